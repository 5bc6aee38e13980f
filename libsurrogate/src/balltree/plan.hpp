// What both ball-tree families (Erwin, BSA) build once per point set: this rank's block of the canonical
// order, the distributed ball tree over the blocks (with its rotated orders) and the slots' positions; each
// family derives its plan from it (erwin/plan.hpp, bsa/plan.hpp). share/docs/balltree.md, "Plans and
// exchanges".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "../serial.hpp"
#include "point_cloud_model.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/model.hpp"

namespace surrogate::balltree {

/// What a family's device forward keeps in a plan for one CUDA device (the uploaded geometry, the index
/// lists, the work arrays): made by the first device forward on the plan for that device, reused by the
/// next ones while the plan lives. Also the object a one-process device forward returns for a batch.
class DeviceGeometry {
 public:
  explicit DeviceGeometry(int device) : device_(device) {}
  virtual ~DeviceGeometry() = default;
  DeviceGeometry(const DeviceGeometry&) = delete;
  DeviceGeometry& operator=(const DeviceGeometry&) = delete;
  int device() const { return device_; }
  /// A number no other geometry of this process had (what a device forward's captured graph is keyed by).
  std::uint64_t serial() const { return serial_.value(); }

 private:
  int device_;
  surrogate::detail::Serial serial_;
};

/// What finishes a family's ball trees for a run (DistributedOptions::finisher): on a CUDA device the
/// device's kernels (device::BallTrees: the same trees, bit for bit), kept while the device and stream
/// stay; null for a CPU run (the host builds them).
class DeviceTrees {
 public:
  DeviceTrees();
  ~DeviceTrees();
  DeviceTrees(const DeviceTrees&) = delete;
  DeviceTrees& operator=(const DeviceTrees&) = delete;
  /// The finisher on `cuda_device`'s `stream` (a cudaStream_t), or null for cuda_device < 0.
  NodeFinisher* for_run(int cuda_device, void* stream);

 private:
  std::unique_ptr<NodeFinisher> finisher_;
  int device_ = -1;
  void* stream_ = nullptr;
};

/// The shape of the distributed tree of a family: the levels' strides and ball sizes, the rotation angle
/// (> 0: the rotated orders and their exchanges too) and the granularity of the rank ranges.
struct TreeShape {
  std::vector<int> strides, ball_sizes;
  double rotate = 0.0;
  std::int64_t granularity = 2;
};

/// The part of a ball-tree family's plan both families share. Layouts: the caller's working rows (solver
/// rows) -> this rank's block of the canonical order (block rows) -> this rank's slots of the distributed
/// tree (slot rows); every ExchangePlan of the plan counts its bytes into Plan::traffic(). The plans are
/// applied through the communicator of the last rebind() (Model::predict rebinds before every forward).
class BallTreePlan : public Plan {
 public:
  const Comm& comm() const { return *comm_; }
  void rebind(const Comm& comm) override;

  std::int64_t block_begin() const { return block_.begin(); }
  std::int64_t block_rows() const { return block_.rows(); }
  /// block_rows() x dimensionality, in canonical order.
  std::span<const float> block_positions() const { return block_.positions(); }
  /// The sample of every block row.
  std::span<const std::int64_t> block_samples() const { return block_.samples(); }
  /// The caller's working rows (`width` values at row stride ld) -> block_rows() x width values. Collective.
  std::vector<float> to_block(const float* rows, index_t ld, int width) const;
  /// block_rows() x width values -> the caller's working rows (row stride ld). Collective.
  void to_solver(std::span<const float> block_rows, int width, float* rows, index_t ld) const;
  /// The same moves on rows in the memory of `place`'s device (strides ld and ld_block), enqueued on its
  /// stream; nothing crosses the host but what the transport stages. Collective.
  void to_block(const float* rows, index_t ld, float* block, index_t ld_block, int width, const Place& place) const {
    block_.to_block(rows, ld, block, ld_block, width, place);
  }
  void to_solver(const float* block, index_t ld_block, float* rows, index_t ld, int width, const Place& place) const {
    block_.to_solver(block, ld_block, rows, ld, width, place);
  }

  /// The distributed tree over the blocks (plan: block rows <-> slot rows) and the rotated orders.
  const DistributedRotatedTrees& trees() const { return trees_; }
  /// The local slots' positions (local slots x dimensionality), in tree order.
  std::span<const float> slot_positions() const { return slot_positions_; }

  /// The device forward's geometry of this plan (null before the first device forward).
  std::unique_ptr<DeviceGeometry>& device_geometry() { return device_; }

 protected:
  BallTreePlan(const Comm& comm, Plan::Basis basis);
  /// This rank's block of the canonical order (route_canonical in block mode), which the plan keeps; the
  /// batch is returned for what the family builds from it (edges). Collective; errors agreed.
  CanonicalBatch gather_block(const PointCloudModel& model, int threads, const std::string& family);
  /// The distributed tree over the blocks (build_distributed, with rotations when shape.rotate > 0) and the
  /// slots' positions; the nodes this rank holds whole finished by `finisher` (DeviceTrees::for_run) or,
  /// when null, on the host. Collective; the tree's input errors are agreed.
  void build_tree(const TreeShape& shape, int dim, NodeFinisher* finisher);
  /// Adds the moves of `plan` to Plan::traffic() (every exchange plan a family keeps or builds per forward).
  void count(ExchangePlan& plan) { plan.count_into(&traffic()); }

 private:
  const Comm* comm_;
  CanonicalBlock block_;
  DistributedRotatedTrees trees_;
  std::vector<float> slot_positions_;
  std::unique_ptr<DeviceGeometry> device_;
};

}  // namespace surrogate::balltree
