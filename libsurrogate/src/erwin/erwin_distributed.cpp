// The distributed Erwin forward (erwin_distributed.hpp). Layouts, in order:
//   solver rows  --block plan-->  canonical blocks (embedding, message passing with a halo of remote
//   sources)  --tree.plan-->  the rank's slots of the distributed tree (every level, every ball, pooling
//   group and unpooling group local; rotated blocks through the per-level exchange plans)
//   --tree.plan back-->  canonical blocks  --block plan back-->  solver rows.
// Every row, edge, ball and group is computed by the same stage code as the single-process forward
// (erwin_stages.hpp) on the same inputs, so the result is bitwise the same. Docs: share/docs/balltree.md.
#include "erwin_distributed.hpp"

#include <algorithm>
#include <numeric>
#include <string>
#include <unordered_map>

#include "erwin_stages.hpp"
#include "surrogate/error.hpp"

namespace surrogate::erwin::detail {
namespace {

/// The rotated orders of this rank's part of the distributed tree: collective exchanges per level.
class ExchangedOrder final : public RotatedOrder {
 public:
  explicit ExchangedOrder(const balltree::DistributedRotations& r) : rotations_(r) {}
  void to_rotated(int level, const float* rows, int width, float* rotated_rows) const override {
    rotations_.exchange[static_cast<std::size_t>(level)].forward(rows, width, rotated_rows);
  }
  void from_rotated(int level, const float* rotated_rows, int width, float* rows) const override {
    rotations_.exchange[static_cast<std::size_t>(level)].backward(rotated_rows, width, rows);
  }

 private:
  const balltree::DistributedRotations& rotations_;
};

}  // namespace

std::int64_t tree_granularity(const Config& c) {
  std::int64_t g = 1, stride_product = 1;
  for (int i = 0; i < c.levels(); ++i) {
    if (i > 0) stride_product *= c.strides[static_cast<std::size_t>(i - 1)];
    g = std::lcm(g, c.ball_sizes[static_cast<std::size_t>(i)] * stride_product);
  }
  return std::lcm(g, stride_product);
}

DistributedPlan::DistributedPlan(const Comm& comm, const Network& net, const CanonicalBatch& all,
                                 std::int64_t solver_rows)
    : comm_(&comm) {
  const Config& c = net.config();
  const int d = c.dimensionality, L = c.levels();
  block_ = CanonicalBlock(comm, all, d, solver_rows, "erwin");
  const std::int64_t n = block_.rows(), begin = block_.begin();
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
      if (dst[e] < begin || dst[e] >= block_.end()) continue;
      std::int64_t j = src[e] - begin;
      if (src[e] < begin || src[e] >= block_.end()) {
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
    std::copy(block_.positions().begin(), block_.positions().end(), edge_positions_.begin());
    balltree::RankRanges ranges;
    ranges.bounds = all.block_bounds;
    for (std::size_t k = 0; k < halo.size(); ++k) {
      halo_rank[k] = ranges.owner(halo[k]);
      halo_key[k] = halo[k] - ranges.begin(halo_rank[k]);
    }
    halo_plan_ = ExchangePlan::from_requests(comm, n, halo_rank, halo_key, {}, {});
    halo_plan_.forward(block_.positions().data(), d, edge_positions_.data() + n * d);  // the halo's positions
  }

  // The distributed tree over the canonical blocks: its serial numbering (samples in order, rank-major
  // inside a sample) is the canonical order, so it is the single-process tree of the batch.
  const std::span<const std::int64_t> block_samples = block_.samples();
  const balltree::DistributedOptions options{tree_granularity(c)};
  if (c.rotate > 0)
    trees_ = balltree::build_distributed_with_rotations(comm, block_.positions(), d, block_samples, c.strides, c.ball_sizes,
                                                        c.rotate, options);
  else
    trees_.tree = balltree::build_distributed(comm, block_.positions(), d, block_samples, options);
  const balltree::DistributedTree& tree = trees_.tree;
  const std::vector<index_t> global_nodes = Stages::level_nodes(net, tree.total_slots());  // same on every rank
  level_nodes_.resize(static_cast<std::size_t>(L));
  for (int i = 0; i < L; ++i)
    level_nodes_[static_cast<std::size_t>(i)] = tree.local_slots() / (global_nodes[0] / global_nodes[static_cast<std::size_t>(i)]);
  slot_positions_.resize(static_cast<std::size_t>(tree.local_slots() * d));
  tree.plan.to_tree(block_.positions().data(), d, slot_positions_.data());
}

void DistributedPlan::rebind(const Comm& comm) {
  comm_ = &comm;
  block_.rebind(comm);
  halo_plan_.rebind(comm);
  trees_.tree.plan.rebind(comm);
  for (ExchangePlan& e : trees_.rotations.exchange) e.rebind(comm);
}

std::vector<float> DistributedPlan::forward(const Network& net, std::span<const float> block_features, int threads) const {
  const Config& c = net.config();
  const int D0 = c.c_hidden[0];
  const std::int64_t n = block_rows();
  if (static_cast<std::int64_t>(block_features.size()) != n * c.c_in)
    throw Error(ErrorCode::internal, "erwin (distributed): block features of the wrong size");
  collectively(*comm_, [&] { Stages::check_features(net, block_features, block_.begin()); });

  // Embedding on the block, then message passing with the remote sources as a halo (rows n ..).
  const index_t ld = Stages::row_stride(net);
  AlignedBuffer<float> h(static_cast<std::size_t>((n + halo_rows_) * ld));
  Stages::embed(net, block_features, n, h.data(), threads);
  if (c.mp_steps > 0) {
    const HaloRefresh refresh = [&](float* rows, index_t stride) {
      halo_plan_.forward(rows, static_cast<int>(stride), rows ? rows + n * stride : nullptr);
    };
    Stages::message_passing(net, h.data(), edge_positions_.data(), n, n + halo_rows_, local_edges_, refresh, threads);
  }

  // The rank's slots of the tree (padding duplicates filled), the U-Net, back to the block.
  const balltree::DistributedTree& tree = trees_.tree;
  AlignedBuffer<float> x(static_cast<std::size_t>(tree.local_slots() * ld));
  tree.plan.to_tree(h.data(), static_cast<int>(ld), x.data());
  const ExchangedOrder order(trees_.rotations);
  Stages::levels(net, x, slot_positions_, level_nodes_, c.rotate > 0 ? &order : nullptr, threads);
  tree.plan.to_solver(x.data(), static_cast<int>(ld), h.data());
  std::vector<float> result(static_cast<std::size_t>(n * D0));
  for (std::int64_t i = 0; i < n; ++i) std::copy_n(h.data() + i * ld, D0, result.data() + i * D0);
  return result;
}

}  // namespace surrogate::erwin::detail
