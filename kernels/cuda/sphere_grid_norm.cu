// Launchers of the grid instance norm and ReLU (surrogate/kernels/cuda_sphere_grid_norm.hpp); the device
// code is in sphere_grid_norm_kernels.cuh. One thread per output element, kThreads per block, a 1-D grid.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "sphere_grid_norm_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
using grid_norm_kernels::kThreads;

void grid_row_sums(const GridRowSumsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, grid_row_sums(a, stream));
  require(a.batch >= 0 && a.lat_rows >= 0 && a.nlon >= 0 && a.dim >= 0 && a.ld >= a.dim && a.part, "grid_row_sums",
          "need batch, lat_rows, nlon, dim >= 0, ld >= dim " + std::to_string(a.dim) + " and an output");
  const index_t elements = static_cast<index_t>(a.batch) * a.lat_rows * a.dim;
  if (elements == 0) return;
  launch(grid_norm_kernels::grid_row_sums_kernel, blocks_for("grid_row_sums", elements, kThreads), kThreads, 0, stream, a);
  check_launch("grid_row_sums_kernel");
}

void grid_norm_stats(const GridNormStatsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, grid_norm_stats(a, stream));
  require(a.batch >= 0 && a.lat_rows >= 0 && a.dim >= 0 && a.points > 0.0 && a.mean, "grid_norm_stats",
          "need batch, lat_rows, dim >= 0, points > 0 and a mean buffer");
  require(!a.finish || (a.weight && a.bias && a.scale && a.shift), "grid_norm_stats",
          "the second pass needs weight, bias, scale and shift");
  const index_t elements = static_cast<index_t>(a.batch) * a.dim;
  if (elements == 0) return;
  launch(grid_norm_kernels::grid_norm_stats_kernel, blocks_for("grid_norm_stats", elements, kThreads), kThreads, 0, stream, a);
  check_launch("grid_norm_stats_kernel");
}

void channel_affine(const ChannelAffineArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, channel_affine(a, stream));
  if (a.rows == 0 || a.dim == 0) return;
  require(a.rows > 0 && a.dim > 0 && a.rows_per_sample > 0 && a.ldx >= a.dim && a.ldy >= a.dim, "channel_affine",
          "need rows, rows_per_sample, dim > 0 and row strides >= dim " + std::to_string(a.dim));
  launch(grid_norm_kernels::channel_affine_kernel, blocks_for("channel_affine", a.rows * a.dim, kThreads), kThreads, 0, stream, a);
  check_launch("channel_affine_kernel");
}

void relu_rows(float* x, index_t ld, index_t rows, int width, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, relu_rows(x, ld, rows, width, stream));
  if (rows == 0 || width == 0) return;
  require(rows > 0 && width > 0 && ld >= width, "relu_rows", "need rows, width > 0 and ld >= width");
  launch(grid_norm_kernels::relu_kernel, blocks_for("relu_rows", rows * width, kThreads), kThreads, 0, stream, x, ld, rows, width);
  check_launch("relu_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
