// DiscoConvS2Device / ResampleS2Device (the CUDA forward of the DISCO convolution and of ResampleS2)
// against the CPU operators, on the cases of sphere_grid_ops_cases.hpp (every grid type, the seam, the
// poles, groups, bias) plus a case large enough to be processed in several chunks of rows. Every test
// SKIPS when no CUDA device is visible.
//
// Tolerances (u = 2^-24, gamma(n) = n u / (1 - n u)):
//  * DISCO, one-hot weights (each output = one y value + bias): BITWISE equal to the CPU operator. The
//    psi contraction is the CPU's float32 arithmetic in the CPU's order (product rounded, then added; nvcc
//    does not fuse __fmul_rn), and one sum of two terms rounds the same in any order.
//  * DISCO, random weights: |GPU - CPU| <= 2 gamma(J + 1 + n_z) (sum_j Y_j |w_j| + |b|) with Y_j the sum
//    of the absolute psi x terms of y_j (|y_j| <= (1 + gamma(n_z)) Y_j): y is the same on both, the two
//    linear layers sum the same J products and the bias in different orders (gamma(J + 1) each). Also
//    |GPU - float64| <= gamma(J + 1 + n_z) (sum_j Y_j |w_j| + |b|) (n_z: the largest (t, k) group).
//  * ResampleS2, bilinear: BITWISE equal to the CPU operator (same float32 operations, fmaf for
//    torch.lerp, double pole sums, IEEE double division).
//  * ResampleS2, bilinear-spherical: outputs that do not read a pole row BITWISE equal; those that do
//    within the effect of the device's sinf/cosf (CUDA: <= 2 ulp) and atan2f (<= 3 ulp) against glibc's
//    (< 1 ulp): each mean S, C of the pole row differs by <= 3 * 2^-24 (terms) + 2^-24 (its rounding to
//    float), so P = atan2(S, C) by <= 8 * 2^-24 / rho (atan2's sensitivity to (S, C) is 1/rho,
//    rho = sqrt(S^2 + C^2)) plus 4 ulp(pi) of the two atan2f; the two interpolation steps move an input
//    difference by at most its size (weights in [0, 1]) and add a few roundings of the output. Tolerance:
//    12 * 2^-24 / rho + 6 ulp(pi) + 4 * 2^-23 (|out| + 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "sphere_grid_ops_cases.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"

namespace sp = surrogate::sphere;
namespace st = surrogate::testing;
namespace cu = surrogate::kernels::cuda;

