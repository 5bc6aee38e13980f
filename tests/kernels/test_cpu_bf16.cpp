// Precision::bf16 on the CPU (share/docs/cpu-bf16.md): the BF16 Linear kernels of every engine this CPU
// offers (AMX-BF16, AVX512-BF16) against the emulation of the same arithmetic (tests/support:
// operands rounded to BF16, FP32 sums in input order), the engine detection against /proc/cpuinfo, and
// FLARE's golden models run with bf16 against the official float64 reference (the table of cpu-bf16.md).
// On a CPU without the instructions only the refusals run; the engine tests are skipped, not passed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "golden.hpp"
#include "precision_emulation.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model.hpp"

namespace k = surrogate::kernels;
namespace st = surrogate::testing;
using surrogate::Precision;

namespace {

constexpr double u = 0x1p-24;

/// The CPU's feature flags as the kernel reports them (independent of the library's own cpuid reading).
bool cpu_flag(const std::string& flag) {
  std::ifstream info("/proc/cpuinfo");
  std::string line;
  while (std::getline(info, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word;
    while (words >> word)
      if (word == flag) return true;
    return false;
  }
  return false;
}

std::vector<k::LinearEngine> available_engines() {
  std::vector<k::LinearEngine> engines;
  for (k::LinearEngine e : {k::LinearEngine::amx_bf16, k::LinearEngine::avx512_bf16})
    if (k::cpu_bf16(e)) engines.push_back(e);
  return engines;
}

TEST(CpuBf16Detection, AgreesWithTheCpuFlags) {
  const bool dot_flags = cpu_flag("avx512_bf16") && cpu_flag("avx512f") && cpu_flag("avx512bw") &&
                         cpu_flag("avx512vl") && cpu_flag("avx512dq");
  EXPECT_EQ(k::cpu_bf16(k::LinearEngine::avx512_bf16) != nullptr, dot_flags);
  if (!dot_flags) {
    EXPECT_EQ(k::cpu_bf16(k::LinearEngine::amx_bf16), nullptr);
    EXPECT_STRNE(k::bf16_unavailable_reason(), "");
    EXPECT_THROW((void)k::cpu_bf16(), std::runtime_error);
    return;
  }
  EXPECT_STREQ(k::bf16_unavailable_reason(), "");
  // AMX also needs the kernel's permission (Linux 5.16 and later grant it); without the flags, never.
  if (!(cpu_flag("amx_bf16") && cpu_flag("amx_tile"))) {
    EXPECT_EQ(k::cpu_bf16(k::LinearEngine::amx_bf16), nullptr);
  }
  const k::CpuKernels& best = k::cpu_bf16();
  EXPECT_NE(best.linear_engine, k::LinearEngine::fp32);
  EXPECT_EQ(best.isa, k::cpu().isa);  // only the Linear layers change
  EXPECT_EQ(best.latent_encode, k::cpu().latent_encode);
}

std::vector<float> random_vector(std::size_t n, float scale, std::mt19937& gen) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

class Bf16Linear : public ::testing::TestWithParam<k::LinearEngine> {
 protected:
  const k::CpuKernels& kern() const { return *k::cpu_bf16(GetParam()); }
};

struct Shape {
  int in, out;
  k::index_t rows;
};

// Against the emulation: both sum the same exact products (BF16 x BF16 fits FP32) in FP32, in different
// orders. Two orders of K + 1 terms differ by at most 2 (K + 1) u sum|terms| (u = 2^-24); the activations'
// slopes are below 1.2 and each side's activation and residual additions add a few u of |y|.
TEST_P(Bf16Linear, MatchesTheEmulatedArithmetic) {
  std::mt19937 gen(21);
  const Shape shapes[] = {{1, 1, 1},    {2, 64, 7},    {3, 5, 13},   {17, 33, 1},  {64, 64, 100}, {64, 1, 37},
                          {32, 130, 9}, {130, 48, 6},  {64, 256, 12}, {64, 64, 240}, {33, 16, 33}, {1100, 40, 19},
                          // the engines' block edges: 16 and 32 rows (AMX tiles), 6 (AVX512-BF16), one past
                          {64, 32, 16}, {64, 64, 17}, {16, 48, 32}, {40, 80, 49}, {20, 16, 6}};
  for (const auto& s : shapes) {
    for (k::Activation act :
         {k::Activation::none, k::Activation::gelu_tanh, k::Activation::silu, k::Activation::gelu_erf,
          k::Activation::relu}) {
      for (int residuals = 0; residuals <= 2; ++residuals) {
        const k::index_t ldx = k::round_up(s.in, k::kPad) + 16, ldy = k::round_up(s.out, k::kPad) + 32;
        const auto w = random_vector(static_cast<std::size_t>(s.in) * s.out, 1.0f / std::sqrt(float(s.in)), gen);
        const auto b = random_vector(static_cast<std::size_t>(s.out), 0.3f, gen);
        const auto x = random_vector(static_cast<std::size_t>(s.rows * ldx), 1.0f, gen);
        const auto r1 = random_vector(static_cast<std::size_t>(s.rows * ldy), 1.0f, gen);
        const auto r2 = random_vector(static_cast<std::size_t>(s.rows * ldy), 1.0f, gen);
        const k::PackedLinear layer(w.data(), b.data(), s.out, s.in);
        std::vector<float> y = r2, ref = r2;  // residual 2 is added in place when residuals == 2
        k::LinearArgs a;
        a.layer = &layer;
        a.x = x.data();
        a.ldx = ldx;
        a.ldy = ldy;
        a.rows = s.rows;
        a.act = act;
        if (residuals >= 1) a.add1 = r1.data(), a.ld_add1 = ldy;
        a.y = y.data();
        if (residuals >= 2) a.add2 = y.data(), a.ld_add2 = ldy;
        kern().linear(a);
        a.y = ref.data();
        if (residuals >= 2) a.add2 = ref.data();
        st::emulated_cpu_kernels(Precision::bf16).linear(a);
        for (k::index_t r = 0; r < s.rows; ++r)
          for (int o = 0; o < s.out; ++o) {
            double magnitude = std::abs(b[o]);
            for (int i = 0; i < s.in; ++i)
              magnitude += std::abs(double(st::round_to_bf16(x[r * ldx + i])) *
                                    st::round_to_bf16(w[static_cast<std::size_t>(o) * s.in + i]));
            double scale = std::abs(ref[r * ldy + o]) + magnitude;
            if (residuals >= 1) scale += std::abs(r1[r * ldy + o]);
            if (residuals >= 2) scale += std::abs(r2[r * ldy + o]);
            const double tol = 1.2 * 2 * (s.in + 1) * u * magnitude + 8 * u * scale;
            ASSERT_LE(std::abs(double(y[r * ldy + o]) - ref[r * ldy + o]), tol)
                << "in " << s.in << " out " << s.out << " row " << r << " col " << o << " act " << int(act)
                << " residuals " << residuals;
          }
        // Padding columns: the bias padding is zero, so they stay finite (the kernels' layout rule).
        for (k::index_t r = 0; r < s.rows; ++r)
          for (k::index_t o = s.out; o < k::round_up(s.out, k::kPad); ++o) ASSERT_TRUE(std::isfinite(y[r * ldy + o]));
      }
    }
  }
}

// A BF16 weight is the nearest even of its float: one unit of BF16 (2^-8 relative) off would move an
// output by far more than the tolerance above, but the layout is also checked directly.
TEST_P(Bf16Linear, PacksTheWeightsRoundedInPairsOfInputs) {
  std::mt19937 gen(22);
  const int in = 37, out = 20;
  auto w = random_vector(static_cast<std::size_t>(in) * out, 2.0f, gen);
  w[5] = 1.0f + 0x1p-8f;  // a tie: rounds to even (1)
  const k::PackedLinear layer(w.data(), nullptr, out, in);
  const std::uint16_t* packed = layer.wt_bf16();
  ASSERT_NE(packed, nullptr);
  ASSERT_EQ(layer.wt_bf16(), packed);  // built once
  const int ld = layer.out_pad();
  for (int kk = 0; kk < layer.in_bf16_pad(); ++kk)
    for (int o = 0; o < ld; ++o) {
      const std::uint16_t bits = packed[(static_cast<std::size_t>(kk / 2) * ld + o) * 2 + kk % 2];
      const float expected = kk < in && o < out ? st::round_to_bf16(w[static_cast<std::size_t>(o) * in + kk]) : 0.0f;
      std::uint32_t expected_bits;
      std::memcpy(&expected_bits, &expected, sizeof expected_bits);
      ASSERT_EQ(bits, expected_bits >> 16) << "input " << kk << " output " << o;
    }
  EXPECT_EQ(packed[(static_cast<std::size_t>(2) * ld + 0) * 2 + 1], 0x3f80);  // w[5]: output 0, input 5 = pair 2, odd
}

// A row's result depends on that row alone (the MPI exactness rule): a block of 240 rows gives the bits of
// the rows computed one at a time; a NaN input stays in its row.
TEST_P(Bf16Linear, RowsAreIndependentOfTheirBlock) {
  std::mt19937 gen(23);
  const int in = 64, out = 64;
  const k::index_t rows = 240, ld = 64;
  const auto w = random_vector(in * out, 0.2f, gen), b = random_vector(out, 0.1f, gen);
  auto x = random_vector(static_cast<std::size_t>(rows * ld), 1.0f, gen);
  x[static_cast<std::size_t>(37 * ld + 5)] = std::numeric_limits<float>::quiet_NaN();
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
  for (k::index_t r = 0; r < rows; ++r)
    for (int o = 0; o < out; ++o) {
      const float va = all[static_cast<std::size_t>(r * ld + o)], vo = one[static_cast<std::size_t>(r * ld + o)];
      if (r == 37) {
        ASSERT_TRUE(std::isnan(va) && std::isnan(vo)) << "column " << o;
      } else {
        ASSERT_FALSE(std::isnan(va)) << "row " << r;
        ASSERT_EQ(std::memcmp(&va, &vo, sizeof va), 0) << "row " << r << " column " << o;
      }
    }
}

std::string engine_name(const ::testing::TestParamInfo<k::LinearEngine>& info) {
  return k::to_string(info.param);
}
INSTANTIATE_TEST_SUITE_P(Engine, Bf16Linear, ::testing::ValuesIn(available_engines()), engine_name);
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Bf16Linear);

// ---------------------------------------------------------------------------------------------------
// FLARE's golden models with bf16 on the CPU against the official float64 reference, next to FP32 and
// the emulation (the GPU's arithmetic): the table of share/docs/cpu-bf16.md.

double max_relative(const std::vector<float>& y, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    num = std::max(num, std::abs(double(y[i]) - ref[i]));
    den = std::max(den, std::abs(ref[i]));
  }
  return num / den;
}

