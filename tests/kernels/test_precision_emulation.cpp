// Accuracy of the tensor-core precisions of the CUDA forward (tf32, bf16), measured WITHOUT a GPU: every
// golden case run by the CPU forward with the Linear layers and the latent decode emulating the GPU's
// arithmetic (the operands of every Linear and of the decode's two products rounded to TF32 / BF16, FP32
// accumulation; tests/support/precision_emulation), against the official float64 reference. The table printed here is the one of share/docs/cuda.md.
// Also: the rounding functions, and the CPU's refusal of tf32. Runs in every build.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "golden.hpp"
#include "precision_emulation.hpp"
#include "surrogate/model.hpp"

namespace st = surrogate::testing;
using surrogate::Precision;

namespace {

TEST(PrecisionEmulation, Bf16RoundsToNearestEven) {
  EXPECT_EQ(st::round_to_bf16(1.0f), 1.0f);
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: ties to even (1); 1 + 3 * 2^-8 rounds up to 1 + 2^-6.
  EXPECT_EQ(st::round_to_bf16(1.0f + 0x1p-8f), 1.0f);
  EXPECT_EQ(st::round_to_bf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);
  EXPECT_EQ(st::round_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);
  EXPECT_EQ(st::round_to_bf16(-3.0f), -3.0f);
  EXPECT_TRUE(std::isnan(st::round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(st::round_to_bf16(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  for (float x : {0.1f, -7.3f, 1e-20f, 3e30f})
    EXPECT_LE(std::abs(st::round_to_bf16(x) - x), std::abs(x) * 0x1p-8f) << x;  // 8 significant bits
}

TEST(PrecisionEmulation, Tf32RoundsToNearestTiesAway) {
  EXPECT_EQ(st::round_to_tf32(1.0f), 1.0f);
  // 1 + 2^-11 is halfway between 1 and 1 + 2^-10: away from zero (cvt.rna).
  EXPECT_EQ(st::round_to_tf32(1.0f + 0x1p-11f), 1.0f + 0x1p-10f);
  EXPECT_EQ(st::round_to_tf32(-(1.0f + 0x1p-11f)), -(1.0f + 0x1p-10f));
  EXPECT_EQ(st::round_to_tf32(1.0f + 0x1p-12f), 1.0f);
  for (float x : {0.1f, -7.3f, 1e-20f, 3e30f})
    EXPECT_LE(std::abs(st::round_to_tf32(x) - x), std::abs(x) * 0x1p-11f) << x;
}

// (bf16 on the CPU: test_cpu_bf16.cpp.)
TEST(PrecisionEmulation, TheCpuRefusesTf32) {
  const st::GoldenCase c = st::load_golden_case(st::golden_case_names().front());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const auto layout = surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data());
  std::vector<float> out(static_cast<std::size_t>(c.points()) * c.out_dim);
  for (Precision p : {Precision::tf32}) {
    surrogate::RunOptions o;
    o.precision = p;
    try {
      model->predict(comm, layout, c.features.data(), c.in_dim, out.data(), c.out_dim, o);
      ADD_FAILURE() << surrogate::precision_name(p) << " accepted on the CPU";
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("needs a CUDA device"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(surrogate::parse_precision("bf16"), Precision::bf16);
  EXPECT_THROW(surrogate::parse_precision("fp16"), surrogate::Error);
  EXPECT_THROW(surrogate::parse_precision("BF16"), surrogate::Error);
}

struct Errors {
  double max_rel = 0;   // max |y - ref| / max |ref|
  double mean_rel = 0;  // mean |y - ref| / mean |ref|
};

Errors errors(const std::vector<float>& y, const std::vector<double>& ref) {
  double num_max = 0, den_max = 0, num_sum = 0, den_sum = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    const double d = std::abs(double(y[i]) - ref[i]);
    num_max = std::max(num_max, d);
    den_max = std::max(den_max, std::abs(ref[i]));
    num_sum += d;
    den_sum += std::abs(ref[i]);
  }
  return {num_max / den_max, num_sum / den_sum};
}

// Bounds (max relative error) well above what was measured (see the table printed and cuda.md), and
// the check that the emulation does change the result (above the FP32 error).
constexpr double kTf32Bound = 1e-2, kBf16Bound = 6e-2;  // measured worst: 5.3e-3, 3.8e-2

TEST(PrecisionEmulation, GoldenCasesWithTf32AndBf16TensorCoreOperands) {
  std::printf("%-22s %8s | %-21s | %-21s | %-21s\n", "case", "points", "fp32 max / mean", "tf32 max / mean",
              "bf16 max / mean");
  double worst_tf32 = 0, worst_bf16 = 0;
  for (const std::string& name : st::golden_case_names()) {
    const st::GoldenCase c = st::load_golden_case(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
    surrogate::SelfComm comm;
    const auto layout = surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data());
    Errors e[3];
    for (Precision p : {Precision::fp32, Precision::tf32, Precision::bf16}) {
      std::vector<float> out(static_cast<std::size_t>(c.points()) * c.out_dim, 0.0f);
      {
        st::ScopedPrecisionEmulation emulate(p);
        surrogate::RunOptions o;
        o.threads = 1;
        model->predict(comm, layout, c.features.data(), c.in_dim, out.data(), c.out_dim, o);
      }
      e[static_cast<int>(p)] = errors(out, c.reference);
    }
    std::printf("%-22s %8lld | %9.2e / %9.2e | %9.2e / %9.2e | %9.2e / %9.2e\n", name.c_str(),
                static_cast<long long>(c.points()), e[0].max_rel, e[0].mean_rel, e[1].max_rel, e[1].mean_rel,
                e[2].max_rel, e[2].mean_rel);
    EXPECT_GT(e[2].max_rel, e[0].max_rel) << name << ": the bf16 emulation did not change the result";
    EXPECT_GT(e[2].max_rel, e[1].max_rel) << name << ": bf16 should be less accurate than tf32";
    EXPECT_LE(e[1].max_rel, kTf32Bound) << name;
    EXPECT_LE(e[2].max_rel, kBf16Bound) << name;
    worst_tf32 = std::max(worst_tf32, e[1].max_rel);
    worst_bf16 = std::max(worst_bf16, e[2].max_rel);
  }
  std::printf("worst max relative error: tf32 %.2e, bf16 %.2e\n", worst_tf32, worst_bf16);
}

}  // namespace
