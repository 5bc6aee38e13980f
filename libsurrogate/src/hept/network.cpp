// HEPT's CPU forward in float or double (share/docs/hept.md): feature encoder, HEPT blocks (RBF-augmented
// queries and keys, E2LSH keys P + code * Delta, stable bucket sorts, Gaussian bucket attention summed
// over the hash tables), the concatenation head and its PyG-style MLP, the optional out_proj.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <type_traits>

#include "../prefetch.hpp"
#include "program.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/nan_keeping.hpp"
#include "surrogate/hept.hpp"
#include "surrogate/kernels/bucket_attention.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/stable_key_sort.hpp"
#include "surrogate/profile.hpp"

namespace surrogate::hept {
namespace {

// The phases this file times (surrogate/profile.hpp).
const PhaseName kLshAttentionLayersPhase{"LSH attention layers"};
const PhaseName kHeptHeadPhase{"head"};
// Buckets whose rows are gathered at once (in float 8 buckets of 100 rows of 32 + 32 + 32 values: 307 KB,
// in L2).
template <class T>
constexpr int kGather = 32 / static_cast<int>(sizeof(T));
// How far ahead of its copy a gathered row is prefetched: 16 to 128 rows ran alike on a Zen 5 core, where
// prefetching the next chunk's rows while the kernel ran was 10-16 % slower (benchmarks/RESULTS.md).
constexpr std::int64_t kPrefetchRows = 32;

/// A Linear layer of the file (float weights: the float kernels use them packed, the float64 ones widen them).
kernels::PackedLinear linear(const ModelFile& file, const std::string& prefix, bool bias = true) {
  const Tensor32& w = file.weight(prefix + ".weight");
  return kernels::PackedLinear(w.values.data(), bias ? file.weight(prefix + ".bias").values.data() : nullptr,
                               static_cast<int>(w.shape[0]), static_cast<int>(w.shape[1]));
}

/// A LayerNorm (eps 1e-5) of the file.
NormLayer norm(const ModelFile& file, const std::string& prefix) {
  return NormLayer(file, prefix, static_cast<int>(file.weight(prefix + ".weight").values.size()), false, 1e-5);
}

int thread_count(int threads) { return threads > 0 ? threads : omp_get_max_threads(); }

/// y[n] = x[n] W^T (+ b) for n rows of one thread (x at stride ldx, y at stride ldy): the CPU kernels' dense
/// layer (float: linear, which writes the padded width; double: linear_f64, each output summed over the
/// inputs in ascending order, then the bias).
template <class T>
void linear_rows(const kernels::PackedLinear& l, const T* x, std::int64_t ldx, T* y, std::int64_t ldy,
                 std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    kernels::cpu().linear({.layer = &l, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .rows = n});
  } else {
    kernels::cpu().linear_f64({&l, x, ldx, y, ldy, n});
  }
}

/// n values from `from` to `to` (not overlapping). A row of whole 64-byte lines is moved a line at a time
/// through registers, inline: a library call per row of a few dozen values costs as much as the move (and
/// GCC makes one of a loop of narrower moves).
template <class T>
void copy_row(const T* from, T* to, int n) {
  constexpr int per_line = 64 / static_cast<int>(sizeof(T));
  if (n % per_line != 0) {
    std::copy_n(from, n, to);
    return;
  }
  for (int i = 0; i < n; i += per_line) __builtin_memcpy(to + i, from + i, 64);
}

/// apply() for a layer of `heads` x `width` outputs (q, k or v), each head's outputs of row n written to
/// y[(h * ldh + n) * ldy ..] (ldh: rows per head), then finish(h, n, that row), and after each block of
/// rows finish_block(first row, rows): the per-head arrays the bucket attention gathers from, without a
/// pass over a [n][heads * width] array. Rows of whole lines are copied whole (values past `width`
/// undefined). Blocks are 64 rows.
template <class T, class Finish, class FinishBlock>
void apply_heads(const kernels::PackedLinear& l, const T* x, std::int64_t ldx, int heads, int width, T* y,
                 std::int64_t ldy, std::int64_t ldh, std::int64_t rows, int threads, const Finish& finish,
                 const FinishBlock& finish_block) {
  constexpr std::int64_t kRows = 64;  // (a block of 64 rows stays in L1 and below malloc's mmap threshold)
  const int pad = std::is_same_v<T, float> ? l.out_pad() : l.out();
#pragma omp parallel num_threads(threads)
  {
    const int span = ldy % (64 / static_cast<int>(sizeof(T))) == 0 ? static_cast<int>(ldy) : width;
    std::vector<T> block(static_cast<std::size_t>(kRows) * static_cast<std::size_t>(pad) + static_cast<std::size_t>(span));
#pragma omp for schedule(static)
    for (std::int64_t r0 = 0; r0 < rows; r0 += kRows) {
      const std::int64_t n = std::min(kRows, rows - r0);
      linear_rows<T>(l, x + r0 * ldx, ldx, block.data(), pad, n);
      for (int h = 0; h < heads; ++h)
        for (std::int64_t r = 0; r < n; ++r) {
          T* row = y + (h * ldh + r0 + r) * ldy;
          const T* from = block.data() + r * pad + h * width;
          copy_row(from, row, span);
          finish(h, r0 + r, row);
        }
      finish_block(r0, n);
    }
  }
}

/// Points whose E2LSH projections are computed at once: a point per lane of the baseline's two 16-byte
/// vectors (the core library is compiled for it).
template <class T>
constexpr int kProjectionLanes = 32 / static_cast<int>(sizeof(T));

/// The E2LSH projections p[(c0 + j) * ldp + u] = sum_t row[u][t] alpha[t * C + c0 + j] of G tables for the
/// points row[0 .. lanes), t ascending with each product and sum rounded, as one point's scalar loop: a point
/// per lane and G tables' chains side by side, where the scalar loop waits on each addition. alpha holds
/// the file's float values (widened exactly in float64).
template <class T, int G>
void hash_projections_of(const T* const* row, int lanes, int dh, const float* alpha, int C, int c0, T* p,
                         std::size_t ldp) {
  using V [[gnu::vector_size(16)]] = T;
  constexpr int VL = 16 / static_cast<int>(sizeof(T));
  V lo[G] = {}, hi[G] = {};
  for (int t = 0; t < dh; ++t) {
    V xl, xh;
    for (int u = 0; u < VL; ++u) {
      xl[u] = row[u][t];
      xh[u] = row[VL + u][t];
    }
    const float* a = alpha + static_cast<std::size_t>(t * C + c0);
    for (int j = 0; j < G; ++j) {
      lo[j] += xl * static_cast<T>(a[j]);
      hi[j] += xh * static_cast<T>(a[j]);
    }
  }
  for (int j = 0; j < G; ++j)
    for (int u = 0; u < lanes; ++u)
      p[static_cast<std::size_t>(c0 + j) * ldp + static_cast<std::size_t>(u)] = u < VL ? lo[j][u] : hi[j][u - VL];
}

/// The projections P[c][n] (at stride ldp per table) of every table for points n0 .. n0 + kProjectionLanes - 1
/// (those below np) of x [n][dh] (rows at stride ldx), alpha [t][c].
template <class T>
void hash_projections(const T* x, std::int64_t ldx, std::int64_t np, std::int64_t n0, int dh, const float* alpha,
                      int C, T* p, std::size_t ldp) {
  constexpr int L = kProjectionLanes<T>;
  const T* row[L];
  for (int u = 0; u < L; ++u) row[u] = x + std::min<std::int64_t>(n0 + u, np - 1) * ldx;  // (the last repeated)
  const int lanes = static_cast<int>(std::min<std::int64_t>(L, np - n0));
  for (int c0 = 0; c0 < C; c0 += 4) switch (std::min(4, C - c0)) {
      case 1: hash_projections_of<T, 1>(row, lanes, dh, alpha, C, c0, p + n0, ldp); break;
      case 2: hash_projections_of<T, 2>(row, lanes, dh, alpha, C, c0, p + n0, ldp); break;
      case 3: hash_projections_of<T, 3>(row, lanes, dh, alpha, C, c0, p + n0, ldp); break;
      default: hash_projections_of<T, 4>(row, lanes, dh, alpha, C, c0, p + n0, ldp); break;
    }
}

/// Asks the caches for rows[0..n) of x (stride ld, `width` values each), every line of each row.
template <class T>
void prefetch_rows(const T* x, std::int64_t ld, const std::int64_t* rows, int n, int width) {
  for (int i = 0; i < n; ++i)
    surrogate::detail::prefetch_bytes(x + rows[i] * ld, sizeof(T) * static_cast<std::size_t>(width));
}

/// Values per row of width n padded to whole 64-byte cache lines.
template <class T>
constexpr int line_padded(int n) {
  constexpr int per_line = 64 / static_cast<int>(sizeof(T));
  return (n + per_line - 1) / per_line * per_line;
}
/// a resized to hold n values from its first 64-byte boundary on; that boundary. (The kept arrays take
/// malloc's 4 KiB pages, not kernels::AlignedBuffer's 2 MiB mappings, which slowed the first forward, and
/// their growth writes nothing: share/docs/hept.md, "Memory".)
template <class T, class A>
T* line_aligned(std::vector<T, A>& a, std::size_t n) {
  a.resize(n + 64 / sizeof(T));
  const auto offset = reinterpret_cast<std::uintptr_t>(a.data()) % 64 / sizeof(T);
  return a.data() + (offset ? 64 / sizeof(T) - offset : 0);
}

/// LayerNorm (biased variance, eps 1e-5) of `dim` channels for rows [first, first + count) on this thread.
/// Eight rows at a time with their sums interleaved: eight independent chains of additions instead of one,
/// each row's arithmetic unchanged (so a row's bits do not depend on the rows around it).
template <class T>
void layer_norm_rows(const NormLayer& nm, const T* x, std::int64_t ldx, T* y, std::int64_t ldy,
                     std::int64_t first, std::int64_t count, int dim) {
  constexpr int R = 8;
  for (std::int64_t n0 = first; n0 < first + count; n0 += R) {
    const int nr = static_cast<int>(std::min<std::int64_t>(R, first + count - n0));
    const T* xr[R];
    for (int u = 0; u < R; ++u) xr[u] = x + (n0 + std::min(u, nr - 1)) * ldx;  // (the last row repeated)
    T mean[R] = {}, var[R] = {};
    for (int c = 0; c < dim; ++c)
      for (int u = 0; u < R; ++u) mean[u] += xr[u][c];
    for (int u = 0; u < R; ++u) mean[u] /= static_cast<T>(dim);
    for (int c = 0; c < dim; ++c)
      for (int u = 0; u < R; ++u) var[u] += (xr[u][c] - mean[u]) * (xr[u][c] - mean[u]);
    for (int u = 0; u < nr; ++u) {
      const T inv = T(1) / std::sqrt(var[u] / static_cast<T>(dim) + T(1e-5));
      for (int c = 0; c < dim; ++c)
        y[(n0 + u) * ldy + c] =
            (xr[u][c] - mean[u]) * inv * static_cast<T>(nm.weight()[c]) + static_cast<T>(nm.bias()[c]);
    }
  }
}

/// layer_norm_rows over `rows` rows, blocks of them per thread.
template <class T>
void layer_norm(const NormLayer& nm, const T* x, std::int64_t ldx, T* y, std::int64_t ldy,
                std::int64_t rows, int dim, int threads) {
  constexpr std::int64_t kRows = 64;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t n0 = 0; n0 < rows; n0 += kRows)
    layer_norm_rows<T>(nm, x, ldx, y, ldy, n0, std::min(kRows, rows - n0), dim);
}

