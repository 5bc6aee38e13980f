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
// The fp32 kernels are in ball_attention_kernels.cuh; this file has the checks, the head-width dispatch,
// the launches and the ball attention on the tensor cores (tf32 / bf16, below); BSA's block selection (one
// thread per selection row and head, no softmax) is in block_selection_kernels.cuh.
//
// The ball attention on the tensor cores (BallAttentionLaunch::precision): mma_softmax.cuh's online
// softmax, FlashAttention's order for a narrow head. A block of kTcWarps warps takes 64 queries of one ball
// and head, each warp 16 of them as mma A fragments (scaled by one float multiply, then rounded); the
// ball's keys, values and positions are staged through shared memory 64 at a time, E padded to the
// fragment width with zeros; the distance bias is computed per logit as the fp32 kernel computes it and
// added with the same fused multiply-add before the softmax.
#include <stdexcept>
#include <string>
#include <type_traits>

#include "launch.cuh"
#include "ball_attention_kernels.cuh"
#include "block_selection_kernels.cuh"
#include "mma_softmax.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using ball_kernels::kThreads;
using ball_kernels::ball_kernel;
using ball_kernels::coarse_kernel;
using ball_kernels::selected_block_kernel;

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

constexpr int kTcWarps = 4;              // warps per block, 16 queries each
constexpr int kTcQueries = 16 * kTcWarps;  // queries of a ball per block
constexpr int kTcKeys = 64;               // keys staged per pass

/// Grid (ball x query tile, head); kE: E padded to a multiple of 8.
template <MlpPrecision P, int kE, bool kBias>
__global__ void __launch_bounds__(kTcWarps * 32) ball_tc_kernel(BallAttentionLaunch a, int tiles) {
  using Softmax = detail::MmaSoftmax<P, kE>;
  constexpr int kDim = kMaxBallPositionDim;
  __shared__ float ks[kTcKeys * Softmax::kPad];
  __shared__ float vs[kTcKeys * kE];
  __shared__ float ps[kTcKeys * kDim];
  const int B = a.ball, E = a.E;
  const index_t base = static_cast<index_t>(blockIdx.x / static_cast<unsigned>(tiles)) * B;  // the ball's row 0
  const index_t c0 = static_cast<index_t>(blockIdx.y) * E;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  const int first = static_cast<int>(blockIdx.x % static_cast<unsigned>(tiles)) * kTcQueries + 16 * warp;
  Softmax sm;
  sm.start([&](int r, int e) {
    return first + r < B && e < E ? __fmul_rn(a.q[(base + first + r) * a.ld + c0 + e], a.scale) : 0.0f;
  });
  float pi[2][kDim] = {};  // the positions of the lane's rows g and g + 8
  const float sigma = kBias ? a.sigma[blockIdx.y] : 0.0f;
  if constexpr (kBias)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < a.dim; ++c)
        if (first + sm.g + 8 * r < B) pi[r][c] = a.positions[(base + first + sm.g + 8 * r) * a.ld_pos + c];
  for (int j0 = 0; j0 < B; j0 += kTcKeys) {
    const int count = min(kTcKeys, B - j0);
    __syncthreads();
    detail::stage_columns<kTcKeys, Softmax::kPad>(ks, count, E, [&](int j, int e) {
      return a.k[(base + j0 + j) * a.ld + c0 + e];
    });
    detail::stage_columns<kTcKeys, kE>(vs, count, E, [&](int j, int e) {
      return a.v[(base + j0 + j) * a.ld + c0 + e];
    });
    if constexpr (kBias)
      detail::stage_columns<kTcKeys, kDim>(ps, count, a.dim, [&](int j, int c) {
        return a.positions[(base + j0 + j) * a.ld_pos + c];
      });
    __syncthreads();
    if (first >= B) continue;  // no queries for this warp (it still joins the barriers)
    for (int l0 = 0; l0 < count; l0 += 16) {
      if constexpr (kBias)
        sm.add(ks, vs, l0, count, [&](int r, int column, float logit) {
          return fmaf(sigma, ball_kernels::distance(pi[r], ps + column * kDim, a.dim), logit);
        });
      else
        sm.add(ks, vs, l0, count);
    }
  }
  if (first >= B) return;
  sm.finish();
  const float inv[2] = {1.0f / sm.row_sum[0], 1.0f / sm.row_sum[1]};  // >= 1: the largest weight is exp(0)
  sm.for_each_value(E, [&](int r, int c, float value) {
    const int row = first + sm.g + 8 * r;
    if (row < B) a.out[(base + row) * a.ldo + c0 + c] = value * inv[r];
  });
}

