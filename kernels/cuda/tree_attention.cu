// Sequoia's tree attention (surrogate/kernels/cuda_tree_attention.hpp): one thread per (query, head), its
// query head in registers, three passes over its few keys (the maximum logit, the sum of the weights,
// the weighted values) recomputing each edge's positional vector and logit instead of storing them.
// Every product and sum is rounded on its own (__dmul_rn, __dadd_rn), in the CPU's order, so the result
// is the CPU's wherever exp is (the host backend's is the CPU's libm).
#include <string>

#include "launch.cuh"
#include "latent_softmax.cuh"  // detail::dispatch_head_width
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_tree_attention.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 128;

/// The hidden layer of the positional MLP for d = p_a - p_key: relu(BN(W1 d + b1)), each layer rounded
/// to float as the CPU's Dense and BatchNorm, returned in double.
__device__ __forceinline__ void pe_hidden(const TreeAttentionArgs& a, const float* pa, const float* pk, double h[3]) {
  const float d[3] = {pa[0] - pk[0], pa[1] - pk[1], pa[2] - pk[2]};
  for (int o = 0; o < 3; ++o) {
    double s = static_cast<double>(a.pe_b1[o]);
    for (int i = 0; i < 3; ++i) s = __dadd_rn(s, __dmul_rn(static_cast<double>(a.pe_w1[o * 3 + i]), static_cast<double>(d[i])));
    const float x = static_cast<float>(s);
    const float y = static_cast<float>(__dadd_rn(__dmul_rn(static_cast<double>(x), static_cast<double>(a.bn_scale[o])),
                                                 static_cast<double>(a.bn_shift[o])));
    h[o] = static_cast<double>(relu_keep_nan(y));
  }
}

/// Channel c of the positional vector (rounded to float, as the CPU stores it).
__device__ __forceinline__ double pe_channel(const TreeAttentionArgs& a, const double h[3], int c) {
  double s = __dadd_rn(a.pe_b3[c], __dmul_rn(a.pe_w3[c], h[0]));
  s = __dadd_rn(s, __dmul_rn(a.pe_w3[a.e + c], h[1]));
  s = __dadd_rn(s, __dmul_rn(a.pe_w3[2 * a.e + c], h[2]));
  return static_cast<double>(static_cast<float>(s));
}

/// One head's logit: four interleaved partial sums of q k + pi, then divided (q: double registers, or the
/// float row itself for wide heads: the same values).
template <class Q>
__device__ __forceinline__ double edge_logit(const TreeAttentionArgs& a, const Q* q, const float* k, const double h[3],
                                             double denom) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int c = 0;
  for (; c + 4 <= a.e; c += 4)
    for (int t = 0; t < 4; ++t)
      s[t] = __dadd_rn(s[t], __dadd_rn(__dmul_rn(static_cast<double>(q[c + t]), static_cast<double>(k[c + t])), pe_channel(a, h, c + t)));
  for (; c < a.e; ++c)
    s[0] = __dadd_rn(s[0], __dadd_rn(__dmul_rn(static_cast<double>(q[c]), static_cast<double>(k[c])), pe_channel(a, h, c)));
  return __dadd_rn(__dadd_rn(s[0], s[1]), __dadd_rn(s[2], s[3])) / denom;
}

/// Edge (query, key)'s logit for one head, the positional hidden layer left in h.
template <int kMax>
__device__ __forceinline__ double key_logit(const TreeAttentionArgs& a, const double* q_regs, const float* q_row,
                                            const float* pa, std::int64_t key, int col, double denom, double h[3]) {
  pe_hidden(a, pa, a.key_positions + key * 3, h);
  const float* k = a.k + key * a.ldkv + col;
  if constexpr (kMax == 0) return edge_logit(a, q_row, k, h, denom);
  else return edge_logit(a, q_regs, k, h, denom);
}

/// One thread per (query, head). kMax > 0: the query head and the weighted values in registers (widths up
/// to kMax); kMax == 0 (wider heads: the top levels' few queries): the query read from its row and the
/// values summed in `scratch`. The same arithmetic either way.
template <int kMax>
__global__ void __launch_bounds__(kThreads) tree_attention_kernel(const TreeAttentionArgs a) {
  constexpr int kRegs = kMax > 0 ? kMax : 1;
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.queries * a.heads) return;
  const index_t qa = i / a.heads;
  const int head = static_cast<int>(i - qa * a.heads), col = head * a.e;
  float* out = a.out + qa * a.ldo + col;
  const std::int64_t b0 = a.first[qa], b1 = a.first[qa + 1], count = b1 - b0;
  if (count == 0) {
    for (int c = 0; c < a.e; ++c) out[c] = 0.0f;
    return;
  }
  const float* q_row = a.q + qa * a.ldq + col;
  double q[kRegs];
