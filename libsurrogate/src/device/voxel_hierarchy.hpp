// Sequoia's voxel hierarchy built on a CUDA device (CUDA builds only): the samples' points uploaded,
// kernels::cuda::voxel_hierarchy run, the collated hierarchy downloaded — what
// sequoia::collate(sequoia::build_sample_hierarchies(...)) returns, bit for bit (share/docs/cuda.md,
// "Voxel hierarchy").
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_voxel_hierarchy.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::device {

/// Keeps its device arrays between calls (grown, never shrunk).
class VoxelHierarchies {
 public:
  /// The collated hierarchy of `samples` (sample_ids as sequoia::collate takes them), built on `stream` of
  /// `device`; returns when it is on the host. Arguments or samples the host builder refuses (no samples,
  /// a sample without points, a non-finite coordinate, not one root voxel, ...) are handed to it, so that
  /// its Error is thrown. Throws kernels::cuda::CudaError. Without `node_arrays`, coords, mapping and
  /// mapping_local stay empty (only collate reads them; a plan needs the rest) unless the host built it.
  sequoia::Hierarchy operator()(int device, cudaStream_t stream, const std::vector<sequoia::SamplePoints>& samples,
                                int divide, int depth, std::vector<sequoia::index_t> sample_ids = {},
                                bool node_arrays = true);

 private:
  kernels::cuda::DeviceBuffer<float> points_;
  kernels::cuda::VoxelHierarchyWork work_;
};

}  // namespace surrogate::device
