// CUDA kernel of Sequoia's tree attention (CUDA builds only; share/docs/cuda.md "Tree attention"): per
// query a list of keys (parents, children or siblings), a positional MLP on every edge in the logits and
// the values, softmax over the query's keys. The arithmetic of sequoia/layers.cpp (double sums, each
// output rounded to float once). Enqueues on the stream; std::invalid_argument for unsupported sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t

namespace surrogate::kernels::cuda {

/// Largest per-head width e kept in registers; wider heads need `scratch`.
inline constexpr int kMaxTreeHeadDim = 64;

/// For query a with keys keys[first[a] .. first[a+1]) and per edge pi = PE(p_a - p_key) (e values, the
/// same for every head), per head h:
///   l_j = sum_c (q_a,c k_j,c + pi_c) / denom_a  (c over head h's e channels, four interleaved partial
///         sums in double, as the CPU's head_logit),  denom_a = tau * count + 1e-8 (float) or fixed_denom,
///   alpha_j = exp(l_j - max l) / sum exp(l - max l),  out_a = sum_j alpha_j (v_j + pi)   (double),
/// queries without keys give 0. PE(d) = W3 relu(BN(W1 d + b1)) + b3: W1 3 x 3 (row-major), b1, BN's
/// scale and shift (3 each, float), W3 transposed (3 x e, double), b3 (e, double).
struct TreeAttentionArgs {
  index_t queries = 0;
  int heads = 0, e = 0;
  const float* q = nullptr;  // queries x ldq (heads * e used)
  index_t ldq = 0;
  const float* k = nullptr;  // key rows x ldkv
  const float* v = nullptr;
  index_t ldkv = 0;
  const float* query_positions = nullptr;  // queries x 3
  const float* key_positions = nullptr;    // key rows x 3
  const std::int64_t* first = nullptr;     // queries + 1
  const std::int64_t* keys = nullptr;
  const float* pe_w1 = nullptr;
  const float* pe_b1 = nullptr;
  const float* bn_scale = nullptr;
  const float* bn_shift = nullptr;
  const double* pe_w3 = nullptr;
  const double* pe_b3 = nullptr;
  float tau = 1.0f, fixed_denom = 0.0f;
  float* out = nullptr;  // queries x ldo
  index_t ldo = 0;
  double* scratch = nullptr;  // queries x heads x e doubles, when e > kMaxTreeHeadDim
};
void tree_attention(const TreeAttentionArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
