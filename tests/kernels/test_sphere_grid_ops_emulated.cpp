// The device code of the DISCO convolution and ResampleS2 kernels (kernels/cuda/sphere_grid_ops_kernels.cuh),
// unchanged, run on the CPU through the host emulation of the CUDA constructs they use
// (cuda_host_emulation.hpp), against the CPU operators (DiscoConvS2, ResampleS2) on small grids: every
// grid type, the seam (shifted longitudes wrapping past nlon_in, nlon_out not dividing nlon_in for the
// resampling), the poles (cutoffs reaching over the pole, the pole expansion), groups, bias, several
// samples, chunks of rows, padded input rows. Labels unit;cuda, CUDA builds, no GPU needed. This checks the
// kernels' indexing and arithmetic, not nvcc's code nor the hardware.
//
// What is compared, and why these tolerances:
//  * DISCO with "one-hot" weights (each output selects one (c, k) of its group, weight 1, other weights 0):
//    every output is y + bias with one rounding whatever the summation order of the linear layer, so the
//    emulated device output must equal the CPU operator's BITWISE: this pins the psi contraction to the
//    CPU's arithmetic (table order, float32, product then sum).
//  * the contraction y against a float64 evaluation from the ORIGINAL (unregrouped) table with psi rounded
//    to float32: |y - y64| <= gamma(n_z) sum_z |psi_z x_z| (n_z terms summed in float32, u = 2^-24).
//  * DISCO with random weights: the device's linear layer (fmaf, j ascending, bias last) and the CPU's
//    packed kernel each lie within gamma(J + 1) (sum_j |y_j w_j| + |b|) of the exact product of the same y
//    (J = K * in_channels/groups terms, one more rounding for the bias), hence
//    |device - CPU| <= 2 gamma(J + 1) (sum_j |y_j w_j| + |b|).
//  * ResampleS2, both modes: the same operations in the same order as resample.cpp (float32 lerp as one
//    fmaf, the shortest-arc form without contraction, double pole sums, host sinf/cosf/atan2f here):
//    BITWISE equal to the CPU operator.
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel source below

#include "sphere_grid_ops_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"  // disco_segments, disco_grouped_weight (host code)
#include "surrogate/sphere/resample.hpp"
#include "sphere_grid_ops_cases.hpp"

namespace cu = surrogate::kernels::cuda;
namespace gk = surrogate::kernels::cuda::sphere_grid_kernels;
namespace sp = surrogate::sphere;
using surrogate::kernels::index_t;

