// The BSA plan of a point set (share/docs/balltree.md, "Plans and exchanges"): what every forward on the
// same points reuses, built once by BsaModel::build_plan (plan.cpp); its CPU forward is in
// network_distributed.cpp, its device forward in cuda/. Every rank runs the layers on its own slots of the
// distributed ball tree (whole balls, compression blocks and selection groups); bitwise the one-process
// forward at any rank count and partition.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../balltree/plan.hpp"
#include "network.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"

namespace surrogate::bsa::detail {

class BsaDeviceForward;  // cuda/device.hpp

/// The plan that fetches the token rows of the global blocks `blocks` (block b = global slots [b C, (b+1) C))
/// from their owners: source = the owners' local slot rows, target row i C + c = slot blocks[i] C + c.
/// Collective (every rank with its own list).
ExchangePlan block_fetch_plan(const Comm& comm, const balltree::DistributedTree& tree, int C,
                              std::span<const std::int64_t> blocks);

/// The tree granularity that keeps every ball (ball_size, and attention_ball_size for ball attention),
/// compression block (C) and selection group (G) of every layer on one rank: their least common multiple;
/// 2 (leaves) for global attention, which attends to whole samples wherever their rows are.
std::int64_t tree_granularity(const Config& config);

/// Beyond the shared part (balltree/plan.hpp: the canonical block, the distributed tree with the rotated
/// order and its exchange, the slots' positions): the slots' positions in rotated order, the rank's slots
/// cut at sample boundaries (RowLayout), and the exchanges of the layers: sparse attention all-gathers the
/// compressed keys and values of every block (one plan, N / C rows) and fetches the token rows of the
/// blocks a rank selected from their owners (a plan per layer, built from the selection); global attention
/// fetches the keys and values of the samples a rank holds only part of (one plan). On a device, the
/// uploaded geometry (BallTreePlan::device_geometry, made by the first device forward).
class BsaPlan final : public balltree::BallTreePlan {
 public:
  /// Collective. Errors (the tree's input errors, unequal padded sample sizes, a size that is not whole
  /// balls, blocks and groups) are agreed.
  BsaPlan(const Comm& comm, Plan::Basis basis, const PointCloudModel& model, const Network& net, int threads,
          balltree::NodeFinisher* finisher);

  void rebind(const Comm& comm) override;

  /// The network on the block's features (block_rows() x c_in); returns block_rows() x c_hidden values,
  /// bitwise the rows of Network::forward of the whole batch. Collective; NaN/Inf features are an agreed
  /// Error(input). network_distributed.cpp.
  std::vector<float> forward(const Network& net, std::span<const float> block_features, int threads);
  /// The same with the layers on a CUDA device (cuda/device.hpp): the features moved to the rank's slots
  /// on the host, the layers on the device, the result moved back to the block on the host. With the
  /// ShapeNet-Car wrapper: no features, and the wrapper's one value a row (features and head on the
  /// device). Collective; errors agreed.
  std::vector<float> forward_on_device(BsaDeviceForward& device, const Network& net,
                                       std::span<const float> block_features);

  /// The local slots cut at sample boundaries.
  const RowLayout& row_layout() const { return layout_; }
  /// The slots' positions in rotated order (rotated models; empty otherwise).
  std::span<const float> rotated_positions() const { return rotated_positions_; }
  /// Tree order -> rotated order of the slots (rotated models): the exchange of the rotated tree.
  const ExchangePlan& rotation() const;
  /// Sparse attention: every rank's compressed blocks (its slots / C rows) to every rank, in global order.
  const ExchangePlan& compressed_blocks() const { return compressed_; }
  /// Global attention: local rows -> the n rows of every sample this rank holds only part of (its partial
  /// segments, in order), in every layer (tree and rotated order) and every call.
  const ExchangePlan& sample_rows() const { return sample_rows_; }
  /// block_fetch_plan of `blocks`, counting into this plan's traffic. Collective.
  ExchangePlan fetch_plan(std::span<const std::int64_t> blocks);

 private:
  int compress_block_size_ = 1;
  std::vector<float> rotated_positions_;  // local slots x d, rotated order
  RowLayout layout_;
  ExchangePlan compressed_, sample_rows_;
};

}  // namespace surrogate::bsa::detail
