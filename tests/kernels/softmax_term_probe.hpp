// The softmax term's two forms compared bitwise inside one instruction set (test_softmax_term.cpp): this
// header is compiled once per set by softmax_term_probe_*.cpp, each in a namespace of its own.
#pragma once

#include <cstdint>

#ifdef SURROGATE_ISA_NS
#include "../../kernels/src/cpu/simd.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {
/// Lanes where simd::softmax_term(x, ref) and scale_down_parts(softmax_exp_parts(x), ref) differ in their
/// bits, over the float bit patterns first, first + step, ... (count of them: n).
inline std::uint64_t softmax_term_mismatches(std::uint32_t first, std::uint32_t step, std::uint64_t n, float ref) {
  using namespace simd;
  const vf r = splat(ref);
  std::uint64_t differ = 0;
  float x[W];
  for (std::uint64_t i = 0; i < n; i += W) {
    for (int l = 0; l < W; ++l) {
      const auto bits = static_cast<std::uint32_t>(first + (i + static_cast<std::uint64_t>(l)) * step);
      __builtin_memcpy(&x[l], &bits, sizeof bits);
    }
    const vf v = load(x);
    const vi a = __builtin_bit_cast(vi, softmax_term(v, r));
    const vi b = __builtin_bit_cast(vi, scale_down_parts(softmax_exp_parts(v), r));
    for (int l = 0; l < W; ++l) differ += a[l] != b[l];
  }
  return differ;
}
}  // namespace surrogate::kernels::SURROGATE_ISA_NS
#endif

namespace surrogate::testing {
std::uint64_t softmax_term_mismatches_avx2(std::uint32_t first, std::uint32_t step, std::uint64_t n, float ref);
std::uint64_t softmax_term_mismatches_avx512(std::uint32_t first, std::uint32_t step, std::uint64_t n, float ref);
}  // namespace surrogate::testing
