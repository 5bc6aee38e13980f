// CPU kernels against naive double-precision references, for every instruction set this CPU runs.
// Tolerances are float32 rounding bounds (u = 2^-24) of the computation, not fitted to results.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "surrogate/kernels/cpu.hpp"

namespace k = surrogate::kernels;

namespace {

constexpr double u = 0x1p-24;  // unit roundoff of float32

std::vector<k::Isa> available_isas() {
  std::vector<k::Isa> isas;
  for (k::Isa isa : {k::Isa::generic, k::Isa::avx2, k::Isa::avx512})
    if (k::cpu(isa)) isas.push_back(isa);
  return isas;
}

std::vector<float> random_vector(std::size_t n, float scale, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// 0.5 x (1 + tanh(a)) written as x / (1 + exp(-2a)) (the same function): in double the tanh form cancels
// to 0 for x < -9 while the true value is ~1e-30.
double gelu_tanh_ref(double x) {
  const double a = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  return x / (1.0 + std::exp(-2.0 * a));
}
double silu_ref(double x) { return x / (1.0 + std::exp(-x)); }
double gelu_erf_ref(double x) { return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0))); }
double act_ref(k::Activation a, double x) {
  switch (a) {
    case k::Activation::gelu_tanh: return gelu_tanh_ref(x);
    case k::Activation::gelu_erf: return gelu_erf_ref(x);
    case k::Activation::silu: return silu_ref(x);
    case k::Activation::relu: return x < 0.0 ? 0.0 : x;
    case k::Activation::none: break;
  }
  return x;
}

class KernelTest : public ::testing::TestWithParam<k::Isa> {
 protected:
  const k::CpuKernels& kern() const { return *k::cpu(GetParam()); }
};

/// Every 31st bit pattern of the floats in [-top_negative, top_positive] (subnormals included) appended to
/// x from position n, handing each full buffer to check(n).
template <class Check>
void every_31st_float(float top_positive, float top_negative, std::vector<float>& x, std::size_t& n, Check&& check) {
  const std::uint32_t top[2] = {std::bit_cast<std::uint32_t>(top_positive), std::bit_cast<std::uint32_t>(top_negative)};
  for (std::uint32_t sign = 0; sign < 2; ++sign)
    for (std::uint64_t bits = 0; bits <= top[sign]; bits += 31) {
      x[n++] = std::bit_cast<float>(static_cast<std::uint32_t>(bits) | (sign << 31));
      if (n == x.size()) check(n), n = 0;
    }
}

// The table of every instruction set has every entry of the one kernel list (cpu_kernel_list.hpp).
TEST_P(KernelTest, TableSetsEveryKernelOfTheList) {
  EXPECT_EQ(kern().isa, GetParam());
#define SURROGATE_EXPECT_KERNEL(name, parameters) EXPECT_NE(kern().name, nullptr) << #name;
  SURROGATE_CPU_KERNELS(SURROGATE_EXPECT_KERNEL)
#undef SURROGATE_EXPECT_KERNEL
}

// ---------------------------------------------------------------------------------------------------
// exp against std::exp in double on every 31st bit pattern of the floats in [-87, 88.376] (subnormal and
// tiny arguments included: 72 million points, both signs) and on a uniform grid. The bound is the one
// stated in simd.hpp: the degree-6 polynomial's fit (0.02 u) plus the roundings of the reduction and of
// the Horner steps, measured over every float of the range at 1.53 u with FMA (AVX2, AVX-512: the same
// arithmetic) and 1.92 u without (generic); asserted at 1.6 u and 2 u.
TEST_P(KernelTest, ExpMeetsItsStatedRelativeErrorBound) {
  const double bound = (GetParam() == k::Isa::generic ? 2.0 : 1.6) * u;
  constexpr std::size_t kChunk = 4096;
  std::vector<float> x(kChunk), y(kChunk);
  double worst = 0.0;
  float worst_x = 0.0f;
  std::size_t count = 0;
  auto check = [&](std::size_t n) {
    kern().exp(x.data(), y.data(), static_cast<k::index_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      const double err = std::abs(y[i] - ref) / ref;
      if (err > worst) worst = err, worst_x = x[i];
    }
    count += n;
  };
  std::size_t n = 0;
  every_31st_float(88.3762626647949f, 87.0f, x, n, check);
  for (double v = -87.0; v <= 88.3; v += 0.00731) {
    x[n++] = static_cast<float>(v);
    if (n == kChunk) check(n), n = 0;
  }
  check(n);
  std::printf("exp (%s): worst relative error %.3f u at x = %.9g over %zu arguments\n", k::to_string(GetParam()),
              worst / u, worst_x, count);
  EXPECT_LE(worst, bound) << "at x = " << worst_x;
  const float inf = std::numeric_limits<float>::infinity();
  const float special[8] = {-inf, -1000.0f, -87.5f, 1000.0f, inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f};
  float out[8] = {};
  kern().exp(special, out, 8);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 0.0f);  // below the normal range: flushed to zero by design
  EXPECT_TRUE(std::isinf(out[3]));
  EXPECT_TRUE(std::isinf(out[4]));
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_EQ(out[6], 1.0f);
  EXPECT_EQ(out[7], 1.0f);
  // An out-of-range lane takes the vector through the clamped path: the other lanes keep their bits.
  std::vector<float> mixed(64), alone(64), together(64);
  for (std::size_t i = 0; i < mixed.size(); ++i) mixed[i] = -20.0f + 0.61f * static_cast<float>(i);
  kern().exp(mixed.data(), alone.data(), 64);
  for (std::size_t i = 0; i < mixed.size(); i += 5) mixed[i] = i % 2 ? 100.0f : -100.0f;
  kern().exp(mixed.data(), together.data(), 64);
  for (std::size_t i = 0; i < mixed.size(); ++i) {
    if (i % 5 == 0) continue;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(alone[i]), std::bit_cast<std::uint32_t>(together[i])) << i;
  }
}

