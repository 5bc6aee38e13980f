// CUDA kernels of the ball-tree attentions (CUDA builds only): Erwin's ball attention with the distance
// bias (also BSA's local branch), BSA's coarse (block-compressed) and selected-block (fine) branches and
// its top-S block selection.
// In fp32 they compute what the CPU code computes (kernels::CpuKernels::ball_attention, bsa::detail::
// coarse_branch / fine_branch) on the device's online softmax (latent_softmax.cuh: the CPU kernels' exp
// arithmetic, power-of-two reference, double sums), one query and head per thread, the keys streamed
// (no score matrix, no bias matrix, no scratch in global memory).
//
// Layout: device buffers, row-major, one token per row; head h of a row is the E columns from h E; any
// row stride >= the row's width. E <= kMaxHeadDim (64); heads <= 65535. Every launcher enqueues on the
// given stream and returns at once; invalid sizes throw std::invalid_argument before anything is enqueued.
//
// Tested by tests/kernels/test_gpu_ball_attention.cpp, on a GPU (gpu.*) and on the host backend (cuda.*:
// the same device code run on the CPU; status: share/docs/cuda.md).
// Used by the Erwin and BSA device forwards.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"   // index_t
#include "surrogate/kernels/cuda.hpp"  // MlpPrecision

namespace surrogate::kernels::cuda {

/// Largest position dimension of the distance bias.
inline constexpr int kMaxBallPositionDim = 4;

/// Multi-head self-attention inside consecutive balls of `ball` tokens (rows = balls * ball): for every
/// token i of ball b = i / ball and head h,
///   out[i, hE:(h+1)E] = sum_j softmax_j(scale q_i . k_j + sigma[h] |p_i - p_j|) v_j,  j in ball b,
/// with |p_i - p_j| computed on the fly from the positions exactly as the CPU's ball_distances (float,
/// components in order, sqrt correctly rounded). sigma == nullptr: no bias (erwin_flash). Padding
/// duplicates of the ball tree are ordinary tokens here, as on the CPU (no mask). One launch covers every
/// ball of the rows and computes the distances itself (the CPU's kernels::BallAttentionArgs is one ball
/// with a precomputed bias tile).
/// precision tf32 / bf16: the two products on the tensor cores (compute capability >= 8.0): the scaled
/// query and the keys, then the softmax weights and the values, rounded to the format and accumulated in
/// FP32; the bias added to each logit as in fp32, the softmax's running maximum and sum FP32.
struct BallAttentionLaunch {
  index_t rows = 0;
  int ball = 0;
  int heads = 0, E = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;                    // row stride of q, k, v
  float scale = 1.0f;
  const float* sigma = nullptr;      // device [heads], or nullptr
  const float* positions = nullptr;  // device rows x dim at positions + i * ld_pos (read when sigma is set)
  index_t ld_pos = 0;
  int dim = 0;                       // 1 .. kMaxBallPositionDim
  float* out = nullptr;
  index_t ldo = 0;
  MlpPrecision precision = MlpPrecision::fp32;
};
void ball_attention(const BallAttentionLaunch& a, cudaStream_t stream);

/// Coarse branch: query i of sample s (queries per sample) attends to the `keys` compressed keys and
/// values of sample s (rows s * keys .. of k/v), no bias; the result is written to `copies` consecutive
/// output rows (s * queries + i) * copies + c, c < copies (coarse-q attention: copies = C, the block's
/// tokens; token queries: copies = 1).
struct CoarseAttentionArgs {
  int samples = 0;
  int heads = 0, E = 0;
  const float* q = nullptr;
  index_t ldq = 0;
  index_t queries = 0;  // per sample
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ldkv = 0;
  index_t keys = 0;     // per sample
  float scale = 1.0f;
  float* out = nullptr;
  index_t ldo = 0;
  int copies = 1;
};
void coarse_attention(const CoarseAttentionArgs& a, cudaStream_t stream);

/// Selected-block (fine) branch: token i of sample s (n tokens per sample) belongs to selection row
/// r = i / tokens_per_row and attends to the S * C tokens of the blocks sel[((s * heads + h) * rows + r)
/// * S + j], j = 0 .. S-1 in that order (block g: tokens g C .. g C + C - 1 of the sample), no bias.
/// rows * tokens_per_row == n; every index must lie in [0, n / C) (not checked on the device).
/// With `first_row` set, the tokens are a window of n rows of their samples (multi-rank: a rank's part of
/// a sample) and the selected blocks' keys and values are rows gathered elsewhere (fetched from their
/// owners): block g of sample s starts at row first_row[s * blocks + g] of k and v, whose row stride is
/// ldkv; indices then lie in [0, blocks) and S <= blocks. The keys are the same values in the same order,
/// so a token's result is bitwise that of the whole-sample launch.
struct SelectedBlockAttentionArgs {
  int samples = 0;
  index_t n = 0;
  int heads = 0, E = 0;
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;
  float scale = 1.0f;
  int C = 0, S = 0;
  int tokens_per_row = 1;
  index_t rows = 0;                  // selection rows per sample
  const std::int32_t* sel = nullptr; // device [samples][heads][rows][S]
  float* out = nullptr;
  index_t ldo = 0;
  const std::int64_t* first_row = nullptr;  // device [samples][blocks], or nullptr (the tokens' own rows)
  index_t blocks = 0;                       // blocks per whole sample (with first_row)
  index_t ldkv = 0;                         // row stride of k and v (with first_row)
};
void selected_block_attention(const SelectedBlockAttentionArgs& a, cudaStream_t stream);

/// BSA's block selection (bsa::detail::select_blocks, kernels::TopKeysArgs) on the device. For sample s,
/// head h and selection row r, block g of the sample scores
///   s_g = sum_t scale (q_t . k_g) / group  over the row's `group` queries (query t: head h of row
///   (s * rows + r) * group + t of q; one query: no division),
/// each dot product the first product and then one fused multiply-add chain in e order, and -inf for the
/// blocks of the balls the row's tokens lie in (ball_tokens > 0: row r covers the tokens [(row0 + r) *
/// row_tokens, + row_tokens) of its sample; ball b holds blocks [b ball_blocks, (b + 1) ball_blocks)).
/// The S largest scores win, equal scores go to the lower block, NaN scores are placed as the CPU's running
/// top-S places them; the S blocks are written in ascending order to sel[((s * heads + h) * rows + r) * S +
/// j]: bitwise the CPU's choice.
/// S <= min(blocks, kMaxSelectedBlocks).
inline constexpr int kMaxSelectedBlocks = kMaxTopKeys;
struct BlockSelectionArgs {
  int samples = 0;
  int heads = 0, E = 0;
  const float* q = nullptr;
  index_t ldq = 0;
  int group = 1;
  index_t rows = 0;           // selection rows per sample
  const float* k = nullptr;   // compressed keys: block g of sample s at row s * blocks + g
  index_t ldk = 0;
  index_t blocks = 0;         // per sample
  float scale = 1.0f;
  int S = 0;
  int ball_tokens = 0;        // tokens per ball, or 0: no mask
  int ball_blocks = 0;        // blocks per ball
  int row_tokens = 1;         // tokens per selection row
  index_t row0 = 0;           // in-sample index of row 0 (a window of its sample)
  std::int32_t* sel = nullptr;  // device [samples][heads][rows][S]
};
void select_blocks(const BlockSelectionArgs& a, cudaStream_t stream);

/// The coarse branch and the selection in one pass, when the coarse queries are the selection's
/// (block-level importance with coarse-q attention: one query per row, select.group == 1, and the same
/// samples, heads, E, q, ldq, queries == rows, k, ldkv == ldk, keys == blocks and scale in both): the
/// softmax's logits are the selection's scores, scale (q . k_g), so the selection is select_blocks' bit
/// for bit, and the coarse output differs from coarse_attention's (which scales the query first) by
/// float rounding, as the CPU's bsa::detail::coarse_and_select does. S <= kMaxOnePassSelectedBlocks.
inline constexpr int kMaxOnePassSelectedBlocks = 32;
void coarse_attention_and_select(const CoarseAttentionArgs& coarse, const BlockSelectionArgs& select,
                                 cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
