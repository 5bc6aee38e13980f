// BSA forward on the CPU (one process). Token arrays are row-major (samples * n rows, n the common padded
// sample size, round_up(width, kPad) columns); a layer runs phase by phase (projections in chunks of rows,
// then the branches of branches.hpp), each phase an OpenMP loop over independent rows or
// (sample, head, block) tasks, so the result does not depend on the thread count.
// Semantics: share/docs/balltree.md (section "BSA").
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../balltree/layers.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/kernels/nan_keeping.hpp"
#include "../layers.hpp"
#include "branches.hpp"
#include "network.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kEmbeddingPhase{"embedding"};
const surrogate::PhaseName kSparseAttentionLayersPhase{"sparse attention layers"};
}  // namespace

namespace surrogate::bsa {
namespace {

using balltree::layers::run_linear;
using balltree::layers::run_norm;
using kernels::kPad;
using kernels::PackedLinear;
using kernels::round_up;

constexpr index_t kRows = 64;  // rows per task of the row-wise phases

struct Layer {
  AlignedBuffer<float> norm1, norm2;
  PackedLinear qkv, out_proj, position_proj, w1, w2, w3;
  std::vector<float> sigma;                     // sparse, ball
  PackedLinear q_mlp[2], k_mlp[2], v_mlp[2];    // compression MLPs (Linear, ReLU, Linear)
  PackedLinear gate;                            // token gate: D -> 3H, sigmoid
  std::vector<float> static_gate;               // [H][2] sigmoid(gates) when the gate is static
};

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

template <typename F>
void for_row_chunks(index_t rows, int threads, F&& body) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t r0 = 0; r0 < rows; r0 += kRows) body(r0, std::min(kRows, rows - r0));
}

/// The rotated order of one process: rotated row i = tree row rot[i]; no other process.
class Permutation final : public detail::LayerExchanges {
 public:
  Permutation(const std::vector<std::int64_t>* rot, int threads) : rot_(rot), threads_(threads) {}
  void to_rotated(const float* rows, int width, float* rotated_rows) const override {
    balltree::layers::gather_rows(rows, width, *rot_, width, rotated_rows, width, threads_);
  }
  void from_rotated(const float* rotated_rows, int width, float* rows) const override {
    balltree::layers::scatter_rows(rotated_rows, width, *rot_, width, rows, width, threads_);
  }
  bool distributed() const override { return false; }
  void gather_blocks(const float*, index_t, int, float*) const override {
    throw Error(ErrorCode::internal, "bsa: no blocks to gather in one process");
  }
  void fetch_blocks(std::span<const std::int64_t>, const float*, int, float*) const override {
    throw Error(ErrorCode::internal, "bsa: no blocks to fetch in one process");
  }
  void fetch_samples(const float*, int, float*) const override {
    throw Error(ErrorCode::internal, "bsa: no samples to fetch in one process");
  }

 private:
  const std::vector<std::int64_t>* rot_;
  int threads_;
};

}  // namespace

/// The row buffers of one layer, kept across the layers of a forward: each layer writes every element it
/// reads (the padding columns stay as first zeroed), and a fresh 2 MiB-aligned mapping per buffer and
/// layer would have the kernel clear its pages again every time.
struct LayerBuffers {
  AlignedBuffer<float> h, u, gates, o, local, coarse, fine, kc, vc, qc;
};

struct Network::Impl {
  Config cfg;
  std::int64_t parameters = 0;
  PackedLinear embed;
  std::vector<Layer> layers;
  std::vector<float> pos_enc;  // wrapper: (c_in/2) x d
  PackedLinear head0, head2;

  void run_layer(const CpuKernels& k, const Layer& L, float* x, index_t ld, const float* pos,
                 const detail::RowLayout& layout, const detail::LayerExchanges& ex, int threads,
                 LayerBuffers& buffers) const;
  void compress(const CpuKernels& k, const PackedLinear* mlp, const float* src, index_t ld_u, int samples, index_t n,
                float* dst, index_t ld_c, int threads) const;
};

