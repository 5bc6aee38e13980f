// One CUDA graph per kept plan (CUDA builds only): the compute of a forward between its load and its
// store, captured once and replayed while nothing it reads or writes has changed. share/docs/cuda.md,
// "One graph per plan".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/kernels/cuda.hpp"
#include "surrogate/transport.hpp"

namespace surrogate::device {

/// run() executes a compute that only enqueues work on one stream: no wait for the device, no allocation,
/// nothing read back (a capture refuses those, on a device as on the host backend; the error passes). The
/// key lists everything a captured kernel depends on that may change between calls: the geometry's
/// serial, sizes, precision and the addresses of buffers that may be reallocated (weights never move). A
/// compute whose key differs from the one left by the last direct run runs directly (and may grow its
/// buffers: the key is read again after it); met again with that key, it is captured as a graph and
/// launched; from then on the graph is replayed for as long as the key stays the same. Host work inside
/// the compute runs only when it runs directly or is captured.
class ComputeGraph {
 public:
  using Key = std::vector<std::uintptr_t>;

  /// Whether graphs are on unless set_enabled says otherwise: the environment variable
  /// SURROGATE_CUDA_GRAPHS = 0, off, no or false turns them off for the process (read once).
  static bool on_by_default() {
    static const bool on = [] {
      const char* v = std::getenv("SURROGATE_CUDA_GRAPHS");
      if (v == nullptr) return true;
      const std::string s(v);
      return !(s == "0" || s == "off" || s == "OFF" || s == "no" || s == "false");
    }();
    return on;
  }

  /// Off: every compute runs directly, kernel by kernel (the benchmarks' comparison); the graph is dropped.
  void set_enabled(bool on) {
    enabled_ = on;
    if (!on) reset();
  }
  bool enabled() const { return enabled_; }
  void reset() noexcept {
    graph_.reset();
    key_.clear();
    seen_.clear();
  }

  /// `traffic`, when given, is the plan's count of its exchanges: the moves inside the compute count there
  /// as they run, and a replay, which runs no host code, adds what the captured compute counted.
  /// `key()` makes the key of the current state.
  template <class KeyOf, class Compute>
  void run(int device, cudaStream_t stream, KeyOf&& key_of, Compute&& compute, Traffic* traffic = nullptr) {
    if (!enabled_) return compute();
    Key key = key_of();
    if (graph_.empty() || key != key_) {
      graph_.reset();
      key_.clear();
      if (key != seen_) {  // a key seen once runs directly: a capture pays off from the second forward on
        seen_.clear();
        compute();
        seen_ = key_of();
        return;
      }
      seen_.clear();
      const Traffic before = traffic ? *traffic : Traffic{};
      graph_.capture(device, stream, [&] { compute(); });  // a failure leaves no graph: the next call runs directly
      key_ = std::move(key);
      counted_ = {};
      if (traffic) {
        counted_.sent = traffic->sent - before.sent;
        counted_.received = traffic->received - before.received;
        counted_.local = traffic->local - before.local;
        counted_.moves = traffic->moves - before.moves;
      }
    } else if (traffic) {
      *traffic += counted_;
    }
    graph_.launch(stream);
  }

  /// A key from values and addresses, in the order given.
  static Key key(std::initializer_list<std::uintptr_t> values, std::initializer_list<const void*> buffers = {}) {
    Key k(values);
    for (const void* p : buffers) k.push_back(reinterpret_cast<std::uintptr_t>(p));
    return k;
  }

 private:
  bool enabled_ = on_by_default();
  kernels::cuda::Graph graph_;
  Key key_, seen_;  // what the graph was captured for; the last key run directly
  Traffic counted_;  // the exchanges the captured compute counted (their bytes; no seconds)
};

}  // namespace surrogate::device
