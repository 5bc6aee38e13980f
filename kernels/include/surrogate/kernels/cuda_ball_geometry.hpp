// The geometry of a ball-tree forward on a CUDA device (CUDA builds only), from device rows, bit for bit
// the host's arithmetic: the levels' positions (balltree::mean_pool), positions relative to their group's
// centre (erwin::program::relative_to_group) and the message-passing edges grouped by receiver
// (erwin::program::order_edges). share/docs/cuda.md, "Ball-tree geometry".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

/// out row g = the mean of rows g group .. g group + group - 1 of `rows`, dim values each: per value the
/// sum in PyTorch's CPU order (kernels/torch_order_sum.hpp) divided by group, as balltree::mean_pool.
struct GroupMeansArgs {
  const float* rows = nullptr;  // device, groups * group rows of dim values
  index_t groups = 0;
  int dim = 0, group = 0;       // >= 1 each
  float* out = nullptr;         // device, groups x dim
};
void group_means(const GroupMeansArgs& a, cudaStream_t stream);

/// rel row r = rows row r - centres row r / group, dim values each (no fused operation: one rounded
/// subtraction per value). With group 1 and centres == rows every value is x - x (+0, or NaN).
struct GroupOffsetsArgs {
  const float* rows = nullptr;     // device, n x dim
  index_t n = 0;
  int dim = 0, group = 0;          // >= 1 each; n a multiple of group
  const float* centres = nullptr;  // device, n / group x dim
  float* rel = nullptr;            // device, n x dim; must not overlap the inputs
};
void group_offsets(const GroupOffsetsArgs& a, cudaStream_t stream);

/// Scratch of edges_by_receiver (device memory, grown on demand, reused across calls).
struct EdgeOrderWork {
  DeviceBuffer<unsigned char> bytes;
};

/// Edges (sources edge_index[e], receivers edge_index[E + e]) grouped by receiver, each group in edge
/// order: start[i] .. start[i + 1] - 1 the edges into receiver i (start: receivers + 1 entries), src and
/// dst in that order, rel = positions[src] - positions[dst] per edge (dim values). `first_bad` (one
/// value) receives the first edge whose source is outside [0, sources) or receiver outside [0,
/// receivers), or -1; with such an edge the other outputs are left unwritten.
struct EdgeOrderArgs {
  index_t edges = 0;                         // E, below 2^31
  const std::int64_t* edge_index = nullptr;  // device, 2 x E
  index_t receivers = 0, sources = 0;        // receivers <= sources, below 2^31
  const float* positions = nullptr;          // device, sources x dim
  int dim = 0;                               // >= 1
  std::int64_t* first_bad = nullptr;         // device, 1 value
  std::int64_t* start = nullptr;             // device, receivers + 1
  std::int64_t* src = nullptr;               // device, E each
  std::int64_t* dst = nullptr;
  float* rel = nullptr;                      // device, E x dim
  EdgeOrderWork* work = nullptr;             // host object holding the device scratch
};
/// Enqueues the grouping on `stream` (no wait for the device); std::invalid_argument for arguments it does
/// not take, before anything is enqueued.
void edges_by_receiver(const EdgeOrderArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
