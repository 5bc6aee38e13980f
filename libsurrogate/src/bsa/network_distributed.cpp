// The BSA forward on a plan (plan.hpp): solver rows -> canonical block (embedding) -> the rank's slots of
// the distributed tree, where every layer runs the one-process stage code (network.hpp) with the plan's
// exchanges (rotated order, compressed blocks all-gathered, selected blocks fetched per layer, global
// attention's sample rows) -> block -> solver rows; bitwise the one-process forward.
// share/docs/balltree.md, "Running BSA" (multi-rank).
#include <algorithm>
#include <string>

#include <omp.h>

#include "cuda/device.hpp"
#include "plan.hpp"
#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {
namespace {

/// The layers' exchanges on the plan (every call collective).
class PlanExchanges final : public LayerExchanges {
 public:
  explicit PlanExchanges(BsaPlan& plan) : plan_(plan) {}
  void to_rotated(const float* rows, int width, float* rotated_rows) const override {
    plan_.rotation().forward(rows, width, rotated_rows);
  }
  void from_rotated(const float* rotated_rows, int width, float* rows) const override {
    plan_.rotation().backward(rotated_rows, width, rows);
  }
  bool distributed() const override { return true; }
  void gather_blocks(const float* local_blocks, index_t count, int width, float* all) const override {
    if (count != plan_.compressed_blocks().source_rows())
      throw Error(ErrorCode::internal, "bsa (plan): compressed blocks of the wrong count");
    plan_.compressed_blocks().forward(local_blocks, width, all);
  }
  void fetch_blocks(std::span<const std::int64_t> blocks, const float* local_rows, int width,
                    float* fetched) const override {
    plan_.fetch_plan(blocks).forward(local_rows, width, fetched);
  }
  void fetch_samples(const float* local_rows, int width, float* fetched) const override {
    plan_.sample_rows().forward(local_rows, width, fetched);
  }

 private:
  BsaPlan& plan_;
};

}  // namespace

std::vector<float> BsaPlan::forward(const Network& net, std::span<const float> block_features, int threads) {
  const Config& c = net.config();
  const int D = c.c_hidden;
  const std::int64_t n = block_rows();
  if (static_cast<std::int64_t>(block_features.size()) != n * c.c_in)
    throw Error(ErrorCode::internal, "bsa (plan): block features of the wrong size");
  collectively(comm(), [&] { Stages::check_features(net, block_features, block_begin()); });

  // Embedding on the block, the rank's slots (padding duplicates filled), the layers, back to the block.
  const index_t ld = Stages::row_stride(net);
  AlignedBuffer<float> h(static_cast<std::size_t>(n * ld));
  Stages::embed(net, block_features, n, h.data(), threads);
  const balltree::DistributedTree& tree = trees().tree;
  AlignedBuffer<float> x(static_cast<std::size_t>(tree.local_slots() * ld));
  tree.plan.to_tree(h.data(), static_cast<int>(ld), x.data());
  const PlanExchanges exchanges(*this);
  Stages::layers(net, x.data(), slot_positions().data(), rotated_positions_.data(), layout_, exchanges, threads);
  tree.plan.to_solver(x.data(), static_cast<int>(ld), h.data());
  std::vector<float> result(static_cast<std::size_t>(n * D));
#pragma omp parallel for num_threads(threads > 0 ? threads : omp_get_max_threads()) schedule(static)
  for (std::int64_t i = 0; i < n; ++i) std::copy_n(h.data() + i * ld, D, result.data() + i * D);
  return result;
}

std::vector<float> BsaPlan::forward_on_device(BsaDeviceForward& device, const Network& net,
                                              std::span<const float> block_features) {
  const Config& c = net.config();
  const bool wrapped = c.wrapper == Wrapper::shapenet_car;  // features and head on the device
  const int width = wrapped ? 1 : c.c_hidden, cin = wrapped ? 0 : c.c_in;
  const std::int64_t n = block_rows();
  if (static_cast<std::int64_t>(block_features.size()) != n * cin)
    throw Error(ErrorCode::internal, "bsa (plan, device): block features of the wrong size");
  if (!wrapped) collectively(comm(), [&] { Stages::check_features(net, block_features, block_begin()); });
  // The features to the rank's slots on the host (c_in values per row: fewer bytes than the hidden rows),
  // the layers on the device, the result rows back to the block on the host.
  const balltree::DistributedTree& tree = trees().tree;
  std::vector<float> slot_features(static_cast<std::size_t>(tree.local_slots() * cin));
  if (cin > 0) tree.plan.exchange().forward(block_features.data(), cin, slot_features.data(), cin, cin);
  const std::vector<float> y = device.forward(*this, slot_features);
  std::vector<float> result(static_cast<std::size_t>(n * width));
  tree.plan.exchange().backward(y.data(), width, result.data(), width, width);
  return result;
}

}  // namespace surrogate::bsa::detail
