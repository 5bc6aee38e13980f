// HEPT's CPU forward in float or double (share/docs/hept.md): feature encoder, HEPT blocks (RBF-augmented
// queries and keys, E2LSH keys P + code * Delta, stable bucket sorts, Gaussian bucket attention summed
// over the hash tables), the concatenation head and its PyG-style MLP, the optional out_proj.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>
#include <type_traits>

#include "../prefetch.hpp"
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

/// y[n] = x[n] W^T (+ b) for `rows` rows (x at stride ldx, y at stride ldy), blocks of rows per thread (a
/// row's bits do not depend on the blocks).
template <class T>
void apply(const kernels::PackedLinear& l, const T* x, std::int64_t ldx, T* y, std::int64_t ldy,
           std::int64_t rows, int threads) {
  constexpr std::int64_t kRows = 256;
  if constexpr (std::is_same_v<T, float>) {
    // The kernel writes the padded width: straight into y when that is the width and y's stride.
    const int pad = l.out_pad();
    const bool direct = l.out() == pad && ldy == pad;
#pragma omp parallel num_threads(threads)
    {
      std::vector<float> block(direct ? 0 : static_cast<std::size_t>(kRows) * static_cast<std::size_t>(pad));
#pragma omp for schedule(static)
      for (std::int64_t r0 = 0; r0 < rows; r0 += kRows) {
        const std::int64_t n = std::min(kRows, rows - r0);
        linear_rows<float>(l, x + r0 * ldx, ldx, direct ? y + r0 * ldy : block.data(), pad, n);
        for (std::int64_t r = 0; r < n && !direct; ++r)
          std::copy(block.data() + r * pad, block.data() + r * pad + l.out(), y + (r0 + r) * ldy);
      }
    }
  } else {
#pragma omp parallel for num_threads(threads) schedule(static)
    for (std::int64_t r0 = 0; r0 < rows; r0 += kRows)
      linear_rows<double>(l, x + r0 * ldx, ldx, y + r0 * ldy, ldy, std::min(kRows, rows - r0));
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

template <class T>
void Network<T>::forward(const Geometry& g, const float* x, const float* coords, T* out, Trace<T>* trace,
                         const std::function<void(std::vector<T>&, std::vector<T>&)>* range, int threads,
                         const BucketStage<T>* buckets, ForwardWork<T>* work) const {
  threads = thread_count(threads);
  const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes, cd = cfg_.coords_dim, Dh = cfg_.hash_dim();
  const int rows = C * H, L = cfg_.n_layers, bs = cfg_.block_size, HD = H * D;
  const std::int64_t np = g.padded_points(), ldcat = static_cast<std::int64_t>(L + 1) * D;
  const auto npu = static_cast<std::size_t>(np);
  // Padded inputs (duplicates are copies of their originals' rows; src: zero rows).
  const bool src_layout = cfg_.layout == Config::Layout::src;
  const int in = cfg_.encoder_in();
  ForwardWork<T> own;
  ForwardWork<T>& w = work ? *work : own;
  // (kept arrays hold the last forward's values: every element read below is written first)
  const auto sized = [](auto& array, std::size_t n) -> auto& {
    array.resize(n);
    return array;
  };
  auto &xp = sized(w.xp, npu * static_cast<std::size_t>(in)), &cp = sized(w.cp, npu * static_cast<std::size_t>(cd));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::int64_t p = 0; p < np; ++p) {
    const std::int64_t i = g.pad_seq[static_cast<std::size_t>(p)];
    if (i < 0) {  // src: zero pads
      std::fill_n(xp.begin() + p * in, in, T(0));
      std::fill_n(cp.begin() + p * cd, cd, T(0));
      continue;
    }
    encoder_input(x + i * cfg_.in_dim, xp.data() + p * in);
    for (int c = 0; c < cd; ++c) cp[static_cast<std::size_t>(p * cd + c)] = static_cast<T>(coords[i * cd + c]);
  }
  auto &cat = sized(w.cat, npu * static_cast<std::size_t>(ldcat)), &hid = sized(w.hid, npu * static_cast<std::size_t>(D));
  apply<T>(w_->enc0, xp.data(), in, hid.data(), D, np, threads);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (std::size_t i = 0; i < hid.size(); ++i) hid[i] = std::max(hid[i], T(0));
  apply<T>(w_->enc2, hid.data(), D, cat.data(), ldcat, np, threads);

  const std::size_t heads_rows = static_cast<std::size_t>(H) * npu, table_rows = static_cast<std::size_t>(rows) * npu;
  auto& xn = sized(w.xn, npu * static_cast<std::size_t>(D));
  // Per head [h][n]: q_hat and k_hat at row stride ldh, v at ldv. Bucket attention on this process
  // gathers their rows in each table's order, so there each row starts a cache line and fills whole ones
  // (float: 2 lines a row instead of about 2.9, 2.9 and 2.5). The split stage (buckets) takes them
  // unpadded.
  const int ldh = buckets ? Dh : line_padded<T>(Dh), ldv = buckets ? D : line_padded<T>(D);
  T* qh = line_aligned(w.qh, heads_rows * static_cast<std::size_t>(ldh));
  T* kh = line_aligned(w.kh, heads_rows * static_cast<std::size_t>(ldh));
  T* vh = line_aligned(w.vh, heads_rows * static_cast<std::size_t>(ldv));
  auto &pq = sized(w.pq, table_rows), &pk = sized(w.pk, table_rows);
  auto &perm_q = sized(w.perm_q, table_rows), &perm_k = sized(w.perm_k, table_rows);
  // Per head: the numerators and the denominator summed over the hash tables, [h][n] rows of D + 1 values
  // (den last) at stride ldn, from a cache line: the buckets' scattered sums touch 2 lines a row, not 3.5.
  const int ldn = line_padded<T>(D + 1);
  T* num = line_aligned(w.num, heads_rows * static_cast<std::size_t>(ldn));
  // Per thread, for a block of kAttnRows rows after the bucket attention: the heads' outputs (HD a row),
  // the output Linear's (ld_out: the kernel's padded width in float), LN2's (D), the feed-forward's hidden
  // and output rows (ld_ff).
  constexpr std::int64_t kAttnRows = 64;
  const bool packed = std::is_same_v<T, float> && L > 0;
  const int ld_out = packed ? w_->layers[0].out_linear.out_pad() : D;
  const int ld_ff = packed ? std::max(w_->layers[0].ff0.out_pad(), w_->layers[0].ff2.out_pad()) : D;
  const auto attn_tiles = static_cast<std::size_t>(kAttnRows * (HD + ld_out + D + 2 * ld_ff));
  auto& attn = sized(w.attn, attn_tiles * static_cast<std::size_t>(threads));
  auto &tnum = w.tnum, &tden = w.tden;  // split graphs: one table's sums
  // First padded row of every graph.
  std::vector<std::int64_t> graph_first(1, 0);
  for (const std::int64_t s : g.padded_sizes) graph_first.push_back(graph_first.back() + s);
  const int graphs = static_cast<int>(g.padded_sizes.size());

  std::optional<ScopedPhase> phase(std::in_place, kLshAttentionLayersPhase);
  for (int l = 0; l < L; ++l) {
    const Layer& layer = w_->layers[static_cast<std::size_t>(l)];
    const std::vector<T>& rbf_scale = rbf_scale_[static_cast<std::size_t>(l)];
    T* e = cat.data() + static_cast<std::int64_t>(l) * D;
    layer_norm(layer.norm1, e, ldcat, xn.data(), D, np, D, threads);
    // q_hat, k_hat [h][n][Dh] = [q ; sqrt(2 w') * coords] and v [h][n][D] from their dense layers, the
    // E2LSH projections P [c][h][n] on alpha [h][t][c] of each block of rows while it is in the cache.
    const auto coordinates = [&](int h, std::int64_t n, T* row) {
      for (int t = 0; t < cd; ++t)
        row[D + t] = rbf_scale[static_cast<std::size_t>(h * cd + t)] * cp[static_cast<std::size_t>(n * cd + t)];
    };
    const auto projections = [&](const T* rows_h, T* p) {
      return [&, rows_h, p](std::int64_t r0, std::int64_t n) {
        for (int h = 0; h < H; ++h) {
          const std::size_t head = static_cast<std::size_t>(h) * npu;
          const float* alpha = layer.alpha.data() + static_cast<std::size_t>(h * Dh * C);
          for (std::int64_t n0 = r0; n0 < r0 + n; n0 += kProjectionLanes<T>)
            hash_projections<T>(rows_h + head * static_cast<std::size_t>(ldh), ldh, np, n0, Dh, alpha, C, p + head,
                                static_cast<std::size_t>(H) * npu);
        }
      };
    };
    apply_heads<T>(layer.wq, xn.data(), D, H, D, qh, ldh, np, np, threads, coordinates, projections(qh, pq.data()));
    apply_heads<T>(layer.wk, xn.data(), D, H, D, kh, ldh, np, np, threads, coordinates, projections(kh, pk.data()));
    apply_heads<T>(layer.wv, xn.data(), D, H, D, vh, ldv, np, np, threads, [](int, std::int64_t, T*) {},
                   [](std::int64_t, std::int64_t) {});
    if (src_layout)  // the pads' q_hat, k_hat and v are zero (their projections 0 enter Delta)
#pragma omp parallel for num_threads(threads) schedule(static)
      for (std::int64_t n = 0; n < np; ++n) {
        if (g.pad_seq[static_cast<std::size_t>(n)] >= 0) continue;
        for (int h = 0; h < H; ++h) {
          const std::size_t slot = static_cast<std::size_t>(h) * npu + static_cast<std::size_t>(n);
          std::fill_n(qh + slot * static_cast<std::size_t>(ldh), Dh, T(0));
          std::fill_n(kh + slot * static_cast<std::size_t>(ldh), Dh, T(0));
          std::fill_n(vh + slot * static_cast<std::size_t>(ldv), D, T(0));
          for (int c = 0; c < C; ++c)
            pq[static_cast<std::size_t>(c * H + h) * npu + static_cast<std::size_t>(n)] =
                pk[static_cast<std::size_t>(c * H + h) * npu + static_cast<std::size_t>(n)] = T(0);
        }
      }
    // The range Delta of every (table, head) over the whole batch (all ranks), then the keys.
    std::vector<T> lo(static_cast<std::size_t>(rows), T(INFINITY)), hi(static_cast<std::size_t>(rows), T(-INFINITY));
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; ++r)
      for (std::size_t n = 0; n < npu; ++n) {
        const auto i = static_cast<std::size_t>(r) * npu + n;
        lo[static_cast<std::size_t>(r)] = std::min({lo[static_cast<std::size_t>(r)], pq[i], pk[i]});
        hi[static_cast<std::size_t>(r)] = std::max({hi[static_cast<std::size_t>(r)], pq[i], pk[i]});
      }
    if (range && *range) (*range)(lo, hi);
    std::vector<T> delta(static_cast<std::size_t>(rows));
    for (int r = 0; r < rows; ++r)
      delta[static_cast<std::size_t>(r)] = hi[static_cast<std::size_t>(r)] - lo[static_cast<std::size_t>(r)];
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int r = 0; r < rows; ++r) {
      const T dr = delta[static_cast<std::size_t>(r)];
      // src: shift (phi * Delta) * (ceil(R_eta) + 1) + eta * Delta, the pads' keys +inf.
      const float region_count = w_->regions[static_cast<std::size_t>(((r / H) * 2) * H + r % H)];
      const T factor = std::ceil(static_cast<T>(region_count)) + T(1);
      for (std::size_t n = 0; n < npu; ++n) {
        const auto i = static_cast<std::size_t>(r) * npu + n;
        if (!src_layout) {
          const T shift = static_cast<T>(g.padded_codes[i]) * dr;
          pq[i] += shift;
          pk[i] += shift;
          continue;
        }
        const T shift = static_cast<T>(g.region_phi[i]) * dr * factor + static_cast<T>(g.region_eta[i]) * dr;
        const bool pad = g.pad_seq[n] < 0;
        pq[i] = pad ? T(INFINITY) : pq[i] + shift;
        pk[i] = pad ? T(INFINITY) : pk[i] + shift;
      }
    }
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
    if (trace) {
      trace->perm_q.emplace_back(perm_q.begin(), perm_q.end());
      trace->perm_k.emplace_back(perm_k.begin(), perm_k.end());
      trace->delta.push_back(delta);
      if (l == 0) {
        trace->keys_q0.assign(pq.begin(), pq.end());
        trace->keys_k0.assign(pk.begin(), pk.end());
      }
    }
    // A block of rows at a time in tiles per thread: the heads' quotients num / den, the output Linear
    // (y), the residual x + y written to the next block of the concatenation, then x + ff(LN2(x)).
    T* next = e + D;
    const bool keep_y = trace && l == 0;  // (the trace's attention output)
    if (keep_y) sized(w.y, npu * static_cast<std::size_t>(D));
#pragma omp parallel num_threads(threads)
    {
      T* const quotients = attn.data() + static_cast<std::size_t>(omp_get_thread_num()) * attn_tiles;
      T* const outputs = quotients + kAttnRows * HD;
      T* const normed = outputs + kAttnRows * ld_out;
      T* const hidden = normed + kAttnRows * D;
      T* const ff_out = hidden + kAttnRows * ld_ff;
#pragma omp for schedule(static)
      for (std::int64_t r0 = 0; r0 < np; r0 += kAttnRows) {
        const std::int64_t rows_here = std::min(kAttnRows, np - r0);
        for (std::int64_t r = 0; r < rows_here; ++r)
          for (int h = 0; h < H; ++h) {
            const T* sums = num + (static_cast<std::size_t>(h) * npu + static_cast<std::size_t>(r0 + r)) *
                                      static_cast<std::size_t>(ldn);
            const T den = sums[D];
            T* to = quotients + r * HD + h * D;
            for (int d = 0; d < D; ++d) to[d] = sums[d] / den;
          }
        linear_rows<T>(layer.out_linear, quotients, HD, outputs, ld_out, rows_here);  // (the padded width)
        T* const xr = next + r0 * ldcat;
        for (std::int64_t r = 0; r < rows_here; ++r)
          for (int d = 0; d < D; ++d) xr[r * ldcat + d] = e[(r0 + r) * ldcat + d] + outputs[r * ld_out + d];
        if (keep_y)
          for (std::int64_t r = 0; r < rows_here; ++r)
            std::copy_n(outputs + r * ld_out, D, w.y.data() + (r0 + r) * D);
        layer_norm_rows<T>(layer.norm2, xr, ldcat, normed, D, 0, rows_here, D);
        linear_rows<T>(layer.ff0, normed, D, hidden, ld_ff, rows_here);
        for (std::int64_t r = 0; r < rows_here; ++r)
          for (int d = 0; d < D; ++d) hidden[r * ld_ff + d] = kernels::relu_keep_nan(hidden[r * ld_ff + d]);
        linear_rows<T>(layer.ff2, hidden, ld_ff, ff_out, ld_ff, rows_here);
        for (std::int64_t r = 0; r < rows_here; ++r)
          for (int d = 0; d < D; ++d) xr[r * ldcat + d] += ff_out[r * ld_ff + d];
      }
    }
    if (keep_y) trace->attn_out0.assign(w.y.begin(), w.y.end());
  }
  phase.reset();
  phase.emplace(kHeptHeadPhase);
  // Head: e = W [e_0 ; ... ; e_L]; out = e + MLP(e) (4 x Linear, LayerNorm, tanh; a last Linear). The MLP
  // runs a block of rows at a time through all its layers, so that its 256-wide activations stay in the
  // caches instead of four passes over np x 256 arrays per layer (each row's operations are unchanged).
  const int half = D / 2;
  constexpr std::int64_t kHeadRows = 64;
  auto& eh = sized(w.eh, npu * static_cast<std::size_t>(half));
  auto& res = sized(w.res, eh.size());
  apply<T>(w_->W, cat.data(), ldcat, eh.data(), half, np, threads);
  const int last_pad = std::is_same_v<T, float> ? w_->mlp[4].out_pad() : half;
  const auto per_thread = static_cast<std::size_t>(kHeadRows * 256);
  auto &a = sized(w.a, per_thread * static_cast<std::size_t>(threads)), &b = sized(w.b, a.size());
