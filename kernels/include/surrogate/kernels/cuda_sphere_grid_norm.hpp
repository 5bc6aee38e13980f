// CUDA kernels of the SphericalTransformer's layers between the spherical operators (CUDA builds only):
// the instance norm over a latitude-longitude grid with the CPU forward's double sums
// (libsurrogate/src/sphere/transformer.cpp, Impl::norm, instance_norm), and ReLU on rows. Used by the
// transformer's device forward (libsurrogate/src/sphere/transformer_device.cpp); the layer norm is
// kernels::cuda::norm, the dense layers, row sums and copies are cuda_point_layers.hpp.
//
// The instance norm in three launches, the CPU's arithmetic in the CPU's order:
//   grid_row_sums   part[(s*lat_rows + row)*dim + c] = sum over the longitudes in order of x (double), or of
//                   (x - mean[s*dim + c])^2 (product and sum rounded separately, as the CPU without FMA);
//   grid_norm_stats over the rows in row order from 0.0: mean = sum / points, or (second pass, with the
//                   mean) inv = 1 / sqrt(var / points + eps), scale = float(inv w), shift = float(b - mean inv w);
//   channel_affine  y[r, c] = x[r, c] * scale[s, c] + shift[s, c] (float32, product rounded before the sum).
// So every value equals the CPU forward's bitwise (one rank; the CPU's multi-rank sums are the same).
//
// Layout: device buffers, row-major, row strides >= the row's width. One thread per output element, no
// shared memory. Every launcher enqueues on the given stream and returns at once; invalid sizes throw
// std::invalid_argument before anything is enqueued.
//
// The device code (kernels/cuda/sphere_grid_norm_kernels.cuh) also runs unchanged on the CPU in
// tests/kernels/test_sphere_grid_norm_emulated.cpp (status: share/docs/cuda.md).
#pragma once

#include <cuda_runtime_api.h>

#include "surrogate/kernels/cpu.hpp"  // index_t

namespace surrogate::kernels::cuda {

/// Per (sample, latitude row, channel) double sums over the nlon longitudes of a grid of `batch` samples
/// of lat_rows x nlon points (point p of sample s at row s*lat_rows*nlon + p, ld floats per row).
struct GridRowSumsArgs {
  const float* x = nullptr;
  index_t ld = 0;
  int batch = 0, lat_rows = 0, nlon = 0, dim = 0;
  const double* mean = nullptr;  // batch x dim: sums of squared deviations; nullptr: sums of the values
  double* part = nullptr;        // batch * lat_rows * dim
};
void grid_row_sums(const GridRowSumsArgs& a, cudaStream_t stream);

/// The row sums added over the lat_rows rows in order. Without `mean`: mean[s*dim + c] = sum / points.
/// With `mean` (the sums were of squared deviations): scale / shift of the affine instance norm.
struct GridNormStatsArgs {
  const double* part = nullptr;  // batch * lat_rows * dim
  int batch = 0, lat_rows = 0, dim = 0;
  double points = 0.0;           // the grid's point count (the divisor)
  double* mean = nullptr;        // out (first pass) or in (second pass)
  bool finish = false;           // second pass: write scale, shift
  double eps = 1e-6;
  const float* weight = nullptr;  // dim
  const float* bias = nullptr;    // dim
  float* scale = nullptr;         // batch * dim
  float* shift = nullptr;         // batch * dim
};
void grid_norm_stats(const GridNormStatsArgs& a, cudaStream_t stream);

/// y[r, c] = x[r, c] * scale[s, c] + shift[s, c] for the rows r of sample s = r / rows_per_sample.
struct ChannelAffineArgs {
  const float* x = nullptr;
  index_t ldx = 0;
  float* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0, rows_per_sample = 0;
  int dim = 0;
  const float* scale = nullptr;
  const float* shift = nullptr;
};
void channel_affine(const ChannelAffineArgs& a, cudaStream_t stream);

/// x[r, c] = max(x[r, c], 0) for c < width (in place).
void relu_rows(float* x, index_t ld, index_t rows, int width, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