/// tanh of n values in place (the kernels': float within 2^-24 (1 + 2^-17) relative, float64 within 4 u).
template <class T>
void tanh_in_place(T* v, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>)
    kernels::cpu().tanh(v, v, n);
  else
    kernels::cpu().tanh_f64(v, v, n);
}

}  // namespace

Weights::Weights(const ModelFile& file, const Config& cfg) {
  const Tensor32& region_counts = file.weight("regions");
  // Each region count R becomes a quantile bin ceil(n / R): R must be positive with a finite 1 / R.
  for (std::size_t i = 0; i < region_counts.values.size(); ++i)
    if (!(region_counts.values[i] > 0.0f) || !std::isfinite(1.0f / region_counts.values[i]))
      throw Error(ErrorCode::weights, "tensor 'regions' holds " + std::to_string(region_counts.values[i]) +
                                          " at index " + std::to_string(i) +
                                          ": region counts must be positive (and at least "
                                          "1e-38, so that 1 / regions is finite)");
  regions = region_counts.values;
  enc0 = linear(file, "feat_encoder.0");
  enc2 = linear(file, "feat_encoder.2");
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "attns." + std::to_string(l) + ".";
    Layer layer;
    layer.norm1 = norm(file, p + "norm1");
    layer.norm2 = norm(file, p + "norm2");
    layer.wq = linear(file, p + "w_q", false);
    layer.wk = linear(file, p + "w_k", false);
    layer.wv = linear(file, p + "w_v", false);
    layer.out_linear = linear(file, p + "attn.out_linear");
    layer.ff0 = linear(file, p + "ff.0");
    layer.ff2 = linear(file, p + "ff.2");
    layer.alpha = file.weight(p + "attn.e2lsh.alpha").values;
    layer.rpe = file.weight(p + "w_rpe.weight").values;
    layers.push_back(std::move(layer));
  }
  W = linear(file, "W", false);
  for (int j = 0; j < 5; ++j) mlp[j] = linear(file, "mlp_out.lins." + std::to_string(j));
  for (int j = 0; j < 4; ++j) mlp_norms[j] = norm(file, "mlp_out.norms." + std::to_string(j));
  if (cfg.num_classes > 0) out_proj = linear(file, "out_proj");
  if (cfg.task == Config::Task::pileup) pids = file.weight("pids_enc.weight").values;
}

