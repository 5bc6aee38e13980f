// The distributed Erwin forward (share/docs/balltree.md, "Running Erwin", multi-rank): every rank runs
// the network on its own part of the distributed ball tree (balltree_distributed.hpp); the result is
// bitwise that of the single-process forward at any rank count and partition. Internal to libsurrogate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../balltree/point_cloud_model.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::erwin::detail {

/// The tree granularity that makes every ball of every level and every pooling group local to one rank:
/// the least common multiple of ball_sizes[i] * strides[0] * ... * strides[i-1] over the levels and of
/// the product of all strides.
std::int64_t tree_granularity(const Config& config);

/// What a distributed forward needs that depends only on the geometry of a predict call (positions,
/// global ids, samples, edges), built once and reused by every forward on that geometry:
/// * canonical blocks: rank r holds canonical points [block_bounds[r], block_bounds[r+1]) and a plan
///   moves rows between the caller's rows (solver layout) and the block;
/// * the message-passing edges of the block's receivers (local indices) and the halo plan that fetches
///   their remote sources;
/// * the distributed tree (with the rotated orders when rotate > 0) over the blocks: the plan block ->
///   the rank's slots, the slots' positions, the per-level exchanges of the rotated blocks.
/// The construction takes the rank's block from the CanonicalBatch (block mode: nothing of size N) and
/// fetches the halo's and slots' positions through the plans; a forward moves this rank's rows only.
/// The plans are applied through the communicator of the last rebind().
class DistributedPlan {
 public:
  /// Collective; `all` from PointCloudModel::gather_canonical in block mode (features not needed).
  /// Errors (a configuration that cannot run, no edges for message passing, the tree's input errors, a
  /// level that is not whole balls) are agreed.
  DistributedPlan(const Comm& comm, const Network& net, const CanonicalBatch& all, std::int64_t solver_rows);

  /// Use `comm` (the same ranks) for the next forwards.
  void rebind(const Comm& comm);
  std::int64_t block_rows() const { return block_.rows(); }
  /// The block's positions (block_rows() x dimensionality), in canonical order.
  std::span<const float> block_positions() const { return block_.positions(); }
  /// solver rows (width values each) -> this rank's block rows, and back. Collective.
  void to_block(const float* solver_rows, int width, float* block_rows) const { block_.to_block(solver_rows, width, block_rows); }
  void to_solver(const float* block_rows, int width, float* solver_rows) const { block_.to_solver(block_rows, width, solver_rows); }
  /// The network on the block's features (block_rows() x c_in); returns block_rows() x c_hidden[0]
  /// values, bitwise the rows of Network::forward of the whole batch. Collective; NaN/Inf features are
  /// an agreed Error(input).
  std::vector<float> forward(const Network& net, std::span<const float> block_features, int threads) const;

  // What the device forward reads once per geometry (erwin_cuda_layout.cpp: its arrays uploaded, its
  // plans applied to device rows through host memory, balltree/device_exchange.hpp).
  const Comm& comm() const { return *comm_; }
  std::int64_t block_begin() const { return block_.begin(); }
  /// Remote message-passing sources of the block's receivers (rows block_rows() .. after the block).
  std::int64_t halo_rows() const { return halo_rows_; }
  /// 2 x E: sources (block rows, then halo rows), receivers (block rows); empty without message passing.
  std::span<const std::int64_t> local_edges() const { return local_edges_; }
  /// (block_rows() + halo_rows()) x dimensionality (empty without message passing).
  std::span<const float> edge_positions() const { return edge_positions_; }
  /// forward: the owners' block rows -> this rank's halo rows.
  const ExchangePlan& halo_plan() const { return halo_plan_; }
  /// The distributed tree (plan: block rows <-> the rank's slots) and the rotated orders' exchanges.
  const balltree::DistributedRotatedTrees& trees() const { return trees_; }
  /// This rank's node count per level, and its slots' positions (local slots x dimensionality).
  std::span<const index_t> level_nodes() const { return level_nodes_; }
  std::span<const float> slot_positions() const { return slot_positions_; }

 private:
  const Comm* comm_;
  CanonicalBlock block_;
  std::int64_t halo_rows_ = 0;
  std::vector<std::int64_t> local_edges_;  // 2 x E: sources (block rows, then halo rows), receivers (block rows)
  std::vector<float> edge_positions_;      // (block + halo rows) x d
  ExchangePlan halo_plan_;       // forward: block rows of the owners -> this rank's halo rows
  balltree::DistributedRotatedTrees trees_;
  std::vector<index_t> level_nodes_;       // this rank's node count per level
  std::vector<float> slot_positions_;      // local slots x d
};

}  // namespace surrogate::erwin::detail
