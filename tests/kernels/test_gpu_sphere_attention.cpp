// AttentionS2Device / NeighborhoodAttentionS2Device (the CUDA forward of the S2 attention operators)
// against the exact float64 result and against the CPU operators on random weights and inputs: self- and
// cross-attention, several grids, heads, head widths in every kernel bucket, qk-norm, bias, the three scale
// modes, explicit and default cutoffs, downsampling, empty neighbourhoods (NaN where the CPU gives NaN);
// bitwise run-to-run determinism; self-attention by nullptr equals passing the query as key and value,
// bitwise. Every test SKIPS when no CUDA device is visible.
//
// Tolerance: the per-element float32 error bound d_y of sphere_attention_reference.hpp (derived there;
// test_cuda_sphere_host.cpp checks, without a GPU, that the CPU operators stay within it):
// |y_gpu - y_exact| <= d_y and |y_gpu - y_cpu| <= 2 d_y.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "sphere_attention_reference.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace sphere = surrogate::sphere;
namespace st = surrogate::testing;

namespace {

using namespace sphere_cuda_test;

/// Uploads the inputs, runs `op.forward` twice (self-attention with nullptr key/value when t.self) and
/// returns the first output after checking the second is bitwise equal.
template <class Op>
std::vector<float> run_on_device(Op& op, const Case& t, const std::vector<float>& xq, const std::vector<float>& xk,
                                 const std::vector<float>& xv, std::size_t out_size) {
  namespace cu = surrogate::kernels::cuda;
  const cu::DeviceBuffer<float> dq = st::to_device(xq);
  cu::DeviceBuffer<float> dk, dv;
  if (!t.self) {
    dk = st::to_device(xk);
    dv = st::to_device(xv);
  }
  cu::DeviceBuffer<float> dy(out_size, st::test_device());
  cu::device_synchronize(st::test_device());  // the pageable uploads are complete
  cu::Stream stream(st::test_device());
  op.forward(t.batch, dq.data(), t.self ? nullptr : dk.data(), t.self ? nullptr : dv.data(), dy.data(), stream.get());
  stream.synchronize();
  const std::vector<float> first = st::to_host(dy.data(), out_size);
  cu::fill(dy.data(), out_size, 0.0f, stream.get());
  op.forward(t.batch, dq.data(), t.self ? nullptr : dk.data(), t.self ? nullptr : dv.data(), dy.data(), stream.get());
  stream.synchronize();
  const std::vector<float> second = st::to_host(dy.data(), out_size);
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), out_size * sizeof(float)))
      << t.name << ": two forwards of the same input differ (the kernels are meant to be deterministic)";
  if (t.self) {  // key = value = query given explicitly: the same result, bitwise
    op.forward(t.batch, dq.data(), dq.data(), dq.data(), dy.data(), stream.get());
    stream.synchronize();
    const std::vector<float> explicit_self = st::to_host(dy.data(), out_size);
    EXPECT_EQ(0, std::memcmp(first.data(), explicit_self.data(), out_size * sizeof(float))) << t.name;
  }
  return first;
}

