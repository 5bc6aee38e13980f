// softmax_term_probe.hpp compiled with the avx2 kernels' flags (tests/kernels/CMakeLists.txt).
#define SURROGATE_ISA_NS term_probe_avx2
#include "softmax_term_probe.hpp"

std::uint64_t surrogate::testing::softmax_term_mismatches_avx2(std::uint32_t first, std::uint32_t step, std::uint64_t n,
                                                               float ref) {
  return surrogate::kernels::term_probe_avx2::softmax_term_mismatches(first, step, n, ref);
}