namespace {

using namespace sphere_grid_ops_test;


/// The emulated device forward: the contraction and the grouped linear layer over the (sample, output
/// latitude) rows in two chunks (as DiscoConvS2Device::forward, which chunks by scratch size). x rows have
/// stride ldx. Returns out (batch * Po x out_channels); y (batch * nlat_out * nlon_out x K * Cin) in *y_all.
std::vector<float> emulated_disco(const sp::DiscoConvS2& op, const std::vector<float>& weight,
                                  const std::vector<float>& bias, int batch, const std::vector<float>& x, index_t ldx,
                                  std::vector<float>* y_all) {
  const sp::DiscoConfig& c = op.config();
  const int K = op.kernel_size();
  const sp::DiscoSegments s = sp::disco_segments(op.table(), K);
  const std::vector<float> w = sp::disco_grouped_weight(c, K, weight);
  cu::DiscoTable table;
  table.segment = s.segment.data();
  table.lat_in = s.lat_in.data();
  table.lon_in = s.lon_in.data();
  table.value = s.value.data();
  table.kernel_size = K;
  const index_t width = static_cast<index_t>(K) * c.in_channels, rows = static_cast<index_t>(batch) * c.nlat_out;
  const index_t chunk = (rows + 1) / 2;
  std::vector<float> out(static_cast<std::size_t>(rows * c.nlon_out * c.out_channels), -7.0f);
  y_all->assign(static_cast<std::size_t>(rows * c.nlon_out * width), -7.0f);
  for (index_t r0 = 0; r0 < rows; r0 += chunk) {
    const index_t r1 = std::min(rows, r0 + chunk);
    std::vector<float> y(static_cast<std::size_t>((r1 - r0) * c.nlon_out * width), -9.0f);
    cu::DiscoContractionArgs a;
    a.x = x.data();
    a.ldx = ldx;
    a.y = y.data();
    a.ldy = width;
    a.batch = batch;
    a.nlat_in = c.nlat_in;
    a.nlon_in = c.nlon_in;
    a.nlat_out = c.nlat_out;
    a.nlon_out = c.nlon_out;
    a.channels = c.in_channels;
    a.groups = c.groups;
    a.rows_begin = r0;
    a.rows_end = r1;
    const dim3 grid(static_cast<unsigned>((c.nlon_out * c.in_channels + gk::kThreads - 1) / gk::kThreads),
                    static_cast<unsigned>(r1 - r0));
    cuda_host_emulation::launch(grid, gk::kThreads, [&] { gk::disco_contraction_kernel(a, table); });
    cu::GroupedLinearArgs l;
    l.x = y.data();
    l.ldx = width;
    l.weight = w.data();
    l.bias = c.bias ? bias.data() : nullptr;
    l.y = out.data() + r0 * c.nlon_out * c.out_channels;
    l.ldy = c.out_channels;
    l.rows = (r1 - r0) * c.nlon_out;
    l.in = static_cast<int>(width / c.groups);
    l.out = c.out_channels / c.groups;
    l.groups = c.groups;
    const dim3 lgrid(static_cast<unsigned>((l.rows + gk::kTileRows - 1) / gk::kTileRows),
                     static_cast<unsigned>((l.out + gk::kTileOut - 1) / gk::kTileOut), static_cast<unsigned>(l.groups));
    cuda_host_emulation::launch(lgrid, gk::kThreads, [&] { gk::grouped_linear_kernel(l); });
    std::copy(y.begin(), y.end(), y_all->begin() + r0 * c.nlon_out * width);
  }
  return out;
}

TEST(SphereDiscoEmulated, OneHotWeightsGiveTheCpuOutputBitwise) {
  std::mt19937 rng(11);
  for (const DiscoCase& t : disco_cases()) {
    const sp::DiscoConfig& c = t.config;
    const int K = sp::filter_basis_size(c.basis, c.kernel_shape), cg = c.in_channels / c.groups;
    std::vector<float> weight(static_cast<std::size_t>(c.out_channels * cg * K), 0.0f);
    std::uniform_int_distribution<int> pick(0, cg * K - 1);
    for (int o = 0; o < c.out_channels; ++o) weight[static_cast<std::size_t>(o * cg * K + pick(rng))] = 1.0f;
    const std::vector<float> bias =
        c.bias ? random_vector(static_cast<std::size_t>(c.out_channels), rng, -0.5f, 0.5f) : std::vector<float>{};
    const sp::DiscoConvS2 op(c, weight, bias, nullptr, sp::DiscoOrder::gather_first);  // the device's order
    const Inputs in = make_inputs(c, t.batch, rng);
    std::vector<float> cpu(static_cast<std::size_t>(t.batch) * c.nlat_out * c.nlon_out * c.out_channels);
    op.forward(t.batch, in.x.data(), cpu.data());
    std::vector<float> y;
    const std::vector<float> dev = emulated_disco(op, weight, bias, t.batch, in.x_padded, in.ldx, &y);
    std::size_t differ = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i)
      if (std::memcmp(&cpu[i], &dev[i], sizeof(float)) != 0) ++differ;
    EXPECT_EQ(differ, 0u) << t.name << ": " << differ << " of " << cpu.size() << " outputs differ from the CPU operator";
  }
}

