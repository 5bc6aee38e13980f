// Launchers of the point-cloud layers (surrogate/kernels/cuda_point_layers.hpp); the device code is in
// point_layers_kernels.cuh. One thread per output element, kThreads per block, a 1-D grid over the
// elements; the dense layer in 64 x 64 output tiles.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "point_layers_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
using point_kernels::kThreads;

void dense(const DenseArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, dense(a, stream));
  if (a.rows == 0 || a.out == 0) return;
  if (a.precision != MlpPrecision::fp32) return backend::dense_tensor_cores(a, stream);
  require(a.rows > 0 && a.out > 0 && a.in >= 0, "dense", "need rows, out >= 0 and in >= 0");
  require(a.ldw >= a.out && a.ldx >= a.in && a.ldy >= a.out && (!a.add || a.ld_add >= a.out), "dense",
          "a row stride is smaller than its row (in " + std::to_string(a.in) + ", out " + std::to_string(a.out) +
              ", ldw " + std::to_string(a.ldw) + ", ldx " + std::to_string(a.ldx) + ", ldy " + std::to_string(a.ldy) + ")");
  const index_t row_tiles = (a.rows + point_kernels::kDenseTile - 1) / point_kernels::kDenseTile;
  const int column_tiles = (a.out + point_kernels::kDenseTile - 1) / point_kernels::kDenseTile;
  require(row_tiles <= 2147483647 && column_tiles <= 65535, "dense",
          std::to_string(a.rows) + " rows x " + std::to_string(a.out) + " outputs exceed the grid");
  launch(point_kernels::dense_tiled_kernel, dim3(static_cast<unsigned>(row_tiles), static_cast<unsigned>(column_tiles)),
         point_kernels::kDenseThreads, 0, stream, a);
  check_launch("dense_tiled_kernel");
}

void copy_rows(const RowCopyArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, copy_rows(a, stream));
  if (a.rows == 0 || a.width == 0) return;
  require(a.rows > 0 && a.width > 0, "copy_rows", "need rows, width >= 0");
  require(a.ld_src >= a.width && a.ld_dst >= a.width, "copy_rows",
          "row strides " + std::to_string(a.ld_src) + " / " + std::to_string(a.ld_dst) + " below the width " +
              std::to_string(a.width));
  launch(point_kernels::copy_rows_kernel, blocks_for("copy_rows", a.rows * a.width, kThreads), kThreads, 0, stream, a);
  check_launch("copy_rows_kernel");
}

void row_binary(const RowBinaryArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, row_binary(a, stream));
  if (a.rows == 0 || a.width == 0) return;
  require(a.rows > 0 && a.width > 0, "row_binary", "need rows, width >= 0");
  require(a.lda >= a.width && a.ldb >= a.width && a.ldy >= a.width, "row_binary", "a row stride is below the width");
  launch(point_kernels::row_binary_kernel, blocks_for("row_binary", a.rows * a.width, kThreads), kThreads, 0, stream, a);
  check_launch("row_binary_kernel");
}

void batch_norm(const BatchNormArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, batch_norm(a, stream));
  if (a.rows == 0 || a.dim == 0) return;
  require(a.rows > 0 && a.dim > 0 && a.ld >= a.dim && (!a.add || a.ld_add >= a.dim), "batch_norm",
          "need rows, dim >= 0 and row strides >= dim " + std::to_string(a.dim));
  launch(point_kernels::batch_norm_kernel, blocks_for("batch_norm", a.rows * a.dim, kThreads), kThreads, 0, stream, a);
  check_launch("batch_norm_kernel");
}

void segment_mean(const SegmentMeanArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, segment_mean(a, stream));
  if (a.receivers == 0 || a.width == 0) return;
  require(a.receivers > 0 && a.width > 0 && a.ld_msg >= a.width && a.ld_agg >= a.width, "segment_mean",
          "need receivers, width >= 0 and row strides >= the width " + std::to_string(a.width));
  launch(point_kernels::segment_mean_kernel, blocks_for("segment_mean", a.receivers * a.width, kThreads), kThreads, 0, stream, a);
  check_launch("segment_mean_kernel");
}

void fourier_features(const FourierArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, fourier_features(a, stream));
  if (a.rows == 0 || a.half == 0) return;
  require(a.rows > 0 && a.half > 0 && a.dim >= 0, "fourier_features", "need rows, half >= 0 and dim >= 0");
  require(a.ld_pos >= a.dim && a.ld_features >= 2 * a.half, "fourier_features",
          "row strides " + std::to_string(a.ld_pos) + " / " + std::to_string(a.ld_features) + " below dim " +
              std::to_string(a.dim) + " / 2 x half " + std::to_string(2 * a.half));
  launch(point_kernels::fourier_features_kernel, blocks_for("fourier_features", a.rows * a.half, kThreads), kThreads, 0,
         stream, a);
  check_launch("fourier_features_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
