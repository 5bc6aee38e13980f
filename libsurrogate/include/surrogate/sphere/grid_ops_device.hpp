// The CUDA forward of DiscoConvS2 and ResampleS2 (CUDA builds only; needs the CUDA toolkit's include
// directory and CUDA::cudart). Same configuration, weights, semantics and layout as the CPU operators
// (disco.hpp, resample.hpp; share/docs/sphere.md "CUDA forward of DISCO and ResampleS2"), on device
// pointers, enqueued on a caller's stream:
//
//   DiscoConvS2Device: the psi contraction (kernels::cuda::disco_contraction: the CPU's float32
//   arithmetic and table order, bitwise the CPU's intermediate y), then the channel contraction with the
//   weight per group (kernels::cuda::grouped_linear, FP32; a float32 bound from the CPU's packed linear
//   kernel, whose summation order differs). The (sample, output latitude) rows are processed in chunks
//   whose intermediate y stays below kDiscoScratchFloats floats.
//   ResampleS2Device: the pole rows and the interpolation (kernels::cuda::resample), bitwise the CPU's
//   except the float sin/cos/atan2 of the bilinear-spherical pole rows (the device's libm); the identity
//   (same grid) is a device-to-device copy.
//
// Each object builds the CPU operator first (every check of the configuration, weights and table, the
// filter table and the interpolation tables are the CPU's; host() returns it), then uploads what the
// device needs once; or it is built on a CPU operator the caller keeps (a model holding both), so that
// the host holds the table and weights once. A forward's scratch belongs to the object: one forward at a time per object (the
// next one on the same stream is fine). The caller's current device is restored. CUDA failures become
// Error (out_of_memory, unsupported or internal) naming the operator and the device.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/resample.hpp"

namespace surrogate::sphere {

/// The largest intermediate y (floats) of one chunk of DiscoConvS2Device::forward (64 MiB).
inline constexpr std::size_t kDiscoScratchFloats = std::size_t{1} << 24;

/// The filter table regrouped by (output latitude t, basis function k), table order kept inside each
/// group, in the layout of kernels::cuda::DiscoTable (host side; the CPU operator regroups the same way).
struct DiscoSegments {
  std::vector<std::int64_t> segment;  // nlat_out * K + 1
  std::vector<std::int32_t> lat_in, lon_in;
  std::vector<float> value;           // psi rounded to float32
};
DiscoSegments disco_segments(const FilterTable& table, int kernel_size);

/// The weight (out_channels, in_channels/groups, K) as kernels::cuda::grouped_linear reads it:
/// w[g][k*Cg + c][o] = weight[g*Og + o][c][k].
std::vector<float> disco_grouped_weight(const DiscoConfig& config, int kernel_size, const std::vector<float>& weight);

class DiscoConvS2Device {
 public:
  /// As DiscoConvS2's constructor (table: nullptr = computed), on `device`.
  DiscoConvS2Device(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
                    const FilterTable* table = nullptr, int device = 0);
  /// The device forward of `host`, which must outlive this object (host() returns it): its table and
  /// weights are uploaded, no second CPU operator is built.
  explicit DiscoConvS2Device(const DiscoConvS2& host, int device = 0);
  ~DiscoConvS2Device();
  DiscoConvS2Device(DiscoConvS2Device&&) noexcept;
  DiscoConvS2Device& operator=(DiscoConvS2Device&&) noexcept;

  /// DiscoConvS2::forward on device buffers of `device`: in batch*nlat_in*nlon_in x in_channels, out
  /// batch*nlat_out*nlon_out x out_channels, channels last, not overlapping. Enqueued on `stream` (a stream
  /// of `device`; nullptr: the legacy default stream); the caller synchronizes before reading `out`.
  void forward(int batch, const float* in, float* out, cudaStream_t stream);

  /// DiscoConvS2::forward_rows on device buffers (latitude bands): `in` holds the input rows [in_begin,
  /// in_end) of every sample, which must contain host().input_rows(out_begin, out_end) (else
  /// Error(invalid_argument) naming the row); `out` the output rows [out_begin, out_end) of every sample.
  /// The kernels are forward()'s: the object keeps a copy of the table's input latitudes with the entries
  /// of the band's output rows rebased to in_begin (built and uploaded on the first call for a band, the
  /// device synchronized first; kept while the band stays the same). Bitwise the rows forward() gives.
  void forward_rows(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin, int out_end,
                    cudaStream_t stream);

  const DiscoConvS2& host() const noexcept;
  int device() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class ResampleS2Device {
 public:
  explicit ResampleS2Device(const ResampleConfig& config, int device = 0);
  /// On a CPU operator the caller keeps (it must outlive this object; host() returns it).
  explicit ResampleS2Device(const ResampleS2& host, int device = 0);
  ~ResampleS2Device();
  ResampleS2Device(ResampleS2Device&&) noexcept;
  ResampleS2Device& operator=(ResampleS2Device&&) noexcept;

  /// ResampleS2::forward on device buffers (contiguous rows of `channels` values), enqueued on `stream`.
  void forward(int batch, int channels, const float* in, float* out, cudaStream_t stream);

  /// ResampleS2::forward_rows on device buffers (latitude bands): `in` holds the input rows [in_begin,
  /// in_end) of every sample, which must contain host().input_rows(out_begin, out_end) (else
  /// Error(invalid_argument) naming the rows); `out` receives the output rows [out_begin, out_end). A pole
  /// row (bilinear with the poles expanded) is computed only when these output rows read it, from input
  /// row 0 or nlat_in - 1, as the CPU. Same kernels and per-element arithmetic: bitwise forward()'s rows.
  /// `in` and `out` must not overlap (Error(invalid_argument)), except `in == out` for the identity
  /// resampling of the same rows, which then copies nothing.
  void forward_rows(int batch, int channels, const float* in, int in_begin, int in_end, float* out, int out_begin,
                    int out_end, cudaStream_t stream);

  const ResampleS2& host() const noexcept;
  int device() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sphere
