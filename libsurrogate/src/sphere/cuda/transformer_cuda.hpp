// The SphericalTransformer's device forward (transformer.hpp) as one class, whose stages transformer.cpp
// (construction, the whole grid on one rank) and transformer_bands.cpp (latitude bands) share. CUDA builds
// only; internal to libsurrogate.
#pragma once

#include <cuda_runtime_api.h>

#include <optional>
#include <vector>

#include "../../device/layers.hpp"
#include "../transformer/bands.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"
#include "transformer.hpp"

namespace surrogate::sphere {

class SphereTransformerCuda final : public SphereTransformerDeviceForward {
 public:
  SphereTransformerCuda(const SphericalTransformer& net, const ModelFile& file, int device);
  void forward(int batch, const float* in, float* out) override;
  void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                     index_t ld_out) override;
  int device() const override { return device_; }

 private:
  struct Block {
    surrogate::device::Norm norm[2];  // instance or layer norm: weight and bias in weights_
    std::optional<AttentionS2Device> global;
    std::optional<NeighborhoodAttentionS2Device> neighborhood;
    surrogate::device::Dense fc1, fc2;  // use_mlp only
  };
  // upsample_sht: RealSHT on the internal grid, InverseRealSHT on the image grid (the CPU classes' tables
  // and truncation), on the kernels of cuda_sphere_sht.hpp.
  struct ShtDecoder {
    int lmax = 0, mmax = 0, modes_in = 0, modes_out = 0, nyquist = -1;
    kernels::cuda::DeviceBuffer<float> analysis, synthesis;     // RealSHT::weights(), InverseRealSHT::table()
    kernels::cuda::DeviceBuffer<double> twiddle_in, twiddle_out;  // cos, sin(2 pi t / nlon) of both grids
    // Work arrays (grown by ensure_buffers); orders and all_coeffs: the exchanges' targets in bands.
    kernels::cuda::DeviceBuffer<float> fourier, orders, coeffs, all_coeffs, g;
  };

  // transformer.cpp: the stages on device arrays of C_ floats per point.
  void ensure_buffers(int batch);
  /// y = norm_which(x) over `lat_rows` latitude rows of `batch` samples (none: y = x); the instance norm's
  /// statistics over those rows (the whole grid: lat_rows = h_).
  void norm(const Block& b, int which, int batch, int lat_rows, const float* x, float* y);
  /// x_ = fc2(act(fc1(y_))) + x_ over `rows` rows.
  void mlp(const Block& b, index_t rows, cudaStream_t s);
  /// x[r] += addend[r] (the first `width` values of `rows` rows; x has rows of `width` floats).
  void add_rows(float* x, const float* addend, index_t rows, int width, int ld_addend, cudaStream_t s);
  /// up (image grid) = InverseRealSHT(RealSHT(x (internal grid))).
  void upsample_sht(int batch, const float* x, float* up, cudaStream_t s);

  // transformer_bands.cpp: the band forward's steps between two exchanges.
  template <class F>
  void on_every_rank(const Comm& comm, F&& work);
  void band_norm(const Comm& comm, const TransformerBands::Exchanges& e, const Place& place, const Block& b, int which,
                 const float* x, float* y);
  void upsample_sht_bands(const Comm& comm, const TransformerBands::Exchanges& e, const Place& place);

  const SphericalTransformer& net_;
  TransformerConfig cfg_;
  int device_ = -1, h_ = 0, w_ = 0, C_ = 0, hidden_ = 0;
  kernels::cuda::Stream stream_;
  surrogate::device::WeightArena weights_;  // the norms' and the MLP layers' weights
  std::optional<DiscoConvS2Device> encoder_, decoder_;
  std::optional<ResampleS2Device> resample_;  // upsample_sht = false
  std::optional<ShtDecoder> sht_;
  kernels::cuda::DeviceBuffer<float> pos_;  // h*w x C, or empty
  bool has_pos_ = false;
  std::vector<Block> blocks_;
  // Work arrays (grown by ensure_buffers; forward_bands: kv_ the key/value rows, band_up_ the decoder's
  // input rows, part_band_ the band's per-row sums, pieces_in_ / pieces_out_ this rank's input and output
  // rows in the working order).
  int capacity_ = 0;
  kernels::cuda::DeviceBuffer<float> in_, x_, y_, att_, hid_, up_, out_, scale_, shift_, kv_, band_up_;
  kernels::cuda::DeviceBuffer<float> pieces_in_, pieces_out_;
  kernels::cuda::DeviceBuffer<double> part_, part_band_, mean_;
};

}  // namespace surrogate::sphere
