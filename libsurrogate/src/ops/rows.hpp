// The vocabulary of a family's stage program: a view of rows, and one argument struct per layer call.
// A program is written once as a template over an Ops and calls only these members:
//
//   dense(DenseArgs)            y = act(x W^T + b) [+ add]      (add may alias y: a residual)
//   norm(NormArgs)              LayerNorm / RMSNorm of x into y (y may equal x)
//   batch_norm(BatchNormArgs)   x = (x [+ add]) alpha + beta    (the folded eval BatchNorm)
//   copy(CopyArgs)              rows gathered / scattered / copied into columns of other rows
//   combine(CombineArgs)        y = a + b or a * b, row-wise
//   segment_mean(SegmentMeanArgs)  the mean of consecutive message rows per receiver
//   ball_attention(BallAttentionArgs)  attention within consecutive balls (optional distance bias)
//   fourier(FourierArgs)        [cos(p F^T), sin(p F^T)] of rows of positions (the ShapeNet-Car wrapper)
//
// Two Ops implement them: HostOps (host_ops.hpp, the CPU kernel table on one tile of rows, inside the
// family's OpenMP loops) and CudaOps (cuda_ops.hpp, the device layers on a stream, once over all rows).
// Each names its layer types (Dense, Norm, Vector: a weight vector); the structs below that only hold such
// layers (BatchNorm) are defined once here for both.
#pragma once

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::ops {

using kernels::Activation;
using kernels::index_t;

enum class Place : std::uint8_t { host, device };

/// `rows` rows of `width` values, row r at data + r * ld, on the host or on a device. Layer calls never
/// write through the views they read (inputs made from const arrays with `view` stay unchanged). Rows of
/// float unless a family's program runs in another arithmetic (HEPT's float64 reference).
template <class T>
struct RowsOf {
  T* data = nullptr;
  index_t ld = 0;
  index_t rows = 0;
  int width = 0;
  Place place = Place::host;

  T* row(index_t r) const { return data + r * ld; }
  /// Columns first .. first + count - 1 of every row.
  RowsOf columns(int first, int count) const { return {data + first, ld, rows, count, place}; }
  /// Rows first .. first + count - 1.
  RowsOf range(index_t first, index_t count) const { return {data + first * ld, ld, count, width, place}; }
  /// Rows first, first + step, first + 2 step, ...: member `first` of every group of `step` rows.
  RowsOf every(int step, int first) const { return {data + first * ld, ld * step, rows / step, width, place}; }
};
using Rows = RowsOf<float>;

/// A view of rows the program only reads.
inline Rows view(const float* data, index_t ld, index_t rows, int width, Place place) {
  return {const_cast<float*>(data), ld, rows, width, place};
}

/// The eval BatchNorm folded as PyTorch's CPU inference kernel: y = x alpha + beta with
/// alpha = weight / sqrt(running_var + eps), beta = bias - running_mean alpha.
template <class Vector>
struct BatchNorm {
  Vector alpha, beta;
};

template <class Dense, class R = Rows>
struct DenseArgs {
  const Dense* layer = nullptr;
  R x, y;  // y.rows = x.rows
  Activation act = Activation::none;
  R add{};  // optional, may alias y
};

template <class Norm, class R = Rows>
struct NormArgs {
  const Norm* norm = nullptr;
  R x, y;
};

template <class Vector>
struct BatchNormArgs {
  const BatchNorm<Vector>* bn = nullptr;
  Rows x;      // normalised in place, x.width channels
  Rows add{};  // optional: added to x before the norm
};

/// dst row r (dst_index[r] if set) = src row r (src_index[r] if set), dst.width values, r < dst.rows.
/// Index arrays live where the rows live; src and dst must not overlap.
struct CopyArgs {
  Rows src;
  const std::int64_t* src_index = nullptr;
  Rows dst;
  const std::int64_t* dst_index = nullptr;
};

enum class Combine : std::uint8_t { add, multiply };

/// y = a + b or a * b for y.rows rows of y.width values; y may equal a or b.
struct CombineArgs {
  Combine op = Combine::add;
  Rows a, b, y;
};

/// agg row i = (sum of msg rows start[i] - start[0] .. start[i + 1] - start[0] - 1, from 0 in order)
/// / max(1, start[i + 1] - start[i]) for i < agg.rows; `start` (agg.rows + 1 entries) where the rows live.
struct SegmentMeanArgs {
  Rows msg;
  const std::int64_t* start = nullptr;
  Rows agg;
};

/// Multi-head attention within each ball of `ball` consecutive rows of q, k, v (heads x E columns each,
/// E = q.width / heads) into out, with the distance bias of the official BallMSA (sigma_h times the
/// distances of the rows' positions) only when `sigma` holds values.
template <class Vector>
struct BallAttentionArgs {
  int ball = 0, heads = 0;
  Rows q, k, v;
  float scale = 1.0f;
  const Vector* sigma = nullptr;
  Rows positions;
  Rows out;
};

/// features row r = [cos(p_r F^T), sin(p_r F^T)] with p_r = positions row r (positions.width values) and
/// F the frequencies (features.width / 2 rows of positions.width values, row-major); each projection sums
/// its products from 0 in coordinate order, every product and sum rounded to float.
template <class Vector>
struct FourierArgs {
  const Vector* frequencies = nullptr;
  Rows positions, features;
};

// ---------------------------------------------------------------------------------------------------
// Sequoia's members (sequoia/program.hpp): its tree attention and the row layers around it, each with
// the arithmetic of Sequoia's CPU forward (sums in double where it sums in double).
//
//   tree_attention(TreeAttentionArgs)  attention of each query over its key list, per-edge positional MLP
//   tree_pool(TreePoolArgs)            per parent the max of its listed child rows (0 without rows)
//   tree_mix(TreeMixArgs)              y = w0 a + w1 b + w2 s in float, left to right (null terms skipped)
//   tree_norm(TreeNormArgs)            the eval BatchNorm in double, rounded once, then ReLU when asked
//   tree_layer_norm_relu(TreeLayerNormArgs)  LayerNorm in double, then ReLU, in place
//   point_conv(PointConvArgs)          PointConv with max aggregation over k listed neighbours
//   tree_sums(TreeSumsArgs)            per list the sum of its rows in double, in list order (the
//                                      classification head's means)

/// Sequoia's positional MLP pe(p) = W3 ReLU(BN(W1 p + b1)) + b3 on three coordinates: W1 (3 x 3, row
/// major), b1 and the folded BatchNorm as float Vectors, W3^T (3 x e, channel-contiguous) and b3 as Wide
/// (double) vectors.
template <class Vector, class Wide>
struct TreePositional {
  Vector w1, b1;
  BatchNorm<Vector> bn;
  Wide w3, b3;
};

/// Query a (q.rows queries) attends to the key rows keys[first[a] - first[0] .. ) of k and v with the edge
/// term pe(p_a - p_key) (kernels/tree_attention.hpp); `first` holds q.rows + 1 offsets into the whole
/// `keys` array (first[0] need not be 0). denom = tau * count + 1e-8, or fixed_denom when > 0.
template <class Positional>
struct TreeAttentionArgs {
  const Positional* pe = nullptr;
  int heads = 0;
  Rows q, k, v;
  Rows query_positions, key_positions;  // 3 values per row
  const std::int64_t* first = nullptr;
  const std::int64_t* keys = nullptr;
  float tau = 1.0f, fixed_denom = 0.0f;
  Rows out;
};

/// out row p = the max of x rows rows[first[p] .. first[p + 1]) (first: out.rows + 1 offsets into the
/// whole `rows` array), in list order with kernels::max_keep_nan; 0 without rows.
struct TreePoolArgs {
  Rows x;
  const std::int64_t* first = nullptr;
  const std::int64_t* rows = nullptr;
  Rows out;
};

struct TreeMixArgs {
  float w[3] = {0, 0, 0};
  Rows a, b, s;  // a null data: the term is skipped
  Rows y;
};

template <class Vector>
struct TreeNormArgs {
  const BatchNorm<Vector>* bn = nullptr;
  Rows x;  // in place
  bool relu = false;
};

template <class Vector>
struct TreeLayerNormArgs {
  const Vector* weight = nullptr;
  const Vector* bias = nullptr;
  Rows x;  // in place
};

/// Per list l < lists: s = the sum from 0.0 in double of the rows rows[first[l] .. first[l+1]) of x
/// (float rows), or of x64 (double rows of `width` values, contiguous) when x has no data, in list order;
/// kept in double (sums: lists x width, contiguous) or, with `means`, divided by counts[l] (the list's
/// length when counts is null) and rounded once to float into means row l. `first`: lists + 1 offsets
/// into the whole `rows` array (first[0] need not be 0). Arrays live where the rows live.
struct TreeSumsArgs {
  Rows x;
  const double* x64 = nullptr;
  const std::int64_t* first = nullptr;
  const std::int64_t* rows = nullptr;
  index_t lists = 0;
  int width = 0;
  double* sums = nullptr;
  const double* counts = nullptr;
  Rows means{};
};

/// y row i = max over t < k of W [x row keys[i k + t] ; p_key - p_i] + b (W: out x (c + 3), a sum in
/// double per output); positions of the rows of x, 3 values each. i < y.rows, rows i0 .. of the point
/// rows: keys and `self` (the row of x and positions of point i) start at the tile's first point.
template <class Vector>
struct PointConvArgs {
  const Vector* w = nullptr;
  const Vector* b = nullptr;
  Rows x, positions;
  const std::int64_t* keys = nullptr;
  int k = 0;
  index_t self = 0;  // the row of the tile's first point in x and positions
  Rows y;
};

// ---------------------------------------------------------------------------------------------------
// BSA's members (bsa/program.hpp): the sparse-attention branches and what joins them.
//
//   map(MapArgs)                       x = f(x) elementwise in place (ReLU, sigmoid)
//   compress(CompressArgs)             compressed blocks: C consecutive rows -> one (MLP per head, or the mean)
//   coarse_select(CoarseSelectArgs)    coarse attention over a segment's compressed blocks and the top-S
//                                      block selection
//   selected_attention(SelectedAttentionArgs)  every query attends to the S blocks its row selected
//   global_attention(GlobalAttentionArgs)      every query attends to all rows of its sample
//   gated_sum(GatedSumArgs)            o = g_local local + g_coarse coarse + g_fine fine per head
//
// On the CPU the branch members are bsa::BsaHostOps' (bsa/host_ops.hpp), run over all the rows they are
// given with their own OpenMP loops over (sample, head, query chunk); map and gated_sum are HostOps',
// row-wise, called per tile.

enum class Map : std::uint8_t { relu, sigmoid };

struct MapArgs {
  Map op = Map::relu;
  Rows x;
};

/// The sparse-attention options that shape the branches (bsa::Config names in parentheses).
struct SparseShape {
  int P = 0;  // ball_size
  int C = 0;  // compress_block_size
  int S = 0;  // selected_blocks_number
  int G = 0;  // group_selection_size (== C with block-level importance)
  bool group_selection = true;  // use_group_selection
  bool mask_own_ball = true;    // should_mask_blocks_in_ball
  bool coarse_q_attn = true;    // use_coarse_q_attn
  bool block_level = true;      // use_coarse_q_attn || use_coarse_q_importance

  /// Rows of the selection per sample and head: blocks (block-level), groups, or tokens.
  index_t selection_rows(index_t n) const {
    if (block_level) return n / C;
    return group_selection ? n / G : n;
  }
  /// Query tokens that share one selection row.
  int tokens_per_row() const { return group_selection ? G : 1; }
};

/// out row b = the block of tokens rows b C .. b C + C - 1 (heads x E columns): with `mlp` (two layers)
/// Linear(C E -> hidden), ReLU, Linear(hidden -> E) on each (block, head) flattened token-major, else the
/// mean over the block (the sum from token 0, divided by C). Device rows only: `gather` (the MLP's input
/// rows as rows of E values of `tokens`, tokens.ld a multiple of E), `start` (the mean's out.rows + 1
/// block starts), and the work rows mlp_in, mlp_hidden (the CPU uses its own per thread).
template <class Dense>
struct CompressArgs {
  const Dense* mlp = nullptr;  // [2], or null
  int C = 1, heads = 1;
  Rows tokens, out;
  const std::int64_t* gather = nullptr;
  const std::int64_t* start = nullptr;
  Rows mlp_in, mlp_hidden;
};

/// One segment: `samples` windows of `length` token rows (in-sample offset row0) with their q (queries of
/// the coarse attention without coarse_q_attn, of the token-level selection) and the blocks: qc the
/// compressed queries of the window's blocks (block-level importance), kc and vc all `blocks` compressed
/// blocks of each of the samples. out: the coarse branch (every token of a query block receives its
/// block's row with coarse_q_attn); sel: samples x heads x shape.selection_rows(length) x S block indices.
struct CoarseSelectArgs {
  SparseShape shape;
  int heads = 1, samples = 1;
  index_t length = 0, row0 = 0, blocks = 0;
  Rows q, qc, kc, vc, out;
  std::int32_t* sel = nullptr;
};

/// One segment: every query (q, `samples` x `length` rows) attends to the S C token rows of the blocks its
/// selection row chose (scale 1/sqrt(E)): from k and v of the whole samples, or, when first_row is set,
/// block b of sample s at row first_row[s * blocks + b] of k and v (blocks fetched from other ranks).
struct SelectedAttentionArgs {
  SparseShape shape;
  int heads = 1, samples = 1;
  index_t length = 0, blocks = 0;
  Rows q, k, v;
  const std::int32_t* sel = nullptr;
  const std::int64_t* first_row = nullptr;
  Rows out;
};

/// One segment: every query (q, `samples` x `length` rows) attends to the `keys` rows of its sample in k
/// and v (sample s's at rows s keys ..), streamed in key order, scale 1/sqrt(E).
struct GlobalAttentionArgs {
  int heads = 1, samples = 1;
  index_t length = 0, keys = 0;
  Rows q, k, v, out;
};

/// out = g0 local + g1 coarse + g2 fine per head, with (g0, g1, g2) the row's 3 gates of the head in
/// `gates`, or (1, static_gates[2 h], static_gates[2 h + 1]) when gates has no rows.
template <class Vector>
struct GatedSumArgs {
  int heads = 1;
  Rows local, coarse, fine, gates;
  const Vector* static_gates = nullptr;
  Rows out;
};

}  // namespace surrogate::ops