Network::Network(const ModelFile& file) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = Config::from_attributes(file.config);
  const Config& c = m.cfg;
  file.check_repeat_count("depth", c.depth, 1);
  const ExpectedShapes shapes = expected_shapes(c);
  file.check_weights(shapes);
  for (const auto& [key, shape] : shapes) {
    std::int64_t count = 1;
    for (const std::int64_t s : shape) count *= s;
    m.parameters += count;
  }
  m.embed = pack_linear(file, "embed");
  for (int l = 0; l < c.depth; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "attn.";
    Layer L;
    L.norm1 = padded_vector(file.weight(p + "norm1.weight").values.data(), c.c_hidden, 0.0f);
    L.norm2 = padded_vector(file.weight(p + "norm2.weight").values.data(), c.c_hidden, 0.0f);
    L.qkv = pack_linear(file, a + "qkv");  // rows [q | k | v], each head-major: the layout the kernels take
    L.out_proj = pack_linear(file, a + "out_proj");
    L.position_proj = pack_linear(file, a + "position_proj");
    L.w1 = pack_linear(file, p + "mlp.w1");
    L.w2 = pack_linear(file, p + "mlp.w2");
    L.w3 = pack_linear(file, p + "mlp.w3");
    if (c.attention_type != AttentionType::global) L.sigma = file.weight(a + "sigma_att").values;
    if (c.attention_type == AttentionType::sparse) {
      if (c.use_compress_mlp) {
        for (int i = 0; i < 2; ++i) {
          const std::string idx = i == 0 ? ".0" : ".2";
          L.k_mlp[i] = pack_linear(file, a + "k_compress_mlp" + idx);
          L.v_mlp[i] = pack_linear(file, a + "v_compress_mlp" + idx);
          if (c.block_level_importance()) L.q_mlp[i] = pack_linear(file, a + "q_compress_mlp" + idx);
        }
      }
      if (c.use_token_gated_attention) {
        L.gate = pack_linear(file, a + "gated_attention.to_strategy.0");
      } else {
        L.static_gate = file.weight(a + "gated_attention.gates").values;
        for (float& g : L.static_gate) g = sigmoid(g);
      }
    }
    m.layers.push_back(std::move(L));
  }
  if (c.wrapper == Wrapper::shapenet_car) {
    m.pos_enc = file.weight("pos_enc.linear.weight").values;
    m.head0 = pack_linear(file, "pred_head.0");
    m.head2 = pack_linear(file, "pred_head.2");
  }
}

Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
const Config& Network::config() const { return impl_->cfg; }
std::int64_t Network::parameter_count() const { return impl_->parameters; }

// Compressed blocks of one of q/k/v (columns `src` of u): with the MLP, Linear(C*E -> h), ReLU,
// Linear(h -> E) on each block of each head flattened token-major; otherwise the mean over the block.
void Network::Impl::compress(const CpuKernels& k, const PackedLinear* mlp, const float* src, index_t ld_u, int samples,
                             index_t n, float* dst, index_t ld_c, int threads) const {
  const int H = cfg.num_heads, E = cfg.head_dim(), C = cfg.compress_block_size;
  const index_t blocks = samples * (n / C);
  if (!cfg.use_compress_mlp) {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (index_t b = 0; b < blocks; ++b)
      for (int ch = 0; ch < H * E; ++ch) {
        float sum = 0.0f;
        for (int t = 0; t < C; ++t) sum += src[(b * C + t) * ld_u + ch];
        dst[b * ld_c + ch] = sum / static_cast<float>(C);
      }
    return;
  }
  // Rows (block, head) of the MLP input, in chunks of kRows.
  const index_t rows = blocks * H;
  const index_t ld_in = round_up(static_cast<index_t>(C) * E, kPad), ld_h = round_up(mlp[0].out(), kPad);
  const index_t ld_o = round_up(E, kPad);
#pragma omp parallel num_threads(threads)
  {
    AlignedBuffer<float> in(static_cast<std::size_t>(kRows * ld_in)), hid(static_cast<std::size_t>(kRows * ld_h));
    AlignedBuffer<float> out(static_cast<std::size_t>(kRows * ld_o));
#pragma omp for schedule(static)
    for (index_t r0 = 0; r0 < rows; r0 += kRows) {
      const index_t count = std::min(kRows, rows - r0);
      for (index_t r = 0; r < count; ++r) {
        const index_t b = (r0 + r) / H, h = (r0 + r) % H;
        float* row = in.data() + r * ld_in;
        std::fill_n(row + C * E, ld_in - C * E, 0.0f);
        for (int t = 0; t < C; ++t) detail::copy_head(src + (b * C + t) * ld_u + h * E, E, row + t * E);
      }
      run_linear(k, mlp[0], in.data(), ld_in, hid.data(), ld_h, count);
      for (index_t i = 0; i < count * ld_h; ++i) hid[static_cast<std::size_t>(i)] = kernels::relu_keep_nan(hid[static_cast<std::size_t>(i)]);
      run_linear(k, mlp[1], hid.data(), ld_h, out.data(), ld_o, count);
      for (index_t r = 0; r < count; ++r) {
        const index_t b = (r0 + r) / H, h = (r0 + r) % H;
        detail::copy_head(out.data() + r * ld_o, E, dst + b * ld_c + h * E);
      }
    }
  }
}

