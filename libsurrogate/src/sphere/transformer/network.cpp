// SphericalTransformer forward on the CPU, in latitude bands (the exchanges of bands.hpp). The residual
// stream is channels last with rows padded to kernels::kPad floats (zeros in the padding), so the norms and
// the MLP run on the shared CPU kernels; the spherical operators (DISCO, attention, resampling) take dense
// rows and get a dense copy only when embed_dim is not a multiple of kPad. share/docs/sphere.md.
#include "surrogate/sphere/transformer.hpp"
#include "surrogate/profile.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

#include "../../layers.hpp"
#include "../workspace_pool.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/nan_keeping.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/resample.hpp"
#include "surrogate/sphere/sht.hpp"
#include "bands.hpp"
#include "internals.hpp"

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kDISCOEncoderPhase{"DISCO encoder"};
const surrogate::PhaseName kAttentionBlocksPhase{"attention blocks"};
const surrogate::PhaseName kUpsamplingAndDISCODecoderPhase{"upsampling and DISCO decoder"};
}  // namespace

namespace surrogate::sphere {
namespace {

using detail::take;
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

AttentionS2Weights transformer_attention_weights(const ModelFile& f, int block) {
  const std::string p = "blocks." + std::to_string(block) + ".self_attn.";
  AttentionS2Weights aw;
  aw.q_weights = values_of(f, p + "q_weights");
  aw.k_weights = values_of(f, p + "k_weights");
  aw.v_weights = values_of(f, p + "v_weights");
  aw.proj_weights = values_of(f, p + "proj_weights");
  aw.q_bias = optional_values(f, p + "q_bias");
  aw.k_bias = optional_values(f, p + "k_bias");
  aw.v_bias = optional_values(f, p + "v_bias");
  aw.proj_bias = optional_values(f, p + "proj_bias");
  return aw;
}

/// A forward's stream buffers, kept between forwards in the model's pool (../workspace_pool.hpp): their
/// pages are taken once, not in every forward. Not cleared on reuse: every forward writes what it reads,
/// except the residual stream's padding columns, which stay zero (cleared again if the row stride changes).
struct TransformerWorkspace {
  AlignedBuffer<float> enc_in, dense, x, y, attn_in, attn_out, kv, upsampled, fourier, orders, partial, coeffs,
      inner_rows, own_in;
  index_t padded_ld = 0;  // the row stride x and y were last used with

  std::size_t bytes() const {
    std::size_t floats = 0;
    for (const AlignedBuffer<float>* b : {&enc_in, &dense, &x, &y, &attn_in, &attn_out, &kv, &upsampled, &fourier,
                                          &orders, &partial, &coeffs, &inner_rows, &own_in})
      floats += b->size();
    return floats * sizeof(float);
  }
};

struct SphericalTransformer::Impl {
  TransformerConfig cfg;
  int h = 0, w = 0, C = 0, hidden = 0;
  index_t ld = 0, ld_hidden = 0;
  std::int64_t parameters = 0;
  std::unique_ptr<DiscoConvS2> encoder, decoder;
  std::unique_ptr<ResampleS2> resample;   // decoder upsampling, upsample_sht = false
  std::unique_ptr<RealSHT> sht;           // upsample_sht = true: analysis on the internal grid,
  std::unique_ptr<InverseRealSHT> isht;   // synthesis on the image grid with the same lmax, mmax
  AlignedBuffer<float> pos;  // (h*w) x ld, or empty
  std::vector<Block> blocks;
  mutable detail::WorkspacePool<TransformerWorkspace> workspaces;

