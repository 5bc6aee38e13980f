// The SphericalTransformer forward on a CUDA device, FP32 or its dense layers in TF32 / BF16
// (transformer.cpp; CUDA builds only): the
// stages of the CPU forward (transformer/network.cpp) on device arrays of embed_dim floats per point, on
// the whole grid (forward) or in the latitude bands of a SpherePlan (forward_bands), with either decoder.
// share/docs/sphere.md, "CUDA forward of the SphericalTransformer".
#pragma once

#include <memory>

#include "../plan.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"  // Precision
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

class SphereTransformerDeviceForward {
 public:
  virtual ~SphereTransformerDeviceForward() = default;
  /// SphericalTransformer::forward (whole grid, one rank) on host arrays: in batch*nlat*nlon x in_chans,
  /// out batch*nlat*nlon x out_chans, channels last. Uploads, runs on the device, downloads, synchronizes;
  /// the whole grid's band is planned on the host once per batch size.
  virtual void forward(int batch, const float* in, float* out) = 0;
  /// Collective. SphericalTransformer::forward_bands with the plan's TransformerBands on the device of every
  /// rank: this rank's rows `in` (its pieces in the working order, in_chans values at row stride ld_in)
  /// uploaded, each stage on the device, every exchange an ExchangePlan device move (through the comm's
  /// DeviceTransport: NCCL when every rank owns its GPU), the output band moved back to the pieces' rows
  /// and downloaded into `out` (out_chans values at row stride ld_out). Bitwise the one-rank device
  /// forward for any partition; a failure on any rank is the same Error on every rank. With `on_device`,
  /// `in` and `out` are rows in this device's memory (neither uploaded nor downloaded).
  virtual void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                             index_t ld_out, bool on_device = false) = 0;
  virtual int device() const = 0;
  /// The stream the forward enqueues on (a cudaStream_t).
  virtual void* stream() const = 0;
  /// The arithmetic of the dense layers from the next forward on: fp32, or tf32 / bf16 on the tensor cores
  /// (the DISCO convolutions, the attention operators, norms and transforms stay fp32).
  virtual void set_precision(Precision precision) = 0;
};

/// The device forward of `net`: its layers' weights and tables uploaded from its CPU layers (the network
/// must outlive the result; the host holds them once). Error(unsupported) without a usable device.
std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer& net,
                                                                                      int device);

}  // namespace surrogate::sphere
