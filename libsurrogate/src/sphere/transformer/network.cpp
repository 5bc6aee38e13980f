// SphericalTransformer on the CPU: its layers (program.hpp's Layers over SphereHostOps) read from the file,
// and the forward in latitude bands, program.hpp's forward through HostExec. The residual stream is channels
// last with rows padded to kernels::kPad floats (zeros in the padding), so the norms and the MLP run on the
// shared CPU kernels; the spherical operators (DISCO, attention, resampling) take dense rows and get a dense
// copy only when embed_dim is not a multiple of kPad. share/docs/sphere.md.
#include "surrogate/sphere/transformer.hpp"
#include "surrogate/profile.hpp"

#include <algorithm>
#include <cmath>
#include <variant>

#include "../../layers.hpp"
#include "../workspace_pool.hpp"
#include "surrogate/error.hpp"
#include "bands.hpp"
#include "host_ops.hpp"
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
using ops::Rows;

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

/// The weights of block `block`'s attention (blocks.<block>.self_attn.*).
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

}  // namespace

/// A forward's buffers (program::Buf), kept between forwards in the model's pool (../workspace_pool.hpp):
/// their pages are taken once, not in every forward. Not cleared on reuse: every forward writes what it
/// reads, except the residual stream's padding columns, which stay zero (cleared again if the row stride
/// changes).
struct TransformerWorkspace {
  static constexpr auto kBuffers = static_cast<std::size_t>(program::Buf::count);
  AlignedBuffer<float> floats[kBuffers];
  AlignedBuffer<double> doubles[kBuffers];
  index_t padded_ld = 0;  // the row stride x and y were last used with

  std::size_t bytes() const {
    std::size_t n = 0;
    for (std::size_t i = 0; i < kBuffers; ++i) n += floats[i].size() * sizeof(float) + doubles[i].size() * sizeof(double);
    return n;
  }
};

struct SphericalTransformer::Impl {
  TransformerConfig cfg;
  index_t ld = 0;  // the residual stream's row stride: embed_dim rounded up to kPad
  std::int64_t parameters = 0;
  program::Layers<SphereHostOps> layers;
  mutable detail::WorkspacePool<TransformerWorkspace> workspaces;

  explicit Impl(const ModelFile& f);
};

