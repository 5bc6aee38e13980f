// Sequoia (HySonLab/HierAttention point-cloud models): the voxel hierarchy of util/voxel_fixed.py, its batch
// collation, and the CPU networks TreeTransformerSeg / TreeTransformerCls. share/docs/sequoia.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/model_file.hpp"

namespace surrogate::sequoia {

using index_t = std::int64_t;

/// 64-bit FNV of integer columns as the reference hashes them: start at 14695981039346656037, per column
/// multiply by 1099511628211 (mod 2^64) THEN xor the value (sign-extended to 64 bits).
std::uint64_t fnv64(const std::int64_t* columns, int count);

/// The hierarchy of one sample (share/docs/sequoia.md, "Hierarchy"). Tree levels 0 (the root voxel) ..
/// depth (the points); node ids 0 .. n-1 the points in input order, n + r the r-th voxel in ascending hash.
struct SampleHierarchy {
  index_t n = 0;
  int divide = 0, depth = 0;
  std::vector<float> points;                       // n x 3, as given
  float lo[3] = {0, 0, 0}, hi[3] = {0, 0, 0};
  std::vector<float> steps;                        // depth x 3
  std::vector<std::int32_t> voxel_coords;          // depth x n x 3
  std::vector<std::uint64_t> voxel_hashes;         // V, ascending
  std::vector<std::int32_t> voxel_rows;            // V x 4: (vx, vy, vz, level)
  std::vector<float> virtual_positions;            // V x 3, voxel centres in the frame shifted by -lo
  std::vector<std::vector<std::uint64_t>> pair_hashes;  // per middle level 1 .. depth-2, ascending
  std::vector<std::int64_t> mapping;               // M x 4: (parent, child, parent level, child level)
  index_t voxels() const { return static_cast<index_t>(voxel_hashes.size()); }
  index_t mapping_rows() const { return static_cast<index_t>(mapping.size() / 4); }
};

/// Builds the hierarchy of n points (row-major n x 3, float32) as the reference does. Throws Error(input)
/// (message naming `what`) for n = 0, non-finite coordinates, or an extent so large that the float32
/// margins put a point outside the root voxel (the reference fails there too).
SampleHierarchy build_sample_hierarchy(const float* points, index_t n, int divide, int depth,
                                       const std::string& what = "sample");

/// One sample's points for build_sample_hierarchies: n rows of (x, y, z) float32 and the name its errors use.
struct SamplePoints {
  const float* points = nullptr;
  index_t n = 0;
  std::string what;
};

/// build_sample_hierarchy of every sample, the samples on the OpenMP threads. The result and any error are
/// those of building them one after another: the error of the first failing sample is thrown.
std::vector<SampleHierarchy> build_sample_hierarchies(const std::vector<SamplePoints>& samples, int divide, int depth);

/// A batch of samples collated as the reference's collate_fn and indexed as its _index: model level
/// i = 0 .. depth (0 the points, depth the roots) = tree level depth - i. coords, mapping and
/// mapping_local are the collation's rows, read by nothing after it: a plan built on a CUDA device leaves
/// them empty.
struct Hierarchy {
  int depth = 0;                                   // voxel levels; model levels = depth + 1
  std::vector<index_t> point_offsets;              // B + 1: the samples' points in the batch's point rows
  std::vector<index_t> offset;                     // B: cumulative node counts (points and voxels)
  std::vector<index_t> sample_ids;                 // B: each sample's index in the caller's batch (errors)
  std::vector<float> coords;                       // T x 3: per sample its points, then its voxel centres
  std::vector<std::int64_t> mapping;               // M x 4, global node ids
  std::vector<std::int64_t> mapping_local;         // M x 4, columns 0-1 as level-local ids
  std::vector<std::vector<std::int64_t>> level_ids;    // per model level: sorted global ids
  std::vector<std::vector<std::int64_t>> level_batch;  // per model level: sample of each node
  std::vector<std::vector<std::int64_t>> pool_parent;  // per model level 0 .. depth-1: Init's pooling target
  /// Per model level, its nodes' positions (float32, row-major x 3).
  std::vector<std::vector<float>> level_positions;
  /// Edge lists per model level, sorted by query (stable: mapping order among a query's edges):
  /// parents: (child local id, parent local id at level i+1); children: (parent, child local id at i-1).
  std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> parent_edges, child_edges;
  index_t samples() const { return static_cast<index_t>(offset.size()); }
  index_t nodes(int level) const { return static_cast<index_t>(level_ids[static_cast<std::size_t>(level)].size()); }
};

/// sample_ids: the samples' indices in the caller's batch (empty: 0 .. B-1).
Hierarchy collate(const std::vector<SampleHierarchy>& samples, std::vector<index_t> sample_ids = {});

/// Every sample's hierarchy (points row-major, samples by point_offsets, B + 1 values) collated.
Hierarchy build_hierarchy(const float* points, const std::vector<index_t>& point_offsets, int divide, int depth);

/// Sibling lists of one model level: per node, `k` level-local ids of its nearest same-sample nodes by
/// the squared distance of the float32 positions computed exactly (double), nearest first, equal distances
/// by ascending id; a sample with fewer than k nodes lists all of them and repeats the first entry.
std::vector<std::int64_t> sibling_lists(const Hierarchy& h, int level, int k);

/// The hyperparameters of either model (/config attributes under the reference's `args` names).
struct Config {
  enum class Kind { segmentation, classification };
  Kind kind = Kind::segmentation;
  int c = 3, dim = 128, heads = 4, depth = 3, layers = 4, divide = 3;
  int n_class = 0, n_part = 0;       // segmentation head
  int dim_cls = 0, classes = 40;     // classification head
  std::string selection = "root";    // classification: root | inner | leaf
  int k_siblings() const { return kind == Kind::segmentation ? 16 : 8; }
  static constexpr int k_pointconv = 16;
  int levels() const { return depth + 1; }
  int width(int level) const { return dim << level; }
  /// From a model file's root attribute `model_class` and /config; Error(format) naming the attribute.
  static Config from_file(const ModelFile& file);
  ExpectedShapes expected_shapes() const;
  std::vector<std::pair<std::string, std::string>> describe() const;
};

struct Share;  // the part of a hierarchy one rank computes (internal: src/sequoia/share.hpp)

/// The CPU forward of either model on a collated hierarchy.
class Network {
 public:
  Network(const ModelFile& file, const Config& cfg);
  ~Network();
  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;
  const Config& config() const;

