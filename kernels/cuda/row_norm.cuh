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

/// apply() by one thread for one row up to kMaxDim (<= 64) wide, with apply()'s bits: the 32 lanes'
/// partials (channels l and l + 32) and warp_sum's butterfly are evaluated in registers in the same order.
/// So a warp normalises 32 rows at once instead of one after another through two chains of shuffles each.
/// The row is read in float4s (x and y 16-byte aligned) three times, as apply() reads it, which keeps the
/// registers to the partials; the columns past dim up to round_up(dim, 4) are written back as read. y may
/// equal x.
template <int kMaxDim>
__device__ __forceinline__ void apply_own_row(const float* x, float* y, int dim, const float* weight, const float* bias,
                                              float eps, bool rms) {
  static_assert(kMaxDim % 4 == 0 && kMaxDim <= 64, "one thread's row: at most 64 channels");
  const auto quad = [&](int c) {  // x[c .. c + 3], zero at or past dim's quad
    return c < kMaxDim && c < dim ? *reinterpret_cast<const float4*>(x + c) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  };
  // p[l] = f(x[l]) then + f(x[l + 32]) from 0, the channels below dim (lane l's loop), for l < 32.
  float p[32];
  const auto partials = [&](auto f) {
#pragma unroll
    for (int c = 0; c < 32; c += 4) {
      const float4 lo = quad(c), hi = quad(c + 32);
      const float a[4] = {lo.x, lo.y, lo.z, lo.w}, b[4] = {hi.x, hi.y, hi.z, hi.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        float v = 0.0f;
        if (c + k < dim) v = f(a[k], v);
        if (c + k + 32 < dim) v = f(b[k], v);
        p[c + k] = v;
      }
    }
#pragma unroll
    for (int offset = 16; offset >= 1; offset /= 2)  // warp_sum's butterfly
#pragma unroll
      for (int i = 0; i < offset; ++i) p[i] = p[i] + p[i + offset];
    return p[0];
  };
  const float inv_dim = 1.0f / static_cast<float>(dim);
  float mean = 0.0f;
  if (!rms) mean = partials([](float v, float s) { return s + v; }) * inv_dim;
  const float var = partials([mean](float v, float ss) {
                      const float d = v - mean;
                      return fmaf(d, d, ss);
                    }) *
                    inv_dim;
  const float rstd = 1.0f / sqrtf(var + eps);
#pragma unroll
  for (int c = 0; c < kMaxDim; c += 4) {
    if (c >= dim) break;
    const float4 q = quad(c);
    float v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      if (c + k < dim) {
        const float xhat = (v[k] - mean) * rstd;
        v[k] = bias ? fmaf(xhat, weight[c + k], bias[c + k]) : xhat * weight[c + k];
      }
    *reinterpret_cast<float4*>(y + c) = make_float4(v[0], v[1], v[2], v[3]);
  }
}

}  // namespace row_norm
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