template <class T>
Network<T>::Network(const ModelFile& file, const Config& cfg)
    : cfg_(cfg), w_(std::make_shared<const Weights>(file, cfg)), rbf_scale_(rbf_scales(cfg_, *w_)) {}

template <class T>
std::vector<std::vector<T>> Network<T>::rbf_scales(const Config& cfg, const Weights& w) {
  // RBF weights from w_rpe.weight viewed [h][d][r][k]: w[h][r] = sum_k exp(min(sum_d w, 50)); eta and phi
  // share r = 0, so the per-coordinate weights are [w0, w0, w1, ...]; the scale is sqrt(2 w'), all in T.
  const int H = cfg.num_heads, D = cfg.h_dim, K = cfg.num_w_per_dist, cd = cfg.coords_dim;
  const int cols = (cd - 1) * K;
  std::vector<std::vector<T>> scales;
  for (const Weights::Layer& layer : w.layers) {
    std::vector<T> sums(static_cast<std::size_t>(H * (cd - 1)));
    for (int h = 0; h < H; ++h)
      for (int r = 0; r < cd - 1; ++r) {
        T total = 0;
        for (int k = 0; k < K; ++k) {
          T s = 0;
          for (int d = 0; d < D; ++d)
            s += static_cast<T>(layer.rpe[static_cast<std::size_t>((h * D + d) * cols + r * K + k)]);
          total += std::exp(std::min(s, T(50)));
        }
        sums[static_cast<std::size_t>(h * (cd - 1) + r)] = total;
      }
    std::vector<T>& scale = scales.emplace_back(static_cast<std::size_t>(H * cd));
    for (int h = 0; h < H; ++h)
      for (int t = 0; t < cd; ++t)
        scale[static_cast<std::size_t>(h * cd + t)] =
            std::sqrt(T(2) * sums[static_cast<std::size_t>(h * (cd - 1) + std::max(0, t - 1))]);
  }
  return scales;
}

namespace {

using kernels::Activation;
using kernels::index_t;

/// program.hpp's Ops on the CPU: one thread's tile of rows, its work rows in the thread's part of the
/// forward's arena (rows padded to the float kernels' padded widths, which they write whole), the CPU
/// kernels' dense layer, HEPT's interleaved LayerNorm and the kernels' tanh.
template <class T>
class HostOps {
 public:
  using Dense = kernels::PackedLinear;
  using Norm = NormLayer;
  using R = program::Rows<T>;

  /// The arena's layout per thread: the slots' row strides, the dense layers' output block and the
  /// quotients; `sums` the heads' numerators and denominators ([h][n] rows of D + 1 at stride ldn).
  struct Layout {
    int ld[static_cast<int>(program::Slot::count)] = {};
    int ld_block = 0, H = 0, D = 0, ldn = 0;
    std::size_t npu = 0;
    const T* sums = nullptr;
    std::size_t per_thread() const {
      std::size_t values = 0;
      for (const int l : ld) values += static_cast<std::size_t>(l);
      return static_cast<std::size_t>(program::kTileRows) * (values + static_cast<std::size_t>(ld_block + H * D));
    }
  };

  HostOps(const Layout& layout, T* arena) : layout_(&layout), arena_(arena) {
    T* at = arena;
    for (int s = 0; s < static_cast<int>(program::Slot::count); ++s) {
      slot_[s] = at;
      at += program::kTileRows * layout.ld[s];
    }
    block_ = at;
    quotients_ = block_ + program::kTileRows * layout.ld_block;
  }