  explicit Impl(const ModelFile& f);
  void norm(const TransformerBands::Exchanges& bands, const Block& b, int which, const float* x, float* y) const;
  void mlp(const Block& b, index_t rows, const float* x_norm, float* x) const;
};

SphericalTransformer::Impl::Impl(const ModelFile& f) : cfg(TransformerConfig::from_attributes(f.config)) {
  f.check_repeat_count("num_layers", cfg.num_layers, 1);
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

  if (cfg.upsample_sht) {
    sht = std::make_unique<RealSHT>(h, w, cfg.grid_internal);
    isht = std::make_unique<InverseRealSHT>(cfg.nlat, cfg.nlon, cfg.grid, sht->lmax(), sht->mmax());
  } else {
    ResampleConfig rc;
    rc.nlat_in = h;
    rc.nlon_in = w;
    rc.nlat_out = cfg.nlat;
    rc.nlon_out = cfg.nlon;
    rc.grid_in = cfg.grid_internal;
    rc.grid_out = cfg.grid;
    resample = std::make_unique<ResampleS2>(rc);
  }

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
    const AttentionS2Weights aw = transformer_attention_weights(f, i);
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
      const auto& op = b.attention.emplace<NeighborhoodAttentionS2>(ac, aw);
      if (i > 0) op.share_workspace(std::get<NeighborhoodAttentionS2>(blocks[0].attention));  // one set of buffers
    } else {
      AttentionS2Config ac;
      ac.in_channels = C;
      ac.num_heads = cfg.num_heads;
      ac.nlat_in = ac.nlat_out = h;
      ac.nlon_in = ac.nlon_out = w;
      ac.grid_in = ac.grid_out = cfg.grid_internal;
      ac.bias = cfg.bias;
      ac.out_channels = C;
      const auto& op = b.attention.emplace<AttentionS2>(ac, aw);
      if (i > 0) op.share_workspace(std::get<AttentionS2>(blocks[0].attention));  // one set of buffers
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

namespace {

/// Per (sample, latitude row, channel) sums over the longitudes in order, in double: f(x, c) of the band's
/// rows (x: batch samples of `lat_rows` rows of `nlon` points, ld floats each) into part[(b*lat_rows +
/// row)*C + c].
template <class F>
void row_sums(int batch, int lat_rows, int nlon, int C, const float* x, index_t ld, std::vector<double>& part, F&& f) {
  part.assign(static_cast<std::size_t>(batch) * static_cast<std::size_t>(lat_rows) * static_cast<std::size_t>(C), 0.0);
  const int tasks = batch * lat_rows;
#pragma omp parallel for schedule(static)
  for (int t = 0; t < tasks; ++t) {
    double* acc = part.data() + static_cast<std::size_t>(t) * static_cast<std::size_t>(C);
    const float* row = x + static_cast<index_t>(t) * nlon * ld;
    for (int lon = 0; lon < nlon; ++lon)
      for (int c = 0; c < C; ++c) acc[c] += f(row[lon * ld + c], c);
  }
}

/// Collective. The per-row sums of every rank (`part`: this rank's band, sample-major) moved to every rank
/// with a band (row_sums), added over the grid's `nlat` rows in row order (north first): total[b*C + c].
/// The result does not depend on the partition; empty on a rank without rows.
std::vector<double> sum_over_rows(const ExchangePlan& row_sums, int batch, int nlat, int C,
                                  const std::vector<double>& part) {
  std::vector<double> all(static_cast<std::size_t>(row_sums.target_rows()) * static_cast<std::size_t>(C));
  row_sums.forward(part.data(), C, all.data());
  if (all.empty()) return {};
  std::vector<double> sum(static_cast<std::size_t>(batch) * static_cast<std::size_t>(C), 0.0);
  for (int b = 0; b < batch; ++b)
    for (int row = 0; row < nlat; ++row) {  // the rows in order
      const double* src = all.data() + (static_cast<std::size_t>(b) * static_cast<std::size_t>(nlat) +
                                        static_cast<std::size_t>(row)) * static_cast<std::size_t>(C);
      for (int c = 0; c < C; ++c) sum[static_cast<std::size_t>(b) * static_cast<std::size_t>(C) + static_cast<std::size_t>(c)] += src[c];
    }
  return sum;
}

}  // namespace

/// y = norm(x) over the samples of this rank's band of the internal grid (ld floats per point); none
/// copies. Collective for the instance norm (its row sums through bands.row_sums).
void SphericalTransformer::Impl::norm(const TransformerBands::Exchanges& bands, const Block& b, int which,
                                      const float* x, float* y) const {
  const int batch = bands.batch, lat_rows = bands.i1 - bands.i0;
  const index_t P = static_cast<index_t>(lat_rows) * w, rows = batch * P;
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
      // over the whole grid (two passes). Sums in double: per latitude row over the longitudes, then over
      // the rows in row order (sum_over_rows) - the same order for any partition and thread count.
      const double points = static_cast<double>(h) * w;
      std::vector<double> part;
      row_sums(batch, lat_rows, w, C, x, ld, part, [](float v, int) { return static_cast<double>(v); });
      std::vector<double> mean = sum_over_rows(bands.row_sums, batch, h, C, part);
      for (auto& m : mean) m /= points;
      std::vector<double> squares;  // per (sample, row, channel) sums of squared deviations
      for (int s = 0; s < batch && lat_rows > 0; ++s) {
        const double* ms = mean.data() + static_cast<std::size_t>(s) * static_cast<std::size_t>(C);
        row_sums(1, lat_rows, w, C, x + s * P * ld, ld, part, [ms](float v, int c) {
          const double d = v - ms[c];
          return d * d;
        });
        squares.insert(squares.end(), part.begin(), part.end());
      }
      const std::vector<double> var = sum_over_rows(bands.row_sums, batch, h, C, squares);
      for (int s = 0; s < batch && lat_rows > 0; ++s) {
        const float* xs = x + s * P * ld;
        float* ys = y + s * P * ld;
        std::vector<float> scale(static_cast<std::size_t>(C)), shift(static_cast<std::size_t>(C));
        for (int c = 0; c < C; ++c) {
          const std::size_t i = static_cast<std::size_t>(s) * static_cast<std::size_t>(C) + static_cast<std::size_t>(c);
          const double inv = 1.0 / std::sqrt(var[i] / points + 1e-6);
          scale[static_cast<std::size_t>(c)] = static_cast<float>(inv * b.norm_w[which][static_cast<std::size_t>(c)]);
          shift[static_cast<std::size_t>(c)] = static_cast<float>(b.norm_b[which][static_cast<std::size_t>(c)] -
                                                                  mean[i] * inv * b.norm_w[which][static_cast<std::size_t>(c)]);
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
      // The exact GELU in the kernel's epilogue (vectorised float32 erf, at most 1.31 ulp from std::erf;
      // 2.29 on the generic kernels); ReLU below.
      if (cfg.activation == MlpActivation::gelu) a.act = kernels::Activation::gelu_erf;
      k.linear(a);
      if (cfg.activation == MlpActivation::relu)
        for (index_t i = 0; i < n; ++i) {
          float* hrow = hid.data() + i * ld_hidden;
          for (int c = 0; c < hidden; ++c) hrow[c] = kernels::relu_keep_nan(hrow[c]);
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

/// Dense (ld == width) copy of padded rows.
void to_dense(const float* x, index_t ld, int width, index_t rows, float* dense) {
#pragma omp parallel for schedule(static)
  for (index_t r = 0; r < rows; ++r) std::copy(x + r * ld, x + r * ld + width, dense + r * width);
}

/// x += dense over the first `width` values of `rows` rows (x at row stride ld).
void add_dense(const float* dense, int width, index_t rows, float* x, index_t ld) {
#pragma omp parallel for schedule(static)
  for (index_t r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) x[r * ld + c] += dense[r * width + c];
}

}  // namespace

void SphericalTransformer::forward(int batch, const float* in, float* out) const {
  const TransformerConfig& c = impl_->cfg;
  if (batch < 1) throw Error(ErrorCode::invalid_argument, "SphericalTransformer::forward: batch must be positive");
  if (!in || !out) throw Error(ErrorCode::invalid_argument, "SphericalTransformer::forward: null input or output");
  const SelfComm self;
  const RowRange whole{0, static_cast<index_t>(batch) * c.nlat * c.nlon};
  const std::int64_t first_row = 0;
  const TransformerBands bands = plan_bands(self, batch, balanced_bands(c.nlat, 1), std::span<const RowRange>(&whole, 1),
                                            std::span<const std::int64_t>(&first_row, 1), whole.end);
  forward_bands(bands, in, c.in_chans, out);
}

BandPartition SphericalTransformer::internal_bands(const BandPartition& image_bands) const {
  const TransformerConfig& c = impl_->cfg;
  return matching_bands(image_bands, latitudes(c.nlat, c.grid).colatitude,
                        latitudes(impl_->h, c.grid_internal).colatitude);
}

void SphericalTransformer::forward_bands(const TransformerBands& bands, const float* input, std::int64_t ld_input,
                                         float* out_band) const {
  const Impl& m = *impl_;
  const TransformerConfig& c = m.cfg;
  const TransformerBands::Exchanges& e = bands.exchanges();
  const int batch = e.batch, i0 = e.i0, i1 = e.i1, g0 = e.g0, g1 = e.g1;
  const index_t P_band = static_cast<index_t>(i1 - i0) * m.w, rows = batch * P_band;
  const int C = m.C;
  const index_t ld = m.ld;
  const auto work = m.workspaces.acquire();
  TransformerWorkspace& ws = *work;

  // Encoder: the image rows within its cutoff of this band (from whichever ranks hold them), then the
  // padded residual stream with the position embedding.
  float* const enc_in = take(ws.enc_in, e.encoder_input.target_rows() * c.in_chans);
  float* const dense = take(ws.dense, rows * C);
  {
    const ScopedPhase phase(kDISCOEncoderPhase);
    e.encoder_input.forward(input, ld_input, enc_in, c.in_chans, c.in_chans);
    m.encoder->forward_rows(batch, enc_in, e.encoder_rows.first, e.encoder_rows.second, dense, i0, i1);
  }
  float* const x = take(ws.x, rows * ld);
  float* const y = take(ws.y, rows * ld);
  if (ws.padded_ld != ld) {  // padding columns written under another row stride: zero both again
    const auto n = static_cast<index_t>(std::min(ws.x.size(), ws.y.size()));
#pragma omp parallel for schedule(static)
    for (index_t i = 0; i < n; ++i) x[i] = y[i] = 0.0f;
    ws.padded_ld = ld;
  }
#pragma omp parallel for schedule(static)
  for (index_t r = 0; r < rows; ++r) {
    const index_t p = static_cast<index_t>(i0) * m.w + r % P_band;  // the point of the internal grid
    for (int ch = 0; ch < C; ++ch) {
      const float pe = m.pos.size() ? m.pos[static_cast<std::size_t>(p * ld + ch)] : 0.0f;
      x[r * ld + ch] = dense[r * C + ch] + pe;
    }
  }

  // Keys and values: the rows inside the neighbourhood cutoff, or every row for global attention.
  float* const attn_out = take(ws.attn_out, rows * C);
  float* const kv = take(ws.kv, e.key_value.target_rows() * C);
  for (const Block& b : m.blocks) {
    const ScopedPhase phase(kAttentionBlocksPhase);
    m.norm(e, b, 0, x, y);
    const float* q = y;
    if (ld != C) {
      float* const attn_in = take(ws.attn_in, rows * C);
      to_dense(y, ld, C, rows, attn_in);
      q = attn_in;
    }
    e.key_value.forward(y, ld, kv, C, C);
    if (const auto* g = std::get_if<AttentionS2>(&b.attention))
      g->forward_rows(batch, i0, i1, q, kv, kv, attn_out);
    else
      std::get<NeighborhoodAttentionS2>(b.attention)
          .forward_rows(batch, i0, i1, q, e.kv_rows.first, e.kv_rows.second, kv, kv, attn_out);
    add_dense(attn_out, C, rows, x, ld);  // x = attention + residual
    m.norm(e, b, 1, x, y);
    if (c.use_mlp) {
      m.mlp(b, rows, y, x);
    } else {  // x = norm1(x) + x
#pragma omp parallel for schedule(static)
      for (index_t i = 0; i < rows * ld; ++i) x[i] += y[i];
    }
  }

  // Decoder: the image rows [g0, g1) need the upsampled rows within the decoder's cutoff.
  const ScopedPhase decoder(kUpsamplingAndDISCODecoderPhase);
  const auto dec_rows = e.decoder_rows;
  float* const upsampled =
      take(ws.upsampled, static_cast<index_t>(batch) * (dec_rows.second - dec_rows.first) * c.nlon * C);
  if (m.sht) {
    // SHT upsampling (share/docs/sphere.md, "Multi-rank mode"). Each rank transforms its own internal rows
    // in longitude (row-local); the orders m are split over the ranks, each rank receiving its orders of
    // every latitude (sht_orders) and summing over the latitudes in order; the coefficients of all orders
    // go to every rank with image rows (sht_coefficients), which synthesises only the image rows its
    // decoder reads. Every coefficient is summed by one rank in the same order: the same bits for any
    // number of ranks.
    const int L = m.sht->lmax(), m0 = e.m0, m1 = e.m1;
    const std::int64_t width = m.sht->fourier_width(C), C2 = 2 * static_cast<std::int64_t>(C);
    float* const own = take(ws.fourier, static_cast<std::int64_t>(batch) * (i1 - i0) * width);
    for (int b = 0; b < batch; ++b)
      m.sht->fourier_rows(i1 - i0, C, x + b * P_band * ld, ld, own + static_cast<std::int64_t>(b) * (i1 - i0) * width);
    float* const my_orders = take(ws.orders, e.sht_orders.target_rows() * C2);
    e.sht_orders.forward(own, C2, my_orders, C2, static_cast<int>(C2));
    float* const part = take(ws.partial, static_cast<std::int64_t>(batch) * (m1 - m0) * L * C2);
    m.sht->legendre_orders(batch, C, m0, m1, my_orders, part);
    float* const coeffs = take(ws.coeffs, e.sht_coefficients.target_rows() * L * C2);
    e.sht_coefficients.forward(part, L * C2, coeffs, L * C2, static_cast<int>(L * C2));
    if (dec_rows.first < dec_rows.second)  // a rank without image rows receives no coefficients
      m.isht->forward_rows_by_order(batch, C, coeffs, upsampled, dec_rows.first, dec_rows.second);
  } else {
    // Bilinear resampling: the internal rows of the interpolation stencils (the resampling of the halo
    // rows is recomputed here rather than exchanged).
    float* const inner_rows = take(ws.inner_rows, e.resample_input.target_rows() * C);
    e.resample_input.forward(x, ld, inner_rows, C, C);
    m.resample->forward_rows(batch, C, inner_rows, e.resample_rows.first, e.resample_rows.second, upsampled,
                             dec_rows.first, dec_rows.second);
  }
  m.decoder->forward_rows(batch, upsampled, dec_rows.first, dec_rows.second, out_band, g0, g1);
  if (c.residual_prediction) {  // the band's own input rows
    const index_t n = e.residual_input.target_rows() * c.in_chans;
    float* const own_in = take(ws.own_in, n);
    e.residual_input.forward(input, ld_input, own_in, c.in_chans, c.in_chans);
#pragma omp parallel for schedule(static)
    for (index_t i = 0; i < n; ++i) out_band[i] += own_in[i];
  }
}

void SphericalTransformer::release_workspace() const noexcept {
  impl_->workspaces.release();
  impl_->encoder->release_workspace();
  impl_->decoder->release_workspace();
  for (const Block& b : impl_->blocks) {
    if (const auto* g = std::get_if<AttentionS2>(&b.attention)) g->release_workspace();
    if (const auto* n = std::get_if<NeighborhoodAttentionS2>(&b.attention)) n->release_workspace();
  }
}

std::size_t SphericalTransformer::workspace_bytes() const {
  std::size_t bytes = impl_->workspaces.idle_bytes() + impl_->encoder->workspace_bytes() +
                      impl_->decoder->workspace_bytes();
  if (impl_->blocks.empty()) return bytes;
  const auto& first = impl_->blocks.front().attention;  // the blocks share one pool
  if (const auto* g = std::get_if<AttentionS2>(&first)) bytes += g->workspace_bytes();
  if (const auto* n = std::get_if<NeighborhoodAttentionS2>(&first)) bytes += n->workspace_bytes();
  return bytes;
}

TransformerView TransformerInternals::view(const SphericalTransformer& net) {
  const SphericalTransformer::Impl& m = *net.impl_;
  TransformerView v;
  v.config = &m.cfg;
  v.h = m.h;
  v.w = m.w;
  v.ld = m.ld;
  v.encoder = m.encoder.get();
  v.decoder = m.decoder.get();
  v.resample = m.resample.get();
  v.sht = m.sht.get();
  v.isht = m.isht.get();
  v.pos = m.pos.size() ? m.pos.data() : nullptr;
  for (const Block& b : m.blocks) {
    TransformerView::Block k;
    for (int n = 0; n < 2; ++n) {
      k.norm_w[n] = b.norm_w[n].size() ? b.norm_w[n].data() : nullptr;
      k.norm_b[n] = b.norm_b[n].size() ? b.norm_b[n].data() : nullptr;
    }
    k.global = std::get_if<AttentionS2>(&b.attention);
    k.neighborhood = std::get_if<NeighborhoodAttentionS2>(&b.attention);
    if (m.cfg.use_mlp) {
      k.fc1 = &b.fc1;
      k.fc2 = &b.fc2;
    }
    v.blocks.push_back(k);
  }
  return v;
}

}  // namespace surrogate::sphere
