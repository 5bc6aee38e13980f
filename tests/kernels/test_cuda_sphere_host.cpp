// Host-side parts of the S2 attention CUDA path (run, and must pass, without a GPU): the float32 error
// bound of the GPU tests (sphere_attention_reference.hpp) holds for the CPU operators on the GPU tests'
// cases and is not vacuous; wide heads are not refused (only a missing device is, clearly); the kernels'
// launchers refuse bad arguments before launching. The GPU comparisons are in
// test_gpu_sphere_attention.cpp. Also the host side of DiscoConvS2Device / ResampleS2Device and their
// launchers (bad arguments refused before any CUDA call; a missing device refused clearly).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"
#include "sphere_attention_reference.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"
#include "sphere_grid_ops_cases.hpp"

namespace sphere = surrogate::sphere;

namespace {

sphere::AttentionS2Weights random_weights(int cin, int ck, int co, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, 0.2f);
  const auto fill = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = d(rng);
    return v;
  };
  const auto ucin = static_cast<std::size_t>(cin), uck = static_cast<std::size_t>(ck), uco = static_cast<std::size_t>(co);
  sphere::AttentionS2Weights w;
  w.q_weights = fill(uck * ucin);
  w.k_weights = fill(uck * ucin);
  w.v_weights = fill(uco * ucin);
  w.proj_weights = fill(uco * uco);
  w.q_bias = fill(uck);
  w.k_bias = fill(uck);
  w.v_bias = fill(uco);
  w.proj_bias = fill(uco);
  return w;
}

/// |cpu - exact| <= bound for every element of every case, and the bound is at most 1% of the largest
/// output: a wrong key, shift, quadrature weight, head or scale moves the outputs by far more. (The bound
/// is a worst case: the measured errors are 1e-4 to 1e-1 of it.)
template <class Op, class Config>
void check_bound(const std::vector<sphere_cuda_test::Case>& cases, std::uint32_t seed) {
  using namespace sphere_cuda_test;
  std::mt19937 rng(seed);
  for (const Case& t : cases) {
    const sphere::AttentionS2Weights w = sphere_cuda_test::random_weights(t, rng);
    const Op cpu(config_of<Config>(t), w);
    const Inputs in = random_inputs(t, rng);
    std::vector<float> y(in.q.size() / static_cast<std::size_t>(t.cin) * static_cast<std::size_t>(t.cout));
    cpu.forward(t.batch, in.q.data(), t.self ? nullptr : in.k.data(), t.self ? nullptr : in.v.data(), y.data());
    const Reference ref = reference(t, cpu, w, in);
    std::size_t nan_mismatch = 0;
    double err = 0, max_bound = 0, max_y = 0;
    const double worst = worst_ratio(y, ref, 1.0, &nan_mismatch, &err);
    for (std::size_t i = 0; i < y.size(); ++i)
      if (!std::isnan(ref.y[i])) {
        max_bound = std::max(max_bound, ref.bound[i]);
        max_y = std::max(max_y, std::abs(ref.y[i]));
      }
    EXPECT_EQ(nan_mismatch, 0u) << t.name;
    EXPECT_LE(worst, 1.0) << t.name << ": max |cpu - exact| " << err;
    EXPECT_LE(max_bound, 1e-2 * max_y) << t.name << ": the bound is too loose to catch errors";
    std::printf("  %-46s max |cpu - exact| %.3g, worst ratio to the bound %.3g, largest bound %.3g (max |y| %.3g)\n",
                t.name.c_str(), err, worst, max_bound, max_y);
  }
}

}  // namespace

TEST(SphereAttentionHost, CpuOperatorsStayWithinTheGpuTestsBound) {
  check_bound<sphere::AttentionS2, sphere::AttentionS2Config>(sphere_cuda_test::global_cases(), 11);
  check_bound<sphere::NeighborhoodAttentionS2, sphere::NeighborhoodAttentionS2Config>(
      sphere_cuda_test::neighborhood_cases(), 12);
}

// No head width or channel count is refused any more (wide heads run on the column-split kernels, channel
// counts above 256 on cuda::dense): a one-head NeighborhoodAttentionS2 of width 320 gets as far as the
// device; without a visible device that is the refusal, with Error(unsupported) naming the operator and
// the device (with a device it is constructed).
TEST(SphereAttentionHost, WideHeadsAreNotRefused) {
  namespace cu = surrogate::kernels::cuda;
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = c.k_channels = c.out_channels = 320;
  c.num_heads = 1;
  c.nlat_in = c.nlat_out = 6;
  c.nlon_in = c.nlon_out = 12;
  std::mt19937 rng(1);
  const sphere::AttentionS2Weights w = random_weights(320, 320, 320, rng);
  std::string why;
  if (cu::device_count(&why) > 0) {
    EXPECT_NO_THROW(sphere::NeighborhoodAttentionS2Device(c, w, 0));
    return;
  }
  try {
    sphere::NeighborhoodAttentionS2Device gpu(c, w, 0);
    FAIL() << "constructed without a visible CUDA device";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("NeighborhoodAttentionS2 (CUDA): CUDA device 0"), std::string::npos) << e.what();
  }
}

