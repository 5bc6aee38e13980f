// Registered models of the ball-tree family (Erwin, BSA): the generic Model path for networks
// whose forward takes the whole batch (features, positions, samples and, for message passing, edges)
// in one process. A family derives from PointCloudModel, says how many coordinates and which graph
// rule it needs, and implements run_batch(); gathering, the canonical point order, the graph and the
// return of each rank's rows are done here.
//
// Multi-rank, gathered mode (forward_geometry; NOT scalable, used by BSA's global attention): every rank gathers all points
// of the batch (features, positions, global ids, samples) and all edges with collectives, runs the
// forward redundantly on the whole batch and keeps its own rows. The result is bitwise independent of
// the rank count and the partition (the forward sees the same arrays in the same order everywhere), but
// memory and time per rank are those of a single process. A family that runs distributed (Erwin, BSA, on
// the distributed ball tree) overrides forward_geometry and uses gather_canonical without features, with
// each rank's edges only, and keeps its plan while the GeometryKey stays the same.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/model.hpp"

namespace surrogate {

/// How a model builds its message-passing graph when the caller gives no edges (/config attributes
/// `graph` = "knn" | "radius" | "none", `graph_k`, `graph_radius`, `graph_max_num_neighbors` (32),
/// `graph_loop` (1); share/docs/model-format.md §4.2).
struct GraphRule {
  enum class Kind { none, knn, radius };
  Kind kind = Kind::none;
  int k = 0;
  double radius = 0.0;
  int max_num_neighbors = 32;
  bool loop = true;
  /// Absent `graph` = none. Throws Error(format) naming the attribute.
  static GraphRule from_attributes(const AttributeMap& config);
  /// "knn (k 8, loop)", "radius (r 0.05, at most 32 neighbours, loop)", "none (edges must be given)".
  std::string describe() const;
  /// The edges (2 x E, canonical indices) of the rule on row-major positions, for the receivers in
  /// `receivers` (default: all points; see graph::ReceiverRange).
  std::vector<std::int64_t> build(std::span<const float> positions, int dim, const balltree::Batch& batch,
                                  int threads, graph::ReceiverRange receivers = {}) const;
};

/// A predict call's batch on every rank in canonical order (samples in order, points of a sample by
/// increasing global id), from PointCloudModel::gather_canonical.
struct CanonicalBatch {
  balltree::Batch batch;
  std::vector<float> features;      // points x in_channels (empty unless gathered with features)
  std::vector<float> positions;     // points x dim
  std::vector<std::int64_t> edges;  // 2 x E canonical indices (sources, then receivers); empty without edges
  bool edges_given = false;         // from the caller (else built by the graph rule, or none)
  /// Block mode: rank r's block of canonical points is [block_bounds[r], block_bounds[r+1]) (balanced
  /// by count) and `edges` holds only the edges whose receiver is in this rank's block, in the order of
  /// the whole graph. Otherwise one block [0, points) and every edge.
  std::vector<std::int64_t> block_bounds;
  std::vector<std::int64_t> canonical_of_row;  // this rank's rows -> canonical index
  std::vector<int> owner_rank;                 // canonical index -> the rank that holds the point
  std::vector<std::int64_t> owner_row;         // canonical index -> its row on that rank
};

/// This rank's block of a CanonicalBatch gathered in block mode (canonical points [begin(), end())), its
/// positions, and the plan that moves rows between the caller's rows and the block. Shared by the
/// distributed plans of the families; applied through the communicator of the last rebind().
class CanonicalBlock {
 public:
  CanonicalBlock() = default;
  /// Collective. `dim` coordinates per point; `family` names the internal error when `all` was not
  /// gathered in block mode.
  CanonicalBlock(const Comm& comm, const CanonicalBatch& all, int dim, std::int64_t solver_rows,
                 const std::string& family);
  std::int64_t begin() const { return begin_; }
  std::int64_t end() const { return end_; }
  std::int64_t rows() const { return end_ - begin_; }
  /// rows() x dim, in canonical order.
  std::span<const float> positions() const { return positions_; }
  /// solver rows (width values each) -> the block's rows, and back. Collective.
  void to_block(const float* solver_rows, int width, float* block_rows) const { plan_.forward(solver_rows, width, block_rows); }
  void to_solver(const float* block_rows, int width, float* solver_rows) const { plan_.backward(block_rows, width, solver_rows); }
  void rebind(const Comm& comm) { plan_.rebind(comm); }

 private:
  std::int64_t begin_ = 0, end_ = 0;
  balltree::ExchangePlan plan_;  // forward: solver rows -> block rows
  std::vector<float> positions_;
};

/// What a distributed plan depends on, on this rank: positions, global ids, samples, edges (compared bit
/// for bit; whether every rank's key is unchanged is agreed collectively by the caller).
struct GeometryKey {
  int rank = -1, size = 0;
  std::vector<float> positions;
  std::vector<std::int64_t> ids, samples, edges;
  bool has_edges = false;
  static GeometryKey of(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, int dim);
  bool operator==(const GeometryKey& other) const;
};

class PointCloudModel : public Model {
 public:
  int position_dim() const override { return dim_; }
  bool needs_edges() const override { return uses_edges_ && rule_.kind == GraphRule::Kind::none; }
  const GraphRule& graph_rule() const { return rule_; }

 protected:
  /// `uses_edges`: the network passes messages (edges are gathered or built); otherwise edges are ignored.
  PointCloudModel(const ModelFile& file, int in_channels, int out_channels, int dim, bool uses_edges);

  /// The family's forward on the whole batch in canonical order (samples in order, points of a sample by
  /// increasing global id): `features` row-major N x in_channels() (normalised), `positions` N x dim,
  /// `edges` 2 x E canonical indices (empty when the network uses none). Returns N x out_channels().
  virtual std::vector<float> run_batch(std::span<const float> features, std::span<const float> positions,
                                       const balltree::Batch& batch, std::span<const std::int64_t> edges,
                                       int threads) const = 0;

  void forward_geometry(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const float* in,
                        index_t ld_in, float* out, index_t ld_out, const RunOptions& options) override;

  /// Gathers the batch (ids, samples, positions, features when `with_features`) on every rank and puts it
  /// in canonical order. Edges: the caller's or, when the network uses edges and none were given, built
  /// by the graph rule; with `block_edges` each rank gets (given edges: by an all-to-all to the owner of
  /// the receiver's block) or builds only the edges of its block's receivers, otherwise every rank gets
  /// every edge. Collective; errors (a global id given twice, an edge joining two samples) are agreed.
  CanonicalBatch gather_canonical(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry,
                                  const float* in, index_t ld_in, bool with_features, bool block_edges,
                                  int threads) const;

 private:
  int dim_;
  bool uses_edges_;
  GraphRule rule_;
};

}  // namespace surrogate