// One layer on samples x n tokens: x += out_proj(attention(RMSNorm1(x))), x += SwiGLU(RMSNorm2(x)).
void Network::Impl::run_layer(const CpuKernels& k, const Layer& L, float* x, index_t ld, const float* pos,
                              const detail::RowLayout& layout, const detail::LayerExchanges& ex, int threads,
                              LayerBuffers& buffers) const {
  const Config& c = cfg;
  const int D = c.c_hidden, H = c.num_heads, E = c.head_dim(), d = c.dimensionality;
  const index_t rows = layout.rows;
  const float eps = std::numeric_limits<float>::epsilon();
  const index_t ld_u = round_up(3 * D, kPad), ld_r = round_up(d, kPad), ld_g = round_up(3 * H, kPad);
  const bool sparse = c.attention_type == AttentionType::sparse;
  const int ball = c.attention_type == AttentionType::ball ? c.attention_ball_size : c.ball_size;

  // Norm, position encoding (not for global attention), q/k/v, token gate.
  AlignedBuffer<float>& h = buffers.h;
  AlignedBuffer<float>& u = buffers.u;
  AlignedBuffer<float>& gates = buffers.gates;
  h.resize(static_cast<std::size_t>(rows * ld));
  u.resize(static_cast<std::size_t>(rows * ld_u));
  const bool token_gates = sparse && c.use_token_gated_attention;
  if (token_gates) gates.resize(static_cast<std::size_t>(rows * ld_g));
  std::vector<float> centres;
  if (c.attention_type != AttentionType::global)
    centres = balltree::mean_pool(std::span<const float>(pos, static_cast<std::size_t>(rows * d)), d, ball);
  for_row_chunks(rows, threads, [&](index_t r0, index_t count) {
    run_norm(k, x + r0 * ld, ld, h.data() + r0 * ld, ld, count, D, L.norm1, nullptr, eps, true);
    if (c.attention_type != AttentionType::global) {
      AlignedBuffer<float> rel(static_cast<std::size_t>(kRows * ld_r));
      for (index_t r = 0; r < count; ++r)
        for (int e = 0; e < d; ++e)
          rel[static_cast<std::size_t>(r * ld_r + e)] = pos[(r0 + r) * d + e] - centres[static_cast<std::size_t>((r0 + r) / ball * d + e)];
      run_linear(k, L.position_proj, rel.data(), ld_r, h.data() + r0 * ld, ld, count, kernels::Activation::none,
                 h.data() + r0 * ld, ld);
    }
    run_linear(k, L.qkv, h.data() + r0 * ld, ld, u.data() + r0 * ld_u, ld_u, count);
    if (token_gates) {
      run_linear(k, L.gate, h.data() + r0 * ld, ld, gates.data() + r0 * ld_g, ld_g, count);
      for (index_t i = r0 * ld_g; i < (r0 + count) * ld_g; ++i) gates[static_cast<std::size_t>(i)] = sigmoid(gates[static_cast<std::size_t>(i)]);
    }
  });
  // Tokens of all local rows (row-wise and ball-wise branches) and of one segment (the sample-wise ones).
  auto tokens = [&](index_t begin, int samples, index_t length, index_t row0) {
    detail::Tokens t;
    t.q = u.data() + begin * ld_u;
    t.k = t.q + D;
    t.v = t.q + 2 * D;
    t.ld = ld_u;
    t.samples = samples;
    t.n = length;
    t.heads = H;
    t.E = E;
    t.row0 = row0;
    return t;
  };
  const detail::Tokens tok = tokens(0, 1, rows, 0);

  // Attention: o (rows x ld) = the fused heads.
  AlignedBuffer<float>& o = buffers.o;
  o.resize(static_cast<std::size_t>(rows * ld));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t r = 0; r < rows; ++r) std::fill_n(o.data() + r * ld, ld, 0.0f);
  if (c.attention_type == AttentionType::global) {
    // A segment that is a whole sample attends to its own rows; a part of a sample (distributed) to the
    // sample's keys and values fetched whole from their owners (n rows of [k | v] per such sample).
    const int kv_width = 2 * D;
    const index_t partial = ex.distributed() ? layout.partial_samples() : 0;
    AlignedBuffer<float> fetched(static_cast<std::size_t>(partial * layout.n * kv_width));
    if (ex.distributed()) {
      AlignedBuffer<float> kv(static_cast<std::size_t>(rows * kv_width));
      for (index_t r = 0; r < rows; ++r) std::copy_n(u.data() + r * ld_u + D, kv_width, kv.data() + r * kv_width);
      ex.fetch_samples(kv.data(), kv_width, fetched.data());
    }
    index_t next_partial = 0;
    for (const auto& g : layout.segments) {
      detail::SampleKeys keys;
      if (g.length < layout.n) {
        keys.k = fetched.data() + next_partial++ * layout.n * kv_width;
        keys.v = keys.k + D;
        keys.ld = kv_width;
        keys.n = layout.n;
      }
      detail::global_attention(k, tokens(g.begin, g.samples, g.length, g.row0), o.data() + g.begin * ld, ld, threads,
                               g.length < layout.n ? &keys : nullptr);
    }
  } else if (c.attention_type == AttentionType::ball) {
    detail::local_branch(k, tok, pos, d, ball, L.sigma.data(), o.data(), ld, threads);
  } else {
    const index_t nb = layout.n / c.compress_block_size, local_blocks = rows / c.compress_block_size;
    const index_t ld_c = round_up(D, kPad);
    AlignedBuffer<float>& kc = buffers.kc;
    AlignedBuffer<float>& vc = buffers.vc;
    AlignedBuffer<float>& qc = buffers.qc;
    kc.resize(static_cast<std::size_t>(local_blocks * ld_c));
    vc.resize(static_cast<std::size_t>(local_blocks * ld_c));
    if (c.block_level_importance()) qc.resize(static_cast<std::size_t>(local_blocks * ld_c));
    compress(k, L.k_mlp, tok.k, ld_u, 1, rows, kc.data(), ld_c, threads);
    compress(k, L.v_mlp, tok.v, ld_u, 1, rows, vc.data(), ld_c, threads);
    if (c.block_level_importance()) compress(k, L.q_mlp, tok.q, ld_u, 1, rows, qc.data(), ld_c, threads);
    // The keys and values of every compressed block of the batch (distributed: all-gathered, N/C rows).
    const bool distributed = ex.distributed();
    AlignedBuffer<float> kc_all(distributed ? static_cast<std::size_t>(layout.samples * nb * ld_c) : 0), vc_all(kc_all.size());
    if (distributed) {
      ex.gather_blocks(kc.data(), local_blocks, static_cast<int>(ld_c), kc_all.data());
      ex.gather_blocks(vc.data(), local_blocks, static_cast<int>(ld_c), vc_all.data());
    }
    detail::SparseShape s;
    s.P = c.ball_size;
    s.C = c.compress_block_size;
    s.S = c.selected_blocks_number;
    s.G = c.group_selection_size;
    s.group_selection = c.use_group_selection;
    s.mask_own_ball = c.should_mask_blocks_in_ball;
    s.coarse_q_attn = c.use_coarse_q_attn;
    s.block_level = c.block_level_importance();
    AlignedBuffer<float>& local = buffers.local;
    AlignedBuffer<float>& coarse = buffers.coarse;
    AlignedBuffer<float>& fine = buffers.fine;
    for (AlignedBuffer<float>* b : {&local, &coarse, &fine}) b->resize(static_cast<std::size_t>(rows * ld));
    detail::local_branch(k, tok, pos, d, c.ball_size, L.sigma.data(), local.data(), ld, threads);
    // Coarse branch and selection per segment (the queries of a window of samples, all their blocks).
    std::vector<std::vector<std::int32_t>> sel(layout.segments.size());
    for (std::size_t i = 0; i < layout.segments.size(); ++i) {
      const auto& g = layout.segments[i];
      const detail::Tokens t = tokens(g.begin, g.samples, g.length, g.row0);
      detail::Blocks blk;
      blk.q = c.block_level_importance() ? qc.data() + g.begin / s.C * ld_c : nullptr;
      blk.k = (distributed ? kc_all.data() : kc.data()) + g.sample * nb * ld_c;
      blk.v = (distributed ? vc_all.data() : vc.data()) + g.sample * nb * ld_c;
      blk.ld = ld_c;
      blk.nb = nb;
      sel[i].resize(static_cast<std::size_t>(g.samples * H * s.selection_rows(g.length) * s.S));
      detail::coarse_and_select(k, t, blk, s, coarse.data() + g.begin * ld, ld, sel[i].data(), threads);
    }
    if (!distributed) {
      for (std::size_t i = 0; i < layout.segments.size(); ++i) {
        const auto& g = layout.segments[i];
        detail::fine_branch(k, tokens(g.begin, g.samples, g.length, g.row0), s, sel[i].data(), fine.data() + g.begin * ld,
                            ld, threads);
      }
    } else {
      // Fine branch: the selected blocks (their token keys and values) fetched from their owners.
      std::vector<std::int64_t> wanted;
      for (std::size_t i = 0; i < layout.segments.size(); ++i) {
        const auto& g = layout.segments[i];
        const std::size_t per_sample = sel[i].size() / static_cast<std::size_t>(g.samples);
        for (std::size_t j = 0; j < sel[i].size(); ++j)
          wanted.push_back((g.sample + static_cast<std::int64_t>(j / per_sample)) * nb + sel[i][j]);
      }
      std::sort(wanted.begin(), wanted.end());
      wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
      const int kv_width = 2 * D;
      AlignedBuffer<float> kv(static_cast<std::size_t>(rows * kv_width));
      for (index_t r = 0; r < rows; ++r) std::copy_n(u.data() + r * ld_u + D, kv_width, kv.data() + r * kv_width);
      AlignedBuffer<float> fetched(wanted.size() * static_cast<std::size_t>(s.C * kv_width));
      ex.fetch_blocks(wanted, kv.data(), kv_width, fetched.data());
      for (std::size_t i = 0; i < layout.segments.size(); ++i) {
        const auto& g = layout.segments[i];
        std::vector<std::int64_t> first_row(static_cast<std::size_t>(g.samples * nb), -1);
        for (std::int64_t b = 0; b < g.samples * nb; ++b) {
          const auto it = std::lower_bound(wanted.begin(), wanted.end(), g.sample * nb + b);
          if (it != wanted.end() && *it == g.sample * nb + b) first_row[static_cast<std::size_t>(b)] = (it - wanted.begin()) * s.C;
        }
        detail::SelectedRows from;
        from.k = fetched.data();
        from.v = fetched.data() + D;
        from.ld = kv_width;
        from.nb = nb;
        from.first_row = first_row.data();
        detail::fine_branch(k, tokens(g.begin, g.samples, g.length, g.row0), s, sel[i].data(), fine.data() + g.begin * ld,
                            ld, threads, &from);
      }
    }
    // Gate: o = g_local * local + g_coarse * coarse + g_fine * fine per head (static: 1, sigmoid(gates)).
    for_row_chunks(rows, threads, [&](index_t r0, index_t count) {
      for (index_t r = r0; r < r0 + count; ++r)
        for (int hd = 0; hd < H; ++hd) {
          float g0 = 1.0f, g1, g2;
          if (token_gates) {
            const float* g = gates.data() + r * ld_g + 3 * hd;
            g0 = g[0];
            g1 = g[1];
            g2 = g[2];
          } else {
            g1 = L.static_gate[static_cast<std::size_t>(2 * hd)];
            g2 = L.static_gate[static_cast<std::size_t>(2 * hd + 1)];
          }
          for (int e = 0; e < E; ++e) {
            const std::size_t i = static_cast<std::size_t>(r * ld + hd * E + e);
            o[i] = g0 * local[i] + g1 * coarse[i] + g2 * fine[i];
          }
        }
    });
  }

  // Output projection with the residual, then the SwiGLU half of the layer.
  const index_t ld_m = round_up(static_cast<index_t>(D) * c.mlp_ratio, kPad);
  for_row_chunks(rows, threads, [&](index_t r0, index_t count) {
    float* xr = x + r0 * ld;
    run_linear(k, L.out_proj, o.data() + r0 * ld, ld, xr, ld, count, kernels::Activation::none, xr, ld);
    AlignedBuffer<float> a1(static_cast<std::size_t>(kRows * ld_m)), a2(a1.size());
    run_norm(k, xr, ld, h.data() + r0 * ld, ld, count, D, L.norm2, nullptr, eps, true);
    run_linear(k, L.w1, h.data() + r0 * ld, ld, a1.data(), ld_m, count, kernels::Activation::silu);
    run_linear(k, L.w2, h.data() + r0 * ld, ld, a2.data(), ld_m, count);
    for (index_t i = 0; i < count * ld_m; ++i) a1[static_cast<std::size_t>(i)] *= a2[static_cast<std::size_t>(i)];
    run_linear(k, L.w3, a1.data(), ld_m, xr, ld, count, kernels::Activation::none, xr, ld);
  });
}

