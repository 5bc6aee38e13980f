// Sequoia's host storage and weight loading (share/docs/sequoia.md, "Forward"): the forward's row matrices,
// the key lists, the layers read from a model file as HostOps' (ops/host_ops.hpp), and the tree attention
// over per-query key lists on whole matrices.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "../ops/host_ops.hpp"
#include "surrogate/kernels/aligned_buffer.hpp"
#include "surrogate/kernels/block_plan.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::sequoia {

/// An allocator whose value-less construct leaves the element uninitialised: Rows that every row's
/// writer fills completely skip the zero-filling of large fresh buffers. Blocks of 2 MiB and more are
/// the kernels' huge-page mappings, replayed by the forward's block plan (surrogate/kernels/block_plan.hpp).
template <class T>
struct UninitialisedAllocator : std::allocator<T>, kernels::DefaultInitConstruct {
  template <class U>
  struct rebind {
    using other = UninitialisedAllocator<U>;
  };
  UninitialisedAllocator() = default;
  template <class U>
  UninitialisedAllocator(const UninitialisedAllocator<U>&) noexcept {}
  static constexpr std::size_t kHugeBytes = std::size_t{2} << 20;
  T* allocate(std::size_t n) {
    if (n * sizeof(T) < kHugeBytes) return std::allocator<T>::allocate(n);
    return static_cast<T*>(kernels::aligned_uninitialised_alloc(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < kHugeBytes) return std::allocator<T>::deallocate(p, n);
    kernels::aligned_free(p, n * sizeof(T));
  }
};

/// Row-major float matrix: zeros, or left uninitialised (Rows::Uninitialised) for writers of every row.
struct Rows {
  struct Uninitialised {};
  std::int64_t rows = 0;
  int cols = 0;
  std::vector<float, UninitialisedAllocator<float>> v;
  Rows() = default;
  Rows(std::int64_t r, int c) : rows(r), cols(c), v(static_cast<std::size_t>(r) * static_cast<std::size_t>(c), 0.0f) {}
  Rows(std::int64_t r, int c, Uninitialised) : rows(r), cols(c), v(static_cast<std::size_t>(r) * static_cast<std::size_t>(c)) {}
  float* row(std::int64_t i) { return v.data() + i * cols; }
  const float* row(std::int64_t i) const { return v.data() + i * cols; }
  std::vector<float> values() const { return {v.begin(), v.end()}; }
  /// r x c, the contents left as they are (uninitialised where the storage grows).
  void reshape(std::int64_t r, int c) {
    rows = r;
    cols = c;
    v.resize(static_cast<std::size_t>(r) * static_cast<std::size_t>(c));
  }
};

/// torch.nn.Linear `prefix` (bias optional) packed for the CPU kernels (HostOps::Dense).
kernels::PackedLinear pack_dense(const ModelFile& f, const std::string& prefix, bool bias);

/// BatchNorm1d `prefix` in eval mode, folded in double: alpha = weight / sqrt(var + 1e-5), beta = bias -
/// mean alpha, each rounded to float once (applied in double by the Ops' tree_norm).
ops::BatchNorm<std::vector<float>> fold_batch_norm(const ModelFile& f, const std::string& prefix);

/// pe_mlp: Linear(3, 3) -> BatchNorm1d(3) -> ReLU -> Linear(3, e), evaluated by the tree attention kernel
/// (surrogate/kernels/tree_attention.hpp: each layer's output rounded to float); the last layer's weights
/// kept in double, channel-contiguous per input (w3[t * e + c]). HostOps' positional MLP, from a file.
struct PositionalMlp : ops::HostOps::Positional {
  PositionalMlp() = default;
  PositionalMlp(const ModelFile& f, const std::string& prefix);
};

/// Tree attention over key lists (TreeAttention / TreeAttentionSiblings; the Ops' tree_attention on the
/// CPU, for tests): for query a with keys
/// keys[first[a] .. first[a+1]) and per edge pi = pe(p_a - p_key), per head h
///   logit = sum_e (q_a,e k_key,e + pi_e) / denom_a,  alpha = softmax over the edges,
///   out_a = sum alpha (v_key + pi)   (heads concatenated; queries without keys give 0),
/// with denom_a = tau * count_a + 1e-8 (count_a its number of edges) or the fixed `fixed_denom` when > 0.
struct KeyLists {
  std::vector<std::int64_t> first;  // queries + 1
  std::vector<std::int64_t> keys;
};
Rows tree_attention(const Rows& q, const Rows& k, const Rows& v, const std::vector<float>& query_positions,
                    const std::vector<float>& key_positions, const KeyLists& lists, const PositionalMlp& pe,
                    int heads, float tau, float fixed_denom);

}  // namespace surrogate::sequoia
