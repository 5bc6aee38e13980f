// LayerNorm / RMSNorm of one row by the 32 lanes of a warp: the arithmetic of the norm kernel (norm.cu),
// shared with the MLP kernels that normalise their input rows as they read them (MlpArgs::norm), so a
// fused norm gives the bits of the separate one.
#pragma once

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace row_norm {

/// Butterfly sum over the warp: the same order for every row, so a row's result does not depend on
/// which warp computes it.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int offset = 16; offset >= 1; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

/// y[c] = norm(x)[c] for c < dim, lane `lane` taking channels lane, lane + 32, ... Every lane reads all
/// its inputs before the shuffles and rewrites only the channels it read: y may equal x. The whole warp
/// calls it (it shuffles).
__device__ __forceinline__ void apply(const float* x, float* y, int dim, const float* weight, const float* bias,
                                      float eps, bool rms, int lane) {
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float mean = 0.0f;
  if (!rms) {
    float s = 0.0f;
    for (int c = lane; c < dim; c += 32) s += x[c];
    mean = warp_sum(s) * inv_dim;
  }
  float ss = 0.0f;
  for (int c = lane; c < dim; c += 32) {
    const float d = x[c] - mean;
    ss = fmaf(d, d, ss);
  }
  const float var = warp_sum(ss) * inv_dim;
  const float rstd = 1.0f / sqrtf(var + eps);
  // xhat * w + bias in one fused multiply-add, as the CPU kernels (norm_impl.hpp) spell it out.
  for (int c = lane; c < dim; c += 32) {
    const float xhat = (x[c] - mean) * rstd;
    y[c] = bias ? fmaf(xhat, weight[c], bias[c]) : xhat * weight[c];
  }
}

}  // namespace row_norm
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