// ---------------------------------------------------------------------------------------------------

std::vector<float> Network::forward(std::span<const float> features, std::span<const float> positions,
                                    const balltree::Batch& batch, int threads) const {
  return forward(build_trees(positions, batch), features, positions, batch, threads);
}

balltree::RotatedTrees Network::build_trees(std::span<const float> positions, const balltree::Batch& batch) const {
  const Config& c = impl_->cfg;
  const std::int64_t n = batch.points();
  const int d = c.dimensionality;
  if (static_cast<std::int64_t>(positions.size()) != n * d)
    throw Error(ErrorCode::input, "bsa: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(n) + " points x " + std::to_string(d));
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (!std::isfinite(positions[i]))
      throw Error(ErrorCode::input, "bsa: positions has a NaN/Inf coordinate at point " + std::to_string(i / static_cast<std::size_t>(d)));
  for (std::int64_t s = 0; s < batch.samples(); ++s)
    if (batch.size(s) < 2)
      throw Error(ErrorCode::input, "bsa: batch sample " + std::to_string(s) + " has " + std::to_string(batch.size(s)) +
                                        " point(s); the ball tree needs at least 2");
  balltree::RotatedTrees trees;
  if (c.should_rotate) {
    const std::vector<int> strides{1}, balls{c.ball_size, c.ball_size};
    trees = balltree::build_with_rotations(positions, d, batch, strides, balls, c.rotation_angle);
  } else {
    trees.tree = balltree::build(positions, d, batch);
  }
  return trees;
}

std::vector<float> Network::forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                    std::span<const float> positions, const balltree::Batch& batch, int threads) const {
  const Config& c = impl_->cfg;
  if (threads <= 0) threads = omp_get_max_threads();
  const int d = c.dimensionality, D = c.c_hidden;
  const index_t points = batch.points();
  const index_t n = detail::Stages::check_inputs(*this, trees, features, positions, batch);
  const balltree::Tree& tree = trees.tree;
  const int samples = static_cast<int>(batch.samples());
  const std::vector<std::int64_t>* rot = c.should_rotate ? &trees.rotated[1] : nullptr;

  // Embedding on the points, then the leaves in tree order.
  const index_t rows = tree.slots();
  const index_t ld = detail::Stages::row_stride(*this);
  AlignedBuffer<float> e(static_cast<std::size_t>(points * ld));
  detail::Stages::embed(*this, features, points, e.data(), threads);
  AlignedBuffer<float> x(static_cast<std::size_t>(rows * ld));
  std::vector<float> pos(static_cast<std::size_t>(rows * d));
  balltree::layers::gather_rows(e.data(), ld, tree.index, static_cast<int>(ld), x.data(), ld, threads);
  balltree::layers::gather_rows(positions.data(), d, tree.index, d, pos.data(), d, threads);
  const Permutation order(rot, threads);
  std::vector<float> pos_rot(rot ? pos.size() : 0);
  if (rot) order.to_rotated(pos.data(), d, pos_rot.data());
  detail::RowLayout layout;
  layout.rows = rows;
  layout.n = n;
  layout.samples = samples;
  layout.segments.push_back({0, samples, n, 0, 0});
  detail::Stages::layers(*this, x.data(), pos.data(), pos_rot.data(), layout, order, threads);

  // Output in input order (the slot holding each point with mask 1).
  const std::vector<std::int64_t> slot = tree.slot_of_point();
  std::vector<float> result(static_cast<std::size_t>(points * D));
  balltree::layers::gather_rows(x.data(), ld, slot, D, result.data(), D, threads);
  return result;
}

