// A number no other object of this process had: how a device forward names the geometry or bands whose
// arrays it kept or whose compute it captured as a graph (device/compute_graph.hpp). Addresses can be
// reused after a free; these numbers are not.
#pragma once

#include <atomic>
#include <cstdint>

namespace surrogate::detail {

/// Each Serial made takes the next number of the process (1, 2, ...); a copy or a move keeps it.
class Serial {
 public:
  Serial() : value_(next()) {}
  std::uint64_t value() const { return value_; }

 private:
  static std::uint64_t next() {
    static std::atomic<std::uint64_t> made{0};
    return ++made;
  }
  std::uint64_t value_;
};

}  // namespace surrogate::detail
