// Rotated orders of the distributed ball tree (share/docs/balltree.md, "Distributed tree"): each rank
// rotates and mean-pools its own tree-order nodes (row-wise and group-wise operations, so bitwise the
// serial values), the rotated partition of every level is placed exactly (distributed_placement.cpp), and
// the exchange tree order <-> rotated order is planned once per level.
#include <algorithm>
#include <string>

#include "distributed_internal.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/error.hpp"

namespace surrogate::balltree {
namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

void check_levels(std::span<const int> strides, std::span<const int> ball_sizes, int dim, Index granularity, double angle) {
  if (ball_sizes.empty())
    throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: ball_sizes is empty (one entry per tree level is needed)");
  if (strides.size() + 1 != ball_sizes.size())
    throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: strides must have one entry fewer than ball_sizes, found " +
                                                 std::to_string(strides.size()) + " strides and " +
                                                 std::to_string(ball_sizes.size()) + " ball sizes");
  for (std::size_t i = 0; i < ball_sizes.size(); ++i)
    if (ball_sizes[i] < 1)
      throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: ball_sizes[" + std::to_string(i) +
                                                   "] must be positive, found " + std::to_string(ball_sizes[i]));
  Index product = 1;
  for (std::size_t i = 0; i < strides.size(); ++i) {
    if (strides[i] < 1)
      throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: strides[" + std::to_string(i) +
                                                   "] must be positive, found " + std::to_string(strides[i]));
    product *= strides[i];
  }
  const Index chunk = granularity % 2 == 0 ? granularity : 2 * granularity;
  if (granularity < 1 || chunk % product != 0)
    throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: options.granularity = " + std::to_string(granularity) +
                                                 " is not a multiple of the product of the strides (" + std::to_string(product) +
                                                 "): a pooling group would straddle two ranks");
  if (angle > 0) rotation_matrix(angle, dim);  // refuses a dim other than 2 and 3
}

}  // namespace

DistributedRotatedTrees build_distributed_with_rotations(const Comm& comm, std::span<const float> local_positions, int dim,
                                                         std::span<const std::int64_t> local_sample_ids,
                                                         std::span<const int> strides, std::span<const int> ball_sizes,
                                                         double angle_degrees, const DistributedOptions& options) {
  collectively(comm, [&] { check_levels(strides, ball_sizes, dim, options.granularity, angle_degrees); });
  DistributedRotatedTrees result;
  result.tree = build_distributed(comm, local_positions, dim, local_sample_ids, options);
  if (!(angle_degrees > 0)) return result;
  const DistributedTree& tree = result.tree;
  DistributedRotations& rot = result.rotations;
  const int p = comm.size(), me = comm.rank();
  const Index total = tree.total_slots();
  const Index samples = static_cast<Index>(tree.sample_points.size());

  // Level 0: this rank's leaves in tree order (duplicates included), rotated row by row.
  std::vector<float> leaves(sz(tree.local_slots() * dim));
  tree.plan.to_tree(local_positions.data(), dim, leaves.data());
  std::vector<float> coords = rotate(leaves, dim, angle_degrees);

  Index per_node = 1;  // slots per node of the current level
  for (std::size_t i = 0; i < ball_sizes.size(); ++i) {
    rot.target_levels.push_back(rotation_target_level(total, ball_sizes[i]));
    // Nodes of the level per sample: node k belongs to the sample of slot k * per_node (the serial [::stride]).
    std::vector<Index> offsets(sz(samples) + 1);
    for (Index b = 0; b <= samples; ++b) offsets[sz(b)] = (tree.slot_offsets[sz(b)] + per_node - 1) / per_node;
    for (Index b = 0; b < samples; ++b)
      if (offsets[sz(b) + 1] <= offsets[sz(b)])
        throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: pooling by strides does not keep the samples apart at level " +
                                                     std::to_string(i) + " (sample " + std::to_string(b) + " has no node)");
    RankRanges nodes;
    nodes.bounds.resize(sz(p) + 1);
    for (int r = 0; r <= p; ++r) nodes.bounds[sz(r)] = tree.slots.bounds[sz(r)] / per_node;
    rot.node_begin.push_back(nodes.begin(me));

    detail::SpreadSamples<float> data;
    data.dim = dim;
    data.samples = samples;
    data.counts.assign(sz(p) * sz(samples), 0);
    for (int r = 0; r < p; ++r)
      for (Index b = 0; b < samples; ++b)
        data.counts[sz(r) * sz(samples) + sz(b)] =
            std::max<Index>(0, std::min(offsets[sz(b) + 1], nodes.end(r)) - std::max(offsets[sz(b)], nodes.begin(r)));
    data.ids.resize(sz(nodes.size(me)));
    for (Index k = 0; k < nodes.size(me); ++k) data.ids[sz(k)] = nodes.begin(me) + k;
    data.coords = coords;
    detail::PlacedRange placed =
        detail::place(comm, data, detail::Placement::partition, rot.target_levels.back(), offsets, nodes,
                      options.serial_threshold, options.finisher);
    rot.peak_points = std::max(rot.peak_points, placed.peak_points);

    const Index local_nodes = nodes.size(me);
    std::vector<int> source_rank(sz(local_nodes));
    std::vector<Index> source_key(sz(local_nodes));
    for (Index k = 0; k < local_nodes; ++k) {
      const Index g = placed.ids[sz(k)];
      source_rank[sz(k)] = nodes.owner(g);
      source_key[sz(k)] = g - nodes.begin(source_rank[sz(k)]);
    }
    rot.exchange.push_back(ExchangePlan::from_requests(comm, local_nodes, source_rank, source_key, {}, {}));
    rot.rotated.push_back(std::move(placed.ids));
    if (i + 1 == ball_sizes.size()) break;

    const int s = strides[i];
    if ((total / per_node) % s != 0)
      throw Error(ErrorCode::invalid_argument, "distributed rotated ball trees: level " + std::to_string(i) + " has " +
                                                   std::to_string(total / per_node) + " nodes, not divisible by strides[" +
                                                   std::to_string(i) + "] = " + std::to_string(s));
    coords = mean_pool(coords, dim, s);
    per_node *= s;
  }
  return result;
}

}  // namespace surrogate::balltree