std::vector<float> Network::forward_shapenet(std::span<const float> positions, const balltree::Batch& batch,
                                             int threads) const {
  const Config& c = impl_->cfg;
  if (c.wrapper != Wrapper::shapenet_car)
    throw Error(ErrorCode::unsupported, "bsa: forward_shapenet needs a model file with the ShapeNet-Car wrapper");
  const int d = c.dimensionality;
  const index_t points = batch.points();
  if (static_cast<index_t>(positions.size()) != points * d)
    throw Error(ErrorCode::input, "bsa: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(points) + " points x " + std::to_string(d));
  const std::vector<float> y = forward(detail::Stages::fourier(*this, positions, threads), positions, batch, threads);
  return detail::Stages::head(*this, y, threads);
}

// ---------------------------------------------------------------------------------------------------
// The stages (network.hpp).

namespace detail {

index_t Stages::row_stride(const Network& net) { return round_up(net.config().c_hidden, kPad); }

const PackedLinear& Stages::embed_weights(const Network& net) { return net.impl_->embed; }

std::vector<LayerWeights> Stages::layer_weights(const Network& net) {
  const Network::Impl& m = *net.impl_;
  std::vector<LayerWeights> out;
  for (const Layer& L : m.layers) {
    LayerWeights w;
    w.norm1 = L.norm1.data();
    w.norm2 = L.norm2.data();
    w.qkv = &L.qkv;
    w.out_proj = &L.out_proj;
    w.position_proj = &L.position_proj;
    w.w1 = &L.w1;
    w.w2 = &L.w2;
    w.w3 = &L.w3;
    w.sigma = &L.sigma;
    w.q_mlp = L.q_mlp;
    w.k_mlp = L.k_mlp;
    w.v_mlp = L.v_mlp;
    w.gate = m.cfg.use_token_gated_attention ? &L.gate : nullptr;
    w.static_gate = &L.static_gate;
    out.push_back(w);
  }
  return out;
}

void Stages::check_sample_size(const Network& net, index_t n) {
  const Config& c = net.config();
  auto multiple = [&](int of, const char* name) {
    if (n % of != 0)
      throw Error(ErrorCode::input, "bsa: the padded sample size " + std::to_string(n) + " is not a multiple of " + name +
                                        " = " + std::to_string(of) + " (too few points for this model?)");
  };
  if (c.attention_type == AttentionType::ball) multiple(c.attention_ball_size, "attention_ball_size");
  if (c.attention_type == AttentionType::sparse) {
    multiple(c.ball_size, "ball_size");
    multiple(c.compress_block_size, "compress_block_size");
    if (c.use_group_selection) multiple(c.group_selection_size, "group_selection_size");
    if (n / c.compress_block_size < c.selected_blocks_number)
      throw Error(ErrorCode::input, "bsa: a sample of " + std::to_string(n) + " slots has " +
                                        std::to_string(n / c.compress_block_size) +
                                        " blocks, fewer than selected_blocks_number = " +
                                        std::to_string(c.selected_blocks_number));
  }
}

index_t Stages::check_inputs(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch) {
  const Config& c = net.config();
  const int d = c.dimensionality;
  const index_t points = batch.points();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::input, "bsa: " + what); };
  if (points < 1) bad("no points");
  if (static_cast<index_t>(features.size()) != points * c.c_in)
    bad("features has " + std::to_string(features.size()) + " values, expected " + std::to_string(points) +
        " points x c_in " + std::to_string(c.c_in));
  if (static_cast<index_t>(positions.size()) != points * d)
    bad("positions has " + std::to_string(positions.size()) + " values, expected " + std::to_string(points) +
        " points x " + std::to_string(d));
  check_features(net, features, 0);
  return check_geometry(net, trees, positions, batch);
}