  R scratch(program::Slot slot, index_t n, int width) const {
    const auto s = static_cast<int>(slot);
    return {slot_[s], layout_->ld[s], n, width, ops::Place::host};
  }

  /// y = act(x W^T + b) [+ add]. The float kernel writes the padded width: straight into work rows of
  /// that stride, otherwise into the block, then the act and the add (add + y, each value rounded once).
  void dense(const ops::DenseArgs<Dense, R>& a) const {
    const Dense& l = *a.layer;
    const int pad = std::is_same_v<T, float> ? l.out_pad() : l.out();
    const std::less<const T*> before;  // (a total order, also for pointers into other arrays)
    const bool work_rows = !before(a.y.data, arena_) && before(a.y.data, block_);
    const bool direct = !a.add.data && (std::is_same_v<T, double> || (work_rows && a.y.ld >= pad));
    T* to = direct ? a.y.data : block_;
    const index_t ld = direct ? a.y.ld : pad;
    linear_rows<T>(l, a.x.data, a.x.ld, to, ld, a.x.rows);
    if (direct && a.act == Activation::none) return;
    for (index_t r = 0; r < a.x.rows; ++r) {
      const T* v = to + r * ld;
      T* y = a.y.row(r);
      const T* add = a.add.data ? a.add.row(r) : nullptr;
      for (int c = 0; c < l.out(); ++c) {
        const T value = a.act == Activation::relu ? kernels::relu_keep_nan(v[c]) : v[c];
        y[c] = add ? add[c] + value : value;
      }
    }
  }
  void norm(const ops::NormArgs<Norm, R>& a) const {
    layer_norm_rows<T>(*a.norm, a.x.data, a.x.ld, a.y.data, a.y.ld, 0, a.x.rows, a.x.width);
  }
  void tanh(const R& x) const {
    if (x.ld == x.width) return tanh_in_place(x.data, x.rows * x.width);
    for (index_t r = 0; r < x.rows; ++r) tanh_in_place(x.row(r), x.width);
  }
  /// The heads' quotients num / den of rows r0 .. r0 + n - 1.
  R attention(index_t r0, index_t n) const {
    const Layout& L = *layout_;
    const int HD = L.H * L.D;
    for (index_t r = 0; r < n; ++r)
      for (int h = 0; h < L.H; ++h) {
        const T* sums = L.sums + (static_cast<std::size_t>(h) * L.npu + static_cast<std::size_t>(r0 + r)) *
                                     static_cast<std::size_t>(L.ldn);
        const T den = sums[L.D];
        T* to = quotients_ + r * HD + h * L.D;
        for (int d = 0; d < L.D; ++d) to[d] = sums[d] / den;
      }
    return {quotients_, HD, n, HD, ops::Place::host};
  }

 private:
  const Layout* layout_;
  T* arena_;
  T* slot_[static_cast<int>(program::Slot::count)] = {};
  T* block_ = nullptr;
  T* quotients_ = nullptr;
};

/// program.hpp's Exec on the CPU: the tile programs per tile of rows on the forward's threads; the LSH
/// stages as fused sweeps over all rows (the per-head scatter with the coordinates and the E2LSH
/// projections, the range and key loops, the sorts and the bucket attention by (head, graph) tasks).
template <class T>
class CpuExec {
 public:
  using Value = T;
  using Ops = HostOps<T>;
  using R = program::Rows<T>;
  using Dense = kernels::PackedLinear;

  CpuExec(const Network<T>& net, const Geometry& g, const float* x, const float* coords, T* out, Trace<T>* trace,
          const std::function<void(std::vector<T>&, std::vector<T>&)>* range, int threads,
          const BucketStage<T>* buckets, ForwardWork<T>& w)
      : net_(net), cfg_(net.config()), g_(g), x_(x), coords_(coords), out_(out), trace_(trace), range_(range),
        threads_(threads), buckets_(buckets), w_(w) {
    const int H = cfg_.num_heads, D = cfg_.h_dim, L = cfg_.n_layers;
    np_ = g.padded_points();
    npu_ = static_cast<std::size_t>(np_);
    ldcat_ = static_cast<index_t>(L + 1) * D;
    head_.enc0 = &net.encoder(0);
    head_.enc2 = &net.encoder(1);
    head_.W = &net.head();
    for (int j = 0; j < 5; ++j) head_.mlp[j] = &net.mlp(j);
    for (int j = 0; j < 4; ++j) head_.mlp_norms[j] = &net.mlp_norm(j);
    if (cfg_.num_classes > 0) head_.out_proj = &net.out_proj();
    for (const auto& layer : net.layers()) blocks_.push_back({&layer.out_linear, &layer.ff0, &layer.ff2, &layer.norm2});
    // The work rows' strides: the widest padded output written into them (float), the width (double).
    const auto out_width = [](const Dense& l) { return std::is_same_v<T, float> ? l.out_pad() : l.out(); };
    auto& ld = layout_.ld;
    ld[static_cast<int>(program::Slot::hidden)] = out_width(*head_.enc0);
    ld[static_cast<int>(program::Slot::normed)] = D;
    ld[static_cast<int>(program::Slot::head_a)] = program::kHeadHidden;
    ld[static_cast<int>(program::Slot::head_b)] = program::kHeadHidden;
    layout_.ld_block = std::max({out_width(*head_.enc2), out_width(*head_.W), out_width(*head_.mlp[4]),
                                 head_.out_proj ? out_width(*head_.out_proj) : 1});
    for (int j = 0; j < 4; ++j)
      ld[static_cast<int>(program::Slot::head_a)] = std::max(ld[static_cast<int>(program::Slot::head_a)], out_width(*head_.mlp[j]));
    for (const auto& layer : net.layers()) {
      ld[static_cast<int>(program::Slot::hidden)] = std::max(ld[static_cast<int>(program::Slot::hidden)], out_width(layer.ff0));
      layout_.ld_block = std::max({layout_.ld_block, out_width(layer.out_linear), out_width(layer.ff2)});
    }
    layout_.H = H;
    layout_.D = D;
    layout_.ldn = line_padded<T>(D + 1);
    layout_.npu = npu_;
  }

