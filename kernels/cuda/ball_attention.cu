// Ball attention with the distance bias (Erwin, BSA's local branch) and BSA's coarse and selected-block
// branches (surrogate/kernels/cuda_ball_attention.hpp).
//
// One thread per (query token, head): grid (ceil(queries / kThreads), heads). A thread keeps its scaled
// query (and, with the bias, its position) in registers and streams its keys once through the shared
// online softmax of latent_softmax.cuh (Pow2Softmax<double>: each term a float whose bits depend only on
// its logit, sums in double), as the CPU kernels do. The threads of a warp mostly share their keys (the
// same ball, sample or selection row), so the key and value loads are broadcasts. Nothing is written to
// global memory but the outputs: no score, distance or gathered-key array.
//
// Arithmetic shared with the CPU: the query is multiplied by the scale first (one float multiply per
// component); the logit is one fused multiply-add chain in e order; the bias term is sigma * |p_i - p_j|
// added with one fused multiply-add, the distance summed component by component without contraction
// and its square root correctly rounded (as balltree_layers::ball_distances); the output is the double
// weighted sum divided by (ball) or multiplied by the inverse of (coarse, fine) the double sum, rounded
// to float once.
//
// NOT YET RUN ON A GPU (compiled only; see the header).
#include <stdexcept>
#include <string>
#include <type_traits>

#include "latent_softmax.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::kernels::cuda {
namespace {

constexpr int kThreads = 128;

template <int kMaxE>
__device__ __forceinline__ void load_scaled_query(const float* q, int E, float scale, float* qs) {
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) qs[e] = e < E ? __fmul_rn(q[e], scale) : 0.0f;
}

/// |p_i - p_j| as the CPU computes it: squares summed in component order, no contraction.
__device__ __forceinline__ float distance(const float* pi, const float* pj, int dim) {
  float sum = 0.0f;
#pragma unroll
  for (int c = 0; c < kMaxBallPositionDim; ++c)
    if (c < dim) {
      const float diff = __fsub_rn(pi[c], pj[c]);
      sum = __fadd_rn(sum, __fmul_rn(diff, diff));
    }
  return __fsqrt_rn(sum);
}

template <int kMaxE, bool kBias>
__global__ void __launch_bounds__(kThreads) ball_kernel(BallAttentionArgs a) {
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
  for (int j = 0; j < a.S; ++j) {
    const index_t first = sample * a.n + static_cast<index_t>(chosen[j]) * a.C;
    for (int c = 0; c < a.C; ++c) {
      const index_t row = first + c;
      sm.add(detail::logit<kMaxE>(qs, a.k + row * a.ld + c0, E), a.v + row * a.ld + c0, E);
    }
  }
  const double inv = 1.0 / sm.sum;
  float* o = a.out + t * a.ldo + c0;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) o[e] = static_cast<float>(sm.acc[e] * inv);
}

/// Calls launch(std::integral_constant<int, kMaxE>) for the head-width bucket of E.
template <class Launch>
void with_head_dim(int E, Launch&& launch) {
  switch (detail::head_dim_bucket(E)) {
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 16: launch(std::integral_constant<int, 16>{}); break;
    case 32: launch(std::integral_constant<int, 32>{}); break;
    default: launch(std::integral_constant<int, 64>{}); break;
  }
}

void check_heads(const char* kernel, int heads, int E) {
  if (E < 1 || E > kMaxHeadDim)
    throw std::invalid_argument(std::string("cuda::") + kernel + ": head width " + std::to_string(E) +
                                " outside 1.." + std::to_string(kMaxHeadDim));
  if (heads < 1 || heads > 65535)
    throw std::invalid_argument(std::string("cuda::") + kernel + ": " + std::to_string(heads) +
                                " heads, need 1..65535");
}

/// The grid of `threads` threads (one per query and head), or throws when it does not fit.
dim3 thread_grid(const char* kernel, index_t threads, int heads) {
  const index_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > 2147483647)
    throw std::invalid_argument(std::string("cuda::") + kernel + ": " + std::to_string(threads) +
                                " queries exceed the grid");
  return dim3(static_cast<unsigned>(blocks), static_cast<unsigned>(heads));
}

}  // namespace

void ball_attention(const BallAttentionArgs& a, cudaStream_t stream) {
  if (a.rows == 0) return;
  check_heads("ball_attention", a.heads, a.E);
  if (a.ball < 1 || a.rows < 0 || a.rows % a.ball != 0)
    throw std::invalid_argument("cuda::ball_attention: " + std::to_string(a.rows) + " rows are not balls of " +
                                std::to_string(a.ball));
  if (a.sigma && (a.dim < 1 || a.dim > kMaxBallPositionDim || !a.positions))
    throw std::invalid_argument("cuda::ball_attention: the distance bias needs positions of dimension 1.." +
                                std::to_string(kMaxBallPositionDim) + " (got " + std::to_string(a.dim) + ")");
  const dim3 grid = thread_grid("ball_attention", a.rows, a.heads);
  with_head_dim(a.E, [&](auto width) {
    constexpr int kE = decltype(width)::value;
    if (a.sigma) ball_kernel<kE, true><<<grid, kThreads, 0, stream>>>(a);
    else ball_kernel<kE, false><<<grid, kThreads, 0, stream>>>(a);
  });
  check_launch("ball_kernel");
}

void coarse_attention(const CoarseAttentionArgs& a, cudaStream_t stream) {
  if (a.samples == 0 || a.queries == 0) return;
  check_heads("coarse_attention", a.heads, a.E);
  if (a.samples < 0 || a.queries < 0 || a.keys < 1 || a.copies < 1)
    throw std::invalid_argument("cuda::coarse_attention: need samples, queries >= 0 and keys, copies >= 1");
  const dim3 grid = thread_grid("coarse_attention", static_cast<index_t>(a.samples) * a.queries, a.heads);
  with_head_dim(a.E, [&](auto width) {
    coarse_kernel<decltype(width)::value><<<grid, kThreads, 0, stream>>>(a);
  });
  check_launch("coarse_kernel");
}

void selected_block_attention(const SelectedBlockAttentionArgs& a, cudaStream_t stream) {
  if (a.samples == 0 || a.n == 0) return;
  check_heads("selected_block_attention", a.heads, a.E);
  if (a.samples < 0 || a.n < 0 || a.C < 1 || a.S < 1 || a.tokens_per_row < 1 || a.rows * a.tokens_per_row != a.n)
    throw std::invalid_argument("cuda::selected_block_attention: need C, S, tokens_per_row >= 1 and rows * "
                                "tokens_per_row == n (rows " + std::to_string(a.rows) + ", tokens_per_row " +
                                std::to_string(a.tokens_per_row) + ", n " + std::to_string(a.n) + ")");
  if (static_cast<index_t>(a.S) * a.C > a.n)
    throw std::invalid_argument("cuda::selected_block_attention: S * C = " +
                                std::to_string(static_cast<index_t>(a.S) * a.C) + " exceeds the " +
                                std::to_string(a.n) + " tokens of a sample");
  const dim3 grid = thread_grid("selected_block_attention", static_cast<index_t>(a.samples) * a.n, a.heads);
  with_head_dim(a.E, [&](auto width) {
    selected_block_kernel<decltype(width)::value><<<grid, kThreads, 0, stream>>>(a);
  });
  check_launch("selected_block_kernel");
}

}  // namespace surrogate::kernels::cuda
