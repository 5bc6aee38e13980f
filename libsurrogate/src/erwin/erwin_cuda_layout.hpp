// Where the rows of the Erwin device forward (erwin_cuda.cpp) live and how they move between its stages,
// for one geometry (CUDA builds only; internal):
//  * single process: the points in the caller's order, the tree's slots gathered by Tree::index, the
//    rotated orders as gathers by RotatedTrees::rotated, the result gathered by slot_of_point;
//  * one rank of the distributed forward (DistributedPlan, erwin_distributed.hpp): the rank's canonical
//    block with a halo of remote message-passing sources, its slots of the distributed tree, the rotated
//    orders and the halo as the plan's exchanges applied to device rows through host memory
//    (balltree::device::DeviceExchange: own rows copied on the device, the others through MPI).
// The host arrays (edges, positions, node counts) are read while the forward sets its geometry; the
// movements act on device rows on the forward's stream and are collective when distributed.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "erwin_distributed.hpp"
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
  /// (points + halo) x dimensionality.
  std::span<const float> edge_positions() const { return edge_positions_; }
  /// Nodes per level (level 0: the slots) and the slots' positions in tree order.
  std::span<const index_t> level_nodes() const { return level_nodes_; }
  std::span<const float> slot_positions() const { return slot_positions_; }

  /// The communicator of the distributed forward (its errors are agreed there), null in one process.
  virtual const Comm* comm() const = 0;
  /// Host rows of level `level`'s nodes (`width` values each) in the rotated order. Collective when distributed.
  virtual std::vector<float> rotated_rows(int level, const std::vector<float>& rows, int width) const = 0;
  /// Uploads what the movements need (index arrays, exchange row lists) to `device`, once per geometry.
  virtual void upload(int device, const kernels::cuda::Stream& stream) = 0;

  /// The halo rows (points .. points + halo) of h (row stride ld) from their owners' rows.
  virtual void refresh_halo(float* h, index_t ld, int width, const kernels::cuda::Stream& stream) const = 0;
  /// Point rows (stride ld_h) -> level-0 node rows (stride ld_x), every slot filled; and back (every
  /// point from the slot that holds it).
  virtual void to_slots(const float* h, index_t ld_h, float* x, index_t ld_x, int width,
                        const kernels::cuda::Stream& stream) const = 0;
  virtual void to_points(const float* x, index_t ld_x, float* h, index_t ld_h, int width,
                         const kernels::cuda::Stream& stream) const = 0;
  /// Level rows (contiguous, `width` values) in tree order -> rotated order, and back.
  virtual void to_rotated(int level, const float* x, float* rotated, int width, const kernels::cuda::Stream& stream) const = 0;
  virtual void from_rotated(int level, const float* rotated, float* x, int width,
                            const kernels::cuda::Stream& stream) const = 0;

 protected:
  index_t points_ = 0, halo_ = 0;
  std::span<const std::int64_t> edges_;
  std::span<const float> edge_positions_;
  std::vector<index_t> level_nodes_;
  std::vector<float> slot_positions_;
};

/// The single-process layout of a batch's trees (Error(input) when the trees, positions or edges do not
/// belong together). `positions` and `edge_index` must stay valid while the forward sets its geometry.
std::unique_ptr<DeviceLayout> single_process_layout(const Network& net, const balltree::RotatedTrees& trees,
                                                    std::span<const float> positions, index_t points,
                                                    std::span<const std::int64_t> edge_index);
/// This rank's layout of a distributed plan, which must outlive it.
std::unique_ptr<DeviceLayout> distributed_layout(const Network& net, const DistributedPlan& plan);

}  // namespace surrogate::erwin::detail