  const Config& config() const { return cfg_; }
  const program::Head<Dense, NormLayer>& head() const { return head_; }
  const program::Block<Dense, NormLayer>& block(int l) const { return blocks_[static_cast<std::size_t>(l)]; }

  R inputs() const { return {w_.xp.data(), cfg_.encoder_in(), np_, cfg_.encoder_in(), ops::Place::host}; }
  R concatenation() const { return {w_.cat.data(), ldcat_, np_, static_cast<int>(ldcat_), ops::Place::host}; }
  R head_rows() const { return {w_.eh.data(), cfg_.h_dim / 2, np_, cfg_.h_dim / 2, ops::Place::host}; }
  R head_out() const { return {w_.res.data(), cfg_.h_dim / 2, np_, cfg_.h_dim / 2, ops::Place::host}; }
  R classes() const { return {w_.final_out.data(), cfg_.num_classes, np_, cfg_.num_classes, ops::Place::host}; }

  template <class F>
  void tiles(F&& f) {
    T* const arena = sized(w_.tiles, layout_.per_thread() * static_cast<std::size_t>(threads_)).data();
#pragma omp parallel num_threads(threads_)
    {
      Ops ops(layout_, arena + static_cast<std::size_t>(omp_get_thread_num()) * layout_.per_thread());
#pragma omp for schedule(static)
      for (index_t r0 = 0; r0 < np_; r0 += program::kTileRows) f(ops, r0, std::min(program::kTileRows, np_ - r0));
    }
  }

  void enter(program::Part part) {
    phase_.reset();
    phase_.emplace(part == program::Part::layers ? kLshAttentionLayersPhase : kHeptHeadPhase);
  }
  void load();
  void project(int l);
  void ranges(int l);
  void keys(int l);
  void buckets(int l);
  void layer_done(int l);
  void store();

 private:
  template <class A>
  static A& sized(A& array, std::size_t n) {
    array.resize(n);
    return array;
  }

