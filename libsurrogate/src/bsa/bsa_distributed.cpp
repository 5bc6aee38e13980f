// The distributed BSA forward (bsa_distributed.hpp). Layouts, in order:
//   solver rows --block plan--> canonical blocks (embedding) --tree.plan--> the rank's slots of the
//   distributed tree (every ball, compression block and selection group local; the odd layers' rotated
//   order through the exchange plan of the rotated tree) --tree.plan back--> blocks --block plan
//   back--> solver rows.
// Global attention: the keys and values of the samples a rank holds only part of come whole, in the
// layer's order, through one exchange plan built with the tree (sample_rows_).
// Every row, ball, block and query is computed by the same stage code as the single-process forward
// (bsa_stages.hpp) on the same inputs in the same order, so the result is bitwise the same.
#include "bsa_distributed.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "bsa_device.hpp"
#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {
namespace {

/// The layers' exchanges on the distributed tree (every call collective).
class TreeExchanges final : public LayerExchanges {
 public:
  /// sample_rows: the plan of fetch_samples (global attention; null otherwise).
  TreeExchanges(const Comm& comm, const balltree::DistributedRotatedTrees& trees, int C,
                const ExchangePlan* sample_rows)
      : comm_(comm), trees_(trees), C_(C), sample_rows_(sample_rows) {}
  void to_rotated(const float* rows, int width, float* rotated_rows) const override {
    rotation().forward(rows, width, rotated_rows);
  }
  void from_rotated(const float* rotated_rows, int width, float* rows) const override {
    rotation().backward(rotated_rows, width, rows);
  }
  bool distributed() const override { return true; }
  void gather_blocks(const float* local_blocks, index_t count, int width, float* all) const override {
    gather_compressed_blocks(comm_, trees_.tree, C_, local_blocks, count, width, all);
  }
  void fetch_blocks(std::span<const std::int64_t> blocks, const float* local_rows, int width,
                    float* fetched) const override {
    block_fetch_plan(comm_, trees_.tree, C_, blocks).forward(local_rows, width, fetched);
  }
  void fetch_samples(const float* local_rows, int width, float* fetched) const override {
    if (!sample_rows_) throw Error(ErrorCode::internal, "bsa (distributed): no plan for the samples' rows");
    sample_rows_->forward(local_rows, width, fetched);
  }

 private:
  const ExchangePlan& rotation() const {
    if (trees_.rotations.exchange.size() < 2)
      throw Error(ErrorCode::internal, "bsa (distributed): the rotated layers have no rotated tree");
    return trees_.rotations.exchange[1];
  }
  const Comm& comm_;
  const balltree::DistributedRotatedTrees& trees_;
  int C_;
  const ExchangePlan* sample_rows_;
};

}  // namespace

void gather_compressed_blocks(const Comm& comm, const balltree::DistributedTree& tree, int C, const float* local_blocks,
                              index_t count, int width, float* all) {
  const int P = comm.size();
  std::vector<std::size_t> bytes(static_cast<std::size_t>(P)), offsets(static_cast<std::size_t>(P));
  std::size_t offset = 0;
  for (int r = 0; r < P; ++r) {
    bytes[static_cast<std::size_t>(r)] = static_cast<std::size_t>(tree.slots.size(r) / C * width) * sizeof(float);
    offsets[static_cast<std::size_t>(r)] = offset;
    offset += bytes[static_cast<std::size_t>(r)];
  }
  comm.allgatherv(local_blocks, static_cast<std::size_t>(count * width) * sizeof(float), all, bytes, offsets);
}

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

DistributedPlan::DistributedPlan(const Comm& comm, const Network& net, const CanonicalBatch& all,
                                 std::int64_t solver_rows)
    : comm_(&comm) {
  const Config& c = net.config();
  const int d = c.dimensionality;
  block_ = CanonicalBlock(comm, all, d, solver_rows, "bsa");

  // The distributed tree over the canonical blocks: its serial numbering (samples in order, rank-major
  // inside a sample) is the canonical order, so it is the single-process tree of the batch.
  const std::span<const std::int64_t> block_samples = block_.samples();
  const balltree::DistributedOptions options{tree_granularity(c)};
  if (c.should_rotate) {
    const std::vector<int> strides{1}, balls{c.ball_size, c.ball_size};
    trees_ = balltree::build_distributed_with_rotations(comm, block_.positions(), d, block_samples, strides, balls,
                                                        c.rotation_angle, options);
  } else {
    trees_.tree = balltree::build_distributed(comm, block_.positions(), d, block_samples, options);
  }
  const balltree::DistributedTree& tree = trees_.tree;
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

  slot_positions_.resize(static_cast<std::size_t>(tree.local_slots() * d));
  tree.plan.to_tree(block_.positions().data(), d, slot_positions_.data());
  if (c.should_rotate) {
    rotated_positions_.resize(slot_positions_.size());
    TreeExchanges(comm, trees_, c.compress_block_size, nullptr)
        .to_rotated(slot_positions_.data(), d, rotated_positions_.data());
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
  }
}

