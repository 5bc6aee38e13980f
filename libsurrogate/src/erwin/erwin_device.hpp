// The Erwin forward on a CUDA device (implemented in a CUDA build, erwin_cuda.cpp; elsewhere the factory
// refuses, erwin_device_stub.cpp). The ball tree and the rotated trees are built on the host (host code by
// design); the arrays that depend only on the geometry (tree order, rotated orders, positions and
// ball-relative positions of every level, the edges grouped by receiver) are uploaded once per geometry,
// the weights once per model, and the whole level sequence (embedding, message passing, every block,
// pooling and unpooling) runs on the device. One process, or one rank's part of the distributed plan
// (erwin_distributed.hpp) with its exchanges staged through host memory. Internal to libsurrogate.
//
// NOT YET RUN ON A GPU: written and compiled on a machine without a device (share/docs/balltree.md).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::erwin::detail {

class DistributedPlan;  // erwin_distributed.hpp

class ErwinDeviceForward {
 public:
  virtual ~ErwinDeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// Network::forward(trees, features, positions, batch, edge_index) on the device: host arrays in the
  /// caller's order, returns points x c_hidden[0] values in input order. The trees must belong to the
  /// positions and the batch (as from balltree::build_with_rotations). `same_geometry`: trees, positions,
  /// batch and edges are those of the previous call, whose uploaded geometry is reused (ignored on the
  /// first call). Throws Error(input) for arrays of the wrong size or out-of-range indices.
  virtual std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                     std::span<const float> positions, const balltree::Batch& batch,
                                     std::span<const std::int64_t> edge_index, bool same_geometry) = 0;
  /// One rank's part of the distributed forward (erwin_distributed.hpp) on the device: the plan's block
  /// features (block_rows() x c_in, canonical order) -> block_rows() x c_hidden[0] values, bitwise the
  /// rows the one-process forward above gives for the whole batch (same kernels on the same rows). The
  /// block with its halo of remote message-passing sources, then the rank's slots of the distributed
  /// tree; the halo refreshes, the block <-> slots moves and the rotated orders are the plan's exchanges
  /// applied to device rows through host memory (balltree/device_exchange.hpp: MPI, no NCCL). The plan
  /// must outlive the next calls; `same_geometry`: the plan is the one of the previous call (its uploaded
  /// arrays are reused). Collective; errors (NaN/Inf features, device errors on any rank) are agreed.
  virtual std::vector<float> forward(const DistributedPlan& plan, std::span<const float> block_features,
                                     bool same_geometry) = 0;
  /// Device milliseconds of the last forward from the features' upload to the result's download (CUDA
  /// events), and of its geometry upload (0 when reused).
  virtual double last_forward_ms() const = 0;
  virtual double last_geometry_ms() const = 0;
};

/// Uploads the network's weights to CUDA device `device`. Throws Error(unsupported) when this build has
/// no CUDA backend, no such device is visible, or the network is outside what the kernels cover (head
/// width > 64, distance-bias dimension > 4, stride 1 between levels of different widths). The network must
/// outlive the result. `edge_chunk`: messages computed at once (receivers are grouped into chunks of at
/// most that many edges, a receiver with more edges alone); it bounds the message buffers, not the result.
inline constexpr index_t kDefaultEdgeChunk = index_t{1} << 17;
std::unique_ptr<ErwinDeviceForward> make_erwin_cuda_forward(const Network& net, int device,
                                                            index_t edge_chunk = kDefaultEdgeChunk);

}  // namespace surrogate::erwin::detail
