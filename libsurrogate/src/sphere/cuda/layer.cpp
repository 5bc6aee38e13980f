// The single-layer spherical models on a CUDA device (layer.hpp): host rows in, the device operator of
// surrogate/sphere/attention_device.hpp on the object's stream, the plan's exchanges between the devices,
// host rows out.
#include "layer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <vector>
#include <type_traits>

#include "../../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
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
      surrogate::detail::raise_current_cuda_error(model_, device_);
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
      surrogate::detail::raise_current_cuda_error(model_, device_);
    }
  }
  void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                     index_t ld_out) override {
    const LayerBands& l = plan.layer();
    const auto& c = op_->host().config();
    const index_t n = plan.layout().local_points(), batch = plan.layout().num_samples();
    const index_t band_rows = batch * (l.lat_end - l.lat_begin) * c.nlon_in;
    const auto cin = static_cast<std::size_t>(in_channels_), cout = static_cast<std::size_t>(out_channels_);
    const Place place{device_, stream_.get(), &comm.device_transport(device_)};
    std::vector<float> host(static_cast<std::size_t>(n) * std::max(cin, cout));
    on_every_rank(comm, [&](cudaStream_t s) {  // this rank's rows, dense, to the device
      for (index_t r = 0; r < n; ++r) std::copy_n(in + r * ld_in, cin, host.data() + static_cast<std::size_t>(r) * cin);
      pieces_.resize(std::max<std::size_t>(static_cast<std::size_t>(n) * std::max(cin, cout), 1), device_);
      in_.resize(std::max<std::size_t>(static_cast<std::size_t>(l.inputs.target_rows()) * cin, 1), device_);
      out_.resize(std::max<std::size_t>(static_cast<std::size_t>(band_rows) * cout, 1), device_);
      cu::copy_to_device(pieces_.data(), host.data(), static_cast<std::size_t>(n) * cin * sizeof(float), s);
    });
    l.inputs.forward(pieces_.data(), in_channels_, in_.data(), in_channels_, in_channels_, place);
    on_every_rank(comm, [&](cudaStream_t s) {
      if (band_rows == 0) return;
      const float* query = in_.data() + l.query_row * in_channels_;
      const float* kv = in_.data() + l.kv_row * in_channels_;
      if constexpr (std::is_same_v<DeviceOp, NeighborhoodAttentionS2Device>)
        op_->forward_rows(static_cast<int>(batch), l.lat_begin, l.lat_end, query, l.kv_begin, l.kv_end, kv, kv,
                          out_.data(), s);
      else if (l.kv_begin != 0 || l.kv_end != c.nlat_in)
        throw Error(ErrorCode::internal, std::string(model_) + ": global attention needs every key/value row");
      else
        op_->forward_rows(static_cast<int>(batch), l.lat_begin, l.lat_end, query, kv, kv, out_.data(), s);
    });
    plan.outputs().forward(out_.data(), out_channels_, pieces_.data(), out_channels_, out_channels_, place);
    on_every_rank(comm, [&](cudaStream_t s) {  // the output rows back to the host
      cu::copy_to_host(host.data(), pieces_.data(), static_cast<std::size_t>(n) * cout * sizeof(float), s);
      stream_.synchronize();
      for (index_t r = 0; r < n; ++r) std::copy_n(host.data() + static_cast<std::size_t>(r) * cout, cout, out + r * ld_out);
    });
  }
  int device() const override { return device_; }

 private:
  /// Device work between two exchanges, on this rank's stream, synchronized; a failure on any rank is the
  /// same Error on every rank before the next exchange.
  template <class F>
  void on_every_rank(const Comm& comm, F&& work) {
    collectively(comm, [&] {
      try {
        cu::DeviceGuard guard(device_);
        work(stream_.get());
        stream_.synchronize();
      } catch (...) {
        surrogate::detail::raise_current_cuda_error(model_, device_);
      }
    });
  }

  const char* model_;
  int device_;
  int in_channels_ = 0, out_channels_ = 0;
  index_t points_ = 0;
  std::unique_ptr<DeviceOp> op_;
  cu::Stream stream_;
  cu::DeviceBuffer<float> in_, out_, pieces_;  // forward_bands: pieces_ holds this rank's input, then output rows
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
