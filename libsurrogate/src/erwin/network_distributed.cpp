// The Erwin forward on a plan (plan.hpp): solver rows -> canonical block (embedding, message passing with
// a halo of remote sources) -> the rank's slots of the distributed tree (every level, ball and pooling
// group local; rotated blocks through the per-level exchanges) -> block -> solver rows, each stage the
// one-process code (network.hpp) on the same inputs, so bitwise the one-process forward.
// share/docs/balltree.md, "Running Erwin" (multi-rank).
#include "plan.hpp"

#include <algorithm>

#include "network.hpp"
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

std::vector<float> ErwinPlan::forward(const Network& net, std::span<const float> block_features, int threads) const {
  const Config& c = net.config();
  const int D0 = c.c_hidden[0];
  const std::int64_t n = block_rows();
  if (static_cast<std::int64_t>(block_features.size()) != n * c.c_in)
    throw Error(ErrorCode::internal, "erwin (distributed): block features of the wrong size");
  collectively(comm(), [&] { Stages::check_features(net, block_features, block_begin()); });

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
  const balltree::DistributedTree& tree = trees().tree;
  AlignedBuffer<float> x(static_cast<std::size_t>(tree.local_slots() * ld));
  tree.plan.to_tree(h.data(), static_cast<int>(ld), x.data());
  const ExchangedOrder order(trees().rotations);
  Stages::levels(net, x, {slot_positions().begin(), slot_positions().end()}, level_nodes_, c.rotate > 0 ? &order : nullptr,
                 threads);
  tree.plan.to_solver(x.data(), static_cast<int>(ld), h.data());
  std::vector<float> result(static_cast<std::size_t>(n * D0));
  for (std::int64_t i = 0; i < n; ++i) std::copy_n(h.data() + i * ld, D0, result.data() + i * D0);
  return result;
}

}  // namespace surrogate::erwin::detail
