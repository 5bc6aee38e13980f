// The Erwin forward on a CUDA device (CUDA builds: forward.cpp, geometry.cpp, layout.cpp; elsewhere the
// model refuses with detail::refuse_without_cuda_backend): the weights uploaded once per model, what
// depends only on the geometry once into a DeviceGeometry (a plan's, or a one-process batch's), the whole
// level sequence on the device. share/docs/balltree.md, "Erwin on a CUDA device".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "../../balltree/plan.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::ops {
class HostOps;
}
namespace surrogate::balltree::wrapper {
template <class Ops>
struct Layers;  // shapenet_wrapper.hpp
}

namespace surrogate::erwin::detail {

class ErwinPlan;  // plan.hpp

class ErwinDeviceForward {
 public:
  virtual ~ErwinDeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// The arithmetic of the dense layers of the next forwards: fp32 (default), or tf32 / bf16 on the
  /// tensor cores (operands rounded, FP32 sums); everything else stays FP32.
  virtual void set_precision(Precision precision) = 0;

  /// With the ShapeNet-Car wrapper (make_erwin_cuda_forward's `wrapper`) every forward below takes no
  /// features (an empty span, rows unread): the network's features are the wrapper's Fourier features of
  /// the geometry's positions, and its result the wrapper's one value a point (pred_head), both on the
  /// device.

  /// One process: the geometry of a batch on the device (trees as from balltree::build_with_rotations of
  /// `positions` and `batch`; edge_index 2 x E point indices, empty without message passing), for any
  /// number of forward() calls. Error(input) when the trees, positions or edges do not belong together.
  virtual std::unique_ptr<balltree::DeviceGeometry> upload_geometry(const balltree::RotatedTrees& trees,
                                                                    std::span<const float> positions,
                                                                    const balltree::Batch& batch,
                                                                    std::span<const std::int64_t> edge_index) = 0;
  /// Network::forward on the device for an uploaded one-process geometry: features (points x c_in, the
  /// caller's order) -> points x c_hidden[0] values in input order. Error(input) for features of the
  /// wrong size or NaN/Inf.
  virtual std::vector<float> forward(balltree::DeviceGeometry& geometry, std::span<const float> features) = 0;
  /// Both at once (a geometry used for one call only).
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch,
                             std::span<const std::int64_t> edge_index) {
    return forward(*upload_geometry(trees, positions, batch, edge_index), features);
  }

  /// One rank's part of the forward on a plan (plan.hpp): the plan's block features (block_rows() x c_in,
  /// canonical order) -> block_rows() x c_hidden[0] values, bitwise the rows the one-process forward gives
  /// for the whole batch (same kernels on the same rows). The block with its halo of remote
  /// message-passing sources, then the rank's slots of the distributed tree; the halo refreshes, the block
  /// <-> slots moves and the rotated orders are the plan's exchanges on device rows (ExchangePlan with a
  /// Place: NCCL, or staged through host memory). The plan's geometry on this device is uploaded by the
  /// first call and kept in the plan (BallTreePlan::device_geometry). Collective; errors (NaN/Inf
  /// features, device errors on any rank) are agreed.
  virtual std::vector<float> forward(ErwinPlan& plan, std::span<const float> block_features) = 0;
  /// The same on the caller's working rows in this device's memory (predict_device): `rows` (the plan's
  /// solver rows, c_in values at stride ld) reach the block and the result (c_hidden[0] values at stride
  /// ld_out) comes back into `out` through the plan's exchanges on device rows. Enqueued on stream();
  /// nothing waits for the device, and only what a staged transport moves crosses the host. The rows'
  /// finiteness is the caller's check (predict_device counts it on the device). Collective; errors agreed.
  virtual void forward_rows(ErwinPlan& plan, const float* rows, index_t ld, float* out, index_t ld_out) = 0;
  /// The stream (a cudaStream_t) every forward enqueues on.
  virtual void* stream() const = 0;

  /// Device milliseconds of the last forward from the features' upload to the result's download (CUDA
  /// events; 0 after forward_rows, which does not wait to read them), and of the geometry upload of the
  /// last call (upload_geometry, or a plan forward that uploaded its plan's geometry; 0 after a forward
  /// that uploaded none).
  virtual double last_forward_ms() const = 0;
  virtual double last_geometry_ms() const = 0;
};

/// Uploads the network's weights to CUDA device `device`. Throws Error(unsupported) when no such device is
/// visible, or the network is outside what the kernels cover (head width > 64, distance-bias dimension >
/// 4, stride 1 between levels of different widths). The network must outlive the result; `wrapper` (the
/// ShapeNet-Car wrapper's layers, null without) is uploaded with the weights. `edge_chunk`:
/// messages computed at once (receivers are grouped into chunks of at most that many edges, a receiver
/// with more edges alone); it bounds the message buffers, not the result.
inline constexpr index_t kDefaultEdgeChunk = index_t{1} << 17;
std::unique_ptr<ErwinDeviceForward> make_erwin_cuda_forward(
    const Network& net, int device, index_t edge_chunk = kDefaultEdgeChunk,
    const balltree::wrapper::Layers<ops::HostOps>* wrapper = nullptr);

}  // namespace surrogate::erwin::detail