index_t Stages::check_geometry(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> positions,
                               const balltree::Batch& batch) {
  const Config& c = net.config();
  const int d = c.dimensionality;
  const index_t points = batch.points();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::input, "bsa: " + what); };
  if (points < 1) bad("no points");
  if (static_cast<index_t>(positions.size()) != points * d)
    bad("positions has " + std::to_string(positions.size()) + " values, expected " + std::to_string(points) +
        " points x " + std::to_string(d));
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (!std::isfinite(positions[i]))
      bad("positions has a NaN/Inf coordinate at point " + std::to_string(i / static_cast<std::size_t>(d)));
  // Equal padded sample sizes (the official reshape to (B, n, D)), whole balls, blocks and groups.
  const balltree::Tree& tree = trees.tree;
  const int samples = static_cast<int>(batch.samples());
  if (tree.mask.size() != tree.index.size() || static_cast<int>(tree.slot_offsets.size()) != samples + 1)
    bad("trees.tree does not belong to this batch");
  const index_t n = tree.slot_offsets[1] - tree.slot_offsets[0];
  for (int s = 1; s < samples; ++s)
    if (tree.slot_offsets[static_cast<std::size_t>(s) + 1] - tree.slot_offsets[static_cast<std::size_t>(s)] != n)
      bad("batch sample " + std::to_string(s) + " pads to " +
          std::to_string(tree.slot_offsets[static_cast<std::size_t>(s) + 1] - tree.slot_offsets[static_cast<std::size_t>(s)]) +
          " tree slots but sample 0 to " + std::to_string(n) +
          "; BSA needs every sample padded to the same size (the same next power of two of its point count)");
  for (const std::int64_t s : tree.index)
    if (s < 0 || s >= points) bad("trees.tree.index holds " + std::to_string(s) + ", not a point index");
  check_sample_size(net, n);
  if (c.should_rotate) {
    if (trees.rotated.size() != 2) bad("should_rotate needs trees.rotated with the two permutations of strides [1]");
    const std::vector<std::int64_t>* rot = &trees.rotated[1];
    if (static_cast<index_t>(rot->size()) != tree.slots()) bad("trees.rotated[1] does not match the tree");
    std::vector<std::uint8_t> seen(rot->size(), 0);
    for (const std::int64_t v : *rot) {
      if (v < 0 || v >= tree.slots() || seen[static_cast<std::size_t>(v)]) bad("trees.rotated[1] is not a permutation");
      seen[static_cast<std::size_t>(v)] = 1;
    }
  }
  return n;
}