namespace {

using namespace sphere_grid_ops_test;

/// Runs op.forward twice on the device (the second into a refilled buffer) and returns the first output
/// after checking both are bitwise equal.
template <class Forward>
std::vector<float> run_twice(std::size_t out_size, const std::string& name, Forward&& forward) {
  cu::DeviceBuffer<float> dy(out_size, st::test_device());
  cu::Stream stream(st::test_device());
  cu::fill(dy.data(), out_size, -7.0f, stream.get());
  forward(dy.data(), stream.get());
  stream.synchronize();
  const std::vector<float> first = st::to_host(dy.data(), out_size);
  cu::fill(dy.data(), out_size, -9.0f, stream.get());
  forward(dy.data(), stream.get());
  stream.synchronize();
  const std::vector<float> second = st::to_host(dy.data(), out_size);
  EXPECT_EQ(0, std::memcmp(first.data(), second.data(), out_size * sizeof(float)))
      << name << ": two forwards of the same input differ (the kernels are meant to be deterministic)";
  return first;
}

std::vector<float> disco_on_device(const sp::DiscoConfig& c, const std::vector<float>& weight,
                                   const std::vector<float>& bias, int batch, const std::vector<float>& x,
                                   const std::string& name) {
  sp::DiscoConvS2Device op(c, weight, bias, nullptr, st::test_device());
  const cu::DeviceBuffer<float> dx = st::to_device(x);
  cu::device_synchronize(st::test_device());
  const std::size_t out_size = static_cast<std::size_t>(batch) * static_cast<std::size_t>(c.nlat_out) *
                               static_cast<std::size_t>(c.nlon_out) * static_cast<std::size_t>(c.out_channels);
  return run_twice(out_size, name, [&](float* y, cudaStream_t s) { op.forward(batch, dx.data(), y, s); });
}

/// The cases of the emulated test plus one whose rows do not fit one chunk of scratch (decoder-like: the
/// same 65 x 128 equiangular grid, 64 channels, (5, 4) piecewise linear: 9 * 64 * 128 floats of y per
/// (sample, latitude) row, 227 rows per chunk of kDiscoScratchFloats; 4 samples = 260 rows, two chunks).
std::vector<DiscoCase> gpu_disco_cases() {
  std::vector<DiscoCase> cases = disco_cases();
  const double pi = 3.14159265358979323846;
  cases.push_back({"decoder_like_65x128_two_chunks",
                   disco_config(64, 3, 65, 128, sp::Grid::equiangular, 65, 128, sp::Grid::equiangular, {5, 4},
                                sp::FilterBasis::piecewise_linear, 1, true, 6 * 0.5 * pi / 32),
                   4});
  return cases;
}

TEST(SphereGridOpsDevice, DiscoOneHotWeightsGiveTheCpuOutputBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(21);
  for (const DiscoCase& t : gpu_disco_cases()) {
    const sp::DiscoConfig& c = t.config;
    const int K = sp::filter_basis_size(c.basis, c.kernel_shape), cg = c.in_channels / c.groups;
    std::vector<float> weight(static_cast<std::size_t>(c.out_channels * cg * K), 0.0f);
    std::uniform_int_distribution<int> pick(0, cg * K - 1);
    for (int o = 0; o < c.out_channels; ++o) weight[static_cast<std::size_t>(o * cg * K + pick(rng))] = 1.0f;
    const std::vector<float> bias =
        c.bias ? random_vector(static_cast<std::size_t>(c.out_channels), rng, -0.5f, 0.5f) : std::vector<float>{};
    const Inputs in = make_inputs(c, t.batch, rng);
    const sp::DiscoConvS2 cpu_op(c, weight, bias, nullptr, sp::DiscoOrder::gather_first);  // the device's order
    std::vector<float> cpu(static_cast<std::size_t>(t.batch) * c.nlat_out * c.nlon_out * c.out_channels);
    cpu_op.forward(t.batch, in.x.data(), cpu.data());
    const std::vector<float> gpu = disco_on_device(c, weight, bias, t.batch, in.x, t.name);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i)
      if (std::memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0) ++differ;
    EXPECT_EQ(differ, 0u) << t.name << ": " << differ << " of " << cpu.size() << " outputs differ from the CPU";
  }
}

