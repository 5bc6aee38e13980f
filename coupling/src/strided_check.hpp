// Checks of a caller's strided array (surrogate::Strided: element (i, j) at data[i * point_stride +
// j * component_stride]) before the library reads or writes it: every offset must be representable, so
// that no product or sum of the strides wraps around into another part of memory, and an output array
// must not give two elements one address.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "surrogate/error.hpp"

namespace surrogate::detail {

/// Throws Error(invalid_argument) naming `what` when the offsets of an n x components array with these
/// strides, times `element_bytes`, do not fit in a signed 64-bit byte offset. `output`: also refuses
/// strides that make two elements share an address (a stride of 0, or rows that overlap).
inline void check_strides(std::int64_t n, int components, std::int64_t point_stride, std::int64_t component_stride,
                          std::size_t element_bytes, bool output, const std::string& what) {
  if (n <= 0 || components <= 0) return;
  const auto text = [&] {
    return what + ": point stride " + std::to_string(point_stride) + ", component stride " +
           std::to_string(component_stride) + " for " + std::to_string(n) + " points x " + std::to_string(components) +
           " components";
  };
  // |stride| via unsigned arithmetic: INT64_MIN has no positive counterpart.
  const auto magnitude = [](std::int64_t s) {
    return s < 0 ? std::uint64_t{0} - static_cast<std::uint64_t>(s) : static_cast<std::uint64_t>(s);
  };
  const std::uint64_t ps = magnitude(point_stride), cs = magnitude(component_stride);
  std::uint64_t span_points = 0, span_components = 0, span = 0, bytes = 0;
  if (__builtin_mul_overflow(static_cast<std::uint64_t>(n - 1), ps, &span_points) ||
      __builtin_mul_overflow(static_cast<std::uint64_t>(components - 1), cs, &span_components) ||
      __builtin_add_overflow(span_points, span_components, &span) ||
      __builtin_mul_overflow(span + 1, static_cast<std::uint64_t>(element_bytes), &bytes) ||
      bytes > static_cast<std::uint64_t>(INT64_MAX))
    throw Error(ErrorCode::invalid_argument, text() + ": the array would span more than 2^63 bytes (overflowing strides)");
  if (!output) return;
  // Two distinct (i, j) at one address: the smaller stride must step over the whole extent of its
  // dimension before the larger stride's next step.
  std::uint64_t small = ps, large = cs, small_count = static_cast<std::uint64_t>(n), large_count = static_cast<std::uint64_t>(components);
  if (small > large || (small == large && small_count == 1)) {
    std::swap(small, large);
    std::swap(small_count, large_count);
  }
  const bool overlap = (small_count > 1 && small == 0) || (large_count > 1 && (large == 0 || small * small_count > large));
  if (overlap)
    throw Error(ErrorCode::invalid_argument, text() + ": these strides would write several values to the same element");
}

}  // namespace surrogate::detail
