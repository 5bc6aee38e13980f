// The sum PyTorch's float32 CPU kernel forms over a strided (non-contiguous) reduced dimension, in its order,
// for the host (balltree::mean_pool) and a CUDA device (kernels/cuda/ball_geometry.cu), so that both round
// every partial sum alike. Additions only: no contraction into fused multiply-adds can change it.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SURROGATE_TORCH_ORDER __host__ __device__ __forceinline__
#else
#define SURROGATE_TORCH_ORDER inline
#endif

namespace surrogate::kernels {

/// PyTorch's ceil-log2 helper of the CPU sum kernel: 1 for x <= 2, else ceil(log2(x)).
SURROGATE_TORCH_ORDER std::int64_t torch_ceil_log2(std::int64_t x) {
  if (x <= 2) return 1;
  std::int64_t r = 0;
  for (auto v = static_cast<std::uint64_t>(x - 1); v != 0; v >>= 1) ++r;
  return r;
}

/// Sum of v[0], v[stride], ..., v[(count-1)*stride] in the order of PyTorch's CPU float sum over a
/// non-contiguous reduced dimension: the elements are read as rows of four; four partial sums (one per
/// column) accumulate the rows with a cascade of four levels (2^p rows per level step, p >= 4); the
/// count % 4 trailing elements go into partial 0; then partial 0 + 1, + 2, + 3.
SURROGATE_TORCH_ORDER float torch_order_sum(const float* v, std::int64_t stride, std::int64_t count) {
  constexpr std::int64_t ilp = 4, levels = 4;
  const std::int64_t rows = count / ilp;
  float acc[levels][ilp] = {};
  const std::int64_t by_level = torch_ceil_log2(rows) / levels;
  const std::int64_t level_power = by_level > 4 ? by_level : 4;
  const std::int64_t level_step = std::int64_t{1} << level_power;
  const std::int64_t level_mask = level_step - 1;
  std::int64_t r = 0;
  while (r + level_step <= rows) {
    for (std::int64_t j = 0; j < level_step; ++j, ++r)
      for (std::int64_t k = 0; k < ilp; ++k) acc[0][k] += v[(r * ilp + k) * stride];
    for (std::int64_t j = 1; j < levels; ++j) {
      for (std::int64_t k = 0; k < ilp; ++k) {
        acc[j][k] += acc[j - 1][k];
        acc[j - 1][k] = 0.0f;
      }
      if ((r & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; r < rows; ++r)
    for (std::int64_t k = 0; k < ilp; ++k) acc[0][k] += v[(r * ilp + k) * stride];
  for (std::int64_t j = 1; j < levels; ++j)
    for (std::int64_t k = 0; k < ilp; ++k) acc[0][k] += acc[j][k];
  float partial[ilp] = {acc[0][0], acc[0][1], acc[0][2], acc[0][3]};
  for (std::int64_t i = rows * ilp; i < count; ++i) partial[0] += v[i * stride];
  for (std::int64_t k = 1; k < ilp; ++k) partial[0] += partial[k];
  return partial[0];
}

}  // namespace surrogate::kernels

#undef SURROGATE_TORCH_ORDER
