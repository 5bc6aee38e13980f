// Software prefetch of one row, for loops that visit rows in an order the hardware prefetchers cannot
// follow (rows listed by index: exchange_plan.cpp, HEPT's bucket gathers).
#pragma once

#include <cstddef>

namespace surrogate::detail {

/// Asks the caches for every 64-byte line of [p, p + bytes), bytes > 0: for reading, or for writing with
/// Write = 1.
template <int Write = 0>
inline void prefetch_bytes(const void* p, std::size_t bytes) {
  const auto* c = static_cast<const char*>(p);
  for (std::size_t b = 0; b < bytes; b += 64) __builtin_prefetch(c + b, Write);
  __builtin_prefetch(c + bytes - 1, Write);
}

}  // namespace surrogate::detail
