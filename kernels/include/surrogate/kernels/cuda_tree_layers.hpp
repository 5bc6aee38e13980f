// CUDA kernels of Sequoia's layers around its tree attention (CUDA builds only; share/docs/cuda.md "Tree
// attention"): eval BatchNorm, max pooling, the three-way mix, the head's LayerNorm, PointConv and the
// classification head's ordered sums, each with
// the arithmetic of the CPU forward (libsurrogate's ops/host_ops.hpp, Sequoia's members). Enqueue on the
// stream; std::invalid_argument for bad sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t

namespace surrogate::kernels::cuda {

/// Eval BatchNorm in place: x[r, c] = float(double(x) * scale[c] + shift[c]) (the double sum rounded to
/// float once), then max(x, 0) when `relu` (NaN and -0 kept as std::max keeps them), c < dim.
struct TreeNormArgs {
  float* x = nullptr;
  index_t ld = 0, rows = 0;
  int dim = 0;
  const float* scale = nullptr;
  const float* shift = nullptr;
  bool relu = false;
};
void tree_norm(const TreeNormArgs& a, cudaStream_t stream);

/// Max pooling: out[p, c] = the max of x[rows[j], c] over j = first[p] .. first[p+1]-1 in order (the first
/// row, then std::max's rule: a later row replaces the value only when larger), 0 for a parent without
/// rows, c < width.
struct TreePoolArgs {
  const float* x = nullptr;
  index_t ldx = 0;
  const std::int64_t* first = nullptr;  // parents + 1
  const std::int64_t* rows = nullptr;
  index_t parents = 0;
  int width = 0;
  float* out = nullptr;
  index_t ldo = 0;
};
void tree_pool(const TreePoolArgs& a, cudaStream_t stream);

/// out[r, c] = w[0] a + w[1] b + w[2] s in float, left to right (each product and sum rounded; a null
/// input is skipped, and without `a` the sum starts from 0.0f), c < width; inputs share the stride ld.
struct TreeMixArgs {
  const float* a = nullptr;
  const float* b = nullptr;
  const float* s = nullptr;
  index_t ld = 0, rows = 0;
  int width = 0;
  float w[3] = {0, 0, 0};
  float* out = nullptr;
  index_t ldo = 0;
};
void tree_mix(const TreeMixArgs& a, cudaStream_t stream);

/// LayerNorm then ReLU in place, in double: mean and variance of the row summed in order, inv =
/// 1 / sqrt(var / dim + eps), x = max(0, float((x - mean) inv weight + bias)).
struct TreeLayerNormArgs {
  float* x = nullptr;
  index_t ld = 0, rows = 0;
  int dim = 0;
  const float* weight = nullptr;
  const float* bias = nullptr;
  double eps = 1e-5;
};
void tree_layer_norm_relu(const TreeLayerNormArgs& a, cudaStream_t stream);

/// PointConv with max aggregation: y[i, o] = max over t < k of m_t, m_t = float(b[o] + sum_j w[o, j] in_j)
/// (double, inputs in order) with in = [x[key_t] (c values) ; p[key_t] - p[i] (float)], key_t =
/// keys[i * k + t]; the max as tree_pool takes it. w is out x (c + 3), row-major.
struct PointConvArgs {
  const float* x = nullptr;
  index_t ldx = 0;
  int c = 0;
  const float* positions = nullptr;  // rows x 3
  const std::int64_t* keys = nullptr;
  int k = 0;
  index_t points = 0;
  const float* w = nullptr;
  const float* b = nullptr;
  int out = 0;
  float* y = nullptr;
  index_t ldy = 0;
};
void point_conv_max(const PointConvArgs& a, cudaStream_t stream);

/// Ordered sums in double: s = the sum from 0.0 of x[rows[j], c] over j = first[l] .. first[l+1]-1 in
/// order (x float rows, or x64 double rows when x is null), then sums[l * width + c] = s, or, with
/// `means`, means[l * ldm + c] = float(s / counts[l]) (counts null: the list's length), l < lists,
/// c < width. `first` holds lists + 1 offsets into the whole `rows` array.
struct TreeSumsArgs {
  const float* x = nullptr;
  const double* x64 = nullptr;
  index_t ldx = 0;
  const std::int64_t* first = nullptr;
  const std::int64_t* rows = nullptr;
  index_t lists = 0;
  int width = 0;
  double* sums = nullptr;
  const double* counts = nullptr;
  float* means = nullptr;
  index_t ldm = 0;
};
void tree_sums(const TreeSumsArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