  /// Throws Error(input) for a hierarchy the model cannot run: the segmentation model with a sample that
  /// has a single node at a level with siblings (the reference fails there with an IndexError).
  void check(const Hierarchy& h) const;

  /// Intermediate results, for tests (filled when asked for).
  struct Trace {
    std::vector<std::vector<float>> init, block0_y, block0_parents, block0_children, block0_siblings, block0_out;
  };
  /// features: the points' c input channels (point rows of the batch, row-major); sample_features: B x
  /// n_class (segmentation; the class vector each sample's points get). Returns segmentation: points x
  /// n_part; classification: B x classes. `siblings` (optional): per model level the lists to use
  /// instead of sibling_lists (tests replaying the reference's lists).
  std::vector<float> forward(const Hierarchy& h, const float* features, const float* sample_features,
                             Trace* trace = nullptr,
                             const std::vector<std::vector<std::int64_t>>* siblings = nullptr) const;
  /// The forward of the share's points (features: their rows, in order) on a hierarchy that every rank
  /// of a split share holds whole (collective then). Returns segmentation: share points x n_part;
  /// classification: B x classes (every rank the same).
  std::vector<float> forward(const Share& share, const Hierarchy& h, const float* features,
                             const float* sample_features, Trace* trace = nullptr) const;

  /// The weights (internal: src/sequoia/network_impl.hpp; the CUDA forward reads them).
  struct Impl;
  const Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sequoia