template <MlpPrecision P, bool kBias>
void launch_ball_tensor_cores(const BallAttentionLaunch& a, cudaStream_t stream) {
  const int tiles = (a.ball + kTcQueries - 1) / kTcQueries;
  const index_t blocks = a.rows / a.ball * tiles;
  if (blocks > 2147483647)
    throw std::invalid_argument("cuda::ball_attention: " + std::to_string(a.rows) + " queries exceed the grid");
  const dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(a.heads));
  detail::dispatch_mma_width(a.E, [&](auto width) {
    launch(ball_tc_kernel<P, decltype(width)::value, kBias>, grid, kTcWarps * 32, 0, stream, a, tiles);
  });
}

}  // namespace

void ball_attention(const BallAttentionLaunch& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, ball_attention(a, stream));
  if (a.rows == 0) return;
  check_heads("ball_attention", a.heads, a.E);
  if (a.ball < 1 || a.rows < 0 || a.rows % a.ball != 0)
    throw std::invalid_argument("cuda::ball_attention: " + std::to_string(a.rows) + " rows are not balls of " +
                                std::to_string(a.ball));
  if (a.sigma && (a.dim < 1 || a.dim > kMaxBallPositionDim || !a.positions))
    throw std::invalid_argument("cuda::ball_attention: the distance bias needs positions of dimension 1.." +
                                std::to_string(kMaxBallPositionDim) + " (got " + std::to_string(a.dim) + ")");
  if (a.precision != MlpPrecision::fp32) {
    require_tensor_cores("ball_attention");
    const bool bias = a.sigma != nullptr;
    if (a.precision == MlpPrecision::bf16) {
      if (bias) launch_ball_tensor_cores<MlpPrecision::bf16, true>(a, stream);
      else launch_ball_tensor_cores<MlpPrecision::bf16, false>(a, stream);
    } else {
      if (bias) launch_ball_tensor_cores<MlpPrecision::tf32, true>(a, stream);
      else launch_ball_tensor_cores<MlpPrecision::tf32, false>(a, stream);
    }
    check_launch("ball_tc_kernel");
    return;
  }
  const dim3 grid = thread_grid("ball_attention", a.rows, a.heads);
  detail::dispatch_head_width(a.E, [&](auto width) {
    constexpr int kE = decltype(width)::value;
    if (a.sigma) launch(ball_kernel<kE, true>, grid, kThreads, 0, stream, a);
    else launch(ball_kernel<kE, false>, grid, kThreads, 0, stream, a);
  });
  check_launch("ball_kernel");
}

void coarse_attention(const CoarseAttentionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, coarse_attention(a, stream));
  if (a.samples == 0 || a.queries == 0) return;
  check_heads("coarse_attention", a.heads, a.E);
  if (a.samples < 0 || a.queries < 0 || a.keys < 1 || a.copies < 1)
    throw std::invalid_argument("cuda::coarse_attention: need samples, queries >= 0 and keys, copies >= 1");
  const dim3 grid = thread_grid("coarse_attention", static_cast<index_t>(a.samples) * a.queries, a.heads);
  detail::dispatch_head_width(a.E, [&](auto width) {
    launch(coarse_kernel<decltype(width)::value>, grid, kThreads, 0, stream, a);
  });
  check_launch("coarse_kernel");
}

void selected_block_attention(const SelectedBlockAttentionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, selected_block_attention(a, stream));
  if (a.samples == 0 || a.n == 0) return;
  check_heads("selected_block_attention", a.heads, a.E);
  if (a.samples < 0 || a.n < 0 || a.C < 1 || a.S < 1 || a.tokens_per_row < 1 || a.rows * a.tokens_per_row != a.n)
    throw std::invalid_argument("cuda::selected_block_attention: need C, S, tokens_per_row >= 1 and rows * "
                                "tokens_per_row == n (rows " + std::to_string(a.rows) + ", tokens_per_row " +
                                std::to_string(a.tokens_per_row) + ", n " + std::to_string(a.n) + ")");
  if (a.first_row == nullptr && static_cast<index_t>(a.S) * a.C > a.n)
    throw std::invalid_argument("cuda::selected_block_attention: S * C = " +
                                std::to_string(static_cast<index_t>(a.S) * a.C) + " exceeds the " +
                                std::to_string(a.n) + " tokens of a sample");
  if (a.first_row != nullptr && (a.S > a.blocks || a.ldkv < 1))
    throw std::invalid_argument("cuda::selected_block_attention: gathered blocks need S <= blocks and ldkv >= 1 (S " +
                                std::to_string(a.S) + ", blocks " + std::to_string(a.blocks) + ", ldkv " +
                                std::to_string(a.ldkv) + ")");
  const dim3 grid = thread_grid("selected_block_attention", static_cast<index_t>(a.samples) * a.n, a.heads);
  detail::dispatch_head_width(a.E, [&](auto width) {
    launch(selected_block_kernel<decltype(width)::value>, grid, kThreads, 0, stream, a);
  });
  check_launch("selected_block_kernel");
}