// Needs no device: the kernels' launchers check their arguments before launching.
TEST(SphereAttentionHost, KernelLaunchersRefuseBadArgumentsBeforeLaunching) {
  namespace cu = surrogate::kernels::cuda;
  cu::SphereAttentionArgs a;
  a.batch = 1;
  a.heads = 1;
  a.ek = 0;
  a.ev = 4;
  a.queries = 8;
  a.keys = 8;
  a.nlon_in = 4;
  EXPECT_THROW(cu::sphere_global_attention(a, nullptr), std::invalid_argument);
  a.ek = 4;
  a.ev = 0;
  EXPECT_THROW(cu::sphere_global_attention(a, nullptr), std::invalid_argument);
  a.ev = 4;
  a.keys = 6;  // not a multiple of nlon_in
  EXPECT_THROW(cu::sphere_global_attention(a, nullptr), std::invalid_argument);
  a.keys = 8;
  cu::SphereNeighbors n;
  n.nlat_out = 3;  // 3 x 4 output points, but queries = 8
  n.nlon_out = 4;
  EXPECT_THROW(cu::sphere_neighborhood_attention(a, n, nullptr), std::invalid_argument);
  n.nlat_out = 2;
  n.nlon_out = 3;  // does not divide nlon_in = 4
  a.queries = 6;
  EXPECT_THROW(cu::sphere_neighborhood_attention(a, n, nullptr), std::invalid_argument);
  // The SHT decoder's launchers (cuda_sphere_sht.hpp): bad sizes and missing arrays, before launching.
  const std::vector<double> twiddle(16, 0.0);
  std::vector<float> buffer(64, 0.0f);
  cu::ShtFourierArgs f;
  f.x = f.y = buffer.data();
  f.twiddle = twiddle.data();
  f.rows = 1;
  f.nlon = 8;
  f.channels = 2;
  f.ldx = f.ldy = 2;
  f.mmax = 4;
  f.modes = 6;  // > mmax and > nlon / 2 + 1
  EXPECT_THROW(cu::sht_fourier_analysis(f, nullptr), std::invalid_argument);
  f.modes = 4;
  f.ldx = 1;  // < channels
  EXPECT_THROW(cu::sht_fourier_analysis(f, nullptr), std::invalid_argument);
  f.mmax = 5;  // synthesis rows hold exactly `modes` orders
  EXPECT_THROW(cu::sht_fourier_synthesis(f, nullptr), std::invalid_argument);
  cu::ShtLegendreArgs l;
  l.x = l.y = buffer.data();
  l.batch = l.nlat = l.lmax = l.mmax = l.channels = 1;
  EXPECT_THROW(cu::sht_legendre_analysis(l, nullptr), std::invalid_argument);  // no table
  l.table = buffer.data();
  l.modes = 1;
  l.nyquist = 1;  // not below modes
  EXPECT_THROW(cu::sht_legendre_synthesis(l, nullptr), std::invalid_argument);
}

// Host side of DiscoConvS2Device / ResampleS2Device (no GPU needed): bad configurations are refused by the
// CPU operator's checks before any CUDA call; the launchers refuse bad sizes before launching; without a
// visible device the construction is refused with Error(unsupported) naming the operator and the device.
TEST(SphereGridOpsHost, DeviceOperatorsRefuseBadArgumentsAndAMissingDeviceClearly) {
  namespace cu = surrogate::kernels::cuda;
  namespace gt = sphere_grid_ops_test;
  sphere::DiscoConfig bad = gt::disco_cases().front().config;
  bad.groups = 2;  // 3 input channels
  try {
    sphere::DiscoConvS2Device op(bad, std::vector<float>(72, 0.1f), std::vector<float>(8, 0.0f));
    ADD_FAILURE() << "a DISCO configuration with in_channels not a multiple of groups was accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::invalid_argument) << e.what();
  }
  cu::GroupedLinearArgs l;
  l.in = 4;
  l.out = 2;
  l.rows = 10;
  l.ldx = 3;  // < in
  l.ldy = 2;
  EXPECT_THROW(cu::grouped_linear(l, nullptr), std::invalid_argument);
  cu::DiscoContractionArgs a;
  a.batch = 1;
  a.nlat_in = a.nlat_out = 4;
  a.nlon_in = 8;
  a.nlon_out = 3;  // does not divide nlon_in
  a.channels = 2;
  a.ldx = 2;
  a.ldy = 2;
  a.rows_end = 1;
  cu::DiscoTable tab;
  tab.kernel_size = 1;
  EXPECT_THROW(cu::disco_contraction(a, tab, nullptr), std::invalid_argument);
  a.nlon_out = 4;
  a.rows_end = 5;  // > batch * nlat_out
  EXPECT_THROW(cu::disco_contraction(a, tab, nullptr), std::invalid_argument);
  cu::ResampleArgs r;
  r.batch = 1;
  r.channels = 1;
  r.nlat_in = r.nlon_in = r.nlat_out = r.nlon_out = 4;
  cu::ResampleTables rt;
  rt.expand_poles = true;  // without the poles scratch
  EXPECT_THROW(cu::resample(r, rt, nullptr), std::invalid_argument);

  std::string why;
  if (cu::device_count(&why) > 0) GTEST_SKIP() << "a CUDA device is visible: the missing-device refusal is not testable";
  const gt::DiscoCase t = gt::disco_cases().front();
  const int K = sphere::filter_basis_size(t.config.basis, t.config.kernel_shape);
  try {
    sphere::DiscoConvS2Device op(t.config, std::vector<float>(static_cast<std::size_t>(8 * 3 * K), 0.1f),
                                 std::vector<float>(8, 0.0f));
    ADD_FAILURE() << "DiscoConvS2Device was constructed without a visible CUDA device";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("DiscoConvS2 (CUDA): CUDA device 0"), std::string::npos) << e.what();
  }
  try {
    sphere::ResampleS2Device op(gt::resample_cases().front().config);
    ADD_FAILURE() << "ResampleS2Device was constructed without a visible CUDA device";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("ResampleS2 (CUDA): CUDA device 0"), std::string::npos) << e.what();
  }
}
