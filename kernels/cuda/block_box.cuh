// The bounding box of a range of 3-D points by one block: a strided pass, then a tree reduction in shared
// memory. Used by nearest.cu (each sample's grid) and voxel_hierarchy.cu (each sample's voxel box).
#pragma once

#include "launch.cuh"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN

/// Called by every thread of a block of kThreads: per axis the least and greatest coordinate of rows
/// [begin, end) of xyz (3 floats a row) into lo and hi on thread 0 (+inf and -inf for no rows; NaNs are
/// passed over, as fminf / fmaxf do). Returns, on every thread, whether some coordinate is NaN or infinite.
template <int kThreads>
__device__ __forceinline__ bool block_box(const float* xyz, index_t begin, index_t end, float (&lo)[3], float (&hi)[3]) {
  __shared__ float low[3][kThreads], high[3][kThreads];
  __shared__ int nonfinite;
  const int t = static_cast<int>(threadIdx.x);
  if (t == 0) nonfinite = 0;
  __syncthreads();
  const float inf = __int_as_float(0x7f800000);
  float mn[3] = {inf, inf, inf}, mx[3] = {-inf, -inf, -inf};
  for (index_t i = begin + t; i < end; i += kThreads)
    for (int c = 0; c < 3; ++c) {
      const float p = xyz[i * 3 + c];
      if (!isfinite(p)) atomicMax(&nonfinite, 1);
      mn[c] = fminf(mn[c], p);
      mx[c] = fmaxf(mx[c], p);
    }
  for (int c = 0; c < 3; ++c) {
    low[c][t] = mn[c];
    high[c][t] = mx[c];
  }
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half)
      for (int c = 0; c < 3; ++c) {
        low[c][t] = fminf(low[c][t], low[c][t + half]);
        high[c][t] = fmaxf(high[c][t], high[c][t + half]);
      }
    __syncthreads();
  }
  for (int c = 0; c < 3; ++c) {
    lo[c] = low[c][0];
    hi[c] = high[c][0];
  }
  return nonfinite != 0;
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
