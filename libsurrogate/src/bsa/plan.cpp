// The BSA plan (plan.hpp): the canonical block, the distributed tree, the slots cut at sample boundaries
// and the exchange plans of the layers.
#include "plan.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {

ExchangePlan block_fetch_plan(const Comm& comm, const balltree::DistributedTree& tree, int C,
                              std::span<const std::int64_t> blocks) {
  std::vector<int> rank(blocks.size() * static_cast<std::size_t>(C));
  std::vector<std::int64_t> key(rank.size());
  for (std::size_t b = 0; b < blocks.size(); ++b)
    for (int c = 0; c < C; ++c) {
      const std::int64_t slot = blocks[b] * C + c;
      const std::size_t t = b * static_cast<std::size_t>(C) + static_cast<std::size_t>(c);
      rank[t] = tree.slots.owner(slot);
      key[t] = slot - tree.slots.begin(rank[t]);
    }
  return ExchangePlan::from_requests(comm, tree.local_slots(), rank, key, {}, {});
}

std::int64_t tree_granularity(const Config& c) {
  // Global attention has no balls, blocks or groups inside a layer (ball_size only shapes the rotated
  // tree, which the distributed build computes exactly at any granularity): leaves of two slots.
  if (c.attention_type == AttentionType::global) return 2;
  std::int64_t g = c.ball_size;
  if (c.attention_type == AttentionType::ball) g = std::lcm(g, static_cast<std::int64_t>(c.attention_ball_size));
  if (c.attention_type == AttentionType::sparse) {
    g = std::lcm(g, static_cast<std::int64_t>(c.compress_block_size));
    if (c.use_group_selection) g = std::lcm(g, static_cast<std::int64_t>(c.group_selection_size));
  }
  return g;
}

BsaPlan::BsaPlan(const Comm& comm, Plan::Basis basis, const PointCloudModel& model, const Network& net, int threads,
                 balltree::NodeFinisher* finisher)
    : BallTreePlan(comm, std::move(basis)), compress_block_size_(net.config().compress_block_size) {
  const Config& c = net.config();
  const int d = c.dimensionality;
  gather_block(model, threads, "bsa");
  balltree::TreeShape shape;
  if (c.should_rotate) {
    shape.strides = {1};
    shape.ball_sizes = {c.ball_size, c.ball_size};
    shape.rotate = c.rotation_angle;
  }
  shape.granularity = tree_granularity(c);
  build_tree(shape, d, finisher);
  const balltree::DistributedTree& tree = trees().tree;
  // Equal padded sample sizes, whole balls, blocks and groups (global data: the same on every rank).
  const std::int64_t samples = static_cast<std::int64_t>(tree.slot_offsets.size()) - 1;
  if (samples < 1) throw Error(ErrorCode::input, "bsa: no points");
  const std::int64_t slots_per_sample = tree.slot_offsets[1] - tree.slot_offsets[0];
  collectively(comm, [&] {
    for (std::int64_t s = 1; s < samples; ++s) {
      const std::int64_t m = tree.slot_offsets[static_cast<std::size_t>(s) + 1] - tree.slot_offsets[static_cast<std::size_t>(s)];
      if (m != slots_per_sample)
        throw Error(ErrorCode::input, "bsa: batch sample " + std::to_string(s) + " pads to " + std::to_string(m) +
                                          " tree slots but sample 0 to " + std::to_string(slots_per_sample) +
                                          "; BSA needs every sample padded to the same size (the same next power of "
                                          "two of its point count)");
    }
    Stages::check_sample_size(net, slots_per_sample);
  });

  if (c.should_rotate) {
    rotated_positions_.resize(slot_positions().size());
    rotation().forward(slot_positions().data(), d, rotated_positions_.data());
  }

  // The rank's slots cut at sample boundaries.
  layout_.rows = tree.local_slots();
  layout_.n = slots_per_sample;
  layout_.samples = samples;
  for (std::int64_t slot = tree.slot_begin; slot < tree.slot_end;) {
    const std::int64_t sample = slot / slots_per_sample;
    const std::int64_t end = std::min(tree.slot_end, (sample + 1) * slots_per_sample);
    layout_.segments.push_back({slot - tree.slot_begin, 1, end - slot, slot - sample * slots_per_sample, sample});
    slot = end;
  }

  if (c.attention_type == AttentionType::sparse) {
    compressed_ = ExchangePlan::all_gather(comm, tree.local_slots() / c.compress_block_size);
    count(compressed_);
  }
  // Global attention: the rows of every sample the rank holds only part of, built once (the rotated
  // layers use the same plan: each rank holds the same range of global slots in both orders).
  if (c.attention_type == AttentionType::global) {
    const std::int64_t wanted = layout_.partial_samples() * slots_per_sample;
    std::vector<int> rank(static_cast<std::size_t>(wanted));
    std::vector<std::int64_t> key(rank.size());
    std::size_t t = 0;
    for (const RowLayout::Segment& g : layout_.segments) {
      if (g.length == slots_per_sample) continue;
      for (std::int64_t j = 0; j < slots_per_sample; ++j, ++t) {
        const std::int64_t slot = g.sample * slots_per_sample + j;
        rank[t] = tree.slots.owner(slot);
        key[t] = slot - tree.slots.begin(rank[t]);
      }
    }
    sample_rows_ = ExchangePlan::from_requests(comm, tree.local_slots(), rank, key, {}, {});
    count(sample_rows_);
  }
}

void BsaPlan::rebind(const Comm& comm) {
  BallTreePlan::rebind(comm);
  compressed_.rebind(comm);
  sample_rows_.rebind(comm);
}

const ExchangePlan& BsaPlan::rotation() const {
  if (trees().rotations.exchange.size() < 2)
    throw Error(ErrorCode::internal, "bsa (plan): the rotated layers have no rotated tree");
  return trees().rotations.exchange[1];
}

ExchangePlan BsaPlan::fetch_plan(std::span<const std::int64_t> blocks) {
  ExchangePlan plan = block_fetch_plan(comm(), trees().tree, compress_block_size_, blocks);
  count(plan);
  return plan;
}

}  // namespace surrogate::bsa::detail
