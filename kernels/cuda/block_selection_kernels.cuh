// The device code of BSA's block selection (cuda::select_blocks and cuda::coarse_attention_and_select in
// surrogate/kernels/cuda_ball_attention.hpp; the launchers are in ball_attention.cu). One thread per
// (selection row, head) scores the blocks of its sample in ascending order and keeps the S best in registers
// by the CPU's rule (kernels/src/cpu/top_set_impl.hpp), so the chosen blocks are bitwise those of
// bsa::detail::select_blocks on the same arrays.
#pragma once

#include <cstdint>

#include "latent_softmax.cuh"
#include "launch.cuh"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace selection_kernels {

constexpr int kThreads = 128;  // selection rows of one head per block

/// scale (q . k): the first product rounded, then one fused multiply-add chain in e order, then the
/// scale (the CPU's top_keys row_scores).
template <int kMaxE>
__device__ __forceinline__ float score(const float* q, const float* k, int E, float scale) {
  float l = __fmul_rn(q[0], k[0]);
#pragma unroll
  for (int e = 1; e < kMaxE; ++e)
    if (e < E) l = fmaf(q[e], k[e], l);
  return __fmul_rn(l, scale);
}

/// The S best (score, block) pairs seen so far, best first; blocks arrive in ascending order, so a later
/// block displaces an earlier one only with a strictly larger score. offer() is the CPU's TopKeys::offer
/// step for step (NaN included). Up to 32 entries the arrays are indexed by constants only (registers);
/// beyond, by the CPU's loop (local memory).
template <int kMaxS>
struct TopBlocks {
  float score[kMaxS] = {};
  std::int32_t block[kMaxS] = {};
  int count = 0, S = 0;
  float last = 0.0f;  // score[S - 1] once count == S

  __device__ __forceinline__ void offer(float s, std::int32_t g) {
    int pos;
    if (count == S) {
      if (!(s > last)) return;
      pos = S - 1;
    } else {
      pos = count++;
    }
    if constexpr (kMaxS <= 32) {
      bool placed = false;
#pragma unroll
      for (int j = kMaxS - 1; j >= 1; --j)
        if (j <= pos && !placed) {
          if (score[j - 1] < s) {
            score[j] = score[j - 1];
            block[j] = block[j - 1];
          } else {
            score[j] = s;
            block[j] = g;
            placed = true;
          }
        }
      if (!placed) {
        score[0] = s;
        block[0] = g;
      }
      if (count == S)
#pragma unroll
        for (int j = 0; j < kMaxS; ++j)
          if (j == S - 1) last = score[j];
    } else {
      while (pos > 0 && score[pos - 1] < s) {
        score[pos] = score[pos - 1];
        block[pos] = block[pos - 1];
        --pos;
      }
      score[pos] = s;
      block[pos] = g;
      if (count == S) last = score[S - 1];
    }
  }

  /// The S blocks in ascending order (they are distinct): each goes to its rank; beyond 32 entries by
  /// the CPU's insertion (TopKeys::write_sorted).
  __device__ __forceinline__ void write_sorted(std::int32_t* out) const {
    if constexpr (kMaxS <= 32) {
#pragma unroll
      for (int i = 0; i < kMaxS; ++i)
        if (i < S) {
          int rank = 0;
#pragma unroll
          for (int j = 0; j < kMaxS; ++j)
            if (j < S && block[j] < block[i]) ++rank;
          out[rank] = block[i];
        }
    } else {
      for (int j = 0; j < S; ++j) {
        int pos = j;
        while (pos > 0 && out[pos - 1] > block[j]) {
          out[pos] = out[pos - 1];
          --pos;
        }
        out[pos] = block[j];
      }
    }
  }
};