void Stages::check_features(const Network& net, std::span<const float> features, index_t first_point) {
  const int c_in = net.config().c_in;
  for (std::size_t i = 0; i < features.size(); ++i)
    if (!std::isfinite(features[i]))
      throw Error(ErrorCode::input, "bsa: features has a NaN/Inf value at point " +
                                        std::to_string(first_point + static_cast<index_t>(i / static_cast<std::size_t>(c_in))));
}

void Stages::embed(const Network& net, std::span<const float> features, index_t points, float* h, int threads) {
  const ScopedPhase phase(kEmbeddingPhase);
  const Network::Impl& m = *net.impl_;
  const CpuKernels& k = kernels::cpu();
  const int c_in = m.cfg.c_in;
  const index_t ld = row_stride(net), ld_in = round_up(c_in, kPad);
  if (threads <= 0) threads = omp_get_max_threads();
  AlignedBuffer<float> in(static_cast<std::size_t>(points * ld_in));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t i = 0; i < points; ++i) std::copy_n(features.data() + i * c_in, c_in, in.data() + i * ld_in);
  for_row_chunks(points, threads, [&](index_t r0, index_t count) {
    run_linear(k, m.embed, in.data() + r0 * ld_in, ld_in, h + r0 * ld, ld, count);
  });
}

