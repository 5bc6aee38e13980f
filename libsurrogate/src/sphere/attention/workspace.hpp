// The scratch of the attention operators' forwards on the CPU (AttentionS2, NeighborhoodAttentionS2),
// kept between forwards instead of being allocated per forward (AttentionS2 did) or held per calling
// thread for the life of the thread (NeighborhoodAttentionS2 did). Internal to libsurrogate.
//
// Each operator holds a pool; a forward takes one workspace from it (a new, empty one when every
// workspace is in use by concurrent forwards on other threads), grows its buffers as needed (they never
// shrink while kept) and gives it back. The memory is released when the operator (the last operator
// sharing the pool) is destroyed, or by release_workspace(), which frees the workspaces not in use.
// The SphericalTransformer's blocks share one pool: one set of buffers for all its layers.
// Buffers are not zeroed on reuse: every forward writes what it reads (as with the former thread_local
// buffers).
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "heads.hpp"

namespace surrogate::sphere::detail {

struct S2Workspace {
  kernels::AlignedBuffer<float> pad_q, pad_k, pad_v;     // inputs in padded rows (when in_channels needs it)
  kernels::AlignedBuffer<float> proj_q, proj_k, proj_v;  // AttentionS2: projections before the rows of common width
  CommonWidthOperands common;                           // AttentionS2
  PlainOperands plain;                                   // NeighborhoodAttentionS2
  kernels::AlignedBuffer<float> k_rings;                 // NeighborhoodAttentionS2: key rings
  kernels::AlignedBuffer<float> v_rings;                 // and value rings
  kernels::AlignedBuffer<float> attention;              // softmax results before the output projection
  kernels::AlignedBuffer<float> projected;              // output projection rows (out_channels not a multiple of kPad)
  std::vector<kernels::AlignedBuffer<float>> sink_blocks;  // project_plain: per OpenMP thread, a k and a v row block

  std::size_t bytes() const {
    const std::size_t floats = pad_q.size() + pad_k.size() + pad_v.size() + proj_q.size() + proj_k.size() +
                               proj_v.size() + common.q.size() + common.k.size() + common.v.size() +
                               plain.q.size() + plain.k.size() + plain.v.size() + k_rings.size() + v_rings.size() +
                               attention.size() + projected.size();
    std::size_t blocks = 0;
    for (const auto& b : sink_blocks) blocks += b.size();
    return (floats + blocks) * sizeof(float);
  }
};

class S2WorkspacePool {
 public:
  /// A workspace taken from the pool for one forward; given back when destroyed.
  class Lease {
   public:
    Lease(S2WorkspacePool& pool, std::unique_ptr<S2Workspace> ws) : pool_(&pool), ws_(std::move(ws)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->give_back(std::move(ws_)); }
    S2Workspace& operator*() const { return *ws_; }
    S2Workspace* operator->() const { return ws_.get(); }

   private:
    S2WorkspacePool* pool_;
    std::unique_ptr<S2Workspace> ws_;
  };

  Lease acquire() {
    std::unique_ptr<S2Workspace> ws;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        ws = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!ws) ws = std::make_unique<S2Workspace>();
    return Lease(*this, std::move(ws));
  }
  /// Frees the workspaces not in use.
  void release() noexcept {
    std::vector<std::unique_ptr<S2Workspace>> freed;
    const std::lock_guard<std::mutex> lock(mutex_);
    freed.swap(idle_);
  }
  /// Bytes held by the workspaces not in use.
  std::size_t idle_bytes() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    std::size_t total = 0;
    for (const auto& ws : idle_) total += ws->bytes();
    return total;
  }

 private:
  void give_back(std::unique_ptr<S2Workspace> ws) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    try {
      idle_.push_back(std::move(ws));
    } catch (...) {  // (no memory for the list: the workspace is freed instead)
    }
  }
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<S2Workspace>> idle_;
};

}  // namespace surrogate::sphere::detail
