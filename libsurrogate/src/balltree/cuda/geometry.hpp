// The ball-relative positions of the ball-tree device forwards (erwin/cuda, bsa/cuda), computed on the
// device with the CPU forwards' arithmetic (surrogate/kernels/cuda_ball_geometry.hpp). CUDA builds only.
#pragma once

#include <cuda_runtime_api.h>

#include "surrogate/kernels/cuda_ball_geometry.hpp"

namespace surrogate::balltree::device {

/// rel = rows - the mean of their ball of `ball` consecutive rows (balltree::mean_pool's sums), d values a
/// row, count rows on the device; balls of one row are their own centre (x - x). `centres` is scratch,
/// grown on `device` when needed.
inline void ball_relative(const float* rows, kernels::index_t count, int d, int ball, float* rel,
                          kernels::cuda::DeviceBuffer<float>& centres, int device, cudaStream_t stream) {
  namespace cu = kernels::cuda;
  if (ball > 1) {
    centres.resize(static_cast<std::size_t>(count / ball) * static_cast<std::size_t>(d), device);
    cu::group_means({rows, count / ball, d, ball, centres.data()}, stream);
  }
  cu::group_offsets({rows, count, d, ball, ball > 1 ? centres.data() : rows, rel}, stream);
}

}  // namespace surrogate::balltree::device
