// The layouts of the Erwin device forward (layout.hpp): one process, or one rank of a plan with its
// exchanges on device rows.
#include "layout.hpp"

#include <string>

#include "../../device/layers.hpp"
#include "../network.hpp"
#include "surrogate/error.hpp"

namespace surrogate::erwin::detail {
namespace {

namespace cu = kernels::cuda;
using surrogate::device::copy_rows;

/// One process: gathers by the tree's index arrays on the device, no halo.
class SingleProcessLayout final : public DeviceLayout {
 public:
  SingleProcessLayout(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> positions,
                      index_t n, std::span<const std::int64_t> edge_index) {
    const Config& c = net.config();
    const int L = c.levels();
    const balltree::Tree& tree = trees.tree;
    level_nodes_ = Stages::level_nodes(net, tree.slots());
    if (tree.mask.size() != tree.index.size() || tree.slots() < n)
      throw Error(ErrorCode::input, "erwin: trees.tree does not belong to these points");
    for (const std::int64_t s : tree.index)
      if (s < 0 || s >= n) throw Error(ErrorCode::input, "erwin: trees.tree.index holds " + std::to_string(s) + ", not a point index");
    if (c.rotate > 0) {
      if (static_cast<int>(trees.rotated.size()) != L)
        throw Error(ErrorCode::input, "erwin: rotate > 0 needs one rotated permutation per level, trees.rotated has " +
                                          std::to_string(trees.rotated.size()));
      for (int i = 0; i < L; ++i) {
        const auto& r = trees.rotated[static_cast<std::size_t>(i)];
        const index_t nodes = level_nodes_[static_cast<std::size_t>(i)];
        bool ok = static_cast<index_t>(r.size()) == nodes;
        for (const std::int64_t v : r) ok = ok && v >= 0 && v < nodes;
        if (!ok) throw Error(ErrorCode::input, "erwin: trees.rotated[" + std::to_string(i) + "] is not a permutation of the level's nodes");
      }
      rotated_ = trees.rotated;
    }
    if (c.mp_steps > 0) {
      if (edge_index.empty() || edge_index.size() % 2 != 0)
        throw Error(ErrorCode::input, "erwin: edge_index must hold 2 x E entries (E > 0) when mp_steps > 0, found " +
                                          std::to_string(edge_index.size()));
      const std::size_t E = edge_index.size() / 2;
      for (std::size_t e = 0; e < 2 * E; ++e)
        if (edge_index[e] < 0 || edge_index[e] >= n)
          throw Error(ErrorCode::input, "erwin: edge_index[" + std::to_string(e < E ? 0 : 1) + "][" + std::to_string(e % E) +
                                            "] = " + std::to_string(edge_index[e]) + " is not a point index");
      edges_ = edge_index;
    }
    points_ = n;
    edge_positions_ = positions;
    point_positions_ = positions;
    tree_index_host_.assign(tree.index.begin(), tree.index.begin() + level_nodes_[0]);
    slot_of_point_host_ = tree.slot_of_point();
  }

  const Comm* comm() const override { return nullptr; }
  void upload(int device, const cu::Stream& stream) override {
    surrogate::device::upload(tree_index_, std::span<const std::int64_t>(tree_index_host_), device, stream.get());
    surrogate::device::upload(slot_, std::span<const std::int64_t>(slot_of_point_host_), device, stream.get());
    rotated_device_.resize(rotated_.size());
    for (std::size_t i = 0; i < rotated_.size(); ++i)
      surrogate::device::upload(rotated_device_[i], std::span<const std::int64_t>(rotated_[i]), device, stream.get());
  }
  void refresh_halo(float*, index_t, int, const cu::Stream&) const override {}
  void to_slots(const float* h, index_t ld_h, float* x, index_t ld_x, int width, const cu::Stream& stream) const override {
    copy_rows(h, ld_h, tree_index_.data(), x, ld_x, nullptr, level_nodes_[0], width, stream.get());
  }
  void to_points(const float* x, index_t ld_x, float* h, index_t ld_h, int width, const cu::Stream& stream) const override {
    copy_rows(x, ld_x, slot_.data(), h, ld_h, nullptr, points_, width, stream.get());
  }
  void to_rotated(int level, const float* x, float* rotated, int width, const cu::Stream& stream) const override {
    const auto l = static_cast<std::size_t>(level);
    copy_rows(x, width, rotated_device_[l].data(), rotated, width, nullptr, level_nodes_[l], width, stream.get());
  }
  void from_rotated(int level, const float* rotated, float* x, int width, const cu::Stream& stream) const override {
    const auto l = static_cast<std::size_t>(level);
    copy_rows(rotated, width, nullptr, x, width, rotated_device_[l].data(), level_nodes_[l], width, stream.get());
  }