#pragma unroll
  for (int c = 0; c < kRegs; ++c) q[c] = kMax > 0 && c < a.e ? static_cast<double>(q_row[c]) : 0.0;
  const double denom = a.fixed_denom > 0.0f ? static_cast<double>(a.fixed_denom)
                                            : static_cast<double>(__fadd_rn(__fmul_rn(a.tau, static_cast<float>(count)), 1e-8f));
  const float* pa = a.query_positions + qa * 3;
  double h[3];
  double top = -INFINITY;
  for (std::int64_t j = b0; j < b1; ++j) {
    const double l = key_logit<kMax>(a, q, q_row, pa, a.keys[j], col, denom, h);
    top = l > top ? l : top;
  }
  double total = 0.0;
  for (std::int64_t j = b0; j < b1; ++j)
    total = __dadd_rn(total, exp(key_logit<kMax>(a, q, q_row, pa, a.keys[j], col, denom, h) - top));
  if constexpr (kMax == 0) {
    double* acc = a.scratch + i * a.e;
    for (int c = 0; c < a.e; ++c) acc[c] = 0.0;
    for (std::int64_t j = b0; j < b1; ++j) {
      const double alpha = exp(key_logit<kMax>(a, q, q_row, pa, a.keys[j], col, denom, h) - top) / total;
      const float* v = a.v + a.keys[j] * a.ldkv + col;
      for (int c = 0; c < a.e; ++c)
        acc[c] = __dadd_rn(acc[c], __dmul_rn(alpha, __dadd_rn(static_cast<double>(v[c]), pe_channel(a, h, c))));
    }
    for (int c = 0; c < a.e; ++c) out[c] = static_cast<float>(acc[c]);
  } else {
    double acc[kMax];
#pragma unroll
    for (int c = 0; c < kMax; ++c) acc[c] = 0.0;
    for (std::int64_t j = b0; j < b1; ++j) {
      const double alpha = exp(key_logit<kMax>(a, q, q_row, pa, a.keys[j], col, denom, h) - top) / total;
      const float* v = a.v + a.keys[j] * a.ldkv + col;
#pragma unroll
      for (int c = 0; c < kMax; ++c)
        if (c < a.e)
          acc[c] = __dadd_rn(acc[c], __dmul_rn(alpha, __dadd_rn(static_cast<double>(v[c]), pe_channel(a, h, c))));
    }
    for (int c = 0; c < a.e; ++c) out[c] = static_cast<float>(acc[c]);
  }
}

}  // namespace

void tree_attention(const TreeAttentionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, tree_attention(a, stream));
  if (a.queries == 0) return;
  require(a.queries > 0 && a.heads > 0 && a.e >= 1 && (a.e <= kMaxTreeHeadDim || a.scratch), "tree_attention",
          "need queries, heads > 0 and e >= 1, and a scratch array for e above " + std::to_string(kMaxTreeHeadDim) +
              " (e " + std::to_string(a.e) + ")");
  const index_t width = static_cast<index_t>(a.heads) * a.e;
  require(a.ldq >= width && a.ldkv >= width && a.ldo >= width, "tree_attention", "row strides below heads x e");
  require(a.q && a.k && a.v && a.query_positions && a.key_positions && a.first && a.keys && a.pe_w1 && a.pe_b1 &&
              a.bn_scale && a.bn_shift && a.pe_w3 && a.pe_b3 && a.out,
          "tree_attention", "a null array");
  if (a.e > kMaxTreeHeadDim) {
    launch(tree_attention_kernel<0>, blocks_for("tree_attention", a.queries * a.heads, kThreads), kThreads, 0, stream, a);
    check_launch("tree_attention_kernel");
    return;
  }
  detail::dispatch_head_width(a.e, [&](auto kmax) {
    launch(tree_attention_kernel<decltype(kmax)::value>, blocks_for("tree_attention", a.queries * a.heads, kThreads),
           kThreads, 0, stream, a);
  });
  check_launch("tree_attention_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