TEST(SphereGridOpsDevice, DiscoRandomWeightsMatchTheCpuAndFloat64WithinTheBound) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(22);
  for (const DiscoCase& t : gpu_disco_cases()) {
    const sp::DiscoConfig& c = t.config;
    const int K = sp::filter_basis_size(c.basis, c.kernel_shape), cg = c.in_channels / c.groups,
              og = c.out_channels / c.groups, J = K * cg;
    const std::vector<float> weight = random_vector(static_cast<std::size_t>(c.out_channels * cg * K), rng, -1.0f, 1.0f);
    const std::vector<float> bias =
        c.bias ? random_vector(static_cast<std::size_t>(c.out_channels), rng, -0.5f, 0.5f) : std::vector<float>{};
    const Inputs in = make_inputs(c, t.batch, rng);
    const sp::DiscoConvS2 cpu_op(c, weight, bias, nullptr, sp::DiscoOrder::gather_first);  // the device's order
    std::vector<float> cpu(static_cast<std::size_t>(t.batch) * c.nlat_out * c.nlon_out * c.out_channels);
    cpu_op.forward(t.batch, in.x.data(), cpu.data());
    const std::vector<float> gpu = disco_on_device(c, weight, bias, t.batch, in.x, t.name);
    const ContractionReference ref = contraction_reference(cpu_op, t.batch, in.x);
    const std::size_t width = static_cast<std::size_t>(K) * static_cast<std::size_t>(c.in_channels);
    const std::size_t rows = static_cast<std::size_t>(t.batch) * c.nlat_out * c.nlon_out;
    double worst_cpu = 0, worst_exact = 0;
    for (std::size_t r = 0; r < rows; ++r)
      for (int o = 0; o < c.out_channels; ++o) {
        const int g = o / og;
        double s = c.bias ? std::fabs(bias[static_cast<std::size_t>(o)]) : 0.0, exact = c.bias ? bias[static_cast<std::size_t>(o)] : 0.0;
        int nz = 0;
        for (int ch = 0; ch < cg; ++ch)
          for (int k = 0; k < K; ++k) {
            const std::size_t j = r * width + static_cast<std::size_t>(g * J + k * cg + ch);
            const double w = weight[static_cast<std::size_t>((o * cg + ch) * K + k)];
            s += ref.y_abs[j] * std::fabs(w);
            exact += ref.y64[j] * w;
            nz = std::max(nz, ref.n_terms[j]);
          }
        const std::size_t i = r * static_cast<std::size_t>(c.out_channels) + static_cast<std::size_t>(o);
        const double to_cpu = std::fabs(static_cast<double>(gpu[i]) - cpu[i]), bound_cpu = 2.0 * gamma(J + 1 + nz) * s;
        const double to_exact = std::fabs(gpu[i] - exact), bound_exact = gamma(J + 1 + nz) * s;
        worst_cpu = std::max(worst_cpu, bound_cpu > 0 ? to_cpu / bound_cpu : to_cpu);
        worst_exact = std::max(worst_exact, bound_exact > 0 ? to_exact / bound_exact : to_exact);
        ASSERT_LE(to_cpu, bound_cpu) << t.name << ": output " << i << " GPU " << gpu[i] << ", CPU " << cpu[i];
        ASSERT_LE(to_exact, bound_exact) << t.name << ": output " << i << " GPU " << gpu[i] << ", float64 " << exact;
      }
    std::printf("  %-36s |GPU - CPU| <= %.3f, |GPU - float64| <= %.3f of their bounds\n", t.name.c_str(), worst_cpu,
                worst_exact);
  }
}

TEST(SphereGridOpsDevice, ResampleMatchesTheCpuBitwiseAndAtSphericalPolesWithinTheLibmBound) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(23);
  const double ulp_pi = std::ldexp(1.0, -22);
  for (const ResampleCase& t : resample_cases()) {
    const sp::ResampleConfig& c = t.config;
    const bool spherical = c.mode == sp::ResampleMode::bilinear_spherical;
    const float pi = static_cast<float>(3.14159265358979323846);
    const std::vector<float> x = random_vector(static_cast<std::size_t>(t.batch * c.nlat_in * c.nlon_in * t.channels),
                                               rng, spherical ? -pi : -2.0f, spherical ? pi : 2.0f);
    sp::ResampleS2Device op(c, st::test_device());
    const std::size_t n_out = static_cast<std::size_t>(t.batch * c.nlat_out * c.nlon_out * t.channels);
    std::vector<float> cpu(n_out);
    op.host().forward(t.batch, t.channels, x.data(), cpu.data());
    const cu::DeviceBuffer<float> dx = st::to_device(x);
    cu::device_synchronize(st::test_device());
    const std::vector<float> gpu =
        run_twice(n_out, t.name, [&](float* y, cudaStream_t s) { op.forward(t.batch, t.channels, dx.data(), y, s); });
    // The circular means of the pole rows (float64 here) give rho per (sample, side, channel).
    std::size_t differ = 0, pole_outputs = 0;
    double worst = 0;
    for (std::size_t i = 0; i < n_out; ++i) {
      const std::size_t ch = i % static_cast<std::size_t>(t.channels);
      const std::size_t p = (i / static_cast<std::size_t>(t.channels)) % static_cast<std::size_t>(c.nlat_out * c.nlon_out);
      const std::size_t b = i / (static_cast<std::size_t>(t.channels) * static_cast<std::size_t>(c.nlat_out * c.nlon_out));
      const int lat = static_cast<int>(p / static_cast<std::size_t>(c.nlon_out));
      const int r0 = op.host().lat_index()[static_cast<std::size_t>(lat)];
      const bool north = op.host().expand_poles() && r0 == 0;
      const bool south = op.host().expand_poles() && r0 + 1 == c.nlat_in + 1;
      if (!spherical || !(north || south)) {
        if (std::memcmp(&cpu[i], &gpu[i], sizeof(float)) != 0) ++differ;
        continue;
      }
      ++pole_outputs;
      const std::size_t row = north ? 0 : static_cast<std::size_t>(c.nlat_in - 1);
      double sn = 0, cs = 0;
      for (int lon = 0; lon < c.nlon_in; ++lon) {
        const float v = x[((b * static_cast<std::size_t>(c.nlat_in) + row) * static_cast<std::size_t>(c.nlon_in) +
                           static_cast<std::size_t>(lon)) * static_cast<std::size_t>(t.channels) + ch];
        sn += std::sin(static_cast<double>(v));
        cs += std::cos(static_cast<double>(v));
      }
      const double rho = std::hypot(sn, cs) / c.nlon_in;
      const double bound = 12.0 * std::ldexp(1.0, -24) / rho + 6.0 * ulp_pi +
                           4.0 * std::ldexp(std::fabs(cpu[i]) + 1.0, -23);
      const double err = std::fabs(static_cast<double>(gpu[i]) - cpu[i]);
      worst = std::max(worst, err / bound);
      EXPECT_LE(err, bound) << t.name << ": output " << i << " (reads a pole row) GPU " << gpu[i] << ", CPU " << cpu[i];
    }
    EXPECT_EQ(differ, 0u) << t.name << ": " << differ << " of " << n_out - pole_outputs
                          << " outputs that read no spherical pole row differ from the CPU";
    if (pole_outputs) std::printf("  %-48s pole outputs within %.3f of the libm bound\n", t.name.c_str(), worst);
  }
}