std::vector<float> run_case(const st::GoldenCase& c, surrogate::Model& model, Precision precision, int threads,
                            bool reproducible) {
  surrogate::SelfComm comm;
  const auto layout = surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data());
  surrogate::RunOptions o;
  o.precision = precision;
  o.threads = threads;
  o.reproducible = reproducible;
  std::vector<float> out(static_cast<std::size_t>(c.points()) * c.out_dim, 0.0f);
  model.predict(comm, layout, c.features.data(), c.in_dim, out.data(), c.out_dim, o);
  return out;
}

// The emulation's bound of test_precision_emulation (measured worst 3.8e-2) holds for the CPU's bf16 too,
// and the CPU's error stays within twice the emulated one (the criterion of the GPU tensor-core test): the
// two differ only in the order of the FP32 sums, which moves a few activations across a BF16 rounding.
constexpr double kBf16Bound = 6e-2;

TEST(CpuBf16Flare, GoldenCasesAgainstTheOfficialFloat64Reference) {
  const auto engines = available_engines();
  if (engines.empty()) GTEST_SKIP() << "no BF16 engine on this CPU: " << k::bf16_unavailable_reason();
  std::printf("%-18s %6s | %9s | %9s", "case", "points", "fp32", "bf16 emul");
  for (k::LinearEngine e : engines) std::printf(" | bf16 %-6s", k::to_string(e));
  std::printf("   (max |y - ref| / max |ref|)\n");
  for (const std::string& name : st::golden_case_names()) {
    const st::GoldenCase c = st::load_golden_case(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
    const double fp32 = max_relative(run_case(c, *model, Precision::fp32, 1, false), c.reference);
    double emulated = 0;
    {
      st::ScopedPrecisionEmulation emulate(Precision::bf16, st::EmulatedKernels::linear);  // the CPU's bf16
      emulated = max_relative(run_case(c, *model, Precision::fp32, 1, false), c.reference);
    }
    std::printf("%-18s %6lld | %9.2e | %9.2e", name.c_str(), static_cast<long long>(c.points()), fp32, emulated);
    for (k::LinearEngine e : engines) {
      ::setenv("SURROGATE_CPU_BF16", k::to_string(e), 1);  // read by every cpu_bf16() call
      const double err = max_relative(run_case(c, *model, Precision::bf16, 1, false), c.reference);
      ::unsetenv("SURROGATE_CPU_BF16");
      std::printf(" | %11.2e", err);
      EXPECT_GT(err, fp32) << name << ": bf16 did not change the result";
      EXPECT_LE(err, kBf16Bound) << name;
      EXPECT_LE(err, 2 * emulated + 1e-5) << name << " " << k::to_string(e);
    }
    std::printf("\n");
  }
}

// In the reproducible mode the prediction does not depend on the thread count in bf16 either (the Linear
// layers are row-local): bitwise.
TEST(CpuBf16Flare, ReproducibleModeIsBitwiseIndependentOfThreads) {
  if (available_engines().empty()) GTEST_SKIP() << "no BF16 engine on this CPU: " << k::bf16_unavailable_reason();
  const st::GoldenCase c = st::load_golden_case("elasticity");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  const auto one = run_case(c, *model, Precision::bf16, 1, true);
  const auto three = run_case(c, *model, Precision::bf16, 3, true);
  ASSERT_EQ(one.size(), three.size());
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
}

// Where bf16 cannot run, the refusal names what is missing; tf32 never runs on the CPU; other families
// refuse bf16 on the CPU by name.
TEST(CpuBf16Flare, OtherFamiliesRefuseBf16OnTheCpu) {
  const auto model = surrogate::make_model(surrogate::ModelFile::read(st::data_dir() + "/hept/hept_example_small.h5"));
  EXPECT_FALSE(model->supports_cpu_bf16());
  surrogate::RunOptions o;
  o.precision = Precision::bf16;
  try {
    model->check_precision(o);
    ADD_FAILURE() << "bf16 accepted by a hept model on the CPU";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("the hept model computes in fp32 on the CPU"), std::string::npos) << e.what();
  }
}

TEST(CpuBf16Flare, RefusalsNameWhatIsMissing) {
  const st::GoldenCase c = st::load_golden_case(st::golden_case_names().front());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  EXPECT_TRUE(model->supports_cpu_bf16());
  surrogate::RunOptions o;
  o.precision = Precision::tf32;
  try {
    model->check_precision(o);
    ADD_FAILURE() << "tf32 accepted on the CPU";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("precision 'tf32' needs a CUDA device"), std::string::npos) << e.what();
  }
  o.precision = Precision::bf16;
  if (!available_engines().empty()) {
    EXPECT_NO_THROW(model->check_precision(o));
    ::setenv("SURROGATE_CPU_BF16", "avx", 1);
    try {
      model->check_precision(o);
      ADD_FAILURE() << "SURROGATE_CPU_BF16=avx accepted";
    } catch (const surrogate::Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected amx or avx512bf16"), std::string::npos) << e.what();
    }
    ::unsetenv("SURROGATE_CPU_BF16");
    return;
  }
  try {
    model->check_precision(o);
    ADD_FAILURE() << "bf16 accepted on a CPU without BF16 instructions";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("needs AVX512-BF16"), std::string::npos) << e.what();
  }
}

}  // namespace
