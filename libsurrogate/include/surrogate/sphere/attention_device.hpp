// The CUDA forward of AttentionS2 and NeighborhoodAttentionS2 (CUDA builds only; needs the CUDA toolkit's
// include directory and CUDA::cudart). Same configuration, weights, semantics and layout as the CPU
// operators (attention.hpp, neighborhood_attention.hpp; share/docs/sphere.md "CUDA"), on device pointers:
//
//   q/k/v projections (1x1 convolutions with bias): kernels::cuda::mlp, one FP32 layer each (channel
//   counts above 256: kernels::cuda::dense, the same fmaf chain per output); after set_precision(tf32 or
//   bf16) kernels::cuda::dense on the tensor cores (operands rounded to that precision, FP32 sums);
//   optional RMS qk-norm and the scale of q: kernels::cuda::sphere_head_norm_scale;
//   the quadrature-weighted softmax: kernels::cuda::sphere_global_attention / sphere_neighborhood_attention
//   (the online softmax of latent_softmax.cuh, double sums; one thread per (sample, head, query) for head
//   widths <= 64, one thread per 64 value columns of a query above);
//   output projection: as the q/k/v projections.
//
// Each object builds the CPU operator first (every check of the configuration and weights, the scale,
// the quadrature weights and the neighbour lists come from it), then uploads what the device needs; or
// it is built on a CPU operator the caller keeps (a model holding both), whose weights it uploads, so
// that the host holds them once.
// Any head width and channel count; batch <= 65535 (Error(invalid_argument) in the forward).
// A forward enqueues on `stream` and returns; its scratch buffers belong to the object, so one object
// runs one forward at a time (the next forward on the same stream is fine). The caller's current
// device is restored. CUDA failures become Error (out_of_memory, unsupported or internal) naming the
// device.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "surrogate/model.hpp"  // Precision
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace surrogate::sphere {

class AttentionS2Device {
 public:
  AttentionS2Device(const AttentionS2Config& config, const AttentionS2Weights& weights, int device = 0);
  /// The device forward of `host`, which must outlive this object (host() returns it): its weights are
  /// uploaded, no second CPU operator is built.
  explicit AttentionS2Device(const AttentionS2& host, int device = 0);
  ~AttentionS2Device();
  AttentionS2Device(AttentionS2Device&&) noexcept;
  AttentionS2Device& operator=(AttentionS2Device&&) noexcept;

  /// AttentionS2::forward on device buffers of `device`: query batch*Po x in_channels, key/value
  /// batch*Pi x in_channels (both nullptr: self-attention, in_shape == out_shape), out batch*Po x
  /// out_channels, channels last. Enqueued on `stream`, a stream of `device` (nullptr: the legacy default
  /// stream); the caller synchronizes before reading `out`.
  void forward(int batch, const float* query, const float* key, const float* value, float* out, cudaStream_t stream);

  /// The output latitude rows [lat_begin, lat_end) only (AttentionS2::forward_rows on device buffers):
  /// query and out hold those rows of every sample (batch*(lat_end-lat_begin)*nlon_out rows), key/value
  /// every input row of every sample. Bitwise the rows forward() computes (the same kernels on the same
  /// rows: a query's keys do not depend on its latitude). Nothing is enqueued for an empty range.
  void forward_rows(int batch, int lat_begin, int lat_end, const float* query, const float* key, const float* value,
                    float* out, cudaStream_t stream);

  /// The arithmetic of the four projections (q, k, v, output) from the next forward on: fp32 (the
  /// default), or tf32 / bf16 on the tensor cores; the qk-norm and the softmax stay FP32 (double sums).
  /// Error(unsupported) for fp64.
  void set_precision(Precision precision);

  /// The CPU operator with the same configuration and weights.
  const AttentionS2& host() const noexcept;
  int device() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class NeighborhoodAttentionS2Device {
 public:
  NeighborhoodAttentionS2Device(const NeighborhoodAttentionS2Config& config,
                                const NeighborhoodAttentionS2Weights& weights, int device = 0);
  /// As AttentionS2Device's: on a CPU operator the caller keeps (it must outlive this object).
  explicit NeighborhoodAttentionS2Device(const NeighborhoodAttentionS2& host, int device = 0);
  ~NeighborhoodAttentionS2Device();
  NeighborhoodAttentionS2Device(NeighborhoodAttentionS2Device&&) noexcept;
  NeighborhoodAttentionS2Device& operator=(NeighborhoodAttentionS2Device&&) noexcept;

  /// NeighborhoodAttentionS2::forward (whole grid) on device buffers, as AttentionS2Device::forward.
  void forward(int batch, const float* query, const float* key, const float* value, float* out, cudaStream_t stream);

  /// The output latitude rows [lat_begin, lat_end) only (NeighborhoodAttentionS2::forward_rows on device
  /// buffers): query and out hold those rows of every sample, key/value the input rows [in_begin, in_end)
  /// of every sample, which must contain host().input_rows(lat_begin, lat_end) (else
  /// Error(invalid_argument)). The neighbour lists of the band, rebased to its first input row, are built
  /// and uploaded on the first call for a band (and again when the band changes; the device is
  /// synchronized first). Bitwise the rows forward() computes. Nothing is enqueued for an empty range.
  void forward_rows(int batch, int lat_begin, int lat_end, const float* query, int in_begin, int in_end,
                    const float* key, const float* value, float* out, cudaStream_t stream);

  /// As AttentionS2Device's.
  void set_precision(Precision precision);

  const NeighborhoodAttentionS2& host() const noexcept;
  int device() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sphere
