// Sequoia's CPU layers (share/docs/sequoia.md, "Forward"): dense rows, eval BatchNorm, the positional MLP
// and tree attention over per-query key lists. Sums in double, each output rounded to float once.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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

/// Work below which a loop runs on the calling thread: a parallel region costs a barrier, and on a busy
/// machine a barrier can wait a whole time slice for a descheduled thread (the top levels have a few rows).
constexpr std::int64_t kSerialWork = 1 << 15;

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

/// torch.nn.Linear (bias optional): one vector in double (the positional MLP, PointConv's messages), or
/// rows through the CPU kernels (float32 accumulation in input-channel order, per row independent of
/// the blocking and the threads).
struct Dense {
  int in = 0, out = 0;
  std::vector<float> w, b;  // out x in; out or empty
  kernels::PackedLinear packed;
  Dense() = default;
  Dense(const ModelFile& f, const std::string& prefix, bool bias);
  void apply(const float* x, float* y) const;
  Rows apply(const Rows& x) const;
  /// The same rows into y, whose storage is reused when it is large enough (a forward's buffers kept
  /// from one block to the next are not mapped and cleared again).
  void apply(const Rows& x, Rows& y) const;
  /// The kernel on n rows of one thread: y at stride ldy >= packed.out_pad(), which it writes whole.
  void apply_rows(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t n) const;
};

/// BatchNorm1d in eval mode: y = (x - mean) / sqrt(var + 1e-5) * weight + bias.
struct BatchNorm {
  std::vector<float> scale, shift;  // weight / sqrt(var + eps), bias - mean * scale
  BatchNorm() = default;
  BatchNorm(const ModelFile& f, const std::string& prefix);
  void apply(float* x) const;
  void apply(Rows& x, bool relu) const;
};

/// pe_mlp: Linear(3, 3) -> BatchNorm1d(3) -> ReLU -> Linear(3, e), evaluated by the tree attention kernel
/// (surrogate/kernels/tree_attention.hpp: each layer's output rounded to float, as Dense and BatchNorm
/// round); the last layer's weights are kept in double, channel-contiguous per input (w3[t * e + c]).
struct PositionalMlp {
  Dense first, last;
  BatchNorm norm;
  std::vector<double> w3, b3;  // 3 x e (transposed), e
  PositionalMlp() = default;
  PositionalMlp(const ModelFile& f, const std::string& prefix);
};

/// Tree attention over key lists (TreeAttention / TreeAttentionSiblings): for query a with keys
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
