// HEPT's forward on a CUDA device, float32 (CUDA builds only; elsewhere the model refuses with
// detail::refuse_without_cuda_backend): the weights uploaded once, the geometry built on the host as for
// the CPU forward, every layer on the device. share/docs/hept.md, "On a CUDA device".
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "surrogate/hept.hpp"

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

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// Network<float>::forward on the device, host arrays in and out (the same arguments; `range` is called
  /// once per layer, also with no points, since it is collective over the ranks). With `split`, g, x and
  /// coords are this rank's padded rows of SplitGraphs and the bucket stage is collective: an error of one
  /// rank there is agreed (the same Error on every rank).
  virtual void forward(const Geometry& g, const float* x, const float* coords, float* out,
                       const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                       const SplitStage* split = nullptr) = 0;
};

/// Uploads the network's weights to CUDA device `device` (or the emulated device). Throws
/// Error(unsupported) when no such device is visible or the model is wider than the kernels take
/// (hash_dim or h_dim above kernels::cuda::kMaxBucketWidth). The network must outlive the result.
std::unique_ptr<DeviceForward> make_cuda_forward(const Network<float>& net, int device);

}  // namespace surrogate::hept::gpu
