// The single-layer spherical models on a CUDA device (layer_device.hpp): host rows in, the device
// operator of attention_device.hpp on the object's stream, host rows out.
#include "layer_device.hpp"

#include <cuda_runtime_api.h>

#include <string>

#include "../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/sphere/attention_device.hpp"

namespace surrogate::sphere {
namespace {

namespace cu = kernels::cuda;
using kernels::index_t;

template <class DeviceOp>
class S2LayerCuda final : public S2LayerDeviceForward {
 public:
  template <class Config, class Weights>
  S2LayerCuda(const char* model, const Config& config, const Weights& weights, int device)
      : model_(model), device_(device) {
    try {
      op_ = std::make_unique<DeviceOp>(config, weights, device);  // refuses what it cannot run, first
      const auto& c = op_->host().config();
      in_channels_ = c.in_channels;
      out_channels_ = c.out_channels;
      points_ = static_cast<index_t>(c.nlat_in) * c.nlon_in;
      stream_ = cu::Stream(device_);
    } catch (...) {
      detail::raise_current_cuda_error(model_, device_);
    }
  }

  void forward(int batch, const float* in, float* out) override {
    if (batch < 1 || !in || !out)
      throw Error(ErrorCode::invalid_argument, std::string(model_) + ": CUDA forward needs batch >= 1 and host arrays");
    try {
      cu::DeviceGuard guard(device_);
      const std::size_t in_count = static_cast<std::size_t>(batch * points_ * in_channels_);
      const std::size_t out_count = static_cast<std::size_t>(batch * points_ * out_channels_);
      if (in_count > in_.size()) in_.resize(in_count, device_);
      if (out_count > out_.size()) out_.resize(out_count, device_);
      cudaStream_t s = stream_.get();
      cu::copy_to_device(in_.data(), in, in_count * sizeof(float), s);
      op_->forward(batch, in_.data(), nullptr, nullptr, out_.data(), s);  // self-attention
      cu::copy_to_host(out, out_.data(), out_count * sizeof(float), s);
      stream_.synchronize();
    } catch (...) {
      detail::raise_current_cuda_error(model_, device_);
    }
  }
  int device() const override { return device_; }

 private:
  const char* model_;
  int device_;
  int in_channels_ = 0, out_channels_ = 0;
  index_t points_ = 0;
  std::unique_ptr<DeviceOp> op_;
  cu::Stream stream_;
  cu::DeviceBuffer<float> in_, out_;
};

}  // namespace

std::unique_ptr<S2LayerDeviceForward> make_s2_attention_device_forward(const AttentionS2Config& config,
                                                                       const AttentionS2Weights& weights, int device) {
  return std::make_unique<S2LayerCuda<AttentionS2Device>>("s2_attention", config, weights, device);
}

std::unique_ptr<S2LayerDeviceForward> make_s2_neighborhood_attention_device_forward(
    const NeighborhoodAttentionS2Config& config, const NeighborhoodAttentionS2Weights& weights, int device) {
  return std::make_unique<S2LayerCuda<NeighborhoodAttentionS2Device>>("s2_neighborhood_attention", config, weights,
                                                                      device);
}

}  // namespace surrogate::sphere
