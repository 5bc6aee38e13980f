// Host-side parts of the S2 attention CUDA path (run, and must pass, without a GPU): the float32 error
// bound of the GPU tests (sphere_attention_reference.hpp) holds for the CPU operators on the GPU tests'
// cases and is not vacuous; the device operators refuse unsupported widths before touching a device; the
// kernels' launchers refuse bad arguments before launching. The GPU comparisons are in
// test_gpu_sphere_attention.cpp.
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

// Needs no device: the width checks come before any CUDA call.
TEST(SphereAttentionHost, RefusesWideHeadsBeforeTouchingTheDevice) {
  sphere::NeighborhoodAttentionS2Config c;
  c.in_channels = 72;
  c.num_heads = 1;
  c.nlat_in = c.nlat_out = 6;
  c.nlon_in = c.nlon_out = 12;
  std::mt19937 rng(1);
  c.k_channels = c.out_channels = 72;
  const sphere::AttentionS2Weights w = random_weights(72, 72, 72, rng);
  try {
    sphere::NeighborhoodAttentionS2Device gpu(c, w, 0);
    FAIL() << "head width 72 accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("64"), std::string::npos) << e.what();
  }
}

// Needs no device: the kernels' launchers check their arguments before launching.
TEST(SphereAttentionHost, KernelLaunchersRefuseBadArgumentsBeforeLaunching) {
  namespace cu = surrogate::kernels::cuda;
  cu::SphereAttentionArgs a;
  a.batch = 1;
  a.heads = 1;
  a.ek = cu::kMaxSphereHeadDim + 1;
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
}