TEST(SphereDiscoEmulated, ContractionMatchesTheTableInFloat64AndRandomWeightsTheCpuWithinTheBound) {
  std::mt19937 rng(12);
  for (const DiscoCase& t : disco_cases()) {
    const sp::DiscoConfig& c = t.config;
    const int K = sp::filter_basis_size(c.basis, c.kernel_shape), cg = c.in_channels / c.groups,
              og = c.out_channels / c.groups;
    const std::vector<float> weight = random_vector(static_cast<std::size_t>(c.out_channels * cg * K), rng, -1.0f, 1.0f);
    const std::vector<float> bias =
        c.bias ? random_vector(static_cast<std::size_t>(c.out_channels), rng, -0.5f, 0.5f) : std::vector<float>{};
    const sp::DiscoConvS2 op(c, weight, bias, nullptr, sp::DiscoOrder::gather_first);  // the device's order
    const Inputs in = make_inputs(c, t.batch, rng);
    std::vector<float> cpu(static_cast<std::size_t>(t.batch) * c.nlat_out * c.nlon_out * c.out_channels);
    op.forward(t.batch, in.x.data(), cpu.data());
    std::vector<float> y;
    const std::vector<float> dev = emulated_disco(op, weight, bias, t.batch, in.x_padded, in.ldx, &y);

    const ContractionReference ref = contraction_reference(op, t.batch, in.x);
    const index_t width = static_cast<index_t>(K) * c.in_channels, po = static_cast<index_t>(c.nlat_out) * c.nlon_out;
    double worst = 0;
    for (std::size_t i = 0; i < y.size(); ++i) {
      const double bound = ref.bound(i);
      const double err = std::fabs(y[i] - ref.y64[i]);
      worst = std::max(worst, bound > 0 ? err / bound : err);
      ASSERT_LE(err, bound) << t.name << ": y[" << i << "] = " << y[i] << ", float64 " << ref.y64[i];
    }
    // The output against the CPU operator within 2 (J + 1) u (sum |y w| + |b|).
    double worst_out = 0;
    const int J = K * cg;
    for (index_t r = 0; r < t.batch * po; ++r)
      for (int o = 0; o < c.out_channels; ++o) {
        const int g = o / og;
        double s = c.bias ? std::fabs(bias[static_cast<std::size_t>(o)]) : 0.0;
        for (int ch = 0; ch < cg; ++ch)
          for (int k = 0; k < K; ++k)
            s += std::fabs(static_cast<double>(y[static_cast<std::size_t>(r * width + g * J + k * cg + ch)]) *
                           weight[static_cast<std::size_t>((o * cg + ch) * K + k)]);
        const double bound = 2.0 * gamma(J + 1) * s;
        const auto i = static_cast<std::size_t>(r * c.out_channels + o);
        const double err = std::fabs(static_cast<double>(dev[i]) - cpu[i]);
        worst_out = std::max(worst_out, bound > 0 ? err / bound : err);
        ASSERT_LE(err, bound) << t.name << ": output " << i << " device " << dev[i] << ", CPU " << cpu[i];
      }
    std::printf("%s: contraction error <= %.3f of its bound, output vs CPU <= %.3f of its bound\n", t.name.c_str(), worst,
                worst_out);
  }
}

// ---------------------------------------------------------------------------------------------------

TEST(SphereResampleEmulated, BothModesGiveTheCpuOutputBitwise) {
  std::mt19937 rng(13);
  for (const ResampleCase& t : resample_cases()) {
    const sp::ResampleS2 op(t.config);
    ASSERT_FALSE(op.identity()) << t.name;
    const sp::ResampleConfig& c = t.config;
    const bool spherical = c.mode == sp::ResampleMode::bilinear_spherical;
    const float pi = static_cast<float>(3.14159265358979323846);
    const std::vector<float> x = random_vector(static_cast<std::size_t>(t.batch * c.nlat_in * c.nlon_in * t.channels),
                                               rng, spherical ? -pi : -2.0f, spherical ? pi : 2.0f);
    const std::size_t n_out = static_cast<std::size_t>(t.batch * c.nlat_out * c.nlon_out * t.channels);
    std::vector<float> cpu(n_out), dev(n_out, -7.0f), poles(static_cast<std::size_t>(t.batch * 2 * t.channels), -5.0f);
    op.forward(t.batch, t.channels, x.data(), cpu.data());
    cu::ResampleTables tab;
    tab.lat_index = op.lat_index().data();
    tab.lat_weight = op.lat_weight().data();
    tab.lon_left = op.lon_left().data();
    tab.lon_right = op.lon_right().data();
    tab.lon_weight = op.lon_weight().data();
    tab.expand_poles = op.expand_poles();
    tab.spherical = spherical;
    cu::ResampleArgs a;
    a.x = x.data();
    a.y = dev.data();
    a.poles = poles.data();
    a.batch = t.batch;
    a.channels = t.channels;
    a.nlat_in = c.nlat_in;
    a.nlon_in = c.nlon_in;
    a.nlat_out = c.nlat_out;
    a.nlon_out = c.nlon_out;
    const auto blocks = [](std::size_t n) { return dim3(static_cast<unsigned>((n + gk::kThreads - 1) / gk::kThreads)); };
    if (tab.expand_poles)
      cuda_host_emulation::launch(blocks(poles.size()), gk::kThreads, [&] { gk::resample_poles_kernel(a, spherical); });
    cuda_host_emulation::launch(blocks(n_out), gk::kThreads, [&] { gk::resample_interpolate_kernel(a, tab); });
    std::size_t differ = 0;
    for (std::size_t i = 0; i < n_out; ++i)
      if (std::memcmp(&cpu[i], &dev[i], sizeof(float)) != 0) ++differ;
    EXPECT_EQ(differ, 0u) << t.name << ": " << differ << " of " << n_out << " outputs differ from the CPU operator"
                          << (op.expand_poles() ? " (pole expansion)" : "");
  }
}

}  // namespace