#pragma omp parallel num_threads(threads)
  {
    T* const ta = a.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
    T* const tb = b.data() + static_cast<std::size_t>(omp_get_thread_num()) * per_thread;
#pragma omp for schedule(static)
    for (std::int64_t r0 = 0; r0 < np; r0 += kHeadRows) {
      const std::int64_t n = std::min(kHeadRows, np - r0);
      const T* src = eh.data() + r0 * half;
      std::int64_t ld = half;
      for (int j = 0; j < 4; ++j) {
        linear_rows<T>(w_->mlp[j], src, ld, ta, 256, n);
        layer_norm_rows<T>(w_->mlp_norms[j], ta, 256, tb, 256, 0, n, 256);
        tanh_in_place(tb, n * 256);
        src = tb;
        ld = 256;
      }
      linear_rows<T>(w_->mlp[4], src, ld, ta, last_pad, n);  // (the kernel writes the padded width)
      for (std::int64_t r = 0; r < n; ++r)
        for (int c = 0; c < half; ++c)
          res[static_cast<std::size_t>((r0 + r) * half + c)] =
              ta[r * last_pad + c] + eh[static_cast<std::size_t>((r0 + r) * half + c)];
    }
  }
  const T* result = res.data();
  if (cfg_.num_classes > 0) {
    auto& final_out = sized(w.final_out, npu * static_cast<std::size_t>(cfg_.num_classes));
    apply<T>(w_->out_proj, res.data(), half, final_out.data(), cfg_.num_classes, np, threads);
    finish_outputs(final_out.data(), np);  // pileup: the sigmoid
    result = final_out.data();
  }
  const int od = cfg_.out_dim();
  for (std::int64_t p = 0; p < np; ++p)
    if (g.unpad[static_cast<std::size_t>(p)])
      std::copy(result + p * od, result + (p + 1) * od, out + g.pad_seq[static_cast<std::size_t>(p)] * od);
}

template <class T>
std::size_t ForwardWork<T>::bytes() const {
  std::size_t values = 0;
  for (const Array<T>* array : {&xp, &cp, &cat, &hid, &xn, &qh, &kh, &pq, &pk, &num, &attn, &y,
                                      &vh, &tnum, &tden, &eh, &a, &b, &res, &final_out})
    values += array->capacity();
  return values * sizeof(T) + (perm_q.capacity() + perm_k.capacity()) * sizeof(std::int64_t);
}

template struct ForwardWork<float>;
template struct ForwardWork<double>;
template class Network<float>;
template class Network<double>;

}  // namespace surrogate::hept