/// The mask of row r: the blocks of the balls its tokens lie in ([begin, end), empty without a mask).
__device__ __forceinline__ void own_ball_blocks(const BlockSelectionArgs& a, index_t r, index_t& begin, index_t& end) {
  begin = end = 0;
  if (a.ball_tokens <= 0) return;
  const index_t token = (a.row0 + r) * a.row_tokens;
  const index_t first = token / a.ball_tokens, last = (token + a.row_tokens - 1) / a.ball_tokens;
  begin = first * a.ball_blocks;
  end = (last + 1) * a.ball_blocks < a.blocks ? (last + 1) * a.ball_blocks : a.blocks;
}

template <int kMaxE, int kMaxS>
__global__ void __launch_bounds__(kThreads) block_selection_kernel(BlockSelectionArgs a) {
  const index_t t = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= static_cast<index_t>(a.samples) * a.rows) return;
  const int E = a.E, h = static_cast<int>(blockIdx.y);
  const index_t c0 = static_cast<index_t>(h) * E;
  const index_t sample = t / a.rows, r = t % a.rows;
  index_t mask_begin, mask_end;
  own_ball_blocks(a, r, mask_begin, mask_end);
  const float* q = a.q + t * a.group * a.ldq + c0;
  float qs[kMaxE];
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) qs[e] = e < E ? q[e] : 0.0f;
  TopBlocks<kMaxS> top;
  top.S = a.S;
  const float* k = a.k + sample * a.blocks * a.ldk + c0;
  const float group = static_cast<float>(a.group);
  for (index_t g = 0; g < a.blocks; ++g) {
    float s = score<kMaxE>(qs, k + g * a.ldk, E, a.scale);
    if (a.group > 1) {  // the mean of the group's scores, summed in order (top_keys_group)
      for (int i = 1; i < a.group; ++i) {
        float qi[kMaxE];
#pragma unroll
        for (int e = 0; e < kMaxE; ++e) qi[e] = e < E ? q[i * a.ldq + e] : 0.0f;
        s = __fadd_rn(s, score<kMaxE>(qi, k + g * a.ldk, E, a.scale));
      }
      s = s / group;
    }
    if (g >= mask_begin && g < mask_end) s = -INFINITY;
    top.offer(s, static_cast<std::int32_t>(g));
  }
  top.write_sorted(a.sel + ((sample * a.heads + h) * a.rows + r) * a.S);
}

/// The coarse branch with the selection (one query per row): the selection's scores are the softmax's
/// logits, the block's softmax term weighting its compressed value row, and the output copied to the
/// `copies` rows of the query's block, as coarse_kernel writes them.
template <int kMaxE, int kMaxS>
__global__ void __launch_bounds__(kThreads) coarse_select_kernel(CoarseAttentionArgs c, BlockSelectionArgs a) {
  const index_t t = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (t >= static_cast<index_t>(a.samples) * a.rows) return;
  const int E = a.E, h = static_cast<int>(blockIdx.y);
  const index_t c0 = static_cast<index_t>(h) * E;
  const index_t sample = t / a.rows, r = t % a.rows;
  index_t mask_begin, mask_end;
  own_ball_blocks(a, r, mask_begin, mask_end);
  float qs[kMaxE];
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) qs[e] = e < E ? a.q[t * a.ldq + c0 + e] : 0.0f;
  TopBlocks<kMaxS> top;
  top.S = a.S;
  detail::Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const float* k = a.k + sample * a.blocks * a.ldk + c0;
  const float* v = c.v + sample * c.keys * c.ldkv + c0;
  for (index_t g = 0; g < a.blocks; ++g) {
    const float l = score<kMaxE>(qs, k + g * a.ldk, E, a.scale);
    sm.add(l, v + g * c.ldkv, E);
    top.offer(g >= mask_begin && g < mask_end ? -INFINITY : l, static_cast<std::int32_t>(g));
  }
  const double inv = 1.0 / sm.sum;
  for (int copy = 0; copy < c.copies; ++copy) {
    float* o = c.out + (t * c.copies + copy) * c.ldo + c0;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e)
      if (e < E) o[e] = static_cast<float>(sm.acc[e] * inv);
  }
  top.write_sorted(a.sel + ((sample * a.heads + h) * a.rows + r) * a.S);
}

}  // namespace selection_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
