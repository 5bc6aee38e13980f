// SphericalTransformer forward on the CPU. The residual stream is channels last with rows padded to
// kernels::kPad floats (zeros in the padding), so the norms and the MLP run on the shared CPU kernels;
// the spherical operators (DISCO, attention, resampling) take dense rows and get a dense copy only when
// embed_dim is not a multiple of kPad.
#include "surrogate/sphere/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

#include "../layers.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/resample.hpp"

namespace surrogate::sphere {
namespace {

using kernels::kPad;
using kernels::PackedLinear;
using kernels::round_up;

constexpr index_t kRowBlock = 256;  // rows per task of the pointwise layers

std::vector<float> values_of(const ModelFile& f, const std::string& key) { return f.weight(key).values; }
std::vector<float> optional_values(const ModelFile& f, const std::string& key) {
  return f.weights.count(key) ? f.weight(key).values : std::vector<float>{};
}

/// The file's DISCO table `name` (datasets name.psi_idx (3, nnz) and name.psi_vals (nnz)), if present.
std::unique_ptr<FilterTable> table_from_file(const ModelFile& f, const std::string& name, const DiscoConfig& cfg) {
  const auto idx = f.tables.find(name + ".psi_idx");
  const auto val = f.tables.find(name + ".psi_vals");
  if (idx == f.tables.end() && val == f.tables.end()) return nullptr;
  if (idx == f.tables.end() || val == f.tables.end())
    throw Error(ErrorCode::format, "'" + f.path + "': /tables needs both " + name + ".psi_idx and " + name + ".psi_vals");
  const Tensor32& I = idx->second;
  const Tensor32& V = val->second;
  if (I.shape.size() != 2 || I.shape[0] != 3 || V.shape.size() != 1 || V.shape[0] != I.shape[1])
    throw Error(ErrorCode::format, "'" + f.path + "': /tables/" + name + ".psi_idx must be (3, nnz) and " + name +
                                       ".psi_vals (nnz,), found " + I.shape_text() + " and " + V.shape_text());
  auto t = std::make_unique<FilterTable>();
  const std::int64_t nnz = V.shape[0];
  t->kernel_size = filter_basis_size(cfg.basis, cfg.kernel_shape);
  t->nlat_out = cfg.nlat_out;
  t->nlat_in = cfg.nlat_in;
  t->nlon_in = cfg.nlon_in;
  for (std::vector<std::int64_t>* dst : {&t->ker, &t->row, &t->col}) dst->resize(static_cast<std::size_t>(nnz));
  t->val.resize(static_cast<std::size_t>(nnz));
  for (std::int64_t n = 0; n < nnz; ++n) {
    const float k = I.values[static_cast<std::size_t>(n)], r = I.values[static_cast<std::size_t>(nnz + n)],
                c = I.values[static_cast<std::size_t>(2 * nnz + n)];
    if (k != std::floor(k) || r != std::floor(r) || c != std::floor(c) || c >= 16777216.0f)
      throw Error(ErrorCode::format, "'" + f.path + "': /tables/" + name + ".psi_idx entry " + std::to_string(n) +
                                         " is not an exactly representable integer index");
    t->ker[static_cast<std::size_t>(n)] = static_cast<std::int64_t>(k);
    t->row[static_cast<std::size_t>(n)] = static_cast<std::int64_t>(r);
    t->col[static_cast<std::size_t>(n)] = static_cast<std::int64_t>(c);
    t->val[static_cast<std::size_t>(n)] = V.values[static_cast<std::size_t>(n)];
  }
  return t;
}


struct Block {
  // Norms: instance norm keeps weight/bias per channel; layer norm runs on the kernels.
  AlignedBuffer<float> norm_w[2], norm_b[2];
  std::variant<std::monostate, AttentionS2, NeighborhoodAttentionS2> attention;
  PackedLinear fc1, fc2;
};


}  // namespace

struct SphericalTransformer::Impl {
  TransformerConfig cfg;
  int h = 0, w = 0, C = 0, hidden = 0;
  index_t ld = 0, ld_hidden = 0;
  std::int64_t parameters = 0;
  std::unique_ptr<DiscoConvS2> encoder, decoder;
  std::unique_ptr<ResampleS2> resample;
  AlignedBuffer<float> pos;  // (h*w) x ld, or empty
  std::vector<Block> blocks;

