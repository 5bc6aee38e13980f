// The shared base of the ball-tree Models (Erwin, BSA): positions and graph rule (GraphRule), the canonical
// order of a batch (route_canonical; block mode for the plans, gathered mode on every rank) and this rank's
// block of it (CanonicalBlock). share/docs/balltree.md, "Running Erwin" (multi-rank) and "Code layout".
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/graph_distributed.hpp"
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
  /// The edges of this rank's block's receivers from the canonical blocks, without gathering samples
  /// (graph_distributed.hpp): exactly build(all positions, ..., ReceiverRange{block}). Collective; `stats`
  /// (optional) says what this rank held. Kind::none: the same error as build() (not agreed: every rank
  /// throws it alike).
  std::vector<std::int64_t> build_distributed(const Comm& comm, const graph::CanonicalBlocks& blocks, int threads,
                                              graph::DistributedGraphStats* stats = nullptr) const;
};

/// A predict call's batch in canonical order (samples in order, points of a sample by increasing global
/// id), from route_canonical (block mode) or PointCloudModel::gather_canonical (either mode).
///
/// Block mode (the distributed plans): rank r holds canonical points [block_bounds[r], block_bounds[r+1])
/// (balanced by count, total * r / P) and `features`, `positions`, `owner_rank`, `owner_row` hold only
/// those rows (index k is canonical point block_bounds[rank] + k); `edges` holds only the edges whose
/// receiver is in this rank's block, in the order of the whole graph. Nothing of size N is kept.
/// Gathered mode: one block [0, points), `features` and `positions` of every point, every edge, and no
/// owner maps.
struct CanonicalBatch {
  balltree::Batch batch;            // the samples' offsets (samples + 1 values)
  std::vector<float> features;      // rows x in_channels (empty unless asked for)
  std::vector<float> positions;     // rows x dim
  std::vector<std::int64_t> edges;  // 2 x E canonical indices (sources, then receivers); empty without edges
  bool edges_given = false;         // from the caller (else built by the graph rule, or none)
  std::vector<std::int64_t> block_bounds;
  std::vector<std::int64_t> canonical_of_row;  // this rank's rows -> canonical index
  std::vector<int> owner_rank;                 // block row -> the rank that holds the point (block mode)
  std::vector<std::int64_t> owner_row;         // block row -> its row on that rank (block mode)
  /// The most points (records or rows) this rank held in one buffer while computing the canonical
  /// order, the owners and the blocks: at most max(local points, ceil(N / P)) in block mode (the caller's
  /// rows, its key range of ids, the block). Not counted: the graph rule's halo (below).
  std::int64_t largest_point_buffer = 0;
  /// Block mode with a graph rule: the other ranks' points this rank fetched to build its receivers' edges
  /// (the halo), what it sent, and the samples it had to fetch whole (graph_distributed.hpp; 0 otherwise).
  graph::DistributedGraphStats graph_stats;
};

/// How route_canonical treats the edges the caller gave (PointGeometry::edge_index).
enum class GivenEdges {
  ignore,    // no edges
  to_blocks, // each edge to the rank owning its receiver's block (block mode)
  local,     // each rank's own edges, in its order, translated to canonical indices (for gathering)
};

/// The canonical order without gathering (memory O(N / P + local points) per rank): every point's (global
/// id, sample, row) goes to the rank owning its id's range (ids are dense: ranges total * r / P), which
/// checks the ids (a duplicate is an agreed Error(input) naming the id and both holders), counts its
/// points per sample, takes the exclusive prefix of those counts over ranks (B values) and so knows the
/// canonical slot of every id it owns; the slot goes back to the point's rank (canonical_of_row), which
/// sends the point's position (and `channels` features of `in`, row stride ld_in) to the rank owning that
/// slot's block. Given edges ask the id owners for their endpoints' slots (an edge joining two samples is
/// an agreed Error(input)). Returns block mode; with GivenEdges::local `edges` holds this rank's edges.
/// Collective.
CanonicalBatch route_canonical(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, int dim,
                               const float* in, index_t ld_in, int channels, GivenEdges edges);

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
  /// The sample of every row.
  std::span<const std::int64_t> samples() const { return samples_; }
  /// solver rows (width values each) -> the block's rows, and back. Collective.
  void to_block(const float* solver_rows, int width, float* block_rows) const { plan_.forward(solver_rows, width, block_rows); }
  void to_solver(const float* block_rows, int width, float* solver_rows) const { plan_.backward(block_rows, width, solver_rows); }
  /// The same moves at row strides: in host memory, or with a device `place` on rows in that device's
  /// memory (enqueued on its stream). Collective.
  void to_block(const float* solver_rows, index_t ld_solver, float* block_rows, index_t ld_block, int width,
                const Place& place = {}) const {
    plan_.forward(solver_rows, ld_solver, block_rows, ld_block, width, place);
  }
  void to_solver(const float* block_rows, index_t ld_block, float* solver_rows, index_t ld_solver, int width,
                 const Place& place = {}) const {
    plan_.backward(block_rows, ld_block, solver_rows, ld_solver, width, place);
  }
  void rebind(const Comm& comm) { plan_.rebind(comm); }
  void count_into(Traffic* sink) { plan_.count_into(sink); }

 private:
  std::int64_t begin_ = 0, end_ = 0;
  ExchangePlan plan_;  // forward: solver rows -> block rows
  std::vector<float> positions_;
  std::vector<std::int64_t> samples_;
};

class PointCloudModel : public Model {
 public:
  int position_dim() const override { return dim_; }
  bool needs_edges() const override { return uses_edges_ && rule_.kind == GraphRule::Kind::none; }
  bool uses_graph() const override { return uses_edges_; }
  const GraphRule& graph_rule() const { return rule_; }

  /// The batch in canonical order (route_canonical) of a plan's layout and working-order geometry.
  /// `block_mode` (the family plans): each rank gets its block (positions, owners), the given edges of its
  /// block's receivers or, when the network uses edges and none were given, builds those by the graph rule
  /// from its block and a halo of the other ranks' points that can be their neighbours
  /// (GraphRule::build_distributed). Otherwise (gathered mode) the blocks are all-gathered: every rank gets
  /// every point (with features when `with_features`) and every edge (the given ones in rank-major order).
  /// Collective; errors (a global id given twice or out of range, an edge joining two samples) are agreed.
  CanonicalBatch gather_canonical(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry,
                                  const float* in, index_t ld_in, bool with_features, bool block_mode,
                                  int threads) const;

 protected:
  /// `uses_edges`: the network passes messages (edges are gathered or built); otherwise edges are ignored.
  PointCloudModel(const ModelFile& file, int in_channels, int out_channels, int dim, bool uses_edges);

 private:
  int dim_;
  bool uses_edges_;
  GraphRule rule_;
};

}  // namespace surrogate
