// GraphRule, CanonicalBlock and PointCloudModel (point_cloud_model.hpp).
#include "point_cloud_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "distributed_internal.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/graph_distributed.hpp"

namespace surrogate {

CanonicalBlock::CanonicalBlock(const Comm& comm, const CanonicalBatch& all, int dim, std::int64_t solver_rows,
                               const std::string& family) {
  if (all.block_bounds.size() != static_cast<std::size_t>(comm.size()) + 1)
    throw Error(ErrorCode::internal, family + " (distributed): the batch was not gathered in block mode");
  begin_ = all.block_bounds[static_cast<std::size_t>(comm.rank())];
  end_ = all.block_bounds[static_cast<std::size_t>(comm.rank()) + 1];
  const auto n = static_cast<std::size_t>(rows());
  if (all.owner_rank.size() != n || all.positions.size() != n * static_cast<std::size_t>(dim))
    throw Error(ErrorCode::internal, family + " (distributed): the block's owners or positions are missing");
  plan_ = ExchangePlan::from_requests(comm, solver_rows, all.owner_rank, all.owner_row, {}, {});
  positions_ = all.positions;
  samples_.resize(n);
  const std::vector<std::int64_t>& offsets = all.batch.offsets();
  std::size_t sample = 0;
  for (std::int64_t c = begin_; c < end_; ++c) {
    while (offsets[sample + 1] <= c) ++sample;
    samples_[static_cast<std::size_t>(c - begin_)] = static_cast<std::int64_t>(sample);
  }
}

// ---------------------------------------------------------------------------------------------------
// GraphRule

GraphRule GraphRule::from_attributes(const AttributeMap& config) {
  GraphRule rule;
  const std::string kind = config.has("graph") ? config.get_string("graph") : "none";
  if (kind == "none") return rule;
  if (kind == "knn") {
    rule.kind = Kind::knn;
    rule.k = static_cast<int>(config.get_size("graph_k", 1, 4096));
  } else if (kind == "radius") {
    rule.kind = Kind::radius;
    rule.radius = config.get_double("graph_radius");
    rule.max_num_neighbors = static_cast<int>(config.get_size_or("graph_max_num_neighbors", 32, 1, 4096));
    if (!(rule.radius > 0) || !std::isfinite(rule.radius))
      throw Error(ErrorCode::format, "/config: graph_radius = " + std::to_string(rule.radius) + " must be positive");
    if (rule.max_num_neighbors < 1)
      throw Error(ErrorCode::format, "/config: graph_max_num_neighbors = " + std::to_string(rule.max_num_neighbors) +
                                         " must be at least 1");
  } else {
    throw Error(ErrorCode::format, "/config: graph = '" + kind + "' (expected knn, radius or none)");
  }
  rule.loop = config.get_int("graph_loop", 1) != 0;
  return rule;
}

std::string GraphRule::describe() const {
  const std::string loop_text = loop ? ", self loops" : ", no self loops";
  switch (kind) {
    case Kind::knn: return "knn (k " + std::to_string(k) + loop_text + ")";
    case Kind::radius: {
      char r[32];
      std::snprintf(r, sizeof r, "%.6g", radius);
      return std::string("radius (r ") + r + ", at most " + std::to_string(max_num_neighbors) + " neighbours" + loop_text + ")";
    }
    case Kind::none: break;
  }
  return "none (edges must be given)";
}

std::vector<std::int64_t> GraphRule::build_distributed(const Comm& comm, const graph::CanonicalBlocks& blocks, int threads,
                                                       graph::DistributedGraphStats* stats) const {
  switch (kind) {
    case Kind::knn: return graph::knn_graph_distributed(comm, blocks, k, loop, threads, stats).index;
    case Kind::radius: return graph::radius_graph_distributed(comm, blocks, radius, max_num_neighbors, loop, threads, stats).index;
    case Kind::none: break;
  }
  return build({}, blocks.dim, *blocks.batch, threads);  // the error
}

std::vector<std::int64_t> GraphRule::build(std::span<const float> positions, int dim, const balltree::Batch& batch,
                                           int threads, graph::ReceiverRange receivers) const {
  switch (kind) {
    case Kind::knn: return graph::knn_graph(positions, dim, batch, k, loop, threads, receivers).index;
    case Kind::radius:
      return graph::radius_graph(positions, dim, batch, radius, max_num_neighbors, loop, threads, receivers).index;
    case Kind::none: break;
  }
  throw Error(ErrorCode::input, "the model passes messages along a graph and its file names no rule to build one: "
                                "give the edges (edge_index)");
}

// ---------------------------------------------------------------------------------------------------
// PointCloudModel

namespace {

/// Every rank's `mine`, rank-major, on every rank.
template <class T>
std::vector<T> gather_all(const Comm& comm, const std::vector<T>& mine) {
  const std::uint64_t count = mine.size();
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(comm.size()));
  comm.allgather(&count, sizeof count, counts.data());
  std::vector<std::size_t> bytes(counts.size()), offsets(counts.size());
  std::size_t total = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = total * sizeof(T);
    bytes[r] = static_cast<std::size_t>(counts[r]) * sizeof(T);
    total += static_cast<std::size_t>(counts[r]);
  }
  std::vector<T> all(total);
  comm.allgatherv(mine.data(), mine.size() * sizeof(T), all.data(), bytes, offsets);
  return all;
}

}  // namespace

