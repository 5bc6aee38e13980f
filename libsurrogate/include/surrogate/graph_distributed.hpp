// The kNN and radius graphs of graph.hpp built over the ranks of a communicator from each rank's block
// of the canonical order, with a halo instead of whole samples: every rank gets exactly the edges that
// the one-process graph gives its block's receivers (same edges, same order, canonical indices), while
// it holds only its block and the other ranks' points that can be neighbours of its receivers.
// Algorithm, exactness argument and costs: share/docs/balltree.md ("Graphs", distributed).
#pragma once

#include <cstdint>
#include <span>

#include "surrogate/balltree.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/graph.hpp"

namespace surrogate::graph {

/// What one rank held and sent while building its part of a distributed graph.
struct DistributedGraphStats {
  std::int64_t foreign_points = 0;   // other ranks' points received (the halo), positions and indices
  std::int64_t sent_points = 0;      // records this rank sent to others (a point counts once per receiver rank)
  std::int64_t whole_samples = 0;    // samples spanning ranks of which every foreign point was fetched (kNN:
                                     // a receiver with fewer than k candidates of its sample in the block)
  std::int64_t requeried = 0;        // kNN: receivers whose neighbours were searched again among block + halo
                                     // (the others' round-1 neighbours within the block are final)
};

/// The canonical points a rank holds: `block_bounds` (ranks + 1 values, the same on every rank) cuts the
/// batch's points 0 ... N-1 into consecutive blocks, rank r holding [block_bounds[r], block_bounds[r+1]);
/// `block_positions` are this rank's points (row-major, block size x dim).
struct CanonicalBlocks {
  std::span<const float> block_positions;
  int dim = 0;
  const balltree::Batch* batch = nullptr;  // the whole batch's samples (offsets), the same on every rank
  std::span<const std::int64_t> block_bounds;
};

/// knn_graph(all positions, dim, batch, k, loop, threads, ReceiverRange{this rank's block}) without
/// gathering the samples: the edges (2 x E, canonical indices) of this rank's receivers, equal edge for
/// edge to the one-process result. Collective; errors (bad arguments, NaN/Inf positions on any rank) are
/// agreed. `stats` (optional) reports what this rank held.
Edges knn_graph_distributed(const Comm& comm, const CanonicalBlocks& blocks, int k, bool loop, int threads = 0,
                            DistributedGraphStats* stats = nullptr);

/// radius_graph(all positions, dim, batch, r, max_num_neighbors, loop, threads, ReceiverRange{block})
/// without gathering the samples, as knn_graph_distributed.
Edges radius_graph_distributed(const Comm& comm, const CanonicalBlocks& blocks, double r, int max_num_neighbors = 32,
                               bool loop = true, int threads = 0, DistributedGraphStats* stats = nullptr);

}  // namespace surrogate::graph
