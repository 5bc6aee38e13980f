// The device code of the grid instance norm and ReLU (kernels/cuda/sphere_grid_norm_kernels.cuh),
// unchanged, run on the CPU through the host emulation (cuda_host_emulation.hpp), the threads of a block
// one after another (the kernels use no shared memory). Labels unit;cuda, CUDA builds, no GPU needed.
//
// What is compared, and why these tolerances:
//  * the instance norm against the CPU forward's arithmetic written out here from
//    libsurrogate/src/sphere/transformer.cpp (Impl::norm, instance_norm: double sums per latitude row over
//    the longitudes, then over the rows in order; mean and biased variance; scale and shift rounded to
//    float; y = x * scale + shift in float32): the same operations in the same order, so BITWISE equal;
//  * the same output against a long-double evaluation of InstanceNorm2d (mean, biased variance, eps 1e-6,
//    affine): the double statistics are exact to ~1e-15 relative, so the float32 error is the rounding of
//    scale and shift (u each) and of the product and the sum (u each): |y - y_ld| <= 4u (|x scale| + |shift|)
//    + 4u |y_ld|, u = 2^-24;
//  * ReLU bitwise against max(x, 0), NaN kept, padding columns untouched.
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel source below

#include "sphere_grid_norm_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

namespace cu = surrogate::kernels::cuda;
namespace nk = surrogate::kernels::cuda::grid_norm_kernels;
using surrogate::kernels::index_t;

template <class Kernel>
void run_blocks(index_t threads_total, Kernel kernel) {
  const auto blocks = static_cast<unsigned>((threads_total + nk::kThreads - 1) / nk::kThreads);
  cuda_host_emulation::launch(dim3(blocks), nk::kThreads, kernel);
}

/// The device instance norm: the three launches of the transformer's device forward.
std::vector<float> device_instance_norm(const std::vector<float>& x, index_t ld, int batch, int nlat, int nlon, int C,
                                        const std::vector<float>& w, const std::vector<float>& b) {
  std::vector<double> part(static_cast<std::size_t>(batch) * nlat * C), mean(static_cast<std::size_t>(batch) * C);
  std::vector<float> scale(mean.size()), shift(mean.size()), y(x.size(), -7.0f);
  cu::GridRowSumsArgs rs;
  rs.x = x.data();
  rs.ld = ld;
  rs.batch = batch;
  rs.lat_rows = nlat;
  rs.nlon = nlon;
  rs.dim = C;
  rs.part = part.data();
  run_blocks(static_cast<index_t>(part.size()), [&] { nk::grid_row_sums_kernel(rs); });
  cu::GridNormStatsArgs st;
  st.part = part.data();
  st.batch = batch;
  st.lat_rows = nlat;
  st.dim = C;
  st.points = static_cast<double>(nlat) * nlon;
  st.mean = mean.data();
  run_blocks(static_cast<index_t>(mean.size()), [&] { nk::grid_norm_stats_kernel(st); });
  rs.mean = mean.data();
  run_blocks(static_cast<index_t>(part.size()), [&] { nk::grid_row_sums_kernel(rs); });
  st.finish = true;
  st.weight = w.data();
  st.bias = b.data();
  st.scale = scale.data();
  st.shift = shift.data();
  run_blocks(static_cast<index_t>(mean.size()), [&] { nk::grid_norm_stats_kernel(st); });
  cu::ChannelAffineArgs af;
  af.x = x.data();
  af.ldx = ld;
  af.y = y.data();
  af.ldy = ld;
  af.rows = static_cast<index_t>(batch) * nlat * nlon;
  af.rows_per_sample = static_cast<index_t>(nlat) * nlon;
  af.dim = C;
  af.scale = scale.data();
  af.shift = shift.data();
  run_blocks(af.rows * C, [&] { nk::channel_affine_kernel(af); });
  return y;
}

