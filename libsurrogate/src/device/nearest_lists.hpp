// Exact k-nearest-neighbour lists computed on a CUDA device (CUDA builds only): the host arrays of
// sequoia::nearest_lists uploaded, kernels::cuda::nearest_lists run, the lists downloaded — the same lists
// as sequoia::nearest_lists, bit for bit (share/docs/cuda.md, "Nearest-neighbour lists").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_nearest.hpp"

namespace surrogate::device {

/// Keeps its device arrays between calls (grown, never shrunk).
class NearestLists {
 public:
  /// The k nearest nodes of each of `queries` (node ids) among the nodes of its sample (`batch`: each
  /// node's sample, nodes grouped by sample), positions nodes x 3: query t's list at t * k. Enqueued on
  /// `stream` of `device`; returns when the lists are on the host. Throws kernels::cuda::CudaError or
  /// std::invalid_argument.
  std::vector<std::int64_t> operator()(int device, cudaStream_t stream, const std::vector<float>& positions,
                                       const std::vector<std::int64_t>& batch, int k,
                                       const std::vector<std::int64_t>& queries);

 private:
  kernels::cuda::DeviceBuffer<float> positions_;
  kernels::cuda::DeviceBuffer<std::int64_t> first_, queries_, lists_;
  kernels::cuda::NearestListsWork work_;
};

}  // namespace surrogate::device