/// The device forward against the exact result and the CPU forward of the same operator.
template <class Op, class DeviceOp>
void compare(const Case& t, const Op& cpu, DeviceOp& gpu, const sphere::AttentionS2Weights& w, std::mt19937& rng) {
  const Inputs in = random_inputs(t, rng);
  const std::size_t out_size = in.q.size() / static_cast<std::size_t>(t.cin) * static_cast<std::size_t>(t.cout);
  std::vector<float> y_cpu(out_size);
  cpu.forward(t.batch, in.q.data(), t.self ? nullptr : in.k.data(), t.self ? nullptr : in.v.data(), y_cpu.data());
  const std::vector<float> y_gpu = run_on_device(gpu, t, in.q, in.k, in.v, out_size);
  const Reference ref = reference(t, cpu, w, in);
  std::size_t nan_mismatch = 0, nan = 0;
  double err_exact = 0, err_cpu = 0, worst_cpu = 0;
  const double worst_exact = worst_ratio(y_gpu, ref, 1.0, &nan_mismatch, &err_exact);
  for (std::size_t i = 0; i < out_size; ++i) {
    nan += std::isnan(y_cpu[i]) ? 1 : 0;
    if (std::isnan(y_cpu[i]) || std::isnan(y_gpu[i])) {
      nan_mismatch += std::isnan(y_cpu[i]) != std::isnan(y_gpu[i]) ? 1 : 0;
      continue;
    }
    const double e = std::abs(static_cast<double>(y_gpu[i]) - y_cpu[i]);
    err_cpu = std::max(err_cpu, e);
    worst_cpu = std::max(worst_cpu, e / (2 * ref.bound[i]));
  }
  EXPECT_EQ(nan_mismatch, 0u) << t.name << ": NaN on one side only";
  EXPECT_LT(nan, out_size) << t.name << ": every output is NaN";
  EXPECT_LE(worst_exact, 1.0) << t.name << ": |gpu - exact| above the float32 bound (max |gpu - exact| " << err_exact << ")";
  EXPECT_LE(worst_cpu, 1.0) << t.name << ": |gpu - cpu| above twice the float32 bound (max |gpu - cpu| " << err_cpu << ")";
  std::printf("  %-46s max |gpu - exact| %.3g (%.3g of the bound), max |gpu - cpu| %.3g (%.3g of 2x), NaN %zu\n",
              t.name.c_str(), err_exact, worst_exact, err_cpu, worst_cpu, nan);
}

}  // namespace

TEST(SphereAttentionDevice, GlobalMatchesCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(2024);
  for (const Case& t : global_cases()) {
    const auto c = config_of<sphere::AttentionS2Config>(t);
    const sphere::AttentionS2Weights w = random_weights(t, rng);
    sphere::AttentionS2Device gpu(c, w, st::test_device());
    compare(t, gpu.host(), gpu, w, rng);
  }
}

TEST(SphereAttentionDevice, NeighborhoodMatchesCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(7);
  for (const Case& t : neighborhood_cases()) {
    const auto c = config_of<sphere::NeighborhoodAttentionS2Config>(t);
    const sphere::AttentionS2Weights w = random_weights(t, rng);
    sphere::NeighborhoodAttentionS2Device gpu(c, w, st::test_device());
    compare(t, gpu.host(), gpu, w, rng);
  }
}

namespace {
/// A device operator built on a CPU operator the caller keeps uploads that operator's weights (read back
/// from its packed copy) and gives, bitwise, what one built from the weights gives; host() is the given
/// operator.
template <class Config, class Cpu, class DeviceOp>
void check_built_on_cpu_operator(const std::vector<Case>& cases, std::mt19937& rng) {
  for (const Case& t : cases) {
    if (t.cin > 16 || t.nlat_in * t.nlon_in > 512) continue;  // the small cases: bias, none, qk-norm, both grids
    const auto c = config_of<Config>(t);
    const sphere::AttentionS2Weights w = random_weights(t, rng);
    const Cpu cpu(c, w);
    DeviceOp from_weights(c, w, st::test_device());
    DeviceOp on_cpu(cpu, st::test_device());
    EXPECT_EQ(&on_cpu.host(), &cpu) << t.name;
    const Inputs in = random_inputs(t, rng);
    const std::size_t out_size = in.q.size() / static_cast<std::size_t>(t.cin) * static_cast<std::size_t>(t.cout);
    const std::vector<float> a = run_on_device(from_weights, t, in.q, in.k, in.v, out_size);
    const std::vector<float> b = run_on_device(on_cpu, t, in.q, in.k, in.v, out_size);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), out_size * sizeof(float))) << t.name;
  }
}
}  // namespace

TEST(SphereAttentionDevice, BuiltOnACpuOperatorGivesTheSameBits) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(31);
  check_built_on_cpu_operator<sphere::AttentionS2Config, sphere::AttentionS2, sphere::AttentionS2Device>(global_cases(),
                                                                                                         rng);
  check_built_on_cpu_operator<sphere::NeighborhoodAttentionS2Config, sphere::NeighborhoodAttentionS2,
                              sphere::NeighborhoodAttentionS2Device>(neighborhood_cases(), rng);
}
