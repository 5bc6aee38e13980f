// The Erwin plan (plan.hpp): the canonical block, the message-passing halo, the distributed tree.
#include "plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_map>

#include "network.hpp"
#include "surrogate/error.hpp"

namespace surrogate::erwin::detail {

std::int64_t tree_granularity(const Config& c) {
  std::int64_t g = 1, stride_product = 1;
  for (int i = 0; i < c.levels(); ++i) {
    if (i > 0) stride_product *= c.strides[static_cast<std::size_t>(i - 1)];
    g = std::lcm(g, c.ball_sizes[static_cast<std::size_t>(i)] * stride_product);
  }
  return std::lcm(g, stride_product);
}

ErwinPlan::ErwinPlan(const Comm& comm, Plan::Basis basis, const PointCloudModel& model, const Network& net, int threads,
                     balltree::NodeFinisher* finisher)
    : BallTreePlan(comm, std::move(basis)) {
  const Config& c = net.config();
  const int d = c.dimensionality, L = c.levels();
  const CanonicalBatch all = gather_block(model, threads, "erwin");
  const std::int64_t n = block_rows(), begin = block_begin(), end = begin + n;
  const std::int64_t total_edges = comm.allreduce<std::int64_t>(static_cast<std::int64_t>(all.edges.size() / 2), ReduceOp::sum);
  collectively(comm, [&] {
    if (c.rotate > 0 && d != 2 && d != 3)
      throw Error(ErrorCode::unsupported, "erwin: rotated blocks need dimensionality 2 or 3 (the official rotation)");
    if (c.mp_steps > 0 && total_edges == 0)
      throw Error(ErrorCode::input, "erwin: edge_index must hold 2 x E entries (E > 0) when mp_steps > 0, found 0");
  });

  if (c.mp_steps > 0) {
    // The block's receivers' edges (all.edges holds only those, in the whole graph's order, hence in edge
    // order per receiver; the filter keeps this right for any superset); remote sources become halo rows.
    const auto E = static_cast<std::int64_t>(all.edges.size() / 2);
    const std::int64_t* src = all.edges.data();
    const std::int64_t* dst = all.edges.data() + E;
    std::vector<std::int64_t> local_dst, halo;  // halo: canonical index of halo row n + k
    std::unordered_map<std::int64_t, std::int64_t> halo_row;
    for (std::int64_t e = 0; e < E; ++e) {
      if (dst[e] < begin || dst[e] >= end) continue;
      std::int64_t j = src[e] - begin;
      if (src[e] < begin || src[e] >= end) {
        const auto [it, added] = halo_row.try_emplace(src[e], n + static_cast<std::int64_t>(halo.size()));
        if (added) halo.push_back(src[e]);
        j = it->second;
      }
      local_edges_.push_back(j);
      local_dst.push_back(dst[e] - begin);
    }
    local_edges_.insert(local_edges_.end(), local_dst.begin(), local_dst.end());
    halo_rows_ = static_cast<std::int64_t>(halo.size());
    std::vector<int> halo_rank(halo.size());
    std::vector<std::int64_t> halo_key(halo.size());
    edge_positions_.resize(static_cast<std::size_t>((n + halo_rows_) * d));
    std::copy(block_positions().begin(), block_positions().end(), edge_positions_.begin());
    balltree::RankRanges ranges;
    ranges.bounds = all.block_bounds;
    for (std::size_t k = 0; k < halo.size(); ++k) {
      halo_rank[k] = ranges.owner(halo[k]);
      halo_key[k] = halo[k] - ranges.begin(halo_rank[k]);
    }
    halo_plan_ = ExchangePlan::from_requests(comm, n, halo_rank, halo_key, {}, {});
    count(halo_plan_);
    halo_plan_.forward(block_positions().data(), d, edge_positions_.data() + n * d);  // the halo's positions
  }

  build_tree({c.strides, c.ball_sizes, c.rotate, tree_granularity(c)}, d, finisher);
  const balltree::DistributedTree& tree = trees().tree;
  const std::vector<index_t> global_nodes = Stages::level_nodes(net, tree.total_slots());  // same on every rank
  level_nodes_.resize(static_cast<std::size_t>(L));
  for (int i = 0; i < L; ++i)
    level_nodes_[static_cast<std::size_t>(i)] = tree.local_slots() / (global_nodes[0] / global_nodes[static_cast<std::size_t>(i)]);
}

void ErwinPlan::rebind(const Comm& comm) {
  BallTreePlan::rebind(comm);
  halo_plan_.rebind(comm);
}

}  // namespace surrogate::erwin::detail
