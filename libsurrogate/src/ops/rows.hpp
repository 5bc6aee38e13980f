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
/// write through the views they read (inputs made from const arrays with `view` stay unchanged).
struct Rows {
  float* data = nullptr;
  index_t ld = 0;
  index_t rows = 0;
  int width = 0;
  Place place = Place::host;

  float* row(index_t r) const { return data + r * ld; }
  /// Columns first .. first + count - 1 of every row.
  Rows columns(int first, int count) const { return {data + first, ld, rows, count, place}; }
  /// Rows first .. first + count - 1.
  Rows range(index_t first, index_t count) const { return {data + first * ld, ld, count, width, place}; }
  /// Rows first, first + step, first + 2 step, ...: member `first` of every group of `step` rows.
  Rows every(int step, int first) const { return {data + first * ld, ld * step, rows / step, width, place}; }
};

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

template <class Dense>
struct DenseArgs {
  const Dense* layer = nullptr;
  Rows x, y;  // y.rows = x.rows
  Activation act = Activation::none;
  Rows add{};  // optional, may alias y
};

template <class Norm>
struct NormArgs {
  const Norm* norm = nullptr;
  Rows x, y;
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

}  // namespace surrogate::ops
