// The two ends of a device-resident predict (Model::predict_device), shared by the families' device
// forwards (CUDA builds only): the caller's strided arrays gathered into working rows, normalised as
// predict() normalises host arrays, and working rows scattered back, de-normalised. Non-finite values are
// counted per channel on the device; only the counts cross to the host. share/docs/cuda.md, "Arrays in
// device memory".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/kernels/cuda.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::device {

using kernels::index_t;

/// A layout's working order (working row -> caller's point, SampleLayout::order()) on a device, kept with
/// a plan so that a predict on it uploads nothing. An empty order is the identity (data() null).
class CallerOrder {
 public:
  /// Uploads `order` to `device` on `stream` (synchronously: the plan's host order may change later).
  CallerOrder(std::span<const index_t> order, int device, cudaStream_t stream);
  const index_t* data() const { return empty_ ? nullptr : order_.data(); }
  int device() const { return device_; }

 private:
  kernels::cuda::DeviceBuffer<index_t> order_;
  int device_ = -1;
  bool empty_ = true;
};

/// A channel whose working (normalised) values must lie strictly between lo and hi: HEPT's particle
/// classes. The gather finds the first working row outside.
struct ValueRange {
  int channel = -1;
  float lo = 0, hi = 0;
};

/// The model's normalisation on one device, the counters and their pinned host copies.
class CallerRows {
 public:
  /// Uploads the normalisation of a model with `in_channels` inputs and `out_channels` outputs to `device`
  /// (synchronously).
  CallerRows(const Normalization& n, int in_channels, int out_channels, int device, cudaStream_t stream);
  int device() const { return device_; }

  /// Enqueues on `stream`, ordered after the caller's work on the device's default stream: arrays.in
  /// gathered into `work` (rows x ld_work; working row r is the caller's point order[r], order null: r),
  /// normalised, and the per-channel counts of non-finite values (with `range`: also the first row outside
  /// it) copied to host memory. Read them with input_counts() / first_outside() once the stream is there.
  void gather(const Model::DeviceArrays& arrays, const index_t* order, index_t rows, float* work, index_t ld_work,
              cudaStream_t stream, const ValueRange* range = nullptr);
  std::vector<std::uint64_t> input_counts() const;
  /// The first working row outside the gather's range, or -1.
  index_t first_outside() const;

  /// Enqueues on `stream`: `work` (rows x ld_work) de-normalised into arrays.out at the caller's points;
  /// with `count`, the per-channel counts of non-finite outputs copied to host memory (output_counts()).
  void scatter(const Model::DeviceArrays& arrays, const index_t* order, index_t rows, const float* work,
               index_t ld_work, bool count, cudaStream_t stream);
  std::vector<std::uint64_t> output_counts() const;

 private:
  int device_ = -1, in_ = 0, out_ = 0;
  bool has_in_norm_ = false, has_out_norm_ = false;
  index_t rows_ = 0;  // of the last gather, for first_outside()
  kernels::cuda::DeviceBuffer<double> norm_;  // input mean, std, output mean, std (as present)
  // Device counters: in_ input counts, the first row outside, out_ output counts; their host copies.
  kernels::cuda::DeviceBuffer<unsigned long long> counters_;
  kernels::cuda::PinnedBuffer<unsigned long long> host_;
};

}  // namespace surrogate::device
