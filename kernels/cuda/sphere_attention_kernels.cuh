// The device code of the sphere attention kernels (sphere_attention.cu has the launchers; see there and
// surrogate/kernels/cuda_sphere.hpp for what they compute). In a header of its own so that a host
// emulation (tests/gpu/test_sphere_kernels_emulated.cpp) can run exactly this code on the CPU.
#pragma once

#include <cfloat>

#include "latent_softmax.cuh"
#include "surrogate/kernels/cuda_sphere.hpp"

namespace surrogate::kernels::cuda::sphere_kernels {

using detail::head_dim_bucket;
using detail::logit;
using detail::Pow2Softmax;

constexpr int kQueries = 128;  // threads (queries) per block
constexpr int kKeyTile = 64;   // keys staged per step (global attention)

template <int kMaxE>
__device__ __forceinline__ void load_query(const float* src, int ek, float (&q)[kMaxE]) {
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) q[e] = e < ek ? src[e] : 0.0f;
}

/// o[e] = acc[e] * (1 / sum), as the CPU operators finish (NaN for a query without keys: 0 * inf).
template <int kMaxE>
__device__ __forceinline__ void store_output(const Pow2Softmax<double, kMaxE>& sm, float* dst, int ev) {
  const double inv = 1.0 / sm.sum;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < ev) dst[e] = static_cast<float>(sm.acc[e] * inv);
}

template <int kMaxE>
__global__ void __launch_bounds__(kQueries) global_attention_kernel(SphereAttentionArgs a) {
  __shared__ float k_tile[kKeyTile][kMaxE];
  __shared__ float v_tile[kKeyTile][kMaxE];
  __shared__ float log_w_tile[kKeyTile];
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const index_t i = static_cast<index_t>(blockIdx.x) * kQueries + threadIdx.x;
  const bool active = i < a.queries;  // inactive threads still stage keys
  float q[kMaxE];
  load_query<kMaxE>(a.q + (static_cast<index_t>(b) * a.queries + (active ? i : 0)) * a.ldq + h * a.ek, a.ek, q);
  Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const float* const k = a.k + static_cast<index_t>(b) * a.keys * a.ldk + h * a.ek;
  const float* const v = a.v + static_cast<index_t>(b) * a.keys * a.ldv + h * a.ev;
  for (index_t j0 = 0; j0 < a.keys; j0 += kKeyTile) {
    const int n = static_cast<int>(a.keys - j0 < kKeyTile ? a.keys - j0 : kKeyTile);
    __syncthreads();  // nobody reads the previous tile any more
    for (int idx = static_cast<int>(threadIdx.x); idx < n * kMaxE; idx += kQueries) {
      const int t = idx / kMaxE, e = idx % kMaxE;
      k_tile[t][e] = e < a.ek ? k[(j0 + t) * a.ldk + e] : 0.0f;
      v_tile[t][e] = e < a.ev ? v[(j0 + t) * a.ldv + e] : 0.0f;
    }
    for (int t = static_cast<int>(threadIdx.x); t < n; t += kQueries)
      log_w_tile[t] = a.log_w_lat[(j0 + t) / a.nlon_in];
    __syncthreads();
    if (active)
      for (int t = 0; t < n; ++t) sm.add(logit<kMaxE>(q, k_tile[t], a.ek) + log_w_tile[t], v_tile[t], a.ev);
  }
  if (active) store_output(sm, a.o + (static_cast<index_t>(b) * a.queries + i) * a.ldo + h * a.ev, a.ev);
}

template <int kMaxE>
__global__ void __launch_bounds__(kQueries) neighborhood_attention_kernel(SphereAttentionArgs a, SphereNeighbors nb) {
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const index_t i = static_cast<index_t>(blockIdx.x) * kQueries + threadIdx.x;
  if (i >= a.queries) return;
  const index_t t = i / nb.nlon_out, wo = i % nb.nlon_out;
  const index_t shift = static_cast<index_t>(a.nlon_in / nb.nlon_out) * wo;
  float q[kMaxE];
  load_query<kMaxE>(a.q + (static_cast<index_t>(b) * a.queries + i) * a.ldq + h * a.ek, a.ek, q);
  Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const float* const k = a.k + static_cast<index_t>(b) * a.keys * a.ldk + h * a.ek;
  const float* const v = a.v + static_cast<index_t>(b) * a.keys * a.ldv + h * a.ev;
  const std::int64_t end = nb.row_offsets[t + 1];
  for (std::int64_t j = nb.row_offsets[t]; j < end; ++j) {
    const std::int64_t column = nb.columns[j];
    const std::int64_t hi = column / a.nlon_in, wi = column - hi * a.nlon_in;
    const std::int64_t r = hi * a.nlon_in + (wi + shift) % a.nlon_in;
    sm.add(logit<kMaxE>(q, k + r * a.ldk, a.ek) + a.log_w_lat[hi], v + r * a.ldv, a.ev);
  }
  store_output(sm, a.o + (static_cast<index_t>(b) * a.queries + i) * a.ldo + h * a.ev, a.ev);
}

/// One thread per (row, head); the products and sums of the norm rounded as the CPU's (no contraction).
__global__ void head_norm_scale_kernel(float* x, index_t ldx, index_t rows, int heads, int width, const float* weight,
                                       float scale) {
  const index_t id = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= rows * heads) return;
  float* const p = x + (id / heads) * ldx + (id % heads) * width;
  if (weight) {
    double sq = 0.0;
    for (int e = 0; e < width; ++e) {
      const double xe = p[e];
      sq = __dadd_rn(sq, __dmul_rn(xe, xe));
    }
    const float inv = static_cast<float>(1.0 / sqrt(sq / width + static_cast<double>(FLT_EPSILON)));
    for (int e = 0; e < width; ++e) p[e] = __fmul_rn(__fmul_rn(p[e], inv), weight[e]);
  }
  for (int e = 0; e < width; ++e) p[e] = __fmul_rn(p[e], scale);
}

}  // namespace surrogate::kernels::cuda::sphere_kernels
