// The ball trees of a plan built for a CUDA device (CUDA builds only): the nodes each rank holds whole,
// finished by kernels::cuda::ball_tree on the device instead of balltree::build / partition on the host —
// the same trees, bit for bit (share/docs/cuda.md, "Ball trees").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_tree.hpp"

namespace surrogate::device {

/// Keeps its device arrays between calls (grown, never shrunk). Each call checks the points are finite,
/// uploads them, runs the kernels on `stream` of `device` and returns when the result is on the host.
/// Throws kernels::cuda::CudaError or std::invalid_argument (the caller's collective maps them).
class BallTrees final : public balltree::NodeFinisher {
 public:
  BallTrees(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  balltree::Tree build(std::span<const float> points, int dim, const balltree::Batch& batch) override;
  std::vector<std::int64_t> partition(std::span<const float> points, int dim, const balltree::Batch& batch,
                                      int target_level) override;
  /// Nodes above this many points are split by many blocks each (BallTreeArgs::wide_points; 0: the
  /// default, kBallTreeWidePoints; a benchmark's knob, the trees are the same whatever it is).
  void set_wide_points(int points) { wide_points_ = points; }

 private:
  /// Uploads the points and runs the launcher into index_ (and mask_ for a tree) for `outputs` outputs.
  void run(std::span<const float> points, int dim, const balltree::Batch& batch, int target_level, std::int64_t outputs);

  int device_;
  cudaStream_t stream_;
  int wide_points_ = 0;
  kernels::cuda::DeviceBuffer<float> positions_;
  kernels::cuda::DeviceBuffer<std::int64_t> index_;
  kernels::cuda::DeviceBuffer<std::uint8_t> mask_;
  kernels::cuda::BallTreeWork work_;
};

}  // namespace surrogate::device
