// The Erwin plan of a point set (share/docs/balltree.md, "Plans and exchanges"): what every forward on
// the same points reuses, built once by ErwinModel::build_plan (plan.cpp); its CPU forward is in
// network_distributed.cpp, its device forward in cuda/. Bitwise the one-process forward at any rank count.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../balltree/plan.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::erwin::detail {

/// The tree granularity that makes every ball of every level and every pooling group local to one rank:
/// the least common multiple of ball_sizes[i] * strides[0] * ... * strides[i-1] over the levels and of
/// the product of all strides.
std::int64_t tree_granularity(const Config& config);

/// Beyond the shared part (balltree/plan.hpp: the canonical block, the distributed tree with the rotated
/// orders and their exchanges, the slots' positions):
/// * the message-passing edges of the block's receivers (local indices) and the halo plan that fetches
///   their remote sources, with the halo's positions;
/// * the node count of every level on this rank;
/// * on a device, the uploaded geometry (BallTreePlan::device_geometry, made by the first device forward).
/// Built from the rank's block (nothing of size N); a forward moves this rank's rows only.
class ErwinPlan final : public balltree::BallTreePlan {
 public:
  /// Collective. Errors (a configuration that cannot run, no edges for message passing, the tree's input
  /// errors, a level that is not whole balls) are agreed. `finisher`: what finishes the ball trees
  /// (balltree::DeviceTrees::for_run; null: the host).
  ErwinPlan(const Comm& comm, Plan::Basis basis, const PointCloudModel& model, const Network& net, int threads,
            balltree::NodeFinisher* finisher);

  void rebind(const Comm& comm) override;

  /// The network on the block's features (block_rows() x c_in); returns block_rows() x c_hidden[0]
  /// values, bitwise the rows of Network::forward of the whole batch. Collective; NaN/Inf features are
  /// an agreed Error(input). network_distributed.cpp.
  std::vector<float> forward(const Network& net, std::span<const float> block_features, int threads) const;

  // What the device forward reads once per plan (cuda/layout.cpp).
  /// Remote message-passing sources of the block's receivers (rows block_rows() .. after the block).
  std::int64_t halo_rows() const { return halo_rows_; }
  /// 2 x E: sources (block rows, then halo rows), receivers (block rows); empty without message passing.
  std::span<const std::int64_t> local_edges() const { return local_edges_; }
  /// (block_rows() + halo_rows()) x dimensionality (empty without message passing).
  std::span<const float> edge_positions() const { return edge_positions_; }
  /// forward: the owners' block rows -> this rank's halo rows.
  const ExchangePlan& halo_plan() const { return halo_plan_; }
  /// This rank's node count per level.
  std::span<const index_t> level_nodes() const { return level_nodes_; }

 private:
  std::int64_t halo_rows_ = 0;
  std::vector<std::int64_t> local_edges_;  // 2 x E: sources (block rows, then halo rows), receivers (block rows)
  std::vector<float> edge_positions_;      // (block + halo rows) x d
  ExchangePlan halo_plan_;                 // forward: block rows of the owners -> this rank's halo rows
  std::vector<index_t> level_nodes_;       // this rank's node count per level
};

}  // namespace surrogate::erwin::detail