TEST(SphereGridNormEmulated, InstanceNormEqualsTheCpuArithmeticBitwise) {
  std::mt19937 rng(5);
  struct Case {
    int batch, nlat, nlon, C;
    index_t ld;
  };
  for (const Case& k : {Case{1, 3, 4, 1, 1}, Case{2, 9, 16, 12, 16}, Case{3, 17, 32, 16, 16}, Case{2, 5, 7, 5, 8}}) {
    const index_t P = static_cast<index_t>(k.nlat) * k.nlon;
    std::vector<float> x(static_cast<std::size_t>(k.batch * P * k.ld), 0.0f), w(k.C), b(k.C);
    std::normal_distribution<float> n(0.0f, 1.0f);
    for (int s = 0; s < k.batch; ++s)
      for (int c = 0; c < k.C; ++c) {
        const float offset = 10.0f * n(rng), spread = std::exp(n(rng));  // means far from 0: the two passes matter
        for (index_t p = 0; p < P; ++p) x[static_cast<std::size_t>((s * P + p) * k.ld + c)] = offset + spread * n(rng);
      }
    for (int c = 0; c < k.C; ++c) {
      w[c] = 1.0f + 0.3f * n(rng);
      b[c] = 0.5f * n(rng);
    }
    const std::vector<float> y = device_instance_norm(x, k.ld, k.batch, k.nlat, k.nlon, k.C, w, b);

    const double points = static_cast<double>(P);
    constexpr double u = 0x1p-24;
    for (int s = 0; s < k.batch; ++s)
      for (int c = 0; c < k.C; ++c) {
        auto at = [&](index_t p) { return x[static_cast<std::size_t>((s * P + p) * k.ld + c)]; };
        // The CPU forward's arithmetic (transformer.cpp, instance_norm).
        double mean = 0.0;
        for (int r = 0; r < k.nlat; ++r) {
          double row = 0.0;
          for (int l = 0; l < k.nlon; ++l) row += static_cast<double>(at(static_cast<index_t>(r) * k.nlon + l));
          mean += row;
        }
        mean /= points;
        double var = 0.0;
        for (int r = 0; r < k.nlat; ++r) {
          double row = 0.0;
          for (int l = 0; l < k.nlon; ++l) {
            const double d = at(static_cast<index_t>(r) * k.nlon + l) - mean;
            row += d * d;
          }
          var += row;
        }
        const double inv = 1.0 / std::sqrt(var / points + 1e-6);
        const float scale = static_cast<float>(inv * w[c]);
        const float shift = static_cast<float>(b[c] - mean * inv * w[c]);
        // Long double InstanceNorm2d.
        long double m = 0.0L, v = 0.0L;
        for (index_t p = 0; p < P; ++p) m += at(p);
        m /= P;
        for (index_t p = 0; p < P; ++p) v += (at(p) - m) * (at(p) - m);
        v /= P;
        for (index_t p = 0; p < P; ++p) {
          const float got = y[static_cast<std::size_t>((s * P + p) * k.ld + c)];
          const float cpu = at(p) * scale + shift;
          ASSERT_EQ(got, cpu) << "sample " << s << " channel " << c << " point " << p;
          const long double ref = (at(p) - m) / std::sqrt(v + 1e-6L) * w[c] + b[c];
          const double bound = 4 * u * (std::fabs(at(p) * scale) + std::fabs(shift)) + 4 * u * std::fabs(static_cast<double>(ref));
          ASSERT_LE(std::fabs(static_cast<double>(got - ref)), bound) << "sample " << s << " channel " << c << " point " << p;
        }
      }
    for (std::size_t i = 0; i < x.size(); ++i)
      if (static_cast<index_t>(i) % k.ld >= k.C) {
        ASSERT_EQ(y[i], -7.0f) << "padding written at " << i;
      }
  }
}

TEST(SphereGridNormEmulated, ReluRows) {
  const int rows = 37, width = 11;
  const index_t ld = 16;
  std::vector<float> x(static_cast<std::size_t>(rows * ld));
  std::mt19937 rng(9);
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (float& v : x) v = n(rng);
  x[3] = std::numeric_limits<float>::quiet_NaN();  // kept, as torch.relu keeps it (fmax would give 0)
  x[ld + 4] = -0.0f;
  std::vector<float> y = x;
  run_blocks(static_cast<index_t>(rows) * width, [&] { nk::relu_kernel(y.data(), ld, rows, width); });
  for (std::size_t i = 0; i < x.size(); ++i) {
    const bool column = static_cast<index_t>(i) % ld < width;
    if (column && std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(y[i])) << "NaN at " << i << " became " << y[i];
      continue;
    }
    EXPECT_EQ(y[i], column ? std::fmax(x[i], 0.0f) : x[i]) << i;
  }
}

}  // namespace
