// The BSA forward on a CUDA device (CUDA builds: forward.cpp, distributed.cpp; elsewhere the model refuses
// with detail::refuse_without_cuda_backend): the weights uploaded once per model, what depends only on the
// geometry once into a DeviceGeometry (a plan's, or a one-process batch's), the layers (the top-S block
// selection and the ShapeNet-Car wrapper included) on the device. share/docs/balltree.md, "BSA on a CUDA
// device".
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "../../balltree/plan.hpp"
#include "../network.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/model.hpp"  // Precision

namespace surrogate::bsa::detail {

class BsaPlan;  // plan.hpp

class BsaDeviceForward {
 public:
  virtual ~BsaDeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// The arithmetic of the dense layers from the next forward on: fp32, or tf32 / bf16 on the tensor cores.
  virtual void set_precision(Precision precision) = 0;

  /// With the ShapeNet-Car wrapper (/config wrapper) every forward below takes no features (an empty
  /// span, rows unread): the network's features are the wrapper's Fourier features of the geometry's
  /// positions, and its result the wrapper's one value a row (pred_head), both on the device.

  /// One process: the geometry of a batch on the device (trees as balltree::build, or
  /// build_with_rotations with strides [1] when the model rotates, of `positions` and `batch`), for any
  /// number of forward() calls. Error(input) as Network::forward for positions and trees that do not
  /// belong together.
  virtual std::unique_ptr<balltree::DeviceGeometry> upload_geometry(const balltree::RotatedTrees& trees,
                                                                    std::span<const float> positions,
                                                                    const balltree::Batch& batch) = 0;
  /// Network::forward on the device for an uploaded one-process geometry: features (points x c_in, the
  /// caller's order) -> points x c_hidden values in input order. Error(input) for features of the wrong
  /// size or NaN/Inf.
  virtual std::vector<float> forward(balltree::DeviceGeometry& geometry, std::span<const float> features) = 0;
  /// Both at once (a geometry used for one call only).
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch) {
    if (net().config().wrapper == Wrapper::shapenet_car) Stages::check_geometry(net(), trees, positions, batch);
    else Stages::check_inputs(net(), trees, features, positions, batch);
    return forward(*upload_geometry(trees, positions, batch), features);
  }

  /// The layers on this rank's slots of a plan (plan.hpp): slot_features (local slots x c_in, tree order,
  /// padding duplicates filled) -> local slots x c_hidden values in tree order, bitwise the rows of
  /// forward() on the whole batch on one rank. What crosses ranks moves by the plan's exchanges on device
  /// rows (ExchangePlan with a Place: NCCL, or staged through host memory). The plan's geometry on this
  /// device is uploaded by the first call and kept in the plan (BallTreePlan::device_geometry).
  /// Collective: an error on one rank (device, input) is the same Error on all.
  virtual std::vector<float> forward(BsaPlan& plan, std::span<const float> slot_features) = 0;

  /// predict_device's rows: `rows` (the plan's solver rows in this device's memory, c_in values at stride
  /// ld) -> `out` (c_hidden values at stride ld_out), moved to the network's rows and back by the plan's
  /// exchanges on device rows. With `batch` (one rank: the one-process geometry of the plan's batch, whose
  /// trees are the plan's) as forward(batch, ...); without, on the plan's slots as forward(plan, ...).
  /// Enqueued on stream(): nothing waits for the device but what the exchanges of several ranks and a
  /// staged transport need. The rows' finiteness is the caller's check (predict_device counts it on the
  /// device). Collective; errors agreed.
  virtual void forward_rows(BsaPlan& plan, balltree::DeviceGeometry* batch, const float* rows, index_t ld, float* out,
                            index_t ld_out) = 0;
  /// The stream (a cudaStream_t) every forward enqueues on.
  virtual void* stream() const = 0;

  /// Device milliseconds of the last forward from the features' upload to the result's download (CUDA
  /// events; on a plan, includes the exchanges' waits; 0 after forward_rows, which does not wait to read
  /// them), and of the geometry upload of the last call
  /// (upload_geometry, or a plan forward that uploaded its plan's geometry; 0 after a forward that uploaded none).
  virtual double last_forward_ms() const = 0;
  virtual double last_geometry_ms() const = 0;

 protected:
  virtual const Network& net() const = 0;
};

/// Uploads the network's weights to CUDA device `device`. Throws Error(unsupported) when no such device is
/// visible, or the network is outside what the kernels cover (head width > 64, more than 4 coordinates).
/// The network must outlive the result.
std::unique_ptr<BsaDeviceForward> make_bsa_cuda_forward(const Network& net, int device);

}  // namespace surrogate::bsa::detail
