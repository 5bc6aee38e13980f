// HEPT's forward on a CUDA device, float32 (CUDA builds only; elsewhere the model refuses with
// detail::refuse_without_cuda_backend): the weights uploaded once, the plan's geometry built on the device
// (the CPU's bits) and kept there, every layer on the device. share/docs/hept.md, "On a CUDA device".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "surrogate/hept.hpp"
#include "surrogate/model.hpp"  // Precision

namespace surrogate {
class Comm;
}

namespace surrogate::hept {
class SplitGraphs;
}

namespace surrogate::hept::gpu {

/// Graphs split over the ranks (the plan's SplitGraphs, on `comm`): each layer's buckets are formed by
/// the plan's sort on the host keys and their rows move between the ranks' devices (ExchangePlan on
/// device rows: NCCL, or staged through host memory).
struct SplitStage {
  const Comm* comm = nullptr;
  const SplitGraphs* graphs = nullptr;
};

/// A batch's geometry on a device: the padded rows, their region codes (or src's region indices), their
/// coordinates, and which padded row answers each input row. Made by a DeviceForward of that device.
class DeviceGeometry {
 public:
  virtual ~DeviceGeometry() = default;
  virtual int device() const = 0;
  /// Input rows (the rows of a forward's x and out) and padded rows.
  virtual std::int64_t points() const = 0;
  virtual std::int64_t padded_points() const = 0;
  /// The geometry copied back to the host, for tests: every field the device holds (a geometry built on
  /// the device: all of Geometry's).
  virtual Geometry download() const = 0;
};

/// finish_geometry's maxima over the ranks (in place). On the device it is called with -1 in every value
/// when this rank failed before it, so that the caller can stop every rank there.
using ReduceMax = std::function<void(std::vector<std::int64_t>&)>;

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// The arithmetic of the dense layers from the next forward on: fp32, or tf32 / bf16 on the tensor cores
  /// (the bucket attention, norms and the plan stay fp32).
  virtual void set_precision(Precision precision) = 0;
  /// quantile_bins<float> and finish_geometry on the device, bit for bit: the graphs `sizes` (consecutive
  /// rows of `coords`, host, points x coords_dim) with batch numbers `graph_ids`; `reduce_max` as
  /// finish_geometry's (collective: called on every rank, also after a failure here). The same Errors
  /// as the CPU's for sizes and regions, before anything is enqueued.
  virtual std::unique_ptr<DeviceGeometry> build_geometry(const float* coords, const std::vector<std::int64_t>& sizes,
                                                         const std::vector<std::int64_t>& graph_ids,
                                                         const ReduceMax& reduce_max = {}) = 0;
  /// A geometry built on the host (the split graphs' rows) and its `inputs` input rows' coordinates.
  virtual std::unique_ptr<DeviceGeometry> upload_geometry(const Geometry& g, const float* coords,
                                                          std::int64_t inputs) = 0;
  /// Network<float>::forward on the device: x (host, g.points() x in_dim) in, out (host, g.points() x
  /// out_dim) out, the padded rows and their coordinates those of `g`. `range` is called once per layer,
  /// also with no points, since it is collective over the ranks. With `split`, g is this rank's padded
  /// rows of SplitGraphs (upload_geometry) and the bucket stage is collective: an error of one rank there
  /// is agreed (the same Error on every rank).
  virtual void forward(const DeviceGeometry& g, const float* x, float* out,
                       const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                       const SplitStage* split = nullptr) = 0;

  /// For a caller that keeps the rows on the device (Model::predict_device): the forward's stream (a
  /// cudaStream_t; the caller enqueues its gather, moves and scatter there), and device arrays for g's
  /// input rows (in_dim values each) and output rows (out_dim), grown as needed, kept by the forward.
  virtual void* stream() const = 0;
  virtual float* input_rows(std::int64_t rows) = 0;
  virtual float* output_rows(std::int64_t rows) = 0;
  /// forward() of whole graphs on device rows x and out (this device's memory), enqueued on stream(): in
  /// one process (range null) nothing waits for the device; across ranks only the ranges' reductions do.
  virtual void forward_on_device(const DeviceGeometry& g, const float* x, float* out,
                                 const std::function<void(std::vector<float>&, std::vector<float>&)>* range) = 0;
};

/// Uploads the network's weights to CUDA device `device` (or the emulated device). Throws
/// Error(unsupported) when no such device is visible or the model is wider than the kernels take
/// (hash_dim or h_dim above kernels::cuda::kMaxBucketWidth). The network must outlive the result.
std::unique_ptr<DeviceForward> make_cuda_forward(const Network<float>& net, int device);

}  // namespace surrogate::hept::gpu
