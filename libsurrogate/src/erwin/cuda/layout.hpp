// Where the rows of the Erwin device forward (forward.cpp) live and how they move between its stages, for
// one geometry: one process (gathers by the tree's index arrays) or one rank of a plan (its block with a
// halo, its slots of the distributed tree; the moves are the plan's exchanges on device rows, collective).
// The host arrays are read only while the forward uploads its geometry. CUDA builds only.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "../plan.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::erwin::detail {

class DeviceLayout {
 public:
  virtual ~DeviceLayout() = default;

  /// Rows of the embedding and the message passing (the receivers), and source-only halo rows after them.
  index_t points() const { return points_; }
  index_t halo_rows() const { return halo_; }
  /// 2 x E: sources (< points + halo), receivers (< points), in edge order per receiver.
  std::span<const std::int64_t> edges() const { return edges_; }
  /// (points + halo) x dimensionality, the first `points` rows point_positions()'s values.
  std::span<const float> edge_positions() const { return edge_positions_; }
  /// points x dimensionality: the positions of the rows of the embedding (the ShapeNet-Car wrapper's input).
  std::span<const float> point_positions() const { return point_positions_; }
  /// Nodes per level (level 0: the slots).
  std::span<const index_t> level_nodes() const { return level_nodes_; }
  /// A plan's slots' positions in tree order (its slots hold other ranks' points); empty in one process,
  /// where to_slots() gathers them from point_positions() on the device.
  std::span<const float> slot_positions() const { return slot_positions_; }

  /// The communicator of the distributed forward (its errors are agreed there), null in one process.
  virtual const Comm* comm() const = 0;
  /// Uploads what the movements need (index arrays) to `device`, once per geometry.
  virtual void upload(int device, const kernels::cuda::Stream& stream) = 0;

  /// The halo rows (points .. points + halo) of h (row stride ld) from their owners' rows.
  virtual void refresh_halo(float* h, index_t ld, int width, const kernels::cuda::Stream& stream) const = 0;
  /// Point rows (stride ld_h) -> level-0 node rows (stride ld_x), every slot filled; and back (every
  /// point from the slot that holds it).
  virtual void to_slots(const float* h, index_t ld_h, float* x, index_t ld_x, int width,
                        const kernels::cuda::Stream& stream) const = 0;
  virtual void to_points(const float* x, index_t ld_x, float* h, index_t ld_h, int width,
                         const kernels::cuda::Stream& stream) const = 0;
  /// Level rows (contiguous, `width` values) in tree order -> rotated order, and back (the node arrays and
  /// the levels' positions). Collective when distributed.
  virtual void to_rotated(int level, const float* x, float* rotated, int width, const kernels::cuda::Stream& stream) const = 0;
  virtual void from_rotated(int level, const float* rotated, float* x, int width,
                            const kernels::cuda::Stream& stream) const = 0;

 protected:
  index_t points_ = 0, halo_ = 0;
  std::span<const std::int64_t> edges_;
  std::span<const float> edge_positions_, point_positions_;
  std::vector<index_t> level_nodes_;
  std::vector<float> slot_positions_;
};

/// The one-process layout of a batch's trees (Error(input) when the trees, positions or edges do not
/// belong together). `positions` and `edge_index` must stay valid while the forward uploads its geometry.
std::unique_ptr<DeviceLayout> single_process_layout(const Network& net, const balltree::RotatedTrees& trees,
                                                    std::span<const float> positions, index_t points,
                                                    std::span<const std::int64_t> edge_index);
/// This rank's layout of a plan, which must outlive it (the plan keeps it in its device geometry).
std::unique_ptr<DeviceLayout> plan_layout(const Network& net, const ErwinPlan& plan);

}  // namespace surrogate::erwin::detail
