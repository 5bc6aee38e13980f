// Distributed ball tree: the tree of balltree.hpp built over the ranks of a communicator, identical
// (integer equality) to the single-process `build` of the gathered points, each rank holding a
// contiguous range of the global tree order made of whole subtrees; the redistribution plan between the
// solver's layout and the tree layout (reused every step); the rotated orders of the rotated layers and
// their exchanges. Algorithm, exactness argument, costs and limits: share/docs/balltree.md, section
// "Distributed tree".
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/exchange.hpp"

namespace surrogate::balltree {

/// A global order split among ranks: rank r owns positions [bounds[r], bounds[r+1]).
struct RankRanges {
  std::vector<std::int64_t> bounds{0};
  std::int64_t begin(int rank) const { return bounds[static_cast<std::size_t>(rank)]; }
  std::int64_t end(int rank) const { return bounds[static_cast<std::size_t>(rank) + 1]; }
  std::int64_t size(int rank) const { return end(rank) - begin(rank); }
  std::int64_t total() const { return bounds.back(); }
  /// The rank that owns position `pos` (0 <= pos < total()).
  int owner(std::int64_t pos) const;
};

/// The plan solver layout <-> tree layout of a DistributedTree. to_tree fills every local slot (padding
/// duplicates get the row of their original, the slot before them); to_solver returns every local point
/// its row from the slot that holds it with mask 1. Rows are `width` contiguous values.
class RedistributionPlan {
 public:
  RedistributionPlan() = default;
  explicit RedistributionPlan(ExchangePlan plan) : plan_(std::move(plan)) {}
  void to_tree(const float* solver_rows, int width, float* tree_rows) const { plan_.forward(solver_rows, width, tree_rows); }
  void to_tree(const double* solver_rows, int width, double* tree_rows) const { plan_.forward(solver_rows, width, tree_rows); }
  void to_solver(const float* tree_rows, int width, float* solver_rows) const { plan_.backward(tree_rows, width, solver_rows); }
  void to_solver(const double* tree_rows, int width, double* solver_rows) const { plan_.backward(tree_rows, width, solver_rows); }
  const ExchangePlan& exchange() const { return plan_; }
  void rebind(const Comm& comm) { plan_.rebind(comm); }
  /// Adds the bytes of every move to `sink` (ExchangePlan::count_into).
  void count_into(Traffic* sink) { plan_.count_into(sink); }

 private:
  ExchangePlan plan_;
};

/// How the global tree order is cut into rank ranges.
struct DistributedOptions {
  /// Every rank range is a multiple of this many slots (the last non-empty range ends at the total).
  /// Use the largest ball of the model in slots (for Erwin: max over levels of ball_sizes[i] times the
  /// product of the strides before level i; the largest ball size times the product of all strides is a
  /// safe choice). An odd value is doubled (a leaf of two slots never straddles ranks). Must be >= 1.
  std::int64_t granularity = 2;
  /// The median selections of nodes spread over several ranks run distributed (share/docs/balltree.md,
  /// "Distributed tree"); a remaining range of at most this many points that still spans ranks is
  /// gathered on one rank and finished there. Any value >= 0 gives the same tree; it trades rounds of
  /// small collectives against memory on that rank.
  std::int64_t serial_threshold = 4096;
  /// Finishes the float32 nodes this rank holds whole; null: balltree::build / partition on this host.
  /// It must give their results: the tree does not depend on it.
  NodeFinisher* finisher = nullptr;
};

/// This rank's part of the distributed tree.
struct DistributedTree {
  /// Points per sample (global) and the global slot ranges per sample (as Tree::slot_offsets).
  std::vector<std::int64_t> sample_points;
  std::vector<std::int64_t> slot_offsets;
  /// Every rank's range of global slots; this rank owns [slot_begin, slot_end).
  RankRanges slots;
  std::int64_t slot_begin = 0, slot_end = 0;
  /// For the local slots: the global point index (serial numbering, see below) and the mask, equal to
  /// Tree::index / Tree::mask of the single-process build in [slot_begin, slot_end).
  std::vector<std::int64_t> index;
  std::vector<std::uint8_t> mask;
  /// The global point index of every local point. Serial numbering: sample by sample; inside a sample,
  /// rank 0's points of that sample in local order, then rank 1's, ... (the order the single-process
  /// build must be given to get the same tree).
  std::vector<std::int64_t> local_point_index;
  /// Solver layout (the local points, in the caller's order) <-> tree layout (the local slots).
  RedistributionPlan plan;
  /// The largest number of points (index and coordinates) the build held at once on this rank in its own
  /// buffers (work array, messages, gathered ranges, the subtrees it finishes), the caller's input not
  /// counted: at most the work array plus the larger of 2 (max(serial_threshold, ceil(points / P) / 8,
  /// 4096) + P) (one batch of a selection round's swaps, both ways) and serial_threshold (a gathered
  /// range). The work array is ceil(points / P), or, where the serial positions of this rank's points
  /// (its slots' points) differ from its part, the union of the two runs (one buffer, the subtrees
  /// delivered in place), both added only when the runs are disjoint; a range gathered at introselect's
  /// depth limit (adversarial input) can be larger.
  std::int64_t peak_points = 0;