  const Network<T>& net_;
  const Config& cfg_;
  const Geometry& g_;
  const float* x_;
  const float* coords_;
  T* out_;
  Trace<T>* trace_;
  const std::function<void(std::vector<T>&, std::vector<T>&)>* range_;
  int threads_;
  const BucketStage<T>* buckets_;
  ForwardWork<T>& w_;
  index_t np_ = 0, ldcat_ = 0;
  std::size_t npu_ = 0;
  program::Head<Dense, NormLayer> head_;
  std::vector<program::Block<Dense, NormLayer>> blocks_;
  typename Ops::Layout layout_;
  // The layer's arrays: per head [h][n] q_hat and k_hat at row stride ldh_, v at ldv_ (on this process
  // each row starts a cache line and fills whole ones: the bucket gathers read 2 lines a row instead of
  // about 2.9, 2.9 and 2.5; the split stage takes them unpadded), the heads' sums at ldn, the ranges.
  int ldh_ = 0, ldv_ = 0;
  T *qh_ = nullptr, *kh_ = nullptr, *vh_ = nullptr, *num_ = nullptr;
  std::vector<T> delta_;
  std::optional<ScopedPhase> phase_;
};

template <class T>
void CpuExec<T>::load() {
  // Padded inputs (duplicates are copies of their originals' rows; src: zero rows).
  const int in = cfg_.encoder_in(), cd = cfg_.coords_dim, D = cfg_.h_dim, H = cfg_.num_heads, C = cfg_.n_hashes;
  auto &xp = sized(w_.xp, npu_ * static_cast<std::size_t>(in)), &cp = sized(w_.cp, npu_ * static_cast<std::size_t>(cd));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (std::int64_t p = 0; p < np_; ++p) {
    const std::int64_t i = g_.pad_seq[static_cast<std::size_t>(p)];
    if (i < 0) {  // src: zero pads
      std::fill_n(xp.begin() + p * in, in, T(0));
      std::fill_n(cp.begin() + p * cd, cd, T(0));
      continue;
    }
    net_.encoder_input(x_ + i * cfg_.in_dim, xp.data() + p * in);
    for (int c = 0; c < cd; ++c) cp[static_cast<std::size_t>(p * cd + c)] = static_cast<T>(coords_[i * cd + c]);
  }
  // (kept arrays hold the last forward's values: every element read is written first)
  sized(w_.cat, npu_ * static_cast<std::size_t>(ldcat_));
  sized(w_.xn, npu_ * static_cast<std::size_t>(D));
  const int Dh = cfg_.hash_dim();
  ldh_ = buckets_ ? Dh : line_padded<T>(Dh);
  ldv_ = buckets_ ? D : line_padded<T>(D);
  const std::size_t heads_rows = static_cast<std::size_t>(H) * npu_, table_rows = static_cast<std::size_t>(C * H) * npu_;
  qh_ = line_aligned(w_.qh, heads_rows * static_cast<std::size_t>(ldh_));
  kh_ = line_aligned(w_.kh, heads_rows * static_cast<std::size_t>(ldh_));
  vh_ = line_aligned(w_.vh, heads_rows * static_cast<std::size_t>(ldv_));
  for (auto* a : {&w_.pq, &w_.pk}) sized(*a, table_rows);
  for (auto* a : {&w_.perm_q, &w_.perm_k}) sized(*a, table_rows);
  // Per head: the numerators and the denominator summed over the hash tables, [h][n] rows of D + 1 values
  // (den last) at stride ldn, from a cache line: the buckets' scattered sums touch 2 lines a row, not 3.5.
  num_ = line_aligned(w_.num, heads_rows * static_cast<std::size_t>(layout_.ldn));
  layout_.sums = num_;
  sized(w_.eh, npu_ * static_cast<std::size_t>(D / 2));
  sized(w_.res, w_.eh.size());
  if (cfg_.num_classes > 0) sized(w_.final_out, npu_ * static_cast<std::size_t>(cfg_.num_classes));
}

template <class T>
void CpuExec<T>::project(int l) {
  const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes, cd = cfg_.coords_dim, Dh = cfg_.hash_dim();
  const auto& layer = net_.layers()[static_cast<std::size_t>(l)];
  const std::vector<T>& rbf_scale = net_.rbf_scale(l);
  T* xn = w_.xn.data();
  const T* cp = w_.cp.data();
  layer_norm(layer.norm1, w_.cat.data() + static_cast<index_t>(l) * D, ldcat_, xn, D, np_, D, threads_);
  // q_hat, k_hat [h][n][Dh] = [q ; sqrt(2 w') * coords] and v [h][n][D] from their dense layers, the
  // E2LSH projections P [c][h][n] on alpha [h][t][c] of each block of rows while it is in the cache.
  const auto coordinates = [&](int h, std::int64_t n, T* row) {
    for (int t = 0; t < cd; ++t)
      row[D + t] = rbf_scale[static_cast<std::size_t>(h * cd + t)] * cp[static_cast<std::size_t>(n * cd + t)];
  };
  const auto projections = [&](const T* rows_h, T* p) {
    return [&, rows_h, p](std::int64_t r0, std::int64_t n) {
      for (int h = 0; h < H; ++h) {
        const std::size_t head = static_cast<std::size_t>(h) * npu_;
        const float* alpha = layer.alpha.data() + static_cast<std::size_t>(h * Dh * C);
        for (std::int64_t n0 = r0; n0 < r0 + n; n0 += kProjectionLanes<T>)
          hash_projections<T>(rows_h + head * static_cast<std::size_t>(ldh_), ldh_, np_, n0, Dh, alpha, C, p + head,
                              static_cast<std::size_t>(H) * npu_);
      }
    };
  };
  T* const pq = w_.pq.data();
  T* const pk = w_.pk.data();
  apply_heads<T>(layer.wq, xn, D, H, D, qh_, ldh_, np_, np_, threads_, coordinates, projections(qh_, pq));
  apply_heads<T>(layer.wk, xn, D, H, D, kh_, ldh_, np_, np_, threads_, coordinates, projections(kh_, pk));
  apply_heads<T>(layer.wv, xn, D, H, D, vh_, ldv_, np_, np_, threads_, [](int, std::int64_t, T*) {},
                 [](std::int64_t, std::int64_t) {});
  if (cfg_.layout != Config::Layout::src) return;
  // src: the pads' q_hat, k_hat and v are zero (their projections 0 enter Delta).
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (std::int64_t n = 0; n < np_; ++n) {
    if (g_.pad_seq[static_cast<std::size_t>(n)] >= 0) continue;
    for (int h = 0; h < H; ++h) {
      const std::size_t slot = static_cast<std::size_t>(h) * npu_ + static_cast<std::size_t>(n);
      std::fill_n(qh_ + slot * static_cast<std::size_t>(ldh_), Dh, T(0));
      std::fill_n(kh_ + slot * static_cast<std::size_t>(ldh_), Dh, T(0));
      std::fill_n(vh_ + slot * static_cast<std::size_t>(ldv_), D, T(0));
      for (int c = 0; c < C; ++c)
        pq[static_cast<std::size_t>(c * H + h) * npu_ + static_cast<std::size_t>(n)] =
            pk[static_cast<std::size_t>(c * H + h) * npu_ + static_cast<std::size_t>(n)] = T(0);
    }
  }
}

template <class T>
void CpuExec<T>::ranges(int /*l*/) {
  // The range Delta of every (table, head) over the whole batch (all ranks).
  const int rows = cfg_.n_hashes * cfg_.num_heads;
  const T* pq = w_.pq.data();
  const T* pk = w_.pk.data();
  std::vector<T> lo(static_cast<std::size_t>(rows), T(INFINITY)), hi(static_cast<std::size_t>(rows), T(-INFINITY));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int r = 0; r < rows; ++r)
    for (std::size_t n = 0; n < npu_; ++n) {
      const auto i = static_cast<std::size_t>(r) * npu_ + n;
      lo[static_cast<std::size_t>(r)] = std::min({lo[static_cast<std::size_t>(r)], pq[i], pk[i]});
      hi[static_cast<std::size_t>(r)] = std::max({hi[static_cast<std::size_t>(r)], pq[i], pk[i]});
    }
  if (range_ && *range_) (*range_)(lo, hi);
  delta_.resize(static_cast<std::size_t>(rows));
  for (int r = 0; r < rows; ++r)
    delta_[static_cast<std::size_t>(r)] = hi[static_cast<std::size_t>(r)] - lo[static_cast<std::size_t>(r)];
}

template <class T>
void CpuExec<T>::keys(int /*l*/) {
  const int H = cfg_.num_heads, rows = cfg_.n_hashes * H;
  const bool src_layout = cfg_.layout == Config::Layout::src;
  T* const pq = w_.pq.data();
  T* const pk = w_.pk.data();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int r = 0; r < rows; ++r) {
    const T dr = delta_[static_cast<std::size_t>(r)];
    // src: shift (phi * Delta) * (ceil(R_eta) + 1) + eta * Delta, the pads' keys +inf.
    const float region_count = net_.regions()[static_cast<std::size_t>(((r / H) * 2) * H + r % H)];
    const T factor = std::ceil(static_cast<T>(region_count)) + T(1);
    for (std::size_t n = 0; n < npu_; ++n) {
      const auto i = static_cast<std::size_t>(r) * npu_ + n;
      if (!src_layout) {
        const T shift = static_cast<T>(g_.padded_codes[i]) * dr;
        pq[i] += shift;
        pk[i] += shift;
        continue;
      }
      const T shift = static_cast<T>(g_.region_phi[i]) * dr * factor + static_cast<T>(g_.region_eta[i]) * dr;
      const bool pad = g_.pad_seq[n] < 0;
      pq[i] = pad ? T(INFINITY) : pq[i] + shift;
      pk[i] = pad ? T(INFINITY) : pk[i] + shift;
    }
  }
}

