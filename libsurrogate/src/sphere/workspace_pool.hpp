// Scratch kept between forwards by the spherical operators and the SphericalTransformer (share/docs/sphere.md,
// "Forward workspaces"). A forward takes one workspace W from its operator's pool (a new, empty one when
// every workspace is in use by concurrent forwards on other threads), grows its buffers as needed (they
// never shrink while kept) and gives it back. release() frees the workspaces not in use; the rest goes
// with the pool. W: default-constructible, with bytes(). Internal to libsurrogate.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "surrogate/kernels/aligned_buffer.hpp"

namespace surrogate::sphere::detail {

/// The first n values of a kept buffer, grown (zeroed) when it holds fewer.
template <class T>
T* take(kernels::AlignedBuffer<T>& b, std::int64_t n) {
  b.resize(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  return b.data();
}

template <class W>
class WorkspacePool {
 public:
  /// A workspace taken from the pool for one forward; given back when destroyed.
  class Lease {
   public:
    Lease(WorkspacePool& pool, std::unique_ptr<W> ws) : pool_(&pool), ws_(std::move(ws)) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { pool_->give_back(std::move(ws_)); }
    W& operator*() const { return *ws_; }
    W* operator->() const { return ws_.get(); }

   private:
    WorkspacePool* pool_;
    std::unique_ptr<W> ws_;
  };

  Lease acquire() {
    std::unique_ptr<W> ws;
    {
      const std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        ws = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!ws) ws = std::make_unique<W>();
    return Lease(*this, std::move(ws));
  }
  /// Frees the workspaces not in use.
  void release() noexcept {
    std::vector<std::unique_ptr<W>> freed;
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
  void give_back(std::unique_ptr<W> ws) noexcept {
    const std::lock_guard<std::mutex> lock(mutex_);
    try {
      idle_.push_back(std::move(ws));
    } catch (...) {  // (no memory for the list: the workspace is freed instead)
    }
  }
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<W>> idle_;
};

}  // namespace surrogate::sphere::detail
