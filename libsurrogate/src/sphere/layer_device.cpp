// The single-layer spherical models on a CUDA device (layer_device.hpp): host rows in, the device
// operator of attention_device.hpp on the object's stream, host rows out.
#include "layer_device.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>

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
  void forward_band(int batch, int lat_begin, int lat_end, const float* query, int kv_begin, int kv_end,
                    const float* key_value, float* out) override {
    if (batch < 1 || !query || !key_value || !out)
      throw Error(ErrorCode::invalid_argument, std::string(model_) + ": CUDA band forward needs batch >= 1 and host arrays");
    if (lat_begin == lat_end) return;
    try {
      cu::DeviceGuard guard(device_);
      const auto& c = op_->host().config();
      const std::size_t q_count = static_cast<std::size_t>(batch) * static_cast<std::size_t>(lat_end - lat_begin) *
                                  static_cast<std::size_t>(c.nlon_in) * static_cast<std::size_t>(in_channels_);
      const std::size_t kv_count = static_cast<std::size_t>(batch) * static_cast<std::size_t>(kv_end - kv_begin) *
                                   static_cast<std::size_t>(c.nlon_in) * static_cast<std::size_t>(in_channels_);
      const std::size_t out_count = q_count / static_cast<std::size_t>(in_channels_) * static_cast<std::size_t>(out_channels_);
      if (q_count + kv_count > in_.size()) in_.resize(q_count + kv_count, device_);
      if (out_count > out_.size()) out_.resize(out_count, device_);
      cudaStream_t s = stream_.get();
      cu::copy_to_device(in_.data(), query, q_count * sizeof(float), s);
      cu::copy_to_device(in_.data() + q_count, key_value, kv_count * sizeof(float), s);
      const float* kv = in_.data() + q_count;
      if constexpr (std::is_same_v<DeviceOp, NeighborhoodAttentionS2Device>)
        op_->forward_rows(batch, lat_begin, lat_end, in_.data(), kv_begin, kv_end, kv, kv, out_.data(), s);
      else if (kv_begin != 0 || kv_end != c.nlat_in)
        throw Error(ErrorCode::internal, std::string(model_) + ": global attention needs every key/value row");
      else
        op_->forward_rows(batch, lat_begin, lat_end, in_.data(), kv, kv, out_.data(), s);
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
