// Fixed-point scales of the reproducible (order-independent) sums.
#include <algorithm>
#include <cmath>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels {

ExactScale exact_scale(index_t count, double maxabs) noexcept {
  // count * maxabs * 2^hi_bits < 2^61 and count * 2^lo_bits <= 2^61 keep every int64 sum exact.
  int count_bits = 0;
  while (count_bits < 62 && (index_t{1} << count_bits) < std::max<index_t>(count, 1)) ++count_bits;
  if (!(maxabs > 0x1p-200) || !std::isfinite(maxabs)) maxabs = 0x1p-200;
  const int max_bits = std::ilogb(maxabs) + 1;  // maxabs < 2^max_bits
  ExactScale s;
  s.hi_bits = 61 - count_bits - max_bits;
  s.lo_bits = std::max(61 - count_bits, 0);
  return s;
}

double exact_value(std::int64_t hi, std::int64_t lo, ExactScale scale) noexcept {
  return std::ldexp(static_cast<double>(hi), -scale.hi_bits) +
         std::ldexp(static_cast<double>(lo), -(scale.hi_bits + scale.lo_bits));
}

}  // namespace surrogate::kernels