// The softmax's exp (softmax_exp_parts: f = x log2 e - k in one rounding, a degree-5 polynomial for 2^f)
// against std::exp in double on every 31st float with |x| <= 87 and up to 88.37. Its bound, stated in
// simd.hpp, has two parts: the polynomial's fit (2.0 u) plus the Horner roundings and the rounding of f,
// 3.3 u in all; and the 1.3e-8 by which log2 e in float falls short, 0.225 |x| u (measured over every float
// with |x| <= 87: 22.7 u at x = -86.9, 0.994 of the bound at its tightest). Without FMA (generic) f comes
// from the two-constant reduction and every Horner step rounds twice (3.8 u measured): asserted at
// (5 + 0.02 |x|) u.
TEST_P(KernelTest, SoftmaxExpMeetsItsStatedRelativeErrorBound) {
  const bool fma = GetParam() != k::Isa::generic;
  const double constant = fma ? 3.3 : 5.0, slope = fma ? 0.225 : 0.02;
  constexpr std::size_t kChunk = 4096;
  std::vector<float> x(kChunk), y(kChunk), other(kChunk);
  const k::CpuKernels* avx2 = k::cpu(k::Isa::avx2);
  double worst = 0.0, worst_ratio = 0.0;
  float worst_x = 0.0f;
  std::size_t differ = 0;
  auto check = [&](std::size_t n) {
    kern().softmax_exp(x.data(), y.data(), static_cast<k::index_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      const double ref = std::exp(static_cast<double>(x[i]));
      const double err = std::abs(y[i] - ref) / ref / u;
      const double ratio = err / (constant + slope * std::abs(x[i]));
      worst = std::max(worst, err);
      if (ratio > worst_ratio) worst_ratio = ratio, worst_x = x[i];
    }
    // AVX2 and AVX-512 run the same arithmetic: the same bits (the CUDA kernels' exp_parts too).
    if (GetParam() == k::Isa::avx512 && avx2) {
      avx2->softmax_exp(x.data(), other.data(), static_cast<k::index_t>(n));
      for (std::size_t i = 0; i < n; ++i) differ += std::bit_cast<std::uint32_t>(y[i]) != std::bit_cast<std::uint32_t>(other[i]);
    }
  };
  std::size_t n = 0;
  every_31st_float(88.37f, 87.0f, x, n, check);
  check(n);
  std::printf("softmax exp (%s): worst relative error %.3f u; worst against (%.1f + %.3f |x|) u: %.3f at x = %.9g\n",
              k::to_string(GetParam()), worst, constant, slope, worst_ratio, worst_x);
  EXPECT_LE(worst_ratio, 1.0) << "at x = " << worst_x;
  EXPECT_EQ(differ, 0u) << "AVX-512 and AVX2 differ";
  // Below the range: e^-87 (normal, the exponent-field addition stays in range), NaN included.
  const float special[4] = {-1000.0f, -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(), 0.0f};
  float out[4] = {};
  kern().softmax_exp(special, out, 4);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(out[i], std::exp(-87.0), 4e-6 * std::exp(-87.0)) << i;
  EXPECT_NEAR(out[3], 1.0, 2 * u);
}

TEST_P(KernelTest, ActivationsMatchTheirDefinitions) {
  std::vector<float> x;
  for (double v = -30.0; v <= 30.0; v += 0.0137) x.push_back(static_cast<float>(v));
  std::vector<float> y(x.size());
  for (k::Activation a : {k::Activation::gelu_tanh, k::Activation::silu}) {
    kern().activation(a, x.data(), y.data(), static_cast<k::index_t>(x.size()));
    for (std::size_t i = 0; i < x.size(); ++i) {
      const double ref = act_ref(a, x[i]);
      // Both are x / (1 + exp(-t)) with t = 2a (GELU) or x (SiLU). exp, the reciprocal and four roundings
      // cost a few ulp relative; the float rounding of t itself (~4u |t|) is amplified by exp's condition
      // number |t|, which matters only in the far negative tail where the result is < 1e-20 |x|. Below
      // t = -80 the exponent is capped (by design), leaving an absolute error under |x| e^-80.
      const double t = a == k::Activation::silu ? x[i] : 2 * std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * std::pow(x[i], 3));
      ASSERT_LE(std::abs(y[i] - ref), (16 + 4 * std::abs(t)) * u * std::abs(ref) + std::abs(x[i]) * 1.9e-35) << "x = " << x[i];
    }
  }
}

// The sigmoid activations at the ends of the float range: +inf stays +inf, NaN stays NaN, a large input is
// itself to rounding, a large negative one at most |x| e^-80 in magnitude (the cap), zeros keep their sign.
TEST_P(KernelTest, ActivationsKeepSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const float special[6] = {inf, std::numeric_limits<float>::quiet_NaN(), -1000.0f, 1000.0f, 0.0f, -0.0f};
  for (k::Activation a : {k::Activation::gelu_tanh, k::Activation::silu}) {
    float out[6];
    kern().activation(a, special, out, 6);
    EXPECT_EQ(out[0], inf);
    EXPECT_TRUE(std::isnan(out[1]));
    EXPECT_LE(std::abs(out[2]), 1000.0f * 1.9e-35f);
    EXPECT_NEAR(out[3], 1000.0f, 2 * u * 1000.0);  // one ulp: AVX2 reciprocal of 1 is 1 - u after its Newton step
    EXPECT_TRUE(out[4] == 0.0f && !std::signbit(out[4]));
    EXPECT_TRUE(out[5] == 0.0f && std::signbit(out[5]));
  }
}

// ReLU as torch.relu and kernels::relu_keep_nan: negatives to +0, NaN and -0 kept, the rest itself.
TEST_P(KernelTest, ReluKeepsNanAndNegativeZero) {
  const float inf = std::numeric_limits<float>::infinity();
  const float special[8] = {inf, std::numeric_limits<float>::quiet_NaN(), -1000.0f, 1000.0f, 0.0f, -0.0f, -inf, 1e-40f};
  float out[8];
  kern().activation(k::Activation::relu, special, out, 8);
  EXPECT_EQ(out[0], inf);
  EXPECT_TRUE(std::isnan(out[1]));
  EXPECT_TRUE(out[2] == 0.0f && !std::signbit(out[2]));
  EXPECT_EQ(out[3], 1000.0f);
  EXPECT_TRUE(out[4] == 0.0f && !std::signbit(out[4]));
  EXPECT_TRUE(out[5] == 0.0f && std::signbit(out[5]));
  EXPECT_TRUE(out[6] == 0.0f && !std::signbit(out[6]));
  EXPECT_EQ(out[7], 1e-40f);
}

/// Distance of float y from the double r in units of the float spacing at |r| (2^-149 for subnormals).
double ulps(float y, double r) {
  if (r == 0.0) return y == 0.0f ? 0.0 : std::numeric_limits<double>::infinity();
  const int e = std::max(std::ilogb(r), -126);
  return std::abs(static_cast<double>(y) - r) / std::ldexp(1.0, e - 23);
}