SphericalTransformer::Impl::Impl(const ModelFile& f) : cfg(TransformerConfig::from_attributes(f.config)) {
  f.check_repeat_count("num_layers", cfg.num_layers, 1);
  f.check_weights(expected_shapes(cfg));
  for (const auto& [key, t] : f.weights) parameters += t.numel();
  program::Layers<SphereHostOps>& L = layers;
  const int h = L.h = cfg.internal_nlat();
  const int w = L.w = cfg.internal_nlon();
  const int C = L.C = cfg.embed_dim;
  const int hidden = L.hidden = cfg.use_mlp ? cfg.mlp_hidden() : 0;
  ld = round_up(C, kPad);
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
  L.encoder = std::make_unique<DiscoConvS2>(enc, values_of(f, "encoder.conv.weight"), std::vector<float>{},
                                            enc_table.get());
  L.decoder = std::make_unique<DiscoConvS2>(dec, values_of(f, "decoder.conv.weight"), std::vector<float>{},
                                            dec_table.get());

  if (cfg.upsample_sht) {
    RealSHT analysis(h, w, cfg.grid_internal);
    InverseRealSHT synthesis(cfg.nlat, cfg.nlon, cfg.grid, analysis.lmax(), analysis.mmax());
    L.sht = std::make_unique<HostSht>(HostSht{std::move(analysis), std::move(synthesis)});
  } else {
    ResampleConfig rc;
    rc.nlat_in = h;
    rc.nlon_in = w;
    rc.nlat_out = cfg.nlat;
    rc.nlon_out = cfg.nlon;
    rc.grid_in = cfg.grid_internal;
    rc.grid_out = cfg.grid;
    L.resample = std::make_unique<ResampleS2>(rc);
  }

  if (cfg.pos_embed != PositionEmbedding::none) {
    const Tensor32& pe = f.weight("pos_embed.position_embeddings");
    const bool per_lat = cfg.pos_embed == PositionEmbedding::learnable_lat;
    L.pos.assign(static_cast<std::size_t>(h * w * ld), 0.0f);
    L.pos_ld = ld;
    for (int c = 0; c < C; ++c)
      for (index_t p = 0; p < static_cast<index_t>(h) * w; ++p) {
        const index_t src = per_lat ? static_cast<index_t>(c) * h + p / w : static_cast<index_t>(c) * h * w + p;
        L.pos[static_cast<std::size_t>(p * ld + c)] = pe.values[static_cast<std::size_t>(src)];
      }
  }

  L.blocks.resize(static_cast<std::size_t>(cfg.num_layers));
  for (int i = 0; i < cfg.num_layers; ++i) {
    program::Block<SphereHostOps>& b = L.blocks[static_cast<std::size_t>(i)];
    const std::string p = "blocks." + std::to_string(i) + ".";
    for (int n = 0; n < 2; ++n) {
      const std::string norm = p + (n == 0 ? "norm0" : "norm1");
      // eps 1e-6: the layer-norm wrapper ignores its eps argument (reference-models §5.5)
      if (cfg.normalization_layer == BlockNorm::instance_norm)
        b.norm[n] = NormLayer(values_of(f, norm + ".weight").data(), values_of(f, norm + ".bias").data(), C, false, 1e-6f);
      else if (cfg.normalization_layer == BlockNorm::layer_norm)
        b.norm[n] = NormLayer(values_of(f, norm + ".norm.weight").data(), values_of(f, norm + ".norm.bias").data(), C,
                              false, 1e-6f);
    }
    const AttentionS2Weights aw = transformer_attention_weights(f, i);
    b.attention = std::make_unique<HostAttention>();
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
      const auto& op = b.attention->op.emplace<NeighborhoodAttentionS2>(ac, aw);
      if (i > 0) op.share_workspace(std::get<NeighborhoodAttentionS2>(L.blocks[0].attention->op));  // one set of buffers
    } else {
      AttentionS2Config ac;
      ac.in_channels = C;
      ac.num_heads = cfg.num_heads;
      ac.nlat_in = ac.nlat_out = h;
      ac.nlon_in = ac.nlon_out = w;
      ac.grid_in = ac.grid_out = cfg.grid_internal;
      ac.bias = cfg.bias;
      ac.out_channels = C;
      const auto& op = b.attention->op.emplace<AttentionS2>(ac, aw);
      if (i > 0) op.share_workspace(std::get<AttentionS2>(L.blocks[0].attention->op));  // one set of buffers
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

/// program.hpp's Exec on the CPU: the row-wise stages in tiles of OpenMP iterations (one SphereHostOps and
/// one set of work rows per thread), the spherical operators once (they thread themselves), the buffers a
/// forward's workspace, the exchanges the host moves of the band plan.
class HostExec {
 public:
  using Ops = SphereHostOps;

  /// A thread's work rows (the MLP's hidden rows), rows padded to kPad.
  class Work {
   public:
    Rows rows(program::Buf, index_t rows, int width) {
      const index_t ld = round_up(width, kPad);
      if (static_cast<index_t>(buf_.size()) < rows * ld) buf_ = AlignedBuffer<float>(static_cast<std::size_t>(rows * ld));
      return {buf_.data(), ld, rows, width, ops::Place::host};
    }

   private:
    AlignedBuffer<float> buf_;
  };

  /// ld: the residual stream's row stride.
  HostExec(const TransformerConfig& cfg, const program::Layers<Ops>& layers, index_t ld,
           const TransformerBands::Exchanges& bands, TransformerWorkspace& ws)
      : cfg_(cfg), layers_(layers), ld_(ld), bands_(bands), ws_(ws), ops_(kernels::cpu()) {
    // The residual stream x and y: padding columns written under another row stride are zeroed again.
    const index_t rows = static_cast<index_t>(bands.batch) * (bands.i1 - bands.i0) * layers.w;
    float* const x = take(buffer(program::Buf::x), rows * ld);
    float* const y = take(buffer(program::Buf::y), rows * ld);
    if (ws.padded_ld != ld) {
      const auto n = static_cast<index_t>(std::min(buffer(program::Buf::x).size(), buffer(program::Buf::y).size()));
#pragma omp parallel for schedule(static)
      for (index_t i = 0; i < n; ++i) x[i] = y[i] = 0.0f;
      ws.padded_ld = ld;
    }
  }

  const TransformerConfig& config() const { return cfg_; }
  const program::Layers<Ops>& layers() const { return layers_; }
  const TransformerBands::Exchanges& bands() const { return bands_; }

  template <class F>
  void tiles(index_t n, index_t tile, F&& f) const {
    const CpuKernels& k = kernels::cpu();
#pragma omp parallel
    {
      Ops ops(k);
      Work work;
#pragma omp for schedule(static)
      for (index_t r0 = 0; r0 < n; r0 += tile) f(ops, work, r0, std::min(tile, n - r0));
    }
  }
  template <class F>
  void once(F&& f) {
    f(ops_);
  }

  /// A buffer of dense rows; x and y (the residual stream) at the padded row stride.
  Rows rows(program::Buf b, index_t rows, int width) {
    const bool stream = b == program::Buf::x || b == program::Buf::y;
    const index_t ld = stream ? ld_ : width;
    return {take(buffer(b), rows * ld), ld, rows, width, ops::Place::host};
  }
  double* sums(program::Buf b, index_t count) { return take(ws_.doubles[static_cast<std::size_t>(b)], count); }

  void exchange(const ExchangePlan& plan, const Rows& src, const Rows& dst, int width) const {
    plan.forward(src.data, src.ld, dst.data, dst.ld, width);
  }
  void exchange(const ExchangePlan& plan, const double* src, double* dst, int width) const {
    plan.forward(src, width, dst);
  }

  ScopedPhase phase(program::Stage s) const {
    switch (s) {
      case program::Stage::encoder: return ScopedPhase(kDISCOEncoderPhase);
      case program::Stage::blocks: return ScopedPhase(kAttentionBlocksPhase);
      case program::Stage::decoder: break;
    }
    return ScopedPhase(kUpsamplingAndDISCODecoderPhase);
  }

 private:
  AlignedBuffer<float>& buffer(program::Buf b) { return ws_.floats[static_cast<std::size_t>(b)]; }

  const TransformerConfig& cfg_;
  const program::Layers<Ops>& layers_;
  index_t ld_;
  const TransformerBands::Exchanges& bands_;
  TransformerWorkspace& ws_;
  Ops ops_;
};

}  // namespace

SphericalTransformer::SphericalTransformer(const ModelFile& file) : impl_(std::make_unique<Impl>(file)) {}
SphericalTransformer::~SphericalTransformer() = default;
SphericalTransformer::SphericalTransformer(SphericalTransformer&&) noexcept = default;
SphericalTransformer& SphericalTransformer::operator=(SphericalTransformer&&) noexcept = default;
const TransformerConfig& SphericalTransformer::config() const { return impl_->cfg; }
std::int64_t SphericalTransformer::parameter_count() const { return impl_->parameters; }

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
                        latitudes(impl_->layers.h, c.grid_internal).colatitude);
}

