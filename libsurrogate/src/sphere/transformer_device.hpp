// The SphericalTransformer forward on a CUDA device, FP32 (transformer_device.cpp in CUDA builds;
// transformer_device_stub.cpp, which refuses, otherwise). Internal to libsurrogate: the registered
// "sphere_transformer" model runs it for RunOptions::cuda_device >= 0, on one rank (forward) or in
// latitude bands on several (forward_bands; both decoders, the SHT one with the CPU path's order split).
//
// The stages of the CPU forward (transformer.cpp) on device arrays, channels last with rows of embed_dim
// floats: DiscoConvS2Device encoder; the position-embedding add (cuda::row_binary, the CPU's float add);
// per block the norm (instance norm: cuda::grid_row_sums / grid_norm_stats / channel_affine, bitwise the
// CPU's; layer norm: cuda::norm, eps 1e-6), the attention device operator (AttentionS2Device or
// NeighborhoodAttentionS2Device), the residual add, the norm, the MLP (cuda::dense on the CPU's packed
// layers, exact-erf GELU in the epilogue or ReLU after it, the second layer adding the residual in place)
// or the norm's residual add without MLP; ResampleS2Device to the image grid; DiscoConvS2Device decoder;
// the input added for residual_prediction.
//
// Decoder upsampling: ResampleS2Device, or with upsample_sht the SHT decoder (RealSHT on the internal
// grid, InverseRealSHT on the image grid) on the kernels of kernels/cuda/sphere_sht.cu. Any embed_dim and
// head width runs (the model zoo's one-head e128 / e256 on the wide-head attention kernels).
//
// COMPILED AND EMULATION-TESTED, NEVER RUN ON A GPU.
#pragma once

#include <memory>
#include <span>

#include "surrogate/comm.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/bands.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

class SphereTransformerDeviceForward {
 public:
  virtual ~SphereTransformerDeviceForward() = default;
  /// SphericalTransformer::forward (whole grid, one rank) on host arrays: in batch*nlat*nlon x in_chans,
  /// out batch*nlat*nlon x out_chans, channels last. Uploads, runs on the device, downloads, synchronizes.
  virtual void forward(int batch, const float* in, float* out) = 0;
  /// Collective. SphericalTransformer::forward_bands on the device of every rank (latitude bands, the same
  /// arguments): each stage on the device, every move between ranks through host memory (the band's rows
  /// downloaded, the CPU path's fetch_rows / all-gather, the fetched rows uploaded). Bitwise the one-rank
  /// device forward for any partition. A failure on any rank is the same Error on every rank. The SHT
  /// decoder splits the orders over the ranks as the CPU path does (upsample_sht_bands).
  virtual void forward_bands(const Comm& comm, int batch, const BandPartition& image_bands,
                             std::span<const HeldRows> input, float* out_band) = 0;
  virtual int device() const = 0;
};

/// The device forward of `net` (its CPU operators, embedding, norms and MLP layers) with the attention and
/// DISCO weights read again from `file` (the file `net` was built from). Throws Error(unsupported) in
/// builds without CUDA and for the configurations named above.
std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer& net,
                                                                                      const ModelFile& file, int device);

}  // namespace surrogate::sphere