template <class T>
void CpuExec<T>::buckets(int /*l*/) {
  const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes, bs = cfg_.block_size, Dh = cfg_.hash_dim();
  const std::size_t npu = npu_, heads_rows = static_cast<std::size_t>(H) * npu;
  const int ldh = ldh_, ldv = ldv_, ldn = layout_.ldn;
  T* const qh = qh_;
  T* const kh = kh_;
  T* const vh = vh_;
  T* const num = num_;
  auto &pq = w_.pq, &pk = w_.pk;
  auto &perm_q = w_.perm_q, &perm_k = w_.perm_k;
  auto &tnum = w_.tnum, &tden = w_.tden;  // split graphs: one table's sums
  const BucketStage<T>* buckets = buckets_;
  const int threads = threads_;
  // First padded row of every graph.
  std::vector<std::int64_t> graph_first(1, 0);
  for (const std::int64_t s : g_.padded_sizes) graph_first.push_back(graph_first.back() + s);
  const int graphs = static_cast<int>(g_.padded_sizes.size());
  // Stable sorts of the keys within each graph (ties by padded position), then bucket attention, one
  // hash table after the other: each query's numerator and denominator are added to its head's sums in
  // table order (OR-combination), each (head, row) written by one task per table: the first table's
  // sums are stored (0 + x is x: a sum from +0 is never -0), the others added.
  if (buckets) {  // graphs spread over ranks: each table's buckets computed where the plan routes them
    std::fill_n(num, heads_rows * static_cast<std::size_t>(ldn), T(0));
    tnum.resize(heads_rows * static_cast<std::size_t>(D));
    tden.resize(heads_rows);
    for (int c = 0; c < C; ++c) {
      const std::size_t table = static_cast<std::size_t>(c * H) * npu;
      (*buckets)(c, pq.data() + table, pk.data() + table, qh, kh, vh, tnum.data(), tden.data());
      for (std::size_t slot = 0; slot < heads_rows; ++slot) {
        T* acc = num + slot * static_cast<std::size_t>(ldn);
        for (int d = 0; d < D; ++d) acc[d] += tnum[slot * static_cast<std::size_t>(D) + static_cast<std::size_t>(d)];
        acc[D] += tden[slot];
      }
    }
  }
  // The bucket tasks of each graph: chunk_first[g] .. chunk_first[g + 1] (kGather buckets each).
  std::vector<std::int64_t> chunk_first(1, 0);
  for (int gi = 0; gi < graphs; ++gi) {
    const std::int64_t size = graph_first[static_cast<std::size_t>(gi) + 1] - graph_first[static_cast<std::size_t>(gi)];
    chunk_first.push_back(chunk_first.back() + (size + kGather<T> * bs - 1) / (kGather<T> * bs));
  }
  const std::pair query_sort{&pq, &perm_q}, key_sort{&pk, &perm_k};
  for (int c = 0; c < C && !buckets; ++c) {
#pragma omp parallel num_threads(threads)
    {
      std::vector<T> scratch(static_cast<std::size_t>(kernels::gaussian_bucket_scratch(bs, Dh, D))),
          bnum(static_cast<std::size_t>(bs * D)), bden(static_cast<std::size_t>(bs));
      kernels::StableKeySortWork<T> sort_work;
      std::vector<T> qs(static_cast<std::size_t>(kGather<T> * bs * ldh)), ks(qs.size()),
          vs(static_cast<std::size_t>(kGather<T> * bs * ldv));
      std::vector<std::int64_t> identity(static_cast<std::size_t>(bs));
      for (int i = 0; i < bs; ++i) identity[static_cast<std::size_t>(i)] = i;
      // The sorts, one task per (head, graph, queries or keys); then the buckets, one task per kGather
      // buckets of a (head, graph): one event has only H (head, graph) pairs, fewer than a node's cores.
#pragma omp for schedule(dynamic)
      for (std::int64_t task = 0; task < 2 * static_cast<std::int64_t>(H) * graphs; ++task) {
        const int h = static_cast<int>(task / (2 * graphs)), gi = static_cast<int>(task / 2 % graphs);
        const std::int64_t b0 = graph_first[static_cast<std::size_t>(gi)],
                           b1 = graph_first[static_cast<std::size_t>(gi) + 1];
        const std::size_t base = static_cast<std::size_t>(c * H + h) * npu;
        auto& [keys, perm] = task % 2 == 0 ? query_sort : key_sort;
        kernels::stable_key_sort(keys->data() + base + b0, b1 - b0, b0, perm->data() + base + b0, sort_work);
      }
#pragma omp for schedule(dynamic)
      for (std::int64_t task = 0; task < static_cast<std::int64_t>(H) * chunk_first.back(); ++task) {
        const int h = static_cast<int>(task / chunk_first.back());
        const std::int64_t chunk = task % chunk_first.back();
        const auto gi = static_cast<std::size_t>(
            std::upper_bound(chunk_first.begin(), chunk_first.end(), chunk) - chunk_first.begin() - 1);
        const std::int64_t b1 = graph_first[gi + 1];
        const std::int64_t c0 = graph_first[gi] + (chunk - chunk_first[gi]) * kGather<T> * bs;
        const std::size_t base = static_cast<std::size_t>(c * H + h) * npu;
        const T* qb = qh + static_cast<std::size_t>(h) * npu * static_cast<std::size_t>(ldh);
        const T* kb = kh + static_cast<std::size_t>(h) * npu * static_cast<std::size_t>(ldh);
        const T* vb = vh + static_cast<std::size_t>(h) * npu * static_cast<std::size_t>(ldv);
        const std::size_t head = static_cast<std::size_t>(h) * npu;
        // kGather buckets at a time, their rows (scattered over the graph) first copied in sorted order:
        // a loop of independent loads, each row asked of the caches kPrefetchRows rows ahead, so that the
        // misses overlap, then contiguous rows for the kernel.
        {
          const std::int64_t s0 = c0, n = std::min<std::int64_t>(kGather<T> * bs, b1 - s0);
          const std::int64_t* pq_rows = perm_q.data() + base + s0;
          const std::int64_t* pk_rows = perm_k.data() + base + s0;
          for (std::int64_t i = 0; i < n; ++i) {
            if (s0 + i + kPrefetchRows < b1) {
              prefetch_rows(qb, ldh, pq_rows + i + kPrefetchRows, 1, Dh);
              prefetch_rows(kb, ldh, pk_rows + i + kPrefetchRows, 1, Dh);
              prefetch_rows(vb, ldv, pk_rows + i + kPrefetchRows, 1, D);
            }
            const T* q_row = qb + pq_rows[i] * ldh;
            const T* k_row = kb + pk_rows[i] * ldh;
            const T* v_row = vb + pk_rows[i] * ldv;
            copy_row(q_row, qs.data() + i * ldh, ldh);
            copy_row(k_row, ks.data() + i * ldh, ldh);
            copy_row(v_row, vs.data() + i * ldv, ldv);
          }
          for (std::int64_t s = 0; s < n; s += bs) {
            // Meanwhile the caches fetch the sums' rows of the next bucket.
            if (s0 + s + bs < b1)
              prefetch_rows(num + head * static_cast<std::size_t>(ldn), ldn, pq_rows + s + bs, bs, D + 1);
            const kernels::GaussianBucketArgsOf<T> args{
                qs.data() + s * ldh, ldh, identity.data(), ks.data() + s * ldh, ldh, identity.data(),
                vs.data() + s * ldv, ldv, bs, Dh, D, bnum.data(), bden.data(), scratch.data()};
            if constexpr (std::is_same_v<T, float>)
              kernels::cpu().gaussian_bucket(args);
            else
              kernels::cpu().gaussian_bucket_f64(args);
            for (int i = 0; i < bs; ++i) {
              const auto row = static_cast<std::size_t>(pq_rows[s + i]);
              T* acc = num + (head + row) * static_cast<std::size_t>(ldn);
              const T* b = bnum.data() + static_cast<std::size_t>(i) * static_cast<std::size_t>(D);
              if (c == 0) {
                for (int d = 0; d < D; ++d) acc[d] = b[d];
                acc[D] = bden[static_cast<std::size_t>(i)];
                continue;
              }
              for (int d = 0; d < D; ++d) acc[d] += b[d];
              acc[D] += bden[static_cast<std::size_t>(i)];
            }
          }
        }
      }
    }
  }
}

