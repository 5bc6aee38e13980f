// Arguments of Sequoia's tree attention, the CPU kernel (CpuKernels::tree_attention) and the CUDA one
// (cuda_tree_attention.hpp): per query a list of keys (parents, children or siblings), a positional MLP on
// every edge in the logits and the values, softmax over the query's keys; double sums, each output rounded
// to float once (share/docs/sequoia.md, "Forward").
#pragma once

#include <cstdint>

namespace surrogate::kernels {

/// For query a with keys keys[first[a] .. first[a+1]) and per edge pi = PE(p_a - p_key) (e values, the
/// same for every head), per head h:
///   l_j = sum_c (q_a,c k_j,c + pi_c) / denom_a  (c over head h's e channels, four interleaved partial
///         sums in double: lane t sums the channels c = t mod 4 in order, then (s0 + s1) + (s2 + s3)),
///         denom_a = tau * count + 1e-8 (float) or fixed_denom,
///   alpha_j = exp(l_j - max l) / sum exp(l - max l),  out_a = sum_j alpha_j (v_j + pi)   (double),
/// queries without keys give 0. PE(d) = W3 relu(BN(W1 d + b1)) + b3: W1 3 x 3 (row-major), b1, BN's
/// scale and shift (3 each, float), W3 transposed (3 x e, double), b3 (e, double). Every sum is rounded
/// on its own in the order written (no fused multiply-add), so the CPU kernels of every instruction set
/// and the CUDA kernel give the same bits.
struct TreeAttentionArgs {
  std::int64_t queries = 0;
  int heads = 0, e = 0;
  const float* q = nullptr;  // queries x ldq (heads * e used)
  std::int64_t ldq = 0;
  const float* k = nullptr;  // key rows x ldkv
  const float* v = nullptr;
  std::int64_t ldkv = 0;
  const float* query_positions = nullptr;  // queries x 3
  const float* key_positions = nullptr;    // key rows x 3
  const std::int64_t* first = nullptr;     // queries + 1 (offsets into keys)
  const std::int64_t* keys = nullptr;
  const float* pe_w1 = nullptr;
  const float* pe_b1 = nullptr;
  const float* bn_scale = nullptr;
  const float* bn_shift = nullptr;
  const double* pe_w3 = nullptr;
  const double* pe_b3 = nullptr;
  float tau = 1.0f, fixed_denom = 0.0f;
  float* out = nullptr;  // queries x ldo
  std::int64_t ldo = 0;
  /// CPU: tree_attention_scratch(heads, e, most keys of a query) doubles. CUDA: queries x heads x e
  /// doubles, when e > cuda::kMaxTreeHeadDim (else unused).
  double* scratch = nullptr;
};

/// Doubles of scratch the CPU kernel needs for queries of at most `max_keys` keys each.
constexpr std::int64_t tree_attention_scratch(int heads, int e, std::int64_t max_keys) {
  return static_cast<std::int64_t>(heads) * e + max_keys * (static_cast<std::int64_t>(heads) + e);
}

}  // namespace surrogate::kernels
