// simd::softmax_term folds the sum's reference into the shifter of its first fused multiply-add; it must give
// the bits of the unfused form, scale_down_parts(softmax_exp_parts(x), ref), for every float and reference
// (share/docs/reproducibility.md, "The exponential"). Run on each instruction set this CPU has.
#include <gtest/gtest.h>

#include <cstdint>

#include "softmax_term_probe.hpp"

namespace {

using Probe = std::uint64_t (*)(std::uint32_t, std::uint32_t, std::uint64_t, float);

// Every 61st bit pattern (NaNs, infinities and subnormals included) for references across the range the
// encode meets (|ref| <= round(2^20 log2 e)), odd and even, small and large.
void expect_same_bits(Probe probe) {
  const float refs[] = {0.0f, 1.0f, -1.0f, 5.0f, -7.0f, 126.0f, -126.0f, 127.0f, 200.0f, -301.0f, 33.0f, 1000001.0f,
                        1512775.0f, -1512775.0f};
  constexpr std::uint32_t kStep = 61;
  constexpr std::uint64_t kCount = (std::uint64_t{1} << 32) / kStep;
  for (float ref : refs) EXPECT_EQ(probe(0, kStep, kCount, ref), 0u) << "ref = " << ref;
}

}  // namespace

TEST(SoftmaxTerm, FoldedReferenceGivesTheUnfusedBitsOnAvx2) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) GTEST_SKIP() << "no AVX2 with FMA";
  expect_same_bits(&surrogate::testing::softmax_term_mismatches_avx2);
}

TEST(SoftmaxTerm, FoldedReferenceGivesTheUnfusedBitsOnAvx512) {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512dq") ||
      !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512bw"))
    GTEST_SKIP() << "no AVX-512";
  expect_same_bits(&surrogate::testing::softmax_term_mismatches_avx512);
}