void SphericalTransformer::forward_bands(const TransformerBands& bands, const float* input, std::int64_t ld_input,
                                         float* out_band) const {
  const Impl& m = *impl_;
  const TransformerConfig& c = m.cfg;
  const TransformerBands::Exchanges& e = bands.exchanges();
  const auto work = m.workspaces.acquire();
  HostExec exec(c, m.layers, m.ld, e, *work);
  const index_t out_rows = static_cast<index_t>(e.batch) * (e.g1 - e.g0) * c.nlon;
  program::forward(exec, ops::view(input, ld_input, 0, c.in_chans, ops::Place::host),
                   {out_band, c.out_chans, out_rows, c.out_chans, ops::Place::host});
}

void SphericalTransformer::release_workspace() const noexcept {
  const program::Layers<SphereHostOps>& L = impl_->layers;
  impl_->workspaces.release();
  L.encoder->release_workspace();
  L.decoder->release_workspace();
  for (const auto& b : L.blocks) {
    if (const auto* g = std::get_if<AttentionS2>(&b.attention->op)) g->release_workspace();
    if (const auto* n = std::get_if<NeighborhoodAttentionS2>(&b.attention->op)) n->release_workspace();
  }
}

std::size_t SphericalTransformer::workspace_bytes() const {
  const program::Layers<SphereHostOps>& L = impl_->layers;
  std::size_t bytes = impl_->workspaces.idle_bytes() + L.encoder->workspace_bytes() + L.decoder->workspace_bytes();
  if (L.blocks.empty()) return bytes;
  const auto& first = L.blocks.front().attention->op;  // the blocks share one pool
  if (const auto* g = std::get_if<AttentionS2>(&first)) bytes += g->workspace_bytes();
  if (const auto* n = std::get_if<NeighborhoodAttentionS2>(&first)) bytes += n->workspace_bytes();
  return bytes;
}

const program::Layers<SphereHostOps>& TransformerInternals::layers(const SphericalTransformer& net) {
  return net.impl_->layers;
}

}  // namespace surrogate::sphere