// erf against std::erf in double on every 61st bit pattern of the positive finite floats (subnormals
// included) and every 997th of the negative ones, plus the special values. The bound is the design's
// (simd.hpp: leading term rounded once, fitted polynomials 1e-9, exp 1 ulp scaled by erfc < 0.16, the
// final rounding): 1.5 ulp where the kernel has FMA, 2.5 ulp without (generic: every Horner step and the
// leading term rounded twice).
TEST_P(KernelTest, ErfIsAccurateOverTheWholeFloatRange) {
  const double bound = GetParam() == k::Isa::generic ? 2.5 : 1.5;
  constexpr std::size_t kChunk = 4096;
  std::vector<float> x(kChunk), y(kChunk);
  double worst = 0.0;
  float worst_x = 0.0f;
  auto check = [&](std::size_t n) {
    kern().erf(x.data(), y.data(), static_cast<k::index_t>(n));
    for (std::size_t i = 0; i < n; ++i) {
      const double err = ulps(y[i], std::erf(static_cast<double>(x[i])));
      if (err > worst) worst = err, worst_x = x[i];
    }
  };
  std::size_t n = 0;
  for (std::uint64_t bits = 0; bits < 0x7f800000u; bits += 61) {
    x[n++] = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (n == kChunk) check(n), n = 0;
  }
  for (std::uint64_t bits = 0x80000000u; bits < 0xff800000u; bits += 997) {
    x[n++] = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (n == kChunk) check(n), n = 0;
  }
  check(n);
  std::printf("erf (%s): worst %.3f ulp at x = %.9g\n", k::to_string(GetParam()), worst, worst_x);
  EXPECT_LE(worst, bound) << "at x = " << worst_x;
  const float inf = std::numeric_limits<float>::infinity();
  const float special[6] = {0.0f, -0.0f, inf, -inf, std::numeric_limits<float>::quiet_NaN(), 4.5f};
  float out[6];
  kern().erf(special, out, 6);
  EXPECT_EQ(out[0], 0.0f);
  EXPECT_EQ(out[1], 0.0f);
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_EQ(out[3], -1.0f);
  EXPECT_TRUE(std::isnan(out[4]));
  EXPECT_EQ(out[5], 1.0f);  // erfc(4.5) = 2e-10, far below half the spacing below 1 (3e-8)
}

// GELU(erf) = 0.5 x (1 + erf(x / sqrt 2)) in float, as PyTorch evaluates it: erf's error (<= 2.5 ulp of
// |erf| <= 1), the rounding of x / sqrt 2 (amplified by erf' |x| / sqrt 2 <= 0.25 |x|... times 0.5 |x|) and
// of 1 + erf, and the two products give |y - ref| <= 4 u (|x| + |ref|); in the far negative tail 1 + erf
// cancels (to 0 below x = -5.4, as in PyTorch), which the |x| term covers.
TEST_P(KernelTest, GeluErfMatchesItsDefinition) {
  std::vector<float> x;
  for (double v = -30.0; v <= 30.0; v += 0.00137) x.push_back(static_cast<float>(v));
  std::vector<float> y(x.size());
  kern().activation(k::Activation::gelu_erf, x.data(), y.data(), static_cast<k::index_t>(x.size()));
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double ref = gelu_erf_ref(x[i]);
    ASSERT_LE(std::abs(y[i] - ref), 4 * u * (std::abs(x[i]) + std::abs(ref))) << "x = " << x[i];
  }
}

// ---------------------------------------------------------------------------------------------------
struct LinearShape {
  int in, out;
  k::index_t rows;
};

TEST_P(KernelTest, LinearMatchesNaiveReference) {
  std::mt19937 gen(11);
  const LinearShape shapes[] = {{1, 1, 1}, {2, 64, 7}, {3, 5, 13}, {17, 33, 1}, {64, 64, 100}, {64, 1, 37},
                                {32, 130, 9}, {130, 48, 6}, {64, 256, 12}};
  for (const auto& s : shapes) {
    for (k::Activation act : {k::Activation::none, k::Activation::gelu_tanh, k::Activation::silu,
                              k::Activation::gelu_erf, k::Activation::relu}) {
      for (int residuals = 0; residuals <= 2; ++residuals) {
        const k::index_t ldx = k::round_up(s.in, k::kPad) + 16, ldy = k::round_up(s.out, k::kPad) + 32;
        const auto w = random_vector(static_cast<std::size_t>(s.in) * s.out, 1.0f / std::sqrt(float(s.in)), gen);
        const auto b = random_vector(static_cast<std::size_t>(s.out), 0.3f, gen);
        auto x = random_vector(static_cast<std::size_t>(s.rows * ldx), 1.0f, gen);
        auto r1 = random_vector(static_cast<std::size_t>(s.rows * ldy), 1.0f, gen);
        auto r2 = random_vector(static_cast<std::size_t>(s.rows * ldy), 1.0f, gen);
        const k::PackedLinear layer(w.data(), b.data(), s.out, s.in);
        std::vector<float> y = r2;  // residual 2 is added in place when residuals == 2
        k::LinearArgs a;
        a.layer = &layer;
        a.x = x.data();
        a.ldx = ldx;
        a.y = y.data();
        a.ldy = ldy;
        a.rows = s.rows;
        a.act = act;
        if (residuals >= 1) a.add1 = r1.data(), a.ld_add1 = ldy;
        if (residuals >= 2) a.add2 = y.data(), a.ld_add2 = ldy;
        kern().linear(a);
        for (k::index_t r = 0; r < s.rows; ++r)
          for (int o = 0; o < s.out; ++o) {
            double dot = b[o], magnitude = std::abs(b[o]);
            for (int i = 0; i < s.in; ++i) {
              dot += double(x[r * ldx + i]) * w[static_cast<std::size_t>(o) * s.in + i];
              magnitude += std::abs(double(x[r * ldx + i]) * w[static_cast<std::size_t>(o) * s.in + i]);
            }
            double ref = act_ref(act, dot);
            double scale = std::abs(ref) + std::abs(dot);
            if (residuals >= 1) ref += r1[r * ldy + o], scale += std::abs(r1[r * ldy + o]);
            if (residuals >= 2) ref += r2[r * ldy + o], scale += std::abs(r2[r * ldy + o]);
            // dot product: (K + 1) u sum|x w| (Lipschitz constant of the activations <= 1.2);
            // activation and residual additions: a few u relative.
            const double tol = 1.2 * (s.in + 2) * u * magnitude + 16 * u * scale;
            ASSERT_LE(std::abs(y[r * ldy + o] - ref), tol)
                << "in " << s.in << " out " << s.out << " row " << r << " col " << o << " act " << int(act);
          }
      }
    }
  }
}