 private:
  std::vector<std::int64_t> tree_index_host_, slot_of_point_host_;
  std::vector<std::vector<std::int64_t>> rotated_;
  cu::DeviceBuffer<std::int64_t> tree_index_, slot_;
  std::vector<cu::DeviceBuffer<std::int64_t>> rotated_device_;
};

/// One rank of a plan: the plan's exchanges on device rows, through the transport of the communicator the
/// plan is bound to (Comm::device_transport: NCCL when every rank owns its GPU, else host staging).
class PlanLayout final : public DeviceLayout {
 public:
  PlanLayout(const Network& net, const ErwinPlan& plan) : plan_(&plan) {
    const Config& c = net.config();
    points_ = plan.block_rows();
    halo_ = plan.halo_rows();
    if (c.mp_steps > 0) {
      edges_ = plan.local_edges();
      edge_positions_ = plan.edge_positions();
    } else {
      edge_positions_ = plan.block_positions();
    }
    point_positions_ = plan.block_positions();
    level_nodes_.assign(plan.level_nodes().begin(), plan.level_nodes().end());
    slot_positions_.assign(plan.slot_positions().begin(), plan.slot_positions().end());
  }

  const Comm* comm() const override { return &plan_->comm(); }
  void upload(int device, const cu::Stream&) override { device_ = device; }  // the plans upload their own lists
  void refresh_halo(float* h, index_t ld, int width, const cu::Stream& stream) const override {
    plan_->halo_plan().forward(h, ld, h + points_ * ld, ld, width, place(stream));
  }
  void to_slots(const float* h, index_t ld_h, float* x, index_t ld_x, int width, const cu::Stream& stream) const override {
    plan_->trees().tree.plan.exchange().forward(h, ld_h, x, ld_x, width, place(stream));
  }
  void to_points(const float* x, index_t ld_x, float* h, index_t ld_h, int width, const cu::Stream& stream) const override {
    plan_->trees().tree.plan.exchange().backward(x, ld_x, h, ld_h, width, place(stream));
  }
  void to_rotated(int level, const float* x, float* rotated, int width, const cu::Stream& stream) const override {
    rotation(level).forward(x, width, rotated, width, width, place(stream));
  }
  void from_rotated(int level, const float* rotated, float* x, int width, const cu::Stream& stream) const override {
    rotation(level).backward(rotated, width, x, width, width, place(stream));
  }

 private:
  const ExchangePlan& rotation(int level) const {
    return plan_->trees().rotations.exchange[static_cast<std::size_t>(level)];
  }
  /// This device and the transport of the communicator of the current predict (collective on its first use).
  Place place(const cu::Stream& stream) const {
    return {device_, stream.get(), &plan_->comm().device_transport(device_)};
  }

  const ErwinPlan* plan_;
  int device_ = -1;
};

}  // namespace

std::unique_ptr<DeviceLayout> single_process_layout(const Network& net, const balltree::RotatedTrees& trees,
                                                    std::span<const float> positions, index_t points,
                                                    std::span<const std::int64_t> edge_index) {
  return std::make_unique<SingleProcessLayout>(net, trees, positions, points, edge_index);
}

std::unique_ptr<DeviceLayout> plan_layout(const Network& net, const ErwinPlan& plan) {
  return std::make_unique<PlanLayout>(net, plan);
}

}  // namespace surrogate::erwin::detail
