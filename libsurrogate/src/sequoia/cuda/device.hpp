// Sequoia's forward on a CUDA device, float32 (CUDA builds only; elsewhere the model refuses with
// detail::refuse_without_cuda_backend): the weights uploaded once, the hierarchy and neighbour lists built on
// the host as for the CPU forward, every layer on the device. share/docs/sequoia.md, "On a CUDA device".
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "../share.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia::gpu {

class DeviceForward {
 public:
  virtual ~DeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// Network::forward(share, ...) on the device, host arrays in and out: a whole share (every node of `h`
  /// on this rank), or a split one (collective over `comm`: the halo and voxel rows move between the
  /// ranks' devices through the share's exchange plans; an error of one rank is agreed before any move).
  /// `geometry` names (s, h) (Plan::hierarchy_serial()): called again with the same number, the forward
  /// keeps the hierarchy's arrays it uploaded for it and uploads only the features; 0 uploads everything.
  virtual std::vector<float> forward(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                     const float* sample_features, std::uint64_t geometry = 0) = 0;
};

/// Uploads the network's weights to CUDA device `device` (or the emulated device). Throws
/// Error(unsupported) when no such device is visible. The network must outlive the result.
std::unique_ptr<DeviceForward> make_cuda_forward(const Network& net, int device);

}  // namespace surrogate::sequoia::gpu