/// A 9 x 16 Legendre-Gauss grid onto itself: the identity resampling.
sp::ResampleConfig identity_9x16() {
  sp::ResampleConfig c;
  c.nlat_in = c.nlat_out = 9;
  c.nlon_in = c.nlon_out = 16;
  c.grid_in = c.grid_out = sp::Grid::legendre_gauss;
  return c;
}

TEST(SphereGridOpsDevice, ResampleOnTheSameGridCopies) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(24);
  sp::ResampleS2Device op(identity_9x16(), st::test_device());
  ASSERT_TRUE(op.host().identity());
  const std::vector<float> x = random_vector(2 * 9 * 16 * 5, rng, -1.0f, 1.0f);
  const cu::DeviceBuffer<float> dx = st::to_device(x);
  cu::device_synchronize(st::test_device());
  const std::vector<float> gpu =
      run_twice(x.size(), "identity", [&](float* y, cudaStream_t s) { op.forward(2, 5, dx.data(), y, s); });
  EXPECT_EQ(0, std::memcmp(x.data(), gpu.data(), x.size() * sizeof(float)));
}

// cudaMemcpyAsync and the kernels need disjoint buffers (the host backend's memmove would hide an overlap).
TEST(SphereGridOpsDevice, ResampleRunsInPlaceOnlyAsTheIdentityOfTheSameRows) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(25);
  sp::ResampleS2Device op(identity_9x16(), st::test_device());
  const std::vector<float> x = random_vector(2 * 9 * 16 * 5, rng, -1.0f, 1.0f);
  cu::DeviceBuffer<float> dx = st::to_device(x);
  op.forward(2, 5, dx.data(), dx.data(), nullptr);
  cu::device_synchronize(st::test_device());
  EXPECT_EQ(0, std::memcmp(x.data(), st::to_host(dx.data(), x.size()).data(), x.size() * sizeof(float)));
  // A narrower output band in the same buffer overlaps its input rows.
  EXPECT_THROW(op.forward_rows(2, 5, dx.data(), 0, 9, dx.data(), 2, 7, nullptr), surrogate::Error);
  EXPECT_THROW(op.forward_rows(2, 5, dx.data(), 0, 9, dx.data() + 16 * 5, 0, 9, nullptr), surrogate::Error);
  // A resampling between two grids never runs in place.
  sp::ResampleS2Device resample(resample_cases().front().config, st::test_device());
  EXPECT_THROW(resample.forward(1, 1, dx.data(), dx.data(), nullptr), surrogate::Error);
}