void select_blocks(const BlockSelectionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, select_blocks(a, stream));
  if (a.samples == 0 || a.rows == 0) return;
  check_heads("select_blocks", a.heads, a.E);
  if (a.samples < 0 || a.rows < 0 || a.group < 1 || a.row_tokens < 1 || a.row0 < 0 || a.ldq < 1 || a.ldk < 1)
    throw std::invalid_argument("cuda::select_blocks: need samples, rows, row0 >= 0 and group, row_tokens, ldq, "
                                "ldk >= 1");
  if (a.S < 1 || a.S > kMaxSelectedBlocks || a.S > a.blocks)
    throw std::invalid_argument("cuda::select_blocks: S = " + std::to_string(a.S) + " outside 1..min(blocks " +
                                std::to_string(a.blocks) + ", " + std::to_string(kMaxSelectedBlocks) + ")");
  if (a.ball_tokens < 0 || (a.ball_tokens > 0 && a.ball_blocks < 1))
    throw std::invalid_argument("cuda::select_blocks: the own-ball mask needs ball_tokens >= 1 and ball_blocks >= 1");
  using selection_kernels::block_selection_kernel;
  const dim3 grid = thread_grid("select_blocks", static_cast<index_t>(a.samples) * a.rows, a.heads);
  detail::dispatch_head_width(a.E, [&](auto width) {
    constexpr int kE = decltype(width)::value;
    if (a.S <= 8) launch(block_selection_kernel<kE, 8>, grid, selection_kernels::kThreads, 0, stream, a);
    else if (a.S <= 32) launch(block_selection_kernel<kE, 32>, grid, selection_kernels::kThreads, 0, stream, a);
    else launch(block_selection_kernel<kE, kMaxSelectedBlocks>, grid, selection_kernels::kThreads, 0, stream, a);
  });
  check_launch("block_selection_kernel");
}

void coarse_attention_and_select(const CoarseAttentionArgs& c, const BlockSelectionArgs& s, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, coarse_attention_and_select(c, s, stream));
  if (s.samples == 0 || s.rows == 0) return;
  check_heads("coarse_attention_and_select", s.heads, s.E);
  if (c.samples != s.samples || c.heads != s.heads || c.E != s.E || c.q != s.q || c.ldq != s.ldq ||
      c.queries != s.rows || c.k != s.k || c.ldkv != s.ldk || c.keys != s.blocks || c.scale != s.scale || s.group != 1)
    throw std::invalid_argument("cuda::coarse_attention_and_select: the coarse branch and the selection must share "
                                "samples, heads, E, q, k, strides, queries == rows, keys == blocks and scale, with "
                                "one query per row");
  if (c.copies < 1 || c.ldo < 1 || s.row0 < 0 || s.row_tokens < 1)
    throw std::invalid_argument("cuda::coarse_attention_and_select: need copies, ldo, row_tokens >= 1 and row0 >= 0");
  if (s.S < 1 || s.S > kMaxOnePassSelectedBlocks || s.S > s.blocks)
    throw std::invalid_argument("cuda::coarse_attention_and_select: S = " + std::to_string(s.S) +
                                " outside 1..min(blocks " + std::to_string(s.blocks) + ", " +
                                std::to_string(kMaxOnePassSelectedBlocks) + ")");
  if (s.ball_tokens < 0 || (s.ball_tokens > 0 && s.ball_blocks < 1))
    throw std::invalid_argument("cuda::coarse_attention_and_select: the own-ball mask needs ball_tokens >= 1 and "
                                "ball_blocks >= 1");
  using selection_kernels::coarse_select_kernel;
  const dim3 grid = thread_grid("coarse_attention_and_select", static_cast<index_t>(s.samples) * s.rows, s.heads);
  detail::dispatch_head_width(s.E, [&](auto width) {
    constexpr int kE = decltype(width)::value;
    if (s.S <= 8) launch(coarse_select_kernel<kE, 8>, grid, selection_kernels::kThreads, 0, stream, c, s);
    else launch(coarse_select_kernel<kE, kMaxOnePassSelectedBlocks>, grid, selection_kernels::kThreads, 0, stream, c, s);
  });
  check_launch("coarse_select_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
