// The device code of the grid instance norm and ReLU (sphere_grid_norm.cu has the launchers; see
// surrogate/kernels/cuda_sphere_grid_norm.hpp for what they compute). In a header of its own so that the
// host emulation (tests/gpu/test_sphere_grid_norm_emulated.cpp) runs exactly this code on the CPU: one
// thread per output element, no shared memory, no synchronisation; the rounding intrinsics keep nvcc from
// fusing what the CPU rounds separately.
#pragma once

#include "launch.cuh"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace grid_norm_kernels {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) grid_row_sums_kernel(GridRowSumsArgs a) {
  const index_t t = flat_index();
  const index_t tasks = static_cast<index_t>(a.batch) * a.lat_rows;
  if (t >= tasks * a.dim) return;
  const index_t task = t / a.dim;  // sample * lat_rows + row
  const int c = static_cast<int>(t - task * a.dim);
  const float* row = a.x + task * a.nlon * a.ld + c;
  double acc = 0.0;
  if (a.mean) {
    const double m = a.mean[(task / a.lat_rows) * a.dim + c];
    for (int lon = 0; lon < a.nlon; ++lon) {
      const double d = __dadd_rn(static_cast<double>(row[lon * a.ld]), -m);
      acc = __dadd_rn(acc, __dmul_rn(d, d));
    }
  } else {
    for (int lon = 0; lon < a.nlon; ++lon) acc = __dadd_rn(acc, static_cast<double>(row[lon * a.ld]));
  }
  a.part[t] = acc;
}

__global__ void __launch_bounds__(kThreads) grid_norm_stats_kernel(GridNormStatsArgs a) {
  const index_t t = flat_index();
  if (t >= static_cast<index_t>(a.batch) * a.dim) return;
  const index_t s = t / a.dim;
  const int c = static_cast<int>(t - s * a.dim);
  double sum = 0.0;
  for (int row = 0; row < a.lat_rows; ++row) sum = __dadd_rn(sum, a.part[(s * a.lat_rows + row) * a.dim + c]);
  if (!a.finish) {
    a.mean[t] = sum / a.points;
    return;
  }
  const double inv = 1.0 / sqrt(__dadd_rn(sum / a.points, a.eps));
  const double w = static_cast<double>(a.weight[c]);
  a.scale[t] = static_cast<float>(__dmul_rn(inv, w));
  a.shift[t] = static_cast<float>(__dadd_rn(static_cast<double>(a.bias[c]), -__dmul_rn(__dmul_rn(a.mean[t], inv), w)));
}

__global__ void __launch_bounds__(kThreads) channel_affine_kernel(ChannelAffineArgs a) {
  const index_t t = flat_index();
  if (t >= a.rows * a.dim) return;
  const index_t r = t / a.dim;
  const int c = static_cast<int>(t - r * a.dim);
  const index_t sc = (r / a.rows_per_sample) * a.dim + c;
  a.y[r * a.ldy + c] = __fmul_rn(a.x[r * a.ldx + c], a.scale[sc]) + a.shift[sc];
}

__global__ void __launch_bounds__(kThreads) relu_kernel(float* x, index_t ld, index_t rows, int width) {
  const index_t t = flat_index();
  if (t >= rows * width) return;
  const index_t r = t / width;
  float* v = x + r * ld + (t - r * width);
  *v = relu_keep_nan(*v);
}

}  // namespace grid_norm_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
