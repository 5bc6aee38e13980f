// The ReLU and max that every layer uses (surrogate/kernels/nan_keeping.hpp): NaN in, NaN out, whichever
// argument holds it, where std::max(0.0f, x), fmaxf and `x > 0 ? x : 0` give a number; otherwise exactly
// std::max (and -0 kept by the ReLU, as std::max(x, 0.0f) and torch.relu keep it).
#include "surrogate/kernels/nan_keeping.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace {

using surrogate::kernels::max_keep_nan;
using surrogate::kernels::relu_keep_nan;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

TEST(NanKeeping, ReluKeepsNaNAndIsMaxWithZeroOtherwise) {
  EXPECT_TRUE(std::isnan(relu_keep_nan(kNaN)));
  EXPECT_TRUE(std::isnan(relu_keep_nan(static_cast<double>(kNaN))));
  EXPECT_FALSE(std::isnan(std::max(0.0f, kNaN)));  // what the helper replaces
  for (const float x : {-kInf, -3.5f, -1e-45f, 0.0f, 1e-45f, 2.0f, kInf})
    EXPECT_EQ(relu_keep_nan(x), std::max(x, 0.0f)) << x;
  EXPECT_TRUE(std::signbit(relu_keep_nan(-0.0f)));
  static_assert(relu_keep_nan(-2.0f) == 0.0f && relu_keep_nan(3.0) == 3.0);
}

TEST(NanKeeping, MaxIsNaNWhenEitherArgumentIs) {
  EXPECT_TRUE(std::isnan(max_keep_nan(kNaN, 1.0f)));
  EXPECT_TRUE(std::isnan(max_keep_nan(1.0f, kNaN)));
  EXPECT_TRUE(std::isnan(max_keep_nan(-kInf, kNaN)));
  EXPECT_TRUE(std::isnan(max_keep_nan(kNaN, kNaN)));
  EXPECT_FALSE(std::isnan(std::max(1.0f, kNaN)));  // what the helper replaces
  for (const float a : {-kInf, -1.0f, 0.0f, 2.5f, kInf})
    for (const float b : {-kInf, -1.0f, 0.0f, 2.5f, kInf}) EXPECT_EQ(max_keep_nan(a, b), std::max(a, b)) << a << " " << b;
  // A running max over values with one NaN in the middle stays NaN (max pooling).
  float m = -kInf;
  for (const float v : {1.0f, kNaN, 5.0f, -2.0f}) m = max_keep_nan(m, v);
  EXPECT_TRUE(std::isnan(m));
}

}  // namespace
