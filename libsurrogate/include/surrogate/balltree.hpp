// Ball tree of Erwin / BSA, built exactly as the official `balltree-erwin` package (0.1.0) builds it:
// recursive median splits along the dimension of largest spread, libstdc++ std::nth_element for the
// split (its leftover order is part of the semantics), padding to a power of two with duplicates and a
// mask, partitions of an existing leaf order, and the rotated trees of build_balltree_with_rotations.
// Semantics, API and what is not done yet: share/docs/balltree.md; specification:
// docs/reference-models.md §1.2.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

namespace surrogate::balltree {

/// Samples of a batch as contiguous ranges of points: sample b holds points offsets[b] .. offsets[b+1]-1.
class Batch {
 public:
  /// One sample of `points` points.
  static Batch single(std::int64_t points);
  /// From a per-point sample index that starts at 0 and is sample-major and contiguous
  /// (non-decreasing in steps of 0 or 1), as the official code requires. An empty `batch_idx` is refused.
  static Batch from_batch_idx(std::span<const std::int64_t> batch_idx);
  /// From offsets (size samples+1, offsets[0] = 0, strictly increasing: no empty sample).
  static Batch from_offsets(std::span<const std::int64_t> offsets);

  std::int64_t samples() const { return static_cast<std::int64_t>(offsets_.size()) - 1; }
  std::int64_t points() const { return offsets_.back(); }
  std::int64_t begin(std::int64_t sample) const { return offsets_[static_cast<std::size_t>(sample)]; }
  std::int64_t end(std::int64_t sample) const { return offsets_[static_cast<std::size_t>(sample) + 1]; }
  std::int64_t size(std::int64_t sample) const { return end(sample) - begin(sample); }
  const std::vector<std::int64_t>& offsets() const { return offsets_; }
  /// The per-point sample index (0,0,...,1,1,...).
  std::vector<std::int64_t> batch_idx() const;

 private:
  std::vector<std::int64_t> offsets_{0};
};

/// Depth L of the tree of a sample of n >= 2 points: ceil(log2(n)) - 1 (2^L leaves of two slots each).
int tree_depth(std::int64_t n);
/// Slots of the tree of a sample of n >= 2 points: 2^(L+1), the next power of two >= n.
std::int64_t padded_size(std::int64_t n);

/// The complete ball trees of all samples of a batch, concatenated sample after sample.
struct Tree {
  /// Gather index (global point indices): slot s holds point index[s]; leaf features are x[index].
  std::vector<std::int64_t> index;
  /// 1 where the slot holds the point itself, 0 for a padding duplicate (a copy of the slot before it).
  std::vector<std::uint8_t> mask;
  /// Slot ranges per sample: sample b owns slots slot_offsets[b] .. slot_offsets[b+1]-1 (padded_size each).
  std::vector<std::int64_t> slot_offsets;

  std::int64_t slots() const { return static_cast<std::int64_t>(index.size()); }
  /// The sample index of every slot (the official `batch_idx[tree_idx]`).
  std::vector<std::int64_t> slot_batch_idx() const;
  /// For every input point, the slot that holds it with mask 1 (inverts the gather: output in input order).
  std::vector<std::int64_t> slot_of_point() const;
};

/// Builds the ball tree of every sample. `points` is row-major (points x dim); float32 coordinates are
/// converted to float64 exactly as the official code does, and all comparisons are made in float64.
/// Throws surrogate::Error for dim < 1, a size that is not points x dim, a point count that differs
/// from `batch`, a sample of fewer than 2 points, and NaN/Inf coordinates.
Tree build(std::span<const double> points, int dim, const Batch& batch);
Tree build(std::span<const float> points, int dim, const Batch& batch);

/// Reorders an existing sequence (for example the leaves of a tree) sample by sample by recursive median
/// splits until `target_level` splits were made or a range holds at most one point; no padding, no mask.
/// Returns a permutation of 0..points-1 (global indices): result[s] is the element placed in slot s.
std::vector<std::int64_t> partition(std::span<const double> points, int dim, const Batch& batch, int target_level);
std::vector<std::int64_t> partition(std::span<const float> points, int dim, const Batch& batch, int target_level);

/// build() and partition() of float32 points computed elsewhere with the same results (a CUDA device:
/// device::BallTrees, share/docs/cuda.md "Ball trees"): what build_with_rotations and the distributed tree
/// (DistributedOptions::finisher: the nodes a rank holds whole, several as the samples of one batch) call
/// instead when given one. Throws on failure.
class NodeFinisher {
 public:
  virtual ~NodeFinisher() = default;
  virtual Tree build(std::span<const float> points, int dim, const Batch& batch) = 0;
  virtual std::vector<std::int64_t> partition(std::span<const float> points, int dim, const Batch& batch,
                                              int target_level) = 0;
};

/// The rotation matrix of the official generate_rotation_matrix (degrees; dim 2 or 3), row-major,
/// each entry computed in double and rounded to float32; the first dim*dim entries hold R row-major
/// (the rest are 0). Applied to row vectors: y = x R.
std::array<float, 9> rotation_matrix(double angle_degrees, int dim);

/// Rows of (n x dim) float32 times rotation_matrix(angle, dim), in float32 as PyTorch's CPU matmul rounds
/// this product: y_j = (x_0 R_0j + x_1 R_1j) + x_2 R_2j, every product and sum rounded (no fused
/// multiply-add).
std::vector<float> rotate(std::span<const float> rows, int dim, double angle_degrees);

/// Number of partition steps of a rotated tree level: max(0, trunc(log2(total_leaves / ball_size))),
/// where total_leaves counts the slots of the WHOLE batch (not of one sample).
int rotation_target_level(std::int64_t total_leaves, std::int64_t ball_size);

/// The main tree and, when angle > 0, one rotated permutation per tree level.
struct RotatedTrees {
  Tree tree;
  /// Empty when angle <= 0 (the official code returns [None] * levels). Otherwise rotated[i] is a
  /// permutation of level i's node array (tree.slots() / prod(strides[0..i-1]) nodes).
  std::vector<std::vector<std::int64_t>> rotated;
  /// The partition steps used for each level (empty when angle <= 0).
  std::vector<int> target_levels;
};

/// The official build_balltree_with_rotations: the tree; its leaves rotated in float32 (x R); for each
/// level i the partition of the rotated nodes with rotation_target_level(slots, ball_sizes[i]); between
/// levels the rotated nodes are mean-pooled in float32 over consecutive groups of strides[i] (the sum in
/// PyTorch's CPU order, then divided by the stride) and the sample index subsampled ([::stride]).
/// Requires float32 points (the official code works only on float32) and strides.size() + 1 ==
/// ball_sizes.size(). The pooled-level node count must be divisible by each stride. `finisher`: what
/// builds the tree and the partitions (null: this host).
RotatedTrees build_with_rotations(std::span<const float> points, int dim, const Batch& batch,
                                  std::span<const int> strides, std::span<const int> ball_sizes,
                                  double angle_degrees, NodeFinisher* finisher = nullptr);

/// The mean pooling between rotated levels: rows of (n x dim) float32 averaged over consecutive groups of
/// `stride` rows, summed in the order PyTorch's CPU sum kernel uses (four interleaved partial sums,
/// cascaded for long groups), then divided by the stride. Exposed for tests.
std::vector<float> mean_pool(std::span<const float> rows, int dim, int stride);

}  // namespace surrogate::balltree
