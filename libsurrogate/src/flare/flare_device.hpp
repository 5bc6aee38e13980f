// The FLARE forward pass on a CUDA device (implemented in a CUDA build; elsewhere the factory refuses).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "surrogate/flare.hpp"

namespace surrogate::detail {

class FlareDeviceForward {
 public:
  virtual ~FlareDeviceForward() = default;
  /// The device the weights live on.
  virtual int device() const = 0;
  /// Same contract as Model::forward (host arrays, normalised inputs in the layout's working order).
  virtual void forward(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                       index_t ld_out, const RunOptions& options) = 0;
  /// Model::predict_device: the caller's arrays are in this device's memory; inputs are gathered into the
  /// working order and normalised, outputs de-normalised and scattered, all on the device. Collective.
  virtual void predict_device(const Comm& comm, const SampleLayout& layout, const Model::DeviceArrays& arrays,
                              const RunOptions& options,
                              const std::function<void(const std::vector<std::uint64_t>&)>& check_inputs) = 0;
};

/// Uploads the model to CUDA device `device`. Throws Error(unsupported) when this build has no CUDA
/// backend or no such device is visible.
std::unique_ptr<FlareDeviceForward> make_flare_cuda_forward(const FlareConfig& cfg, const ModelFile& file, int device);

}  // namespace surrogate::detail