void DistributedPlan::rebind(const Comm& comm) {
  comm_ = &comm;
  block_.rebind(comm);
  trees_.tree.plan.rebind(comm);
  for (ExchangePlan& e : trees_.rotations.exchange) e.rebind(comm);
  sample_rows_.rebind(comm);
}

std::vector<float> DistributedPlan::forward(const Network& net, std::span<const float> block_features, int threads) const {
  const Config& c = net.config();
  const int D = c.c_hidden;
  const std::int64_t n = block_rows();
  if (static_cast<std::int64_t>(block_features.size()) != n * c.c_in)
    throw Error(ErrorCode::internal, "bsa (distributed): block features of the wrong size");
  collectively(*comm_, [&] { Stages::check_features(net, block_features, block_.begin()); });

  // Embedding on the block, the rank's slots (padding duplicates filled), the layers, back to the block.
  const index_t ld = Stages::row_stride(net);
  AlignedBuffer<float> h(static_cast<std::size_t>(n * ld));
  Stages::embed(net, block_features, n, h.data(), threads);
  const balltree::DistributedTree& tree = trees_.tree;
  AlignedBuffer<float> x(static_cast<std::size_t>(tree.local_slots() * ld));
  tree.plan.to_tree(h.data(), static_cast<int>(ld), x.data());
  const TreeExchanges exchanges(*comm_, trees_, c.compress_block_size,
                                c.attention_type == AttentionType::global ? &sample_rows_ : nullptr);
  Stages::layers(net, x.data(), slot_positions_.data(), rotated_positions_.data(), layout_, exchanges, threads);
  tree.plan.to_solver(x.data(), static_cast<int>(ld), h.data());
  std::vector<float> result(static_cast<std::size_t>(n * D));
  for (std::int64_t i = 0; i < n; ++i) std::copy_n(h.data() + i * ld, D, result.data() + i * D);
  return result;
}

std::vector<float> DistributedPlan::forward_on_device(BsaDeviceForward& device, const Network& net,
                                                      std::span<const float> block_features, bool same_geometry,
                                                      int threads) const {
  const Config& c = net.config();
  const int D = c.c_hidden, cin = c.c_in;
  const std::int64_t n = block_rows();
  if (static_cast<std::int64_t>(block_features.size()) != n * cin)
    throw Error(ErrorCode::internal, "bsa (distributed, device): block features of the wrong size");
  collectively(*comm_, [&] { Stages::check_features(net, block_features, block_.begin()); });
  // The features to the rank's slots on the host (c_in values per row: fewer bytes than the hidden rows),
  // the layers on the device, the hidden rows back to the block on the host.
  const balltree::DistributedTree& tree = trees_.tree;
  std::vector<float> padded(block_features.begin(), block_features.end());
  padded.resize(std::max<std::size_t>(1, padded.size()));
  std::vector<float> slot_features(static_cast<std::size_t>(std::max<std::int64_t>(1, tree.local_slots() * cin)));
  tree.plan.to_tree(padded.data(), cin, slot_features.data());
  slot_features.resize(static_cast<std::size_t>(tree.local_slots() * cin));
  DistributedRows rows;
  rows.comm = comm_;
  rows.tree = &tree;
  rows.layout = &layout_;
  rows.positions = slot_positions_;
  rows.rotated_positions = rotated_positions_;
  if (c.should_rotate) {
    if (trees_.rotations.exchange.size() < 2)
      throw Error(ErrorCode::internal, "bsa (distributed): the rotated layers have no rotated tree");
    rows.rotation = &trees_.rotations.exchange[1];
  }
  if (c.attention_type == AttentionType::global) rows.sample_rows = &sample_rows_;
  std::vector<float> y = device.forward_distributed(rows, slot_features, same_geometry, threads);
  y.resize(std::max<std::size_t>(1, y.size()));
  std::vector<float> result(static_cast<std::size_t>(std::max<std::int64_t>(1, n * D)));
  tree.plan.to_solver(y.data(), D, result.data());
  result.resize(static_cast<std::size_t>(n * D));
  return result;
}

}  // namespace surrogate::bsa::detail
