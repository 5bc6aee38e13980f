// Sequoia's voxel hierarchy on a CUDA device (CUDA builds only): what sequoia::build_sample_hierarchy
// computes for every sample of a batch and sequoia::collate then makes of them, bit for bit — voxel
// coordinates in float32, FNV-64 hashes, the distinct voxels and parent-child pairs by stable radix sorts,
// the mapping rows, the level lists and the edge lists sorted by query (share/docs/cuda.md, "Voxel
// hierarchy"; share/docs/sequoia.md, "Hierarchy").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

/// Scratch of voxel_hierarchy (device memory, grown on demand, reused across calls).
struct VoxelHierarchyWork {
  DeviceBuffer<unsigned char> voxels, lists, sort;  // the voxels and pairs; the collated lists; CUB's scratch
};

struct VoxelHierarchyArgs {
  int samples = 0;                      // >= 1
  int divide = 0, depth = 0;            // >= 2 each, divide^(depth - 1) < 2^31
  const std::int64_t* first = nullptr;  // HOST, samples + 1 point offsets: 0 first, every sample >= 1 point
  const float* points = nullptr;        // device, first[samples] x 3
  /// false: coords, mapping and mapping_local are not downloaded (left empty in the result): only the
  /// collation reads them, so a plan needs the lists alone (at 10^6 points about 70 MB less to copy).
  bool node_arrays = true;
  VoxelHierarchyWork* work = nullptr;
};

/// The collated hierarchy as flat arrays (the fields of sequoia::Hierarchy; model level i = depth - tree
/// level). Lists of every model level one after another, level i at [x_first[i], x_first[i + 1]).
struct VoxelHierarchyResult {
  /// false: a sample failed a check of the host builder (a non-finite coordinate, no extent along an
  /// axis, a voxel coordinate outside int32, not one root voxel); nothing else is filled, and the host
  /// builder's error names it.
  bool valid = false;
  std::vector<std::int64_t> offset;                       // samples: cumulative node counts
  std::vector<float> coords;                              // nodes x 3
  std::vector<std::int64_t> mapping, mapping_local;       // rows x 4
  std::vector<std::int64_t> level_first;                  // depth + 2
  std::vector<std::int64_t> level_ids, level_batch;
  std::vector<float> level_positions;                     // x 3
  std::vector<std::int64_t> parent_first, parent_edges;  // depth + 2; edges (query, other) pairs
  std::vector<std::int64_t> child_first, child_edges;
  std::vector<std::int64_t> pool_first, pool_parent;     // depth + 1
};

/// Builds the hierarchy on `stream`, waiting for the device twice (the voxel and pair counts, the result);
/// returns when `out` holds it. std::invalid_argument for arguments it does
/// not take (before anything is enqueued); CudaError.
void voxel_hierarchy(const VoxelHierarchyArgs& a, VoxelHierarchyResult& out, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
