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

/// The canonical points cut into contiguous blocks, rank r holding canonical points
/// [bounds[r], bounds[r+1]) (balanced by count), and the plan between the caller's rows (solver layout)
/// and this rank's block. Collective.
struct CanonicalBlocks {
  balltree::RankRanges ranges;
  std::int64_t begin = 0, end = 0;
  balltree::ExchangePlan plan;  // forward: solver rows -> block rows; backward: block rows -> solver rows
  CanonicalBlocks(const Comm& comm, const CanonicalBatch& all, std::int64_t local_rows);
  std::int64_t rows() const { return end - begin; }
};

/// The Erwin network over the ranks. `block_features`: this rank's block of canonical points
/// (blocks.rows() x c_in); `all`: positions, samples and edges of the whole batch in canonical order
/// (features not needed). Returns blocks.rows() x c_hidden[0] values, bitwise equal to the rows of
/// Network::forward(all features, all.positions, all.batch, all.edges). Collective; errors are agreed.
std::vector<float> forward_distributed(const Comm& comm, const Network& net, const CanonicalBlocks& blocks,
                                       std::span<const float> block_features, const CanonicalBatch& all, int threads);

/// The tree granularity that makes every ball of every level and every pooling group local to one rank:
/// the least common multiple of ball_sizes[i] * strides[0] * ... * strides[i-1] over the levels and of
/// the product of all strides.
std::int64_t tree_granularity(const Config& config);

}  // namespace surrogate::erwin::detail
