// The single-layer spherical models ("s2_attention", "s2_neighborhood_attention") on a CUDA device, FP32
// (layer_device.cpp in CUDA builds; layer_device_stub.cpp, which refuses, otherwise). Internal to
// libsurrogate: the registered layer models run it for RunOptions::cuda_device >= 0 - forward on one
// rank, forward_band for each rank's latitude band on several (sphere_models.cpp).
//
// Self-attention on the model's grid: the host rows are uploaded, AttentionS2Device /
// NeighborhoodAttentionS2Device (surrogate/sphere/attention_device.hpp) runs on the object's stream, the
// output rows are downloaded. Refused (Error(unsupported) at construction, by the device operators):
// the neighbourhood upsampling mode (any head width and channel count runs).
//
// COMPILED AND EMULATION-TESTED, NEVER RUN ON A GPU.
#pragma once

#include <memory>

#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace surrogate::sphere {

class S2LayerDeviceForward {
 public:
  virtual ~S2LayerDeviceForward() = default;
  /// The operator's whole-grid self-attention on host arrays: in batch*nlat*nlon x in_channels, out
  /// batch*nlat*nlon x out_channels, channels last. Uploads, runs on the device, downloads, synchronizes.
  virtual void forward(int batch, const float* in, float* out) = 0;
  /// One latitude band (several ranks): the output rows [lat_begin, lat_end) of every sample from `query`
  /// (those rows of `in`, batch*(lat_end-lat_begin)*nlon x in_channels) and `key_value` (the input rows
  /// [kv_begin, kv_end) of every sample: every row for global attention, at least the neighbourhoods'
  /// rows for neighbourhood attention); out: batch*(lat_end-lat_begin)*nlon x out_channels. Uploads,
  /// runs, downloads, synchronizes; bitwise the rows forward() gives. Nothing happens for an empty band.
  virtual void forward_band(int batch, int lat_begin, int lat_end, const float* query, int kv_begin, int kv_end,
                            const float* key_value, float* out) = 0;
  virtual int device() const = 0;
};

/// Throw Error(unsupported) in builds without CUDA and for the configurations named above.
std::unique_ptr<S2LayerDeviceForward> make_s2_attention_device_forward(const AttentionS2Config& config,
                                                                       const AttentionS2Weights& weights, int device);
std::unique_ptr<S2LayerDeviceForward> make_s2_neighborhood_attention_device_forward(
    const NeighborhoodAttentionS2Config& config, const NeighborhoodAttentionS2Weights& weights, int device);

}  // namespace surrogate::sphere