TEST(SphereGridOpsDevice, BadForwardArgumentsAreRefused) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const DiscoCase t = disco_cases().front();
  const int K = sp::filter_basis_size(t.config.basis, t.config.kernel_shape);
  sp::DiscoConvS2Device disco(t.config, std::vector<float>(static_cast<std::size_t>(8 * 3 * K), 0.1f),
                              std::vector<float>(8, 0.0f), nullptr, st::test_device());
  float dummy = 0;
  EXPECT_THROW(disco.forward(-1, &dummy, &dummy, nullptr), surrogate::Error);
  EXPECT_THROW(disco.forward(1, nullptr, &dummy, nullptr), surrogate::Error);
  sp::ResampleS2Device resample(resample_cases().front().config, st::test_device());
  EXPECT_THROW(resample.forward(0, 1, &dummy, &dummy, nullptr), surrogate::Error);
  EXPECT_THROW(resample.forward(1, 0, &dummy, &dummy, nullptr), surrogate::Error);
}

}  // namespace

// Device operators built on CPU operators the caller keeps (a model's device forward builds them so):
// the same bits as the ones built from the configuration and weights, whatever order the CPU operator
// runs in (the device reads its table and its weights, read back exactly), and host() is that operator.
TEST(SphereGridOpsDevice, BuiltOnACpuOperatorGivesTheSameBits) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 rng(24);
  for (const DiscoCase& t : disco_cases()) {
    const sp::DiscoConfig& c = t.config;
    const int K = sp::filter_basis_size(c.basis, c.kernel_shape), cg = c.in_channels / c.groups;
    const std::vector<float> weight = random_vector(static_cast<std::size_t>(c.out_channels * cg * K), rng, -1.0f, 1.0f);
    const std::vector<float> bias =
        c.bias ? random_vector(static_cast<std::size_t>(c.out_channels), rng, -0.5f, 0.5f) : std::vector<float>{};
    const Inputs in = make_inputs(c, t.batch, rng);
    const std::vector<float> expected = disco_on_device(c, weight, bias, t.batch, in.x, t.name);
    for (const sp::DiscoOrder order : {sp::DiscoOrder::gather_first, sp::DiscoOrder::weights_first}) {
      const sp::DiscoConvS2 cpu(c, weight, bias, nullptr, order);
      sp::DiscoConvS2Device op(cpu, st::test_device());
      EXPECT_EQ(&op.host(), &cpu) << t.name;
      const cu::DeviceBuffer<float> dx = st::to_device(in.x);
      cu::device_synchronize(st::test_device());
      const std::vector<float> got =
          run_twice(expected.size(), t.name, [&](float* y, cudaStream_t s) { op.forward(t.batch, dx.data(), y, s); });
      EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), expected.size() * sizeof(float)))
          << t.name << (order == sp::DiscoOrder::gather_first ? ", gather first" : ", weights first");
    }
  }
  for (const ResampleCase& t : resample_cases()) {
    const sp::ResampleConfig& c = t.config;
    const std::vector<float> x =
        random_vector(static_cast<std::size_t>(t.batch * c.nlat_in * c.nlon_in * t.channels), rng, -2.0f, 2.0f);
    const std::size_t n_out = static_cast<std::size_t>(t.batch * c.nlat_out * c.nlon_out * t.channels);
    const cu::DeviceBuffer<float> dx = st::to_device(x);
    cu::device_synchronize(st::test_device());
    sp::ResampleS2Device own(c, st::test_device());
    const sp::ResampleS2 cpu(c);
    sp::ResampleS2Device on_cpu(cpu, st::test_device());
    EXPECT_EQ(&on_cpu.host(), &cpu) << t.name;
    const auto run = [&](sp::ResampleS2Device& op) {
      return run_twice(n_out, t.name, [&](float* y, cudaStream_t s) { op.forward(t.batch, t.channels, dx.data(), y, s); });
    };
    const std::vector<float> a = run(own), b = run(on_cpu);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), n_out * sizeof(float))) << t.name;
  }
}
