// Exact k-nearest-neighbour lists on a CUDA device (CUDA builds only): each query's k nearest nodes among
// the nodes of its sample, in the order of surrogate::sequoia::nearest_lists (share/docs/sequoia.md,
// "Neighbour order"), bit for bit. A uniform grid per sample, searched in rings of cells around the query
// until no unvisited cell can hold a nearer node (share/docs/cuda.md, "Nearest-neighbour lists").
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

/// The largest k of nearest_lists (each query keeps its k best in the thread's own memory).
inline constexpr int kMaxNearest = 32;  // grid_nearest::kMaxK

/// Scratch of nearest_lists: the samples' grids and the nodes binned by cell (device memory, grown on
/// demand, reused across calls).
struct NearestListsWork {
  DeviceBuffer<unsigned char> bytes;
};

/// lists[t * k + j], j < k: the j-th nearest node to node query_ids[t] among the nodes of its sample.
/// Distance: the squared distance sum_c (double(p_c) - double(q_c))^2 accumulated from c = 0, every
/// operation rounded to double (no fused multiply-add); ties go to the smaller node. A sample of fewer
/// than k nodes lists all of them, then its first entry repeated up to k. Positions must be finite.
struct NearestListsArgs {
  index_t nodes = 0;                        // rows of positions; 8 nodes + samples < 2^31 - 1
  const float* positions = nullptr;         // device, nodes x 3
  int samples = 0;                          // >= 1
  const std::int64_t* first = nullptr;      // device, samples + 1 ascending offsets, 0 first, nodes last
  index_t queries = 0;
  const std::int64_t* query_ids = nullptr;  // device, queries node ids; nullptr: queries == nodes, id t
  int k = 0;                                // 1 .. kMaxNearest
  std::int64_t* lists = nullptr;            // device, queries x k
  NearestListsWork* work = nullptr;         // host object holding the device scratch
};
/// Enqueues the lists on `stream`; std::invalid_argument for arguments it does not take, before anything
/// is enqueued.
void nearest_lists(const NearestListsArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
