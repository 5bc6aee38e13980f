// The device code of the ball-tree attention kernels (ball_attention.cu has the launchers; see there and
// surrogate/kernels/cuda_ball_attention.hpp for what they compute): the fp32 kernels, one thread per query
// and head, with no shared memory and no synchronisation; the tensor-core ball kernel is in ball_attention.cu.
#pragma once

#include "launch.cuh"
#include "latent_softmax.cuh"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace ball_kernels {


constexpr int kThreads = 128;  // threads (queries of one head) per block

template <int kMaxE>
__device__ __forceinline__ void load_scaled_query(const float* q, int E, float scale, float* qs) {
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) qs[e] = e < E ? __fmul_rn(q[e], scale) : 0.0f;
}

/// |p_i - p_j| as the CPU computes it: squares summed in component order, no contraction (__fmul_rn is
/// never fused into an FMA, so neither the square nor the sum is), sqrtf correctly rounded (nvcc's
/// default -prec-sqrt=true; the project never builds with --use_fast_math).
__device__ __forceinline__ float distance(const float* pi, const float* pj, int dim) {
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxBallPositionDim; ++c)
    if (c < dim) {
      const float diff = pi[c] - pj[c];
      sum = sum + __fmul_rn(diff, diff);
    }
  return sqrtf(sum);
}

template <int kMaxE, bool kBias>
__global__ void __launch_bounds__(kThreads) ball_kernel(BallAttentionLaunch a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.rows) return;
  const int E = a.E;
  const index_t c0 = static_cast<index_t>(blockIdx.y) * E;
  float qs[kMaxE];
  load_scaled_query<kMaxE>(a.q + i * a.ld + c0, E, a.scale, qs);
  float pi[kMaxBallPositionDim] = {};
  float sigma = 0.0f;
  if constexpr (kBias) {
    sigma = a.sigma[blockIdx.y];
#pragma unroll
    for (int c = 0; c < kMaxBallPositionDim; ++c)
      if (c < a.dim) pi[c] = a.positions[i * a.ld_pos + c];
  }
  const index_t first = i - i % a.ball;
  detail::Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  for (int j = 0; j < a.ball; ++j) {
    const index_t row = first + j;
    float l = detail::logit<kMaxE>(qs, a.k + row * a.ld + c0, E);
    if constexpr (kBias) l = fmaf(sigma, distance(pi, a.positions + row * a.ld_pos, a.dim), l);
    sm.add(l, a.v + row * a.ld + c0, E);
  }
  float* o = a.out + i * a.ldo + c0;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) o[e] = static_cast<float>(sm.acc[e] / sm.sum);
}

template <int kMaxE>
__global__ void __launch_bounds__(kThreads) coarse_kernel(CoarseAttentionArgs a) {
  const index_t t = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= static_cast<index_t>(a.samples) * a.queries) return;
  const int E = a.E;
  const index_t c0 = static_cast<index_t>(blockIdx.y) * E;
  const index_t sample = t / a.queries;
  float qs[kMaxE];
  load_scaled_query<kMaxE>(a.q + t * a.ldq + c0, E, a.scale, qs);
  detail::Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const index_t first = sample * a.keys;
  for (index_t j = 0; j < a.keys; ++j) {
    const index_t row = first + j;
    sm.add(detail::logit<kMaxE>(qs, a.k + row * a.ldkv + c0, E), a.v + row * a.ldkv + c0, E);
  }
  const double inv = 1.0 / sm.sum;
  for (int c = 0; c < a.copies; ++c) {
    float* o = a.out + (t * a.copies + c) * a.ldo + c0;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e)
      if (e < E) o[e] = static_cast<float>(sm.acc[e] * inv);
  }
}

template <int kMaxE>
__global__ void __launch_bounds__(kThreads) selected_block_kernel(SelectedBlockAttentionArgs a) {
  const index_t t = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= static_cast<index_t>(a.samples) * a.n) return;
  const int E = a.E;
  const int h = static_cast<int>(blockIdx.y);
  const index_t c0 = static_cast<index_t>(h) * E;
  const index_t sample = t / a.n, r = (t % a.n) / a.tokens_per_row;
  float qs[kMaxE];
  load_scaled_query<kMaxE>(a.q + t * a.ld + c0, E, a.scale, qs);
  const std::int32_t* chosen = a.sel + ((sample * a.heads + h) * a.rows + r) * a.S;
  detail::Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const index_t ldkv = a.first_row ? a.ldkv : a.ld;
  for (int j = 0; j < a.S; ++j) {
    const index_t first = a.first_row ? a.first_row[sample * a.blocks + chosen[j]]
                                      : sample * a.n + static_cast<index_t>(chosen[j]) * a.C;
    for (int c = 0; c < a.C; ++c) {
      const index_t row = first + c;
      sm.add(detail::logit<kMaxE>(qs, a.k + row * ldkv + c0, E), a.v + row * ldkv + c0, E);
    }
  }
  const double inv = 1.0 / sm.sum;
  float* o = a.out + t * a.ldo + c0;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) o[e] = static_cast<float>(sm.acc[e] * inv);
}

}  // namespace ball_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
