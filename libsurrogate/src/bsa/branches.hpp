// The three branches of BSA's sparse attention (NativeSparseAttention) and the block selection, on
// projected q/k/v of a batch of equally sized samples. Internal to libsurrogate (the tests include it to
// check each branch against a naive reference). Every function parallelises over (sample, head, block of
// rows) with OpenMP; a row's result never depends on the number of threads. The softmaxes stream through
// the shared online-softmax primitive kernels::CpuKernels::latent_encode (the queries of a task are its
// "latents"), so no n x n or nb x nb score matrix is formed; the importance scores and the top-S go
// through kernels::CpuKernels::top_keys (W keys at a time in registers, no score row stored).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "../ops/rows.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::bsa::detail {

using kernels::CpuKernels;
using kernels::index_t;

/// One head's E floats: a fixed-size copy for the usual head widths, which the compiler inlines (as a
/// memmove call per row these copies took about 3 % of the forward at E = 8).
inline void copy_head(const float* src, int E, float* dst) {
  switch (E) {
    case 4: std::memcpy(dst, src, 4 * sizeof(float)); return;
    case 8: std::memcpy(dst, src, 8 * sizeof(float)); return;
    case 16: std::memcpy(dst, src, 16 * sizeof(float)); return;
    default: std::copy_n(src, E, dst);
  }
}

/// Per-token q, k, v of `samples` samples of n tokens each (rows sample-major): row i of q at q + i*ld,
/// head h in columns [h*E, (h+1)*E); likewise k and v.
struct Tokens {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;
  int samples = 1;
  index_t n = 0;
  int heads = 0, E = 0;
  /// In-sample index of each sample's first row: the rows are the window [row0, row0 + n) of samples of
  /// `Blocks::nb * C` tokens (0 and the whole samples in one process; a rank's part of one sample when
  /// distributed). The own-ball mask of the selection counts from it.
  index_t row0 = 0;
};

/// Compressed blocks in the same column layout: k and v hold all nb blocks of each whole sample (rows
/// sample-major); q holds the blocks of the tokens' window (t.n / C per sample) and may be null when the
/// importance is token-level.
struct Blocks {
  const float* q = nullptr;
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;
  index_t nb = 0;
};

/// The sparse-attention options that shape the branches (ops/rows.hpp, shared with the device).
using SparseShape = ops::SparseShape;

/// Compressed blocks of `blocks` blocks of C consecutive token rows (src, heads x E columns, stride ld)
/// into dst (stride ld_c): with `mlp` ([2]: Linear(C E -> hidden), ReLU, Linear(hidden -> E)) on each
/// (block, head) flattened token-major, in tasks of 64 such rows; without, the mean over the block.
void compress_blocks(const CpuKernels& k, const kernels::PackedLinear* mlp, const float* src, index_t ld,
                     index_t blocks, int C, int heads, int E, float* dst, index_t ld_c, int threads);

/// Local branch: attention inside each ball of `ball` consecutive tokens with the bias
/// sigma[h] * |p_i - p_j| (positions: rows x dim, in token order), scale 1/sqrt(E). Output: head h of
/// token i at out + i*ldo + h*E.
void local_branch(const CpuKernels& k, const Tokens& t, const float* positions, int dim, int ball, const float* sigma,
                  float* out, index_t ldo, int threads);

/// Coarse branch: with coarse_q_attn, each block's compressed query attends to all nb compressed blocks of
/// its sample and every token of the block receives the result; otherwise every token's query attends
/// to them. Scale 1/sqrt(E), no mask.
void coarse_branch(const CpuKernels& k, const Tokens& t, const Blocks& b, const SparseShape& s, float* out,
                   index_t ldo, int threads);

/// Importance scores and top-S selection. For every (sample, head, selection row) writes the S chosen
/// block indices in ascending order to sel[((sample * heads + h) * rows + r) * S + j]. Scores:
/// block-level <qc_r, kc_g> / sqrt(E); token-level <q_i, kc_g> / sqrt(E), averaged over the G tokens of a
/// group with group selection. Blocks of the own ball score -inf when mask_own_ball (for a group: the
/// ball of any of its tokens). The S largest scores win; equal scores are ordered by the lower block
/// index (so a sample with fewer than S candidates outside the own ball takes all of them, then the
/// lowest-index blocks of the own ball). S <= kernels::kMaxTopKeys (else Error(unsupported)). `min_gap`, when not null, receives the smallest difference
/// between the S-th and the (S+1)-th score over all rows where both are finite.
void select_blocks(const CpuKernels& k, const Tokens& t, const Blocks& b, const SparseShape& s, std::int32_t* sel,
                   int threads, double* min_gap = nullptr);

/// coarse_branch and select_blocks (no min_gap) in one pass when the coarse queries are the compressed
/// blocks and the importance is block-level (the logits are the scores): every query block's
/// <qc_r, kc_g> / sqrt(E) (the dot product first, then the scale) is both its coarse-attention logit and
/// block g's importance, so the selection is bit for bit select_blocks' and the coarse output differs from
/// coarse_branch's (which scales q first) by float32 rounding only. Other options: the two calls.
void coarse_and_select(const CpuKernels& k, const Tokens& t, const Blocks& b, const SparseShape& s, float* out,
                       index_t ldo, std::int32_t* sel, int threads);

/// Where the fine branch reads the keys and values of selected blocks when they are not the tokens'
/// own rows (distributed: blocks fetched from their owners). Block b of sample smp starts at row
/// first_row[smp * nb + b] of k and v (C consecutive rows, head h in columns [h*E, (h+1)*E)).
struct SelectedRows {
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;
  index_t nb = 0;
  const std::int64_t* first_row = nullptr;
};

/// Fine branch: every token attends to the S*C tokens of its row's selected blocks (ascending block
/// order), scale 1/sqrt(E), no bias. The keys are t.k/t.v of the whole samples, or `rows` when given.
void fine_branch(const CpuKernels& k, const Tokens& t, const SparseShape& s, const std::int32_t* sel, float* out,
                 index_t ldo, int threads, const SelectedRows* rows = nullptr);

/// Where global attention reads the keys and values when the tokens are only a window of their samples
/// (distributed: the samples' rows fetched from their owners): sample smp's n keys at rows
/// [smp * n, (smp + 1) * n) of k and v, in the sample's order (head h in columns [h*E, (h+1)*E)).
struct SampleKeys {
  const float* k = nullptr;
  const float* v = nullptr;
  index_t ld = 0;
  index_t n = 0;
};

/// Full attention over all tokens of each sample (attention_type "global"), scale 1/sqrt(E): every query
/// of t attends to the t.n tokens of its sample, or to the keys->n keys of its sample when `keys` is
/// given. One query's result depends only on its q row and the sample's keys and values (streamed in
/// one pass in key order), not on the window or the thread count.
void global_attention(const CpuKernels& k, const Tokens& t, float* out, index_t ldo, int threads,
                      const SampleKeys* keys = nullptr);

}  // namespace surrogate::bsa::detail
