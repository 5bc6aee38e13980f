// The shared part of the ball-tree families' plans (plan.hpp).
#include "plan.hpp"

#include <string>

#include "surrogate/error.hpp"
#include "surrogate/profile.hpp"
#if SURROGATE_HAVE_CUDA
#include "../device/ball_trees.hpp"
#endif

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kCanonicalOrderAndGraphPhase{"canonical order and graph"};
const surrogate::PhaseName kBallTreePhase{"ball tree"};
}  // namespace

namespace surrogate::balltree {

BallTreePlan::BallTreePlan(const Comm& comm, Plan::Basis basis) : Plan(std::move(basis)), comm_(&comm) {}

CanonicalBatch BallTreePlan::gather_block(const PointCloudModel& model, int threads, const std::string& family) {
  const ScopedPhase phase(kCanonicalOrderAndGraphPhase);
  CanonicalBatch all = model.gather_canonical(*comm_, layout(), geometry(), nullptr, 0, false, true, threads);
  block_ = CanonicalBlock(*comm_, all, model.position_dim(), layout().local_points(), family);
  block_.count_into(&traffic());
  return all;
}

DeviceTrees::DeviceTrees() = default;
DeviceTrees::~DeviceTrees() = default;

NodeFinisher* DeviceTrees::for_run(int cuda_device, void* stream) {
  if (cuda_device < 0) return nullptr;
#if SURROGATE_HAVE_CUDA
  if (!finisher_ || device_ != cuda_device || stream_ != stream) {
    finisher_ = std::make_unique<device::BallTrees>(cuda_device, static_cast<cudaStream_t>(stream));
    device_ = cuda_device;
    stream_ = stream;
  }
  return finisher_.get();
#else
  throw Error(ErrorCode::unsupported, "ball trees on device " + std::to_string(cuda_device) +
                                          ": this build of the library has no CUDA backend");
#endif
}

void BallTreePlan::build_tree(const TreeShape& shape, int dim, NodeFinisher* finisher) {
  const ScopedPhase phase(kBallTreePhase);
  // The distributed tree over the canonical blocks: its serial numbering (samples in order, rank-major
  // inside a sample) is the canonical order, so it is the single-process tree of the batch.
  DistributedOptions options{shape.granularity};
  options.finisher = finisher;
  if (shape.rotate > 0)
    trees_ = build_distributed_with_rotations(*comm_, block_.positions(), dim, block_.samples(), shape.strides,
                                              shape.ball_sizes, shape.rotate, options);
  else
    trees_.tree = build_distributed(*comm_, block_.positions(), dim, block_.samples(), options);
  trees_.tree.plan.count_into(&traffic());
  for (ExchangePlan& e : trees_.rotations.exchange) count(e);
  slot_positions_.resize(static_cast<std::size_t>(trees_.tree.local_slots() * dim));
  trees_.tree.plan.to_tree(block_.positions().data(), dim, slot_positions_.data());
}

void BallTreePlan::rebind(const Comm& comm) {
  comm_ = &comm;
  block_.rebind(comm);
  trees_.tree.plan.rebind(comm);
  for (ExchangePlan& e : trees_.rotations.exchange) e.rebind(comm);
}

std::vector<float> BallTreePlan::to_block(const float* rows, index_t ld, int width) const {
  std::vector<float> block(static_cast<std::size_t>(block_rows() * width));
  block_.to_block(rows, ld, block.data(), width, width);
  return block;
}

void BallTreePlan::to_solver(std::span<const float> block_rows, int width, float* rows, index_t ld) const {
  if (static_cast<std::int64_t>(block_rows.size()) != this->block_rows() * width)
    throw Error(ErrorCode::internal, "ball-tree plan: block rows of the wrong size");
  block_.to_solver(block_rows.data(), width, rows, ld, width);
}

}  // namespace surrogate::balltree
