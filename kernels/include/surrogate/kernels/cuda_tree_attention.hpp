// CUDA kernel of Sequoia's tree attention (CUDA builds only; share/docs/cuda.md "Tree attention"): per
// query a list of keys (parents, children or siblings), a positional MLP on every edge in the logits and
// the values, softmax over the query's keys: the arithmetic of the CPU kernel (tree_attention.hpp, the
// formula and arguments). Enqueues on the stream; std::invalid_argument for unsupported sizes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/tree_attention.hpp"

namespace surrogate::kernels::cuda {

/// Largest per-head width e kept in registers; wider heads need `scratch`.
inline constexpr int kMaxTreeHeadDim = 64;

using kernels::TreeAttentionArgs;
void tree_attention(const TreeAttentionArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
