// The single-layer spherical models ("s2_attention", "s2_neighborhood_attention") on a CUDA device, FP32 or
// the projections in tf32 / bf16 (CUDA builds only): self-attention on the model's grid with AttentionS2Device / NeighborhoodAttentionS2Device
// on the object's stream, in a plan's latitude bands (at one rank one band, the whole grid); the device
// operators refuse the neighbourhood upsampling mode (Error(unsupported) at construction).
// share/docs/sphere.md, "Latitude bands on a device".
#pragma once

#include <memory>

#include "../plan.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"  // Precision
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace surrogate::sphere {

class S2LayerDeviceForward {
 public:
  virtual ~S2LayerDeviceForward() = default;
  /// Collective. The plan's latitude bands (SpherePlan::layer) on the device of every rank: this rank's
  /// rows `in` (its pieces in the working order, in_channels values at row stride ld_in) uploaded, the
  /// query and key/value rows moved between the devices (ExchangePlan device moves through the comm's
  /// DeviceTransport), the operator's row-range forward, the output band moved back to the pieces'
  /// rows and downloaded into `out` (out_channels values at row stride ld_out). Bitwise the same rows at
  /// any rank count; a failure on any rank is the same Error on every rank. With `on_device`, `in` and
  /// `out` are rows in this device's memory (neither uploaded nor downloaded).
  virtual void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                             index_t ld_out, bool on_device = false) = 0;
  /// The projections' arithmetic from the next forward on: fp32, or tf32 / bf16 on the tensor cores.
  virtual void set_precision(Precision precision) = 0;
  virtual int device() const = 0;
  /// The stream the forward enqueues on (a cudaStream_t).
  virtual void* stream() const = 0;
};

/// The device forward of the CPU operator `op` (which must outlive it; its weights are uploaded, held once
/// on the host). Throw Error(unsupported) for the configurations named above (and without a usable device).
std::unique_ptr<S2LayerDeviceForward> make_s2_attention_device_forward(const AttentionS2& op, int device);
std::unique_ptr<S2LayerDeviceForward> make_s2_neighborhood_attention_device_forward(const NeighborhoodAttentionS2& op,
                                                                                   int device);

}  // namespace surrogate::sphere