PointCloudModel::PointCloudModel(const ModelFile& file, int in_channels, int out_channels, int dim, bool uses_edges)
    : Model(file, in_channels, out_channels), dim_(dim), uses_edges_(uses_edges), rule_(GraphRule::from_attributes(file.config)) {}

CanonicalBatch PointCloudModel::gather_canonical(const Comm& comm, const SampleLayout& layout,
                                                 const PointGeometry& geometry, const float* in, index_t ld_in,
                                                 bool with_features, bool block_mode, int threads) const {
  const bool given = uses_edges_ && comm.allreduce<std::int64_t>(geometry.edge_index ? 1 : 0, ReduceOp::max) > 0;
  const GivenEdges edges = !given ? GivenEdges::ignore : block_mode ? GivenEdges::to_blocks : GivenEdges::local;
  CanonicalBatch result = route_canonical(comm, layout, geometry, dim_, in, ld_in, with_features ? in_channels() : 0, edges);

  if (!block_mode) {
    // The blocks are consecutive canonical ranges: their rank-major concatenation is the canonical order.
    result.positions = gather_all(comm, result.positions);
    result.features = gather_all(comm, result.features);
    result.owner_rank.clear();
    result.owner_row.clear();
    result.block_bounds = {0, layout.global_points()};
    if (given) {
      // Every rank's edges in its order, rank-major (the union's order), as (j, i) pairs.
      const std::size_t mine = result.edges.size() / 2;
      std::vector<std::int64_t> pairs(2 * mine);
      for (std::size_t e = 0; e < mine; ++e) {
        pairs[2 * e] = result.edges[e];
        pairs[2 * e + 1] = result.edges[mine + e];
      }
      pairs = gather_all(comm, pairs);
      const std::size_t count = pairs.size() / 2;
      result.edges.resize(pairs.size());
      for (std::size_t e = 0; e < count; ++e) {
        result.edges[e] = pairs[2 * e];
        result.edges[count + e] = pairs[2 * e + 1];
      }
    } else if (uses_edges_) {
      collectively(comm, [&] { result.edges = rule_.build(result.positions, dim_, result.batch, threads); });
    }
    return result;
  }
  if (given || !uses_edges_) return result;

  // Block mode, edges built by the rule: each rank builds its receivers' edges from its block and a halo
  // of the other ranks' points that can be their neighbours (graph_distributed.hpp), exactly the
  // one-process edges of its block.
  collectively(comm, [&] {
    if (rule_.kind == GraphRule::Kind::none) rule_.build({}, dim_, result.batch, threads);  // the agreed error
  });
  const graph::CanonicalBlocks blocks{result.positions, dim_, &result.batch, result.block_bounds};
  result.edges = rule_.build_distributed(comm, blocks, threads, &result.graph_stats);
  return result;
}

}  // namespace surrogate