template <class T>
void CpuExec<T>::layer_done(int l) {
  if (!trace_) return;
  Trace<T>* const trace = trace_;
  auto &pq = w_.pq, &pk = w_.pk;
  auto &perm_q = w_.perm_q, &perm_k = w_.perm_k;
  const std::vector<T>& delta = delta_;
  trace->perm_q.emplace_back(perm_q.begin(), perm_q.end());
  trace->perm_k.emplace_back(perm_k.begin(), perm_k.end());
  trace->delta.push_back(delta);
  if (l != 0) return;
  trace->keys_q0.assign(pq.begin(), pq.end());
  trace->keys_k0.assign(pk.begin(), pk.end());
  // The first layer's attention output out_linear(attn), again from its kept sums (the same bits).
  const int D = cfg_.h_dim;
  auto& y = sized(w_.y, npu_ * static_cast<std::size_t>(D));
  const auto& out_linear = *blocks_.front().out_linear;
  tiles([&](Ops& ops, index_t r0, index_t n) {
    ops.dense(ops::DenseArgs<Dense, R>{&out_linear, ops.attention(r0, n), R{y.data() + r0 * D, D, n, D, ops::Place::host}});
  });
  trace->attn_out0.assign(y.begin(), y.end());
}

template <class T>
void CpuExec<T>::store() {
  const T* result = w_.res.data();
  if (cfg_.num_classes > 0) {
    net_.finish_outputs(w_.final_out.data(), np_);  // pileup: the sigmoid
    result = w_.final_out.data();
  }
  const int od = cfg_.out_dim();
  for (std::int64_t p = 0; p < np_; ++p)
    if (g_.unpad[static_cast<std::size_t>(p)])
      std::copy(result + p * od, result + (p + 1) * od, out_ + g_.pad_seq[static_cast<std::size_t>(p)] * od);
}

}  // namespace

template <class T>
void Network<T>::forward(const Geometry& g, const float* x, const float* coords, T* out, Trace<T>* trace,
                         const std::function<void(std::vector<T>&, std::vector<T>&)>* range, int threads,
                         const BucketStage<T>* buckets, ForwardWork<T>* work) const {
  ForwardWork<T> own;
  CpuExec<T> exec(*this, g, x, coords, out, trace, range, thread_count(threads), buckets, work ? *work : own);
  program::forward(exec);
}

template <class T>
std::size_t ForwardWork<T>::bytes() const {
  std::size_t values = 0;
  for (const Array<T>* array : {&xp, &cp, &cat, &xn, &qh, &kh, &pq, &pk, &num, &tiles, &y, &vh, &tnum, &tden, &eh,
                                &res, &final_out})
    values += array->capacity();
  return values * sizeof(T) + (perm_q.capacity() + perm_k.capacity()) * sizeof(std::int64_t);
}

template struct ForwardWork<float>;
template struct ForwardWork<double>;
template class Network<float>;
template class Network<double>;

}  // namespace surrogate::hept