TEST_P(KernelTest, LinearRowsAreIndependentOfTheirBlock) {
  std::mt19937 gen(12);
  const int in = 64, out = 64;
  const k::index_t rows = 23, ld = 64;
  const auto w = random_vector(in * out, 0.2f, gen), b = random_vector(out, 0.1f, gen);
  const auto x = random_vector(static_cast<std::size_t>(rows * ld), 1.0f, gen);
  const k::PackedLinear layer(w.data(), b.data(), out, in);
  std::vector<float> all(static_cast<std::size_t>(rows * ld)), one(all.size());
  k::LinearArgs a;
  a.layer = &layer;
  a.x = x.data();
  a.ldx = ld;
  a.y = all.data();
  a.ldy = ld;
  a.rows = rows;
  a.act = k::Activation::gelu_tanh;
  kern().linear(a);
  for (k::index_t r = 0; r < rows; ++r) {
    a.x = x.data() + r * ld;
    a.y = one.data() + r * ld;
    a.rows = 1;
    kern().linear(a);
  }
  EXPECT_EQ(all, one);  // bitwise: the same point gives the same bits in any block
}

// ---------------------------------------------------------------------------------------------------
TEST_P(KernelTest, NormsMatchNaiveReference) {
  std::mt19937 gen(13);
  for (int dim : {1, 3, 8, 24, 64, 100}) {
    for (bool rms : {false, true}) {
      const k::index_t rows = 9, ld = k::round_up(dim, k::kPad);
      auto x = random_vector(static_cast<std::size_t>(rows * ld), 2.0f, gen);
      for (k::index_t r = 0; r < rows; ++r)
        for (int c = 0; c < dim; ++c) x[r * ld + c] += 3.0f;  // a non-zero mean
      std::vector<float> w(static_cast<std::size_t>(ld), 0.0f), b(static_cast<std::size_t>(ld), 0.0f);
      for (int c = 0; c < dim; ++c) w[c] = 1.0f + 0.3f * std::sin(float(c)), b[c] = 0.1f * std::cos(float(c));
      std::vector<float> y(x.size());
      k::NormArgs a;
      a.x = x.data();
      a.ldx = ld;
      a.y = y.data();
      a.ldy = ld;
      a.rows = rows;
      a.dim = dim;
      a.weight = w.data();
      a.bias = rms ? nullptr : b.data();
      a.eps = rms ? 1.1920929e-07f : 1e-5f;
      a.rms = rms;
      kern().norm(a);
      for (k::index_t r = 0; r < rows; ++r) {
        double mean = 0, var = 0;
        if (!rms) {
          for (int c = 0; c < dim; ++c) mean += x[r * ld + c];
          mean /= dim;
        }
        for (int c = 0; c < dim; ++c) var += (x[r * ld + c] - mean) * (x[r * ld + c] - mean);
        var /= dim;
        for (int c = 0; c < dim; ++c) {
          const double ref = (x[r * ld + c] - mean) / std::sqrt(var + a.eps) * w[c] + (rms ? 0.0 : b[c]);
          // mean and variance are float sums over dim terms: about dim u relative each.
          ASSERT_NEAR(y[r * ld + c], ref, (4.0 * dim + 16) * u * (std::abs(ref) + std::abs(w[c]) + 1.0))
              << "dim " << dim << " rms " << rms;
        }
        for (k::index_t c = dim; c < ld; ++c) EXPECT_EQ(y[r * ld + c], 0.0f) << "padding column " << c;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Latent attention: one head with M latents of width E over n points (k, v rows of stride ld).
struct LatentCase {
  int M, E;
  k::index_t n;
};

struct LatentData {
  int M, E;
  k::index_t n, ld;
  std::vector<float> q, keys, values, z;
  LatentData(const LatentCase& c, std::mt19937& gen) : M(c.M), E(c.E), n(c.n), ld(c.E + 5) {
    q = random_vector(static_cast<std::size_t>(M) * E, 0.8f, gen);
    keys = random_vector(static_cast<std::size_t>(n * ld), 1.0f, gen);
    values = random_vector(static_cast<std::size_t>(n * ld), 1.0f, gen);
    z = random_vector(static_cast<std::size_t>(M) * E, 1.0f, gen);
  }
  double logit(int m, k::index_t i) const {
    double l = 0;
    for (int e = 0; e < E; ++e) l += double(q[m * E + e]) * keys[i * ld + e];
    return l;
  }
  /// Bound of the float rounding error of a logit: E u sum |q k|.
  double logit_error(int m, k::index_t i) const {
    double s = 0;
    for (int e = 0; e < E; ++e) s += std::abs(double(q[m * E + e]) * keys[i * ld + e]);
    return (E + 1) * u * s;
  }
};

const LatentCase latent_cases[] = {{1, 1, 1}, {3, 4, 7}, {16, 8, 16}, {64, 8, 33}, {5, 8, 1500}, {7, 16, 300},
                                   {4, 3, 77}, {300, 8, 40}, {2, 64, 20}, {2000, 16, 24}};

/// Runs the streaming encode over the rows [cuts[j], cuts[j+1]) in turn, as the model does per tile.
void encode_in_parts(const k::CpuKernels& kern, const LatentData& d, const std::vector<k::index_t>& cuts,
                     std::vector<std::int32_t>& ref, std::vector<double>& total, std::vector<double>& acc) {
  ref.assign(static_cast<std::size_t>(d.M), k::kNoExponent);
  total.assign(static_cast<std::size_t>(d.M), 0.0);
  acc.assign(static_cast<std::size_t>(d.M) * d.E, 0.0);
  for (std::size_t j = 0; j + 1 < cuts.size(); ++j) {
    if (cuts[j] == cuts[j + 1]) continue;
    k::LatentEncodeArgs a;
    a.q = d.q.data();
    a.M = d.M;
    a.E = d.E;
    a.k = d.keys.data() + cuts[j] * d.ld;
    a.ldk = d.ld;
    a.v = d.values.data() + cuts[j] * d.ld;
    a.ldv = d.ld;
    a.rows = cuts[j + 1] - cuts[j];
    a.ref_exp = ref.data();
    a.sum = total.data();
    a.weighted = acc.data();
    kern.latent_encode(a);
  }
}

TEST_P(KernelTest, LatentEncodeMatchesSoftmaxOverPoints) {
  std::mt19937 gen(14);
  for (const auto& c : latent_cases) {
    const LatentData d(c, gen);
    std::vector<std::int32_t> ref;
    std::vector<double> total, acc;
    encode_in_parts(kern(), d, {0, d.n / 3, d.n}, ref, total, acc);
    for (int m = 0; m < d.M; ++m) {
      double mx = -1e300, max_err = 0;
      for (k::index_t i = 0; i < d.n; ++i) mx = std::max(mx, d.logit(m, i)), max_err = std::max(max_err, d.logit_error(m, i));
      // The reference exponent keeps every term below 2 and the largest one above 2^-1.5.
      const double largest = std::exp(mx) * std::ldexp(1.0, -ref[m]);
      EXPECT_LT(largest, 2.0 * (1 + 4 * max_err));
      EXPECT_GT(largest, 0.3);
      std::vector<double> expected(static_cast<std::size_t>(d.E), 0.0);
      double s = 0, vmax = 0;
      for (k::index_t i = 0; i < d.n; ++i) {
        const double p = std::exp(d.logit(m, i) - mx);
        s += p;
        for (int e = 0; e < d.E; ++e) expected[e] += p * d.values[i * d.ld + e], vmax = std::max(vmax, std::abs(double(d.values[i * d.ld + e])));
      }
      for (int e = 0; e < d.E; ++e) {
        const double z = acc[m * d.E + e] / total[m];
        // Each term carries its logit's rounding error and exp's few ulp; the sums are double.
        EXPECT_NEAR(z, expected[e] / s, (2 * max_err + 16 * u) * 2 * vmax) << "M " << d.M << " E " << d.E << " n " << d.n;
      }
    }
  }
}

TEST_P(KernelTest, LatentEncodeBarelyDependsOnHowPointsAreSplit) {
  std::mt19937 gen(18);
  for (const auto& c : latent_cases) {
    const LatentData d(c, gen);
    std::vector<std::int32_t> ref_a, ref_b;
    std::vector<double> total_a, acc_a, total_b, acc_b;
    encode_in_parts(kern(), d, {0, d.n}, ref_a, total_a, acc_a);
    std::vector<k::index_t> cuts = {0};
    std::uniform_int_distribution<k::index_t> step(1, 29);
    while (cuts.back() < d.n) cuts.push_back(std::min(d.n, cuts.back() + step(gen)));
    encode_in_parts(kern(), d, cuts, ref_b, total_b, acc_b);
    for (int m = 0; m < d.M; ++m) {
      // Same terms, different double summation order: agreement to a few double roundings per term.
      const double scale = std::ldexp(1.0, ref_b[m] - ref_a[m]);
      EXPECT_NEAR(total_b[m] * scale, total_a[m], 1e-14 * total_a[m] * std::log2(double(d.n) + 2));
      for (int e = 0; e < d.E; ++e) {
        double mag = 0;
        for (k::index_t i = 0; i < d.n; ++i) mag += std::abs(d.values[i * d.ld + e]) * std::exp(d.logit(m, i)) * std::ldexp(1.0, -ref_a[m]);
        EXPECT_NEAR(acc_b[m * d.E + e] * scale, acc_a[m * d.E + e], 1e-14 * mag * std::log2(double(d.n) + 2));
      }
    }
  }
}

/// The decode of d's latents over its rows (one bias per latent, or none) into rows of ldy floats, 7 in the
/// columns past E.
std::vector<float> decode(const k::CpuKernels& kern, const LatentData& d, const float* latent_bias, k::index_t ldy) {
  std::vector<float> y(static_cast<std::size_t>(d.n * ldy), 7.0f);
  k::LatentDecodeArgs a;
  a.q = d.q.data();
  a.z = d.z.data();
  a.M = d.M;
  a.E = d.E;
  a.k = d.keys.data();
  a.ldk = d.ld;
  a.y = y.data();
  a.ldy = ldy;
  a.rows = d.n;
  a.latent_bias = latent_bias;
  kern.latent_decode(a);
  return y;
}

TEST_P(KernelTest, LatentDecodeMatchesSoftmaxOverLatents) {
  std::mt19937 gen(15);
  std::uniform_real_distribution<float> log_weight(-3.0f, 0.0f);
  for (const auto& c : latent_cases) {
    const LatentData d(c, gen);
    std::vector<float> latent_bias(static_cast<std::size_t>(d.M));
    for (float& b : latent_bias) b = log_weight(gen);
    // Without and with one bias per latent (LatentDecodeArgs::latent_bias, the global S² attention's log
    // quadrature weights), added to the logit in float.
    for (const bool with_bias : {false, true}) {
      const k::index_t ldy = d.E + 3;
      const std::vector<float> y = decode(kern(), d, with_bias ? latent_bias.data() : nullptr, ldy);
      double zmax = 0;
      for (float v : d.z) zmax = std::max(zmax, double(std::abs(v)));
      for (k::index_t i = 0; i < d.n; ++i) {
        std::vector<double> l(static_cast<std::size_t>(d.M));
        double mx = -1e300, max_err = 0;
        for (int m = 0; m < d.M; ++m) {
          const double b = with_bias ? latent_bias[static_cast<std::size_t>(m)] : 0.0;
          l[m] = d.logit(m, i) + b;
          mx = std::max(mx, l[m]);
          max_err = std::max(max_err, d.logit_error(m, i) + u * std::abs(l[m]));  // (+ the bias's rounding)
        }
        double s = 0;
        std::vector<double> ref(static_cast<std::size_t>(d.E), 0.0);
        for (int m = 0; m < d.M; ++m) {
          const double p = std::exp(l[m] - mx);
          s += p;
          for (int e = 0; e < d.E; ++e) ref[e] += p * d.z[m * d.E + e];
        }
        // Float sums over at most one block of 256 latents (then double across blocks).
        const int summed = std::min(d.M, 256);
        for (int e = 0; e < d.E; ++e)
          ASSERT_NEAR(y[i * ldy + e], ref[e] / s, (2 * max_err + (summed + 32) * u) * 2 * zmax)
              << "row " << i << " M " << d.M << " bias " << with_bias;
        for (k::index_t e = d.E; e < ldy; ++e) ASSERT_EQ(y[i * ldy + e], 7.0f) << "wrote outside the head's columns";
      }
    }
  }
}

// Each row's softmax runs in one SIMD lane (the double totals across blocks of latents too): the AVX2 and
// AVX-512 kernels give the same bits, with and without a bias per latent.
TEST(LatentDecode, Avx2AndAvx512GiveTheSameBits) {
  const k::CpuKernels* avx2 = k::cpu(k::Isa::avx2);
  const k::CpuKernels* avx512 = k::cpu(k::Isa::avx512);
  if (!avx2 || !avx512) GTEST_SKIP() << "needs both the AVX2 and the AVX-512 kernels";
  std::mt19937 gen(24);
  for (const auto& c : latent_cases) {
    const LatentData d(c, gen);
    std::vector<float> latent_bias(static_cast<std::size_t>(d.M));
    for (float& b : latent_bias) b = std::uniform_real_distribution<float>(-3.0f, 0.0f)(gen);
    for (const bool with_bias : {false, true}) {
      const float* bias = with_bias ? latent_bias.data() : nullptr;
      EXPECT_EQ(decode(*avx2, d, bias, d.E), decode(*avx512, d, bias, d.E))
          << "M " << d.M << " E " << d.E << " bias " << with_bias;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
TEST(ExactScale, SumsNeverOverflow) {
  for (k::index_t count : {k::index_t{1}, k::index_t{1000}, k::index_t{1} << 20, k::index_t{1} << 40}) {
    for (double maxabs : {1e-30, 1e-3, 1.0, 3.7, 1e6}) {
      const k::ExactScale s = k::exact_scale(count, maxabs);
      EXPECT_LE(std::log2(double(count)) + std::log2(maxabs) + s.hi_bits, 61.0 + 1e-9);
      EXPECT_LE(std::log2(double(count)) + s.lo_bits, 61.0 + 1e-9);
      // Accumulated truncation error (count terms, each below 2^-(hi+lo)) relative to maxabs:
      // negligible against float32 rounding up to 2^30 points per sample (documented limit).
      if (count <= (k::index_t{1} << 30)) {
        EXPECT_LT(double(count) * std::ldexp(1.0, -(s.hi_bits + s.lo_bits)) / maxabs, 0x1p-40);
      }
    }
  }
}

TEST_P(KernelTest, ExactEncodeIsIndependentOfHowPointsAreSplit) {
  std::mt19937 gen(16);
  for (const auto& c : latent_cases) {
    const LatentData d(c, gen);
    // pass 1: the global maximum
    std::vector<float> mx(static_cast<std::size_t>(d.M), -std::numeric_limits<float>::infinity());
    k::LatentMaxArgs m;
    m.q = d.q.data();
    m.M = d.M;
    m.E = d.E;
    m.k = d.keys.data();
    m.ldk = d.ld;
    m.rows = d.n;
    m.max = mx.data();
    kern().latent_max(m);
    float vmax = 0;
    for (k::index_t i = 0; i < d.n; ++i)
      for (int e = 0; e < d.E; ++e) vmax = std::max(vmax, std::abs(d.values[i * d.ld + e]));
    auto run = [&](const std::vector<k::index_t>& cuts) {
      std::vector<std::int64_t> acc(static_cast<std::size_t>(d.M) * (d.E + 1) * 2, 0);
      for (std::size_t j = 0; j + 1 < cuts.size(); ++j) {
        if (cuts[j] == cuts[j + 1]) continue;
        k::LatentExactArgs a;
        a.q = d.q.data();
        a.M = d.M;
        a.E = d.E;
        a.k = d.keys.data() + cuts[j] * d.ld;
        a.ldk = d.ld;
        a.v = d.values.data() + cuts[j] * d.ld;
        a.ldv = d.ld;
        a.rows = cuts[j + 1] - cuts[j];
        a.ref_max = mx.data();
        a.sum_scale = k::exact_scale(d.n, 1.0);
        a.value_scale = k::exact_scale(d.n, vmax);
        a.acc = acc.data();
        kern().latent_encode_exact(a);
      }
      return acc;
    };
    const auto whole = run({0, d.n});
    std::vector<k::index_t> cuts = {0};
    std::uniform_int_distribution<k::index_t> step(1, 37);
    while (cuts.back() < d.n) cuts.push_back(std::min(d.n, cuts.back() + step(gen)));
    EXPECT_EQ(run(cuts), whole) << "integer sums depend on the split (M " << d.M << ", n " << d.n << ")";
    // ... and they agree with the softmax average within float rounding.
    const auto sum_scale = k::exact_scale(d.n, 1.0), value_scale = k::exact_scale(d.n, vmax);
    for (int mi = 0; mi < d.M; ++mi) {
      const std::int64_t* a = whole.data() + static_cast<std::size_t>(mi) * (d.E + 1) * 2;
      const double s = k::exact_value(a[0], a[1], sum_scale);
      double ref_s = 0, max_err = 0;
      std::vector<double> ref(static_cast<std::size_t>(d.E), 0.0);
      for (k::index_t i = 0; i < d.n; ++i) {
        const double p = std::exp(d.logit(mi, i) - mx[mi]);
        max_err = std::max(max_err, d.logit_error(mi, i));
        ref_s += p;
        for (int e = 0; e < d.E; ++e) ref[e] += p * d.values[i * d.ld + e];
      }
      for (int e = 0; e < d.E; ++e) {
        const double z = k::exact_value(a[2 * (1 + e)], a[2 * (1 + e) + 1], value_scale) / s;
        EXPECT_NEAR(z, ref[e] / ref_s, (2 * max_err + 16 * u) * 2 * vmax);
      }
    }
  }
}

// Terms whose fixed-point image does not fit (found by the fuzzer: an Inf activation made the reproducible
// encode overflow its int64 sums, undefined behaviour): left out and counted. A NaN value leaves out that
// channel's term of its row, NaN keys the whole row: the sums are those of the data without them.
TEST_P(KernelTest, ExactEncodeCountsTermsThatDoNotFit) {
  std::mt19937 gen(17);
  const LatentData d(LatentCase{64, 8, 33}, gen);
  const float vmax = 1.0f;  // above every |value| of LatentData
  auto run = [&](const std::vector<float>& keys, const std::vector<float>& values, k::index_t rows,
                 std::vector<std::int64_t>& bad) {
    std::vector<std::int64_t> acc(static_cast<std::size_t>(d.M) * (d.E + 1) * 2, 0);
    const std::vector<float> ref_max(static_cast<std::size_t>(d.M), 100.0f);  // above every logit
    bad.assign(static_cast<std::size_t>(d.M), 0);
    k::LatentExactArgs a;
    a.q = d.q.data();
    a.M = d.M;
    a.E = d.E;
    a.k = keys.data();
    a.ldk = d.ld;
    a.v = values.data();
    a.ldv = d.ld;
    a.rows = rows;
    a.ref_max = ref_max.data();
    a.sum_scale = k::exact_scale(d.n, 1.0);
    a.value_scale = k::exact_scale(d.n, vmax);
    a.acc = acc.data();
    a.bad = bad.data();
    kern().latent_encode_exact(a);
    return acc;
  };
  std::vector<float> keys = d.keys, values = d.values;
  values[static_cast<std::size_t>(0 * d.ld + 1)] = std::numeric_limits<float>::quiet_NaN();  // row 0, channel 1
  for (int e = 0; e < d.E; ++e) keys[static_cast<std::size_t>(2 * d.ld + e)] = std::numeric_limits<float>::quiet_NaN();
  std::vector<std::int64_t> bad, none;
  const auto got = run(keys, values, d.n, bad);
  for (int m = 0; m < d.M; ++m) EXPECT_EQ(bad[static_cast<std::size_t>(m)], 1 + (1 + d.E)) << "latent " << m;
  // the reference: row 0's channel 1 zero, row 2 removed
  std::vector<float> ref_keys, ref_values;
  for (k::index_t i = 0; i < d.n; ++i) {
    if (i == 2) continue;
    ref_keys.insert(ref_keys.end(), d.keys.begin() + i * d.ld, d.keys.begin() + (i + 1) * d.ld);
    ref_values.insert(ref_values.end(), d.values.begin() + i * d.ld, d.values.begin() + (i + 1) * d.ld);
  }
  ref_values[1] = 0.0f;
  EXPECT_EQ(got, run(ref_keys, ref_values, d.n - 1, none));
  for (const std::int64_t b : none) EXPECT_EQ(b, 0);
}

// The fixed-point images bit for bit: with zero queries and reference every weight is exp(0) = 1, so
// the sums are those of trunc(v 2^hi) and trunc(frac 2^lo), computed here in scalar double (exact).
// Row counts on both sides of 1024, where the scales' images fall below 2^51 (AVX2's short
// conversions), values spread over 2^-30 .. 2^8 and both signs; a NaN row takes the checked path.
TEST_P(KernelTest, ExactEncodeImagesAreTruncatedExactly) {
  std::mt19937 gen(18);
  for (const k::index_t n : {k::index_t{40}, k::index_t{1500}, k::index_t{5000}}) {
    for (const bool with_nan : {false, true}) {
      const int M = 3, E = 8;
      const k::index_t ld = E + 3;
      std::vector<float> q(static_cast<std::size_t>(M) * E, 0.0f), keys = random_vector(std::size_t(n * ld), 1.0f, gen);
      std::vector<float> values = random_vector(std::size_t(n * ld), 1.0f, gen);
      std::uniform_int_distribution<int> shift(-30, 8);
      float vmax = 0;
      for (float& v : values) {
        v = std::ldexp(v, shift(gen));
        vmax = std::max(vmax, std::abs(v));
      }
      if (with_nan) values[static_cast<std::size_t>(7 * ld + 2)] = std::numeric_limits<float>::quiet_NaN();
      const std::vector<float> ref_max(static_cast<std::size_t>(M), 0.0f);
      std::vector<std::int64_t> acc(static_cast<std::size_t>(M) * (E + 1) * 2, 0), bad(static_cast<std::size_t>(M), 0);
      k::LatentExactArgs a;
      a.q = q.data();
      a.M = M;
      a.E = E;
      a.k = keys.data();
      a.ldk = ld;
      a.v = values.data();
      a.ldv = ld;
      a.rows = n;
      a.ref_max = ref_max.data();
      a.sum_scale = k::exact_scale(n, 1.0);
      a.value_scale = k::exact_scale(n, vmax);
      a.acc = acc.data();
      a.bad = bad.data();
      kern().latent_encode_exact(a);
      auto image = [](double t, k::ExactScale s, std::int64_t& hi, std::int64_t& lo) {
        const double scaled = std::ldexp(t, s.hi_bits);
        hi += static_cast<std::int64_t>(std::trunc(scaled));
        lo += static_cast<std::int64_t>(std::trunc(std::ldexp(scaled - std::trunc(scaled), s.lo_bits)));
      };
      std::vector<std::int64_t> ref(acc.size(), 0);
      for (int m = 0; m < M; ++m) {
        std::int64_t* r = ref.data() + static_cast<std::size_t>(m) * (E + 1) * 2;
        for (k::index_t i = 0; i < n; ++i) {
          image(1.0, a.sum_scale, r[0], r[1]);
          for (int e = 0; e < E; ++e) {
            const float v = values[static_cast<std::size_t>(i * ld + e)];
            if (!std::isnan(v)) image(v, a.value_scale, r[2 * (1 + e)], r[2 * (1 + e) + 1]);
          }
        }
        EXPECT_EQ(bad[static_cast<std::size_t>(m)], with_nan ? 1 : 0) << "n " << n;
      }
      EXPECT_EQ(acc, ref) << "n " << n << (with_nan ? " with a NaN value" : "");
    }
  }
}

// ---------------------------------------------------------------------------------------------------
// Ball attention: softmax over the m points of a ball, per head, with an optional additive bias
// sigma_h * bias_ij. Sizes cross the decode's blocks of 256 keys (the running rescale) and its chunks of
// queries (E = 16: 256 rows, E = 64: 64 rows); strides are not multiples of anything.
struct BallCase {
  int m, heads, E;
};

struct BallData {
  int m, heads, E;
  k::index_t ld, ld_bias;
  float scale;
  std::vector<float> q, keys, values, bias, sigma;
  BallData(const BallCase& c, std::mt19937& gen)
      : m(c.m), heads(c.heads), E(c.E), ld(c.heads * c.E + 3), ld_bias(c.m + 2),
        scale(1.0f / std::sqrt(static_cast<float>(c.E))) {
    q = random_vector(static_cast<std::size_t>(m * ld), 1.5f, gen);
    keys = random_vector(static_cast<std::size_t>(m * ld), 1.5f, gen);
    values = random_vector(static_cast<std::size_t>(m * ld), 1.0f, gen);
    // Distance-like, symmetric bias (the kernel's contract); the last row ends at its m-th entry (nothing
    // readable past it); the padding between rows NaN (never read).
    std::uniform_real_distribution<float> dist(0.0f, 3.0f);
    bias.assign(static_cast<std::size_t>((m - 1) * ld_bias + m), std::numeric_limits<float>::quiet_NaN());
    for (int i = 0; i < m; ++i)
      for (int j = 0; j <= i; ++j) bias[i * ld_bias + j] = bias[j * ld_bias + i] = dist(gen);
    // Mild, strong (nearly one-hot: deep underflow of most terms) and positive factors.
    const float factors[] = {-1.0f, -25.0f, 0.7f};
    for (int h = 0; h < heads; ++h) sigma.push_back(factors[h % 3]);
  }
  std::vector<float> run(const k::CpuKernels& kern, const float* sig) const {
    std::vector<float> out(static_cast<std::size_t>(m * ld), -7.0f);
    k::BallAttentionArgs a;
    a.m = m;
    a.heads = heads;
    a.E = E;
    a.q = q.data();
    a.k = keys.data();
    a.v = values.data();
    a.ld = ld;
    a.scale = scale;
    a.sigma = sig;
    a.bias = sig ? bias.data() : nullptr;
    a.ld_bias = ld_bias;
    a.out = out.data();
    a.ldo = ld;
    kern.ball_attention(a);
    return out;
  }
};

const BallCase ball_cases[] = {{1, 1, 1}, {2, 3, 4}, {16, 8, 8}, {17, 2, 5}, {45, 4, 3},
                               {100, 3, 16}, {256, 8, 8}, {70, 1, 64}, {300, 2, 16}};

TEST_P(KernelTest, BallAttentionMatchesNaiveSoftmax) {
  std::mt19937 gen(21);
  for (const auto& c : ball_cases) {
    const BallData d(c, gen);
    for (const bool with_bias : {false, true}) {
      const std::vector<float> out = d.run(kern(), with_bias ? d.sigma.data() : nullptr);
      for (int h = 0; h < d.heads; ++h) {
        const k::index_t c0 = static_cast<k::index_t>(h) * d.E;
        for (int i = 0; i < d.m; ++i) {
          std::vector<double> l(static_cast<std::size_t>(d.m));
          double mx = -1e300, max_err = 0;
          for (int j = 0; j < d.m; ++j) {
            double dot = 0, mag = 0;
            for (int e = 0; e < d.E; ++e) {
              const double t = double(d.q[i * d.ld + c0 + e]) * d.keys[j * d.ld + c0 + e];
              dot += t, mag += std::abs(t);
            }
            const double b = with_bias ? double(d.sigma[h]) * d.bias[i * d.ld_bias + j] : 0.0;
            l[j] = d.scale * dot + b;
            mx = std::max(mx, l[j]);
            // The scaled queries, the logit's multiply-add chain and the bias term are float.
            max_err = std::max(max_err, (d.E + 3) * u * (d.scale * mag + std::abs(b)));
          }
          double s = 0;
          std::vector<double> expected(static_cast<std::size_t>(d.E), 0.0);
          double vmax = 0;
          for (int j = 0; j < d.m; ++j) {
            const double p = std::exp(l[j] - mx);
            s += p;
            for (int e = 0; e < d.E; ++e) {
              expected[e] += p * d.values[j * d.ld + c0 + e];
              vmax = std::max(vmax, std::abs(double(d.values[j * d.ld + c0 + e])));
            }
          }
          for (int e = 0; e < d.E; ++e)
            ASSERT_NEAR(out[i * d.ld + c0 + e], expected[e] / s, (2 * max_err + 16 * u) * 2 * vmax)
                << "m " << d.m << " heads " << d.heads << " E " << d.E << " bias " << with_bias << " head " << h
                << " row " << i;
        }
      }
      // Columns outside the heads are left alone.
      for (int i = 0; i < d.m; ++i)
        for (k::index_t col = static_cast<k::index_t>(d.heads) * d.E; col < d.ld; ++col)
          ASSERT_EQ(out[i * d.ld + col], -7.0f);
    }
  }
}

TEST_P(KernelTest, BallAttentionBiasTermIsAddedAndNothingElseChanges) {
  std::mt19937 gen(22);
  for (const auto& c : ball_cases) {
    const BallData d(c, gen);
    // sigma = 0 adds exact zeros to the logits: the same bits as without a bias.
    const std::vector<float> zeros(static_cast<std::size_t>(d.heads), 0.0f);
    EXPECT_EQ(d.run(kern(), zeros.data()), d.run(kern(), nullptr)) << "m " << d.m << " E " << d.E;
    // A bias of -80 on every key but one (per row: m - 1 - i, a symmetric choice) leaves that key's value
    // (weights below 1e-34).
    BallData one_hot = d;
    std::fill(one_hot.sigma.begin(), one_hot.sigma.end(), -80.0f);
    std::fill(one_hot.bias.begin(), one_hot.bias.end(), 1.0f);
    std::fill(one_hot.q.begin(), one_hot.q.end(), 0.01f);
    for (int i = 0; i < d.m; ++i) one_hot.bias[i * d.ld_bias + (d.m - 1 - i)] = 0.0f;
    const std::vector<float> out = one_hot.run(kern(), one_hot.sigma.data());
    for (int i = 0; i < d.m; ++i)
      for (k::index_t col = 0; col < static_cast<k::index_t>(d.heads) * d.E; ++col)
        ASSERT_NEAR(out[i * d.ld + col], d.values[(d.m - 1 - i) * d.ld + col], 1e-6) << "m " << d.m << " row " << i;
  }
}

// Each query's softmax runs in one SIMD lane, the same operations on every instruction set with FMA: the
// AVX2 and AVX-512 kernels give the same bits.
TEST(BallAttention, Avx2AndAvx512GiveTheSameBits) {
  const k::CpuKernels* avx2 = k::cpu(k::Isa::avx2);
  const k::CpuKernels* avx512 = k::cpu(k::Isa::avx512);
  if (!avx2 || !avx512) GTEST_SKIP() << "needs both the AVX2 and the AVX-512 kernels";
  std::mt19937 gen(23);
  for (const auto& c : ball_cases) {
    const BallData d(c, gen);
    for (const bool with_bias : {false, true}) {
      const float* sigma = with_bias ? d.sigma.data() : nullptr;
      EXPECT_EQ(d.run(*avx2, sigma), d.run(*avx512, sigma)) << "m " << d.m << " E " << d.E << " bias " << with_bias;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, KernelTest, ::testing::ValuesIn(available_isas()),
                         [](const auto& param_info) { return std::string(k::to_string(param_info.param)); });

TEST(Dispatch, BestIsaIsUsable) {
  EXPECT_NE(k::cpu(k::best_cpu_isa()), nullptr);
  if (std::getenv("SURROGATE_CPU_ISA")) GTEST_SKIP() << "SURROGATE_CPU_ISA overrides the choice";
  EXPECT_EQ(k::cpu().isa, k::best_cpu_isa());
}

TEST(Blas, GemmMatchesNaiveProduct) {
  std::mt19937 gen(17);
  const int m = 5, n = 7, kk = 9;
  const auto a = random_vector(m * kk, 1.0f, gen), b = random_vector(n * kk, 1.0f, gen);
  std::vector<float> c(m * n, 0.0f);
  k::blas_gemm_abt(m, n, kk, 1.0f, a.data(), kk, b.data(), kk, 0.0f, c.data(), n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double ref = 0, mag = 0;
      for (int t = 0; t < kk; ++t) ref += double(a[i * kk + t]) * b[j * kk + t], mag += std::abs(double(a[i * kk + t]) * b[j * kk + t]);
      EXPECT_NEAR(c[i * n + j], ref, (kk + 2) * u * mag);
    }
}

}  // namespace