  explicit Impl(const ModelFile& f);
  void norm(const Block& b, int which, int batch, const float* x, float* y) const;
  void mlp(const Block& b, index_t rows, const float* x_norm, float* x) const;
};

SphericalTransformer::Impl::Impl(const ModelFile& f) : cfg(TransformerConfig::from_attributes(f.config)) {
  f.check_weights(expected_shapes(cfg));
  for (const auto& [key, t] : f.weights) parameters += t.numel();
  h = cfg.internal_nlat();
  w = cfg.internal_nlon();
  C = cfg.embed_dim;
  hidden = cfg.use_mlp ? cfg.mlp_hidden() : 0;
  ld = round_up(C, kPad);
  ld_hidden = round_up(std::max(hidden, 1), kPad);
  const FilterBasis basis = parse_filter_basis(cfg.filter_basis_type);
  const BasisNormMode norm_mode = parse_basis_norm_mode(cfg.basis_norm_mode);

  DiscoConfig enc;
  enc.in_channels = cfg.in_chans;
  enc.out_channels = C;
  enc.nlat_in = cfg.nlat;
  enc.nlon_in = cfg.nlon;
  enc.nlat_out = h;
  enc.nlon_out = w;
  enc.grid_in = cfg.grid;
  enc.grid_out = cfg.grid_internal;
  enc.kernel_shape = cfg.encoder_kernel_shape;
  enc.basis = basis;
  enc.norm_mode = norm_mode;
  enc.theta_cutoff = cfg.disco_cutoff(cfg.nlat);
  DiscoConfig dec = enc;
  dec.in_channels = C;
  dec.out_channels = cfg.out_chans;
  dec.nlat_in = dec.nlat_out = cfg.nlat;
  dec.nlon_in = dec.nlon_out = cfg.nlon;
  dec.grid_in = dec.grid_out = cfg.grid;
  dec.theta_cutoff = cfg.disco_cutoff(h);  // the coarse latitude count (reference-models §5.5)
  const auto enc_table = table_from_file(f, "encoder", enc);
  const auto dec_table = table_from_file(f, "decoder", dec);
  encoder = std::make_unique<DiscoConvS2>(enc, values_of(f, "encoder.conv.weight"), std::vector<float>{}, enc_table.get());
  decoder = std::make_unique<DiscoConvS2>(dec, values_of(f, "decoder.conv.weight"), std::vector<float>{}, dec_table.get());

  ResampleConfig rc;
  rc.nlat_in = h;
  rc.nlon_in = w;
  rc.nlat_out = cfg.nlat;
  rc.nlon_out = cfg.nlon;
  rc.grid_in = cfg.grid_internal;
  rc.grid_out = cfg.grid;
  resample = std::make_unique<ResampleS2>(rc);

  if (cfg.pos_embed != PositionEmbedding::none) {
    const Tensor32& pe = f.weight("pos_embed.position_embeddings");
    const bool per_lat = cfg.pos_embed == PositionEmbedding::learnable_lat;
    pos = AlignedBuffer<float>(static_cast<std::size_t>(h * w * ld));
    std::fill(pos.data(), pos.data() + pos.size(), 0.0f);
    for (int c = 0; c < C; ++c)
      for (index_t p = 0; p < static_cast<index_t>(h) * w; ++p) {
        const index_t src = per_lat ? static_cast<index_t>(c) * h + p / w : static_cast<index_t>(c) * h * w + p;
        pos[static_cast<std::size_t>(p * ld + c)] = pe.values[static_cast<std::size_t>(src)];
      }
  }

  blocks.resize(static_cast<std::size_t>(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    Block& b = blocks[static_cast<std::size_t>(i)];
    const std::string p = "blocks." + std::to_string(i) + ".";
    for (int n = 0; n < 2; ++n) {
      const std::string norm = p + (n == 0 ? "norm0" : "norm1");
      if (cfg.normalization_layer == BlockNorm::instance_norm) {
        b.norm_w[n] = padded_vector(values_of(f, norm + ".weight").data(), C, 0.0f);
        b.norm_b[n] = padded_vector(values_of(f, norm + ".bias").data(), C, 0.0f);
      } else if (cfg.normalization_layer == BlockNorm::layer_norm) {
        b.norm_w[n] = padded_vector(values_of(f, norm + ".norm.weight").data(), C, 0.0f);
        b.norm_b[n] = padded_vector(values_of(f, norm + ".norm.bias").data(), C, 0.0f);
      }
    }
    AttentionS2Weights aw;
    aw.q_weights = values_of(f, p + "self_attn.q_weights");
    aw.k_weights = values_of(f, p + "self_attn.k_weights");
    aw.v_weights = values_of(f, p + "self_attn.v_weights");
    aw.proj_weights = values_of(f, p + "self_attn.proj_weights");
    aw.q_bias = optional_values(f, p + "self_attn.q_bias");
    aw.k_bias = optional_values(f, p + "self_attn.k_bias");
    aw.v_bias = optional_values(f, p + "self_attn.v_bias");
    aw.proj_bias = optional_values(f, p + "self_attn.proj_bias");
    if (cfg.neighborhood) {
      NeighborhoodAttentionS2Config ac;
      ac.in_channels = C;
      ac.num_heads = cfg.num_heads;
      ac.nlat_in = ac.nlat_out = h;
      ac.nlon_in = ac.nlon_out = w;
      ac.grid_in = ac.grid_out = cfg.grid_internal;
      ac.bias = cfg.bias;
      ac.out_channels = C;
      ac.theta_cutoff = cfg.attention_cutoff();
      b.attention.emplace<NeighborhoodAttentionS2>(ac, aw);
    } else {
      AttentionS2Config ac;
      ac.in_channels = C;
      ac.num_heads = cfg.num_heads;
      ac.nlat_in = ac.nlat_out = h;
      ac.nlon_in = ac.nlon_out = w;
      ac.grid_in = ac.grid_out = cfg.grid_internal;
      ac.bias = cfg.bias;
      ac.out_channels = C;
      b.attention.emplace<AttentionS2>(ac, aw);
    }
    if (cfg.use_mlp) {
      const auto fc1_w = values_of(f, p + "mlp.fwd.0.weight");
      const auto fc1_b = values_of(f, p + "mlp.fwd.0.bias");
      const auto fc2_w = values_of(f, p + (cfg.drop_rate > 0.0 ? "mlp.fwd.3.weight" : "mlp.fwd.2.weight"));
      b.fc1 = PackedLinear(fc1_w.data(), fc1_b.data(), hidden, C);
      b.fc2 = PackedLinear(fc2_w.data(), nullptr, C, hidden);
    }
  }
}

/// y = norm(x) over `batch` samples of h*w rows (ld floats each); none copies.
void SphericalTransformer::Impl::norm(const Block& b, int which, int batch, const float* x, float* y) const {
  const index_t P = static_cast<index_t>(h) * w, rows = batch * P;
  switch (cfg.normalization_layer) {
    case BlockNorm::none: std::copy(x, x + rows * ld, y); return;
    case BlockNorm::layer_norm: {
      const CpuKernels& k = kernels::cpu();
#pragma omp parallel for schedule(static)
      for (index_t r0 = 0; r0 < rows; r0 += kRowBlock) {
        kernels::NormArgs a;
        a.x = x + r0 * ld;
        a.ldx = ld;
        a.y = y + r0 * ld;
        a.ldy = ld;
        a.rows = std::min(kRowBlock, rows - r0);
        a.dim = C;
        a.weight = b.norm_w[which].data();
        a.bias = b.norm_b[which].data();
        a.eps = 1e-6f;  // the wrapper ignores its eps argument (reference-models §5.5)
        k.norm(a);
      }
      return;
    }
    case BlockNorm::instance_norm: {
      // InstanceNorm2d(eps 1e-6, affine): per sample and channel, the unweighted mean and biased variance
      // over the grid points; accumulated in double in a fixed row order (independent of the threads).
      for (int s = 0; s < batch; ++s) {
        const float* xs = x + s * P * ld;
        float* ys = y + s * P * ld;
        std::vector<double> mean(static_cast<std::size_t>(C), 0.0), var(static_cast<std::size_t>(C), 0.0);
        for (index_t p = 0; p < P; ++p)
          for (int c = 0; c < C; ++c) mean[static_cast<std::size_t>(c)] += xs[p * ld + c];
        for (auto& m : mean) m /= static_cast<double>(P);
        for (index_t p = 0; p < P; ++p)
          for (int c = 0; c < C; ++c) {
            const double d = xs[p * ld + c] - mean[static_cast<std::size_t>(c)];
            var[static_cast<std::size_t>(c)] += d * d;
          }
        std::vector<float> scale(static_cast<std::size_t>(C)), shift(static_cast<std::size_t>(C));
        for (int c = 0; c < C; ++c) {
          const double inv = 1.0 / std::sqrt(var[static_cast<std::size_t>(c)] / static_cast<double>(P) + 1e-6);
          scale[static_cast<std::size_t>(c)] = static_cast<float>(inv * b.norm_w[which][static_cast<std::size_t>(c)]);
          shift[static_cast<std::size_t>(c)] = static_cast<float>(b.norm_b[which][static_cast<std::size_t>(c)] -
                                                                  mean[static_cast<std::size_t>(c)] * inv *
                                                                      b.norm_w[which][static_cast<std::size_t>(c)]);
        }
#pragma omp parallel for schedule(static)
        for (index_t p = 0; p < P; ++p)
          for (int c = 0; c < C; ++c)
            ys[p * ld + c] = xs[p * ld + c] * scale[static_cast<std::size_t>(c)] + shift[static_cast<std::size_t>(c)];
      }
      return;
    }
  }
}

/// x += fc2(act(fc1(x_norm))) over `rows` rows.
void SphericalTransformer::Impl::mlp(const Block& b, index_t rows, const float* x_norm, float* x) const {
  const CpuKernels& k = kernels::cpu();
#pragma omp parallel
  {
    AlignedBuffer<float> hid(static_cast<std::size_t>(kRowBlock * ld_hidden));
#pragma omp for schedule(static)
    for (index_t r0 = 0; r0 < rows; r0 += kRowBlock) {
      const index_t n = std::min(kRowBlock, rows - r0);
      kernels::LinearArgs a;
      a.layer = &b.fc1;
      a.x = x_norm + r0 * ld;
      a.ldx = ld;
      a.y = hid.data();
      a.ldy = ld_hidden;
      a.rows = n;
      k.linear(a);
      for (index_t i = 0; i < n; ++i) {
        float* hrow = hid.data() + i * ld_hidden;
        if (cfg.activation == MlpActivation::gelu)
          for (int c = 0; c < hidden; ++c) hrow[c] = gelu_erf(hrow[c]);
        else if (cfg.activation == MlpActivation::relu)
          for (int c = 0; c < hidden; ++c) hrow[c] = std::max(hrow[c], 0.0f);
      }
      kernels::LinearArgs o;
      o.layer = &b.fc2;
      o.x = hid.data();
      o.ldx = ld_hidden;
      o.y = x + r0 * ld;
      o.ldy = ld;
      o.rows = n;
      o.add1 = x + r0 * ld;  // the residual, in place
      o.ld_add1 = ld;
      k.linear(o);
    }
  }
}

SphericalTransformer::SphericalTransformer(const ModelFile& file) : impl_(std::make_unique<Impl>(file)) {}
SphericalTransformer::~SphericalTransformer() = default;
SphericalTransformer::SphericalTransformer(SphericalTransformer&&) noexcept = default;
SphericalTransformer& SphericalTransformer::operator=(SphericalTransformer&&) noexcept = default;
const TransformerConfig& SphericalTransformer::config() const { return impl_->cfg; }
std::int64_t SphericalTransformer::parameter_count() const { return impl_->parameters; }

namespace {

/// Dense (ld == width) view of padded rows: copies when the padding is not empty.
void to_dense(const float* x, index_t ld, int width, index_t rows, std::vector<float>& dense) {
  dense.resize(static_cast<std::size_t>(rows * width));
  for (index_t r = 0; r < rows; ++r) std::copy(x + r * ld, x + r * ld + width, dense.data() + r * width);
}

void add_dense(const float* dense, int width, index_t rows, float* x, index_t ld) {
  for (index_t r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) x[r * ld + c] += dense[r * width + c];
}

}  // namespace

void SphericalTransformer::forward(int batch, const float* in, float* out) const {
  const Impl& m = *impl_;
  const TransformerConfig& c = m.cfg;
  if (batch < 1) throw Error(ErrorCode::invalid_argument, "SphericalTransformer::forward: batch must be positive");
  if (!in || !out) throw Error(ErrorCode::invalid_argument, "SphericalTransformer::forward: null input or output");
  const index_t P_img = static_cast<index_t>(c.nlat) * c.nlon, P = static_cast<index_t>(m.h) * m.w;
  const index_t rows = batch * P;
  const int C = m.C;
  const index_t ld = m.ld;

  // Encoder (dense C columns), then the padded residual stream with the position embedding.
  std::vector<float> dense(static_cast<std::size_t>(rows * C));
  m.encoder->forward(batch, in, dense.data());
  AlignedBuffer<float> x(static_cast<std::size_t>(rows * ld)), y(static_cast<std::size_t>(rows * ld));
  std::fill(x.data(), x.data() + x.size(), 0.0f);
  std::fill(y.data(), y.data() + y.size(), 0.0f);
#pragma omp parallel for schedule(static)
  for (index_t r = 0; r < rows; ++r)
    for (int ch = 0; ch < C; ++ch) {
      const float pe = m.pos.size() ? m.pos[static_cast<std::size_t>((r % P) * ld + ch)] : 0.0f;
      x[static_cast<std::size_t>(r * ld + ch)] = dense[static_cast<std::size_t>(r * C + ch)] + pe;
    }

  std::vector<float> attn_in, attn_out(static_cast<std::size_t>(rows * C));
  for (const Block& b : m.blocks) {
    m.norm(b, 0, batch, x.data(), y.data());
    const float* q = y.data();
    if (ld != C) {
      to_dense(y.data(), ld, C, rows, attn_in);
      q = attn_in.data();
    }
    if (const auto* g = std::get_if<AttentionS2>(&b.attention)) g->forward(batch, q, nullptr, nullptr, attn_out.data());
    else std::get<NeighborhoodAttentionS2>(b.attention).forward(batch, q, nullptr, nullptr, attn_out.data());
    add_dense(attn_out.data(), C, rows, x.data(), ld);  // x = attention + residual
    m.norm(b, 1, batch, x.data(), y.data());
    if (c.use_mlp) {
      m.mlp(b, rows, y.data(), x.data());
    } else {  // x = norm1(x) + x
      for (index_t i = 0; i < rows * ld; ++i) x[static_cast<std::size_t>(i)] += y[static_cast<std::size_t>(i)];
    }
  }

  // Decoder: resample to the image grid, DISCO convolution, optional residual prediction.
  to_dense(x.data(), ld, C, rows, dense);
  std::vector<float> upsampled(static_cast<std::size_t>(batch * P_img * C));
  m.resample->forward(batch, C, dense.data(), upsampled.data());
  m.decoder->forward(batch, upsampled.data(), out);
  if (c.residual_prediction) {
    for (index_t i = 0; i < batch * P_img * c.out_chans; ++i) out[i] += in[i];
  }
}

}  // namespace surrogate::sphere