  std::int64_t local_slots() const { return slot_end - slot_begin; }
  std::int64_t total_slots() const { return slot_offsets.back(); }
};

/// Builds the tree collectively. `local_positions` holds this rank's points row-major (points x dim);
/// `local_sample_ids` the sample of each (0 .. samples-1, any order; the number of samples is the
/// largest id over all ranks plus one). A rank may hold no points. Every sample needs at least 2 points
/// in total. Errors (bad sizes, ids, NaN/Inf, a sample of fewer than 2 points) are agreed: every rank
/// throws the same surrogate::Error, naming the first failing rank.
DistributedTree build_distributed(const Comm& comm, std::span<const float> local_positions, int dim,
                                  std::span<const std::int64_t> local_sample_ids, const DistributedOptions& options = {});
DistributedTree build_distributed(const Comm& comm, std::span<const double> local_positions, int dim,
                                  std::span<const std::int64_t> local_sample_ids, const DistributedOptions& options = {});

/// The rotated orders of build_with_rotations, distributed: level i's nodes are the global slots divided
/// by p_i = strides[0] * ... * strides[i-1]; this rank owns level-i nodes [slot_begin / p_i, slot_end / p_i).
struct DistributedRotations {
  std::vector<int> target_levels;
  /// node_begin[i]: first level-i node of this rank.
  std::vector<std::int64_t> node_begin;
  /// rotated[i][k] = RotatedTrees::rotated[i][node_begin[i] + k] (a global level-i node index).
  std::vector<std::vector<std::int64_t>> rotated;
  /// exchange[i].forward: rows of this rank's level-i nodes in tree order -> rows in rotated order
  /// (rotated row k = tree node rotated[i][k]); backward is the inverse.
  std::vector<ExchangePlan> exchange;
  /// As DistributedTree::peak_points, the largest over the levels' placements.
  std::int64_t peak_points = 0;
};

/// build_with_rotations over the ranks (angle > 0; float32 points, dim 2 or 3): the tree as
/// build_distributed and, per level, the rotated order and its exchange plan. options.granularity must
/// be a multiple of strides[0] * ... * strides[levels-2] (rank ranges hold whole pooling groups).
struct DistributedRotatedTrees {
  DistributedTree tree;
  DistributedRotations rotations;
};
DistributedRotatedTrees build_distributed_with_rotations(const Comm& comm, std::span<const float> local_positions, int dim,
                                                         std::span<const std::int64_t> local_sample_ids,
                                                         std::span<const int> strides, std::span<const int> ball_sizes,
                                                         double angle_degrees, const DistributedOptions& options = {});

}  // namespace surrogate::balltree