void Stages::layers(const Network& net, float* x, const float* pos, const float* pos_rot, const RowLayout& layout,
                    const LayerExchanges& ex, int threads) {
  const ScopedPhase phase(kSparseAttentionLayersPhase);
  const Network::Impl& m = *net.impl_;
  const Config& c = m.cfg;
  const CpuKernels& k = kernels::cpu();
  if (threads <= 0) threads = omp_get_max_threads();
  const index_t rows = layout.rows, ld = row_stride(net);
  AlignedBuffer<float> residual(static_cast<std::size_t>(rows * ld)), xr(c.should_rotate ? residual.size() : 0);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t i = 0; i < rows * ld; ++i) residual[static_cast<std::size_t>(i)] = x[i];
  LayerBuffers buffers;
  for (int l = 0; l < c.depth; ++l) {
    const Layer& L = m.layers[static_cast<std::size_t>(l)];
    if (c.should_rotate && l % 2 == 1) {
      ex.to_rotated(x, static_cast<int>(ld), xr.data());
      m.run_layer(k, L, xr.data(), ld, pos_rot, layout, ex, threads, buffers);
      ex.from_rotated(xr.data(), static_cast<int>(ld), x);
    } else {
      m.run_layer(k, L, x, ld, pos, layout, ex, threads, buffers);
    }
    if ((l + 1) % c.block_size == 0 || l + 1 == c.depth) {
#pragma omp parallel for num_threads(threads) schedule(static)
      for (index_t i = 0; i < rows * ld; ++i) residual[static_cast<std::size_t>(i)] = x[i] += residual[static_cast<std::size_t>(i)];
    }
  }
}

std::vector<float> Stages::fourier(const Network& net, std::span<const float> positions, int threads) {
  const Network::Impl& m = *net.impl_;
  const Config& c = m.cfg;
  const int d = c.dimensionality, half = c.c_in / 2;
  const auto points = static_cast<index_t>(positions.size()) / d;
  if (threads <= 0) threads = omp_get_max_threads();
  std::vector<float> features(static_cast<std::size_t>(points * c.c_in));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t i = 0; i < points; ++i)
    for (int j = 0; j < half; ++j) {
      float proj = 0.0f;
      for (int e = 0; e < d; ++e) proj += positions[static_cast<std::size_t>(i * d + e)] * m.pos_enc[static_cast<std::size_t>(j * d + e)];
      features[static_cast<std::size_t>(i * c.c_in + j)] = std::cos(proj);
      features[static_cast<std::size_t>(i * c.c_in + half + j)] = std::sin(proj);
    }
  return features;
}

std::vector<float> Stages::head(const Network& net, std::span<const float> y, int threads) {
  const Network::Impl& m = *net.impl_;
  const int D = m.cfg.c_hidden;
  const auto points = static_cast<index_t>(y.size()) / D;
  // pred_head: Linear(D, D), exact GELU, Linear(D, 1).
  const index_t ld = round_up(D, kPad);
  std::vector<float> out(static_cast<std::size_t>(points));
  const CpuKernels& k = kernels::cpu();
  for_row_chunks(points, threads <= 0 ? omp_get_max_threads() : threads, [&](index_t r0, index_t count) {
    AlignedBuffer<float> in(static_cast<std::size_t>(kRows * ld)), hid(in.size()), o(static_cast<std::size_t>(kRows * kPad));
    std::fill_n(in.data(), kRows * ld, 0.0f);
    for (index_t r = 0; r < count; ++r) std::copy_n(y.data() + (r0 + r) * D, D, in.data() + r * ld);
    run_linear(k, m.head0, in.data(), ld, hid.data(), ld, count, kernels::Activation::gelu_erf);
    run_linear(k, m.head2, hid.data(), ld, o.data(), kPad, count);
    for (index_t r = 0; r < count; ++r) out[static_cast<std::size_t>(r0 + r)] = o[static_cast<std::size_t>(r * kPad)];
  });
  return out;
}

}  // namespace detail

}  // namespace surrogate::bsa
