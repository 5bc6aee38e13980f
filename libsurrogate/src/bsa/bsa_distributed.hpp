// The distributed BSA forward (share/docs/balltree.md, "Running BSA", multi-rank): every rank runs the
// layers on its own slots of the distributed ball tree (balltree_distributed.hpp), whole balls,
// compression blocks and selection groups; the rotated layers go through the tree's exchange plan, the
// compressed keys and values of every block are all-gathered (N / C rows), and the token rows of the
// blocks a rank selected are fetched from their owners, layer by layer; with global attention every rank
// fetches the keys and values of the samples it holds part of. The result is bitwise that of the
// single-process forward at any rank count and partition. Internal to libsurrogate.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "../balltree/point_cloud_model.hpp"
#include "bsa_stages.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"

namespace surrogate::bsa::detail {

class BsaDeviceForward;

/// all (the batch's compressed blocks in global order, `width` floats each) = every rank's `count` local
/// blocks (its slots / C, in slot order). Collective.
void gather_compressed_blocks(const Comm& comm, const balltree::DistributedTree& tree, int C, const float* local_blocks,
                              index_t count, int width, float* all);

/// The plan that fetches the token rows of the global blocks `blocks` (block b = global slots [b C, (b+1) C))
/// from their owners: source = the owners' local slot rows, target row i C + c = slot blocks[i] C + c.
/// Collective (every rank with its own list).
ExchangePlan block_fetch_plan(const Comm& comm, const balltree::DistributedTree& tree, int C,
                                        std::span<const std::int64_t> blocks);

/// The tree granularity that keeps every ball (ball_size, and attention_ball_size for ball attention),
/// compression block (C) and selection group (G) of every layer on one rank: their least common multiple;
/// 2 (leaves) for global attention, which attends to whole samples wherever their rows are.
std::int64_t tree_granularity(const Config& config);

/// What a distributed forward needs from the geometry of a predict call: the canonical blocks (rank r
/// holds canonical points [block_bounds[r], block_bounds[r+1]), a plan between them and the caller's
/// rows), the distributed tree (with the rotated order) over the blocks, the rank's slots' positions in
/// tree and rotated order and its segments of samples; built once per geometry from the rank's block
/// (nothing of size N) and reused. The plans are applied through the communicator of the last rebind(). Every
/// attention type (global: see sample_rows_).
class DistributedPlan {
 public:
  /// Collective; `all` from PointCloudModel::gather_canonical in block mode (features not needed).
  /// Errors (the tree's input errors, unequal padded sample sizes, a size that is not whole balls,
  /// blocks and groups) are agreed.
  DistributedPlan(const Comm& comm, const Network& net, const CanonicalBatch& all, std::int64_t solver_rows);

  /// Use `comm` (the same ranks) for the next forwards.
  void rebind(const Comm& comm);
  std::int64_t block_rows() const { return block_.rows(); }
  /// The block's positions (block_rows() x dimensionality), in canonical order.
  std::span<const float> block_positions() const { return block_.positions(); }
  /// solver rows (width values each) -> this rank's block rows, and back. Collective.
  void to_block(const float* solver_rows, int width, float* block_rows) const { block_.to_block(solver_rows, width, block_rows); }
  void to_solver(const float* block_rows, int width, float* solver_rows) const { block_.to_solver(block_rows, width, solver_rows); }
  /// The network on the block's features (block_rows() x c_in); returns block_rows() x c_hidden values,
  /// bitwise the rows of Network::forward of the whole batch. Collective; NaN/Inf features are an
  /// agreed Error(input).
  std::vector<float> forward(const Network& net, std::span<const float> block_features, int threads) const;
  /// The same on a CUDA device (bsa_device.hpp, forward_distributed): the features moved to the rank's
  /// slots on the host, the layers on the device, the result moved back to the block on the host.
  /// `same_geometry`: this plan's geometry is already on `device` (its previous call). Collective;
  /// errors agreed.
  std::vector<float> forward_on_device(BsaDeviceForward& device, const Network& net,
                                       std::span<const float> block_features, bool same_geometry, int threads) const;

 private:
  const Comm* comm_;
  CanonicalBlock block_;
  balltree::DistributedRotatedTrees trees_;
  std::vector<float> slot_positions_, rotated_positions_;  // local slots x d, tree / rotated order
  RowLayout layout_;
  /// Global attention: local rows -> the n rows of every sample this rank holds only part of (its
  /// partial segments, in order), used in every layer (tree and rotated order) and every call.
  ExchangePlan sample_rows_;
};

}  // namespace surrogate::bsa::detail
