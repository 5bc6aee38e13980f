// Graphs for the message-passing embedding of Erwin (and other point models): the kNN and radius graphs
// that the official experiments build with torch_cluster (knn_graph / radius_graph), within samples
// only, with a documented tie rule, in O(N log N) per sample through a k-d tree. Semantics, tie rule and
// the differences from torch_cluster: share/docs/balltree.md ("Graphs"); reference-models.md §1.4.1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/balltree.hpp"

namespace surrogate::graph {

/// Edges in PyG's source_to_target layout: 2 x E values, sources j in [0, E), receivers i in [E, 2E).
/// Every graph below lists its edges receiver by receiver (i increasing) and, for one receiver, by
/// increasing squared distance, equal distances by increasing source index j.
struct Edges {
  std::vector<std::int64_t> index;  // 2 x E
  std::int64_t count() const { return static_cast<std::int64_t>(index.size() / 2); }
};

/// The receivers a graph is built for: points [begin, end) of the batch (end < 0: to the last point).
/// The result is exactly the edges of the whole graph whose receiver lies in the range, in the same
/// order (a receiver's neighbours do not depend on the other receivers); the candidates (sources) are
/// still all points of the receiver's sample. Lets each rank of a distributed run build its own part.
/// `subset` (optional): only these receivers, increasing indices inside the range (empty: all of it).
struct ReceiverRange {
  std::int64_t begin = 0, end = -1;
  std::span<const std::int64_t> subset = {};
};

/// torch_cluster.knn_graph(pos, k, batch, loop, flow="source_to_target"): for every point i the k
/// points j of its own sample nearest to it (fewer when the sample is smaller). Squared distances are
/// computed in the coordinates' type as nanoflann does, sum_c (p_ic - p_jc)^2 accumulated from c = 0 in
/// that precision without fused multiply-add. Ties: smaller j first (torch_cluster's order among equal
/// distances depends on its k-d tree). loop = true: i itself is a candidate (distance 0, so it is among
/// the k unless k or more other points coincide with it); loop = false: i is not a candidate.
/// `positions` is row-major (points x dim); throws Error(invalid_argument) for k < 1 or dim < 1 and
/// Error(input) for sizes that do not match `batch` and NaN/Inf coordinates. threads = 0: OpenMP default.
Edges knn_graph(std::span<const float> positions, int dim, const balltree::Batch& batch, int k, bool loop = true,
                int threads = 0, ReceiverRange receivers = {});
Edges knn_graph(std::span<const double> positions, int dim, const balltree::Batch& batch, int k, bool loop = true,
                int threads = 0, ReceiverRange receivers = {});

/// torch_cluster.radius_graph(pos, r, batch, loop, max_num_neighbors): for every point i the points j of
/// its sample with squared distance < r^2 (strict, as nanoflann; r^2 computed in double and rounded to
/// the coordinates' type), distances as in knn_graph. When more than max_num_neighbors qualify, the
/// official code keeps an implementation-defined subset (the first ones nanoflann reports, unsorted);
/// we keep the max_num_neighbors nearest (ties: smaller j). loop = false excludes i itself.
/// Throws Error(invalid_argument) for r <= 0 or NaN, max_num_neighbors < 1, dim < 1.
Edges radius_graph(std::span<const float> positions, int dim, const balltree::Batch& batch, double r,
                   int max_num_neighbors = 32, bool loop = true, int threads = 0, ReceiverRange receivers = {});
Edges radius_graph(std::span<const double> positions, int dim, const balltree::Batch& batch, double r,
                   int max_num_neighbors = 32, bool loop = true, int threads = 0, ReceiverRange receivers = {});

}  // namespace surrogate::graph
