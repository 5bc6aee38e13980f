// The single-layer spherical models on a CUDA device (layer.hpp): the device operator of
// surrogate/sphere/attention_device.hpp on the object's stream, in the plan's latitude bands through
// ../layer_program.hpp, the CPU model's forward, on SphereCudaOps (ops.hpp) and a DeviceRun (exec.hpp).
#include "layer.hpp"

#include <cuda_runtime_api.h>

#include <string>
#include <type_traits>

#include "../../cuda_errors.hpp"
#include "../layer_program.hpp"
#include "exec.hpp"
#include "ops.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sphere {
namespace {

namespace cu = kernels::cuda;
using kernels::index_t;

/// layer_program.hpp's Exec on a device: the operator once over the band's rows.
class LayerExec : public DeviceRun {
 public:
  using Ops = SphereCudaOps;
  LayerExec(const char* model, int device, cudaStream_t stream, const Comm& comm, DeviceBuffers& buffers)
      : DeviceRun(model, device, stream, comm, buffers), ops_(nullptr, stream) {}
  template <class F>
  void once(F&& f) {
    launch([&] { f(ops_); });
  }

 private:
  SphereCudaOps ops_;
};

class S2LayerCuda final : public S2LayerDeviceForward {
 public:
  /// Host: AttentionS2 or NeighborhoodAttentionS2 (kept by the caller).
  template <class Host>
  S2LayerCuda(const char* model, const Host& host, int device) : model_(model), device_(device) {
    try {
      // The device operator refuses what it cannot run, first.
      if constexpr (std::is_same_v<Host, AttentionS2>) op_.global.emplace(host, device);
      else op_.neighborhood.emplace(host, device);
      const auto set = [&](const auto& c) {  // the operator's configuration
        in_channels_ = c.in_channels;
        out_channels_ = c.out_channels;
        nlon_ = c.nlon_in;
      };
      if (op_.global) set(op_.global->host().config());
      else set(op_.neighborhood->host().config());
      stream_ = cu::Stream(device_);
    } catch (...) {
      surrogate::detail::raise_current_cuda_error(model_, device_);
    }
  }

  void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                     index_t ld_out, bool on_device) override {
    const index_t n = plan.layout().local_points();
    LayerExec exec(model_, device_, stream_.get(), comm, buffers_);
    exec.rows_on_device = on_device;
    const ops::Rows input = exec.upload(in, ld_in, n, in_channels_);
    const ops::Rows result = exec.output(n, out_channels_);
    const LayerBands& bands = plan.layer();
    exec.run_graph(
        graph_,
        [&] {
          return surrogate::device::ComputeGraph::key({bands.serial.value(), static_cast<std::uintptr_t>(n),
                                                       static_cast<std::uintptr_t>(precision_)},
                                                      {input.data, result.data, &plan.outputs()});
        },
        [&] {
          program::layer_forward(exec, &op_, bands, plan.outputs(), static_cast<int>(plan.layout().num_samples()),
                                 nlon_, input, result);
        });
    exec.download(result, out, ld_out);
  }
  void set_precision(Precision precision) override {
    op_.set_precision(precision);
    precision_ = precision;
  }
  int device() const override { return device_; }
  void* stream() const override { return stream_.get(); }

 private:
  const char* model_;
  int device_;
  int in_channels_ = 0, out_channels_ = 0, nlon_ = 0;
  Precision precision_ = Precision::fp32;  // of the projections (in the graph's key)
  DeviceAttention op_;
  cu::Stream stream_;
  DeviceBuffers buffers_;
  surrogate::device::ComputeGraph graph_;  // forward_bands' stages on one rank
};

}  // namespace

std::unique_ptr<S2LayerDeviceForward> make_s2_attention_device_forward(const AttentionS2& op, int device) {
  return std::make_unique<S2LayerCuda>("s2_attention", op, device);
}

std::unique_ptr<S2LayerDeviceForward> make_s2_neighborhood_attention_device_forward(const NeighborhoodAttentionS2& op,
                                                                                   int device) {
  return std::make_unique<S2LayerCuda>("s2_neighborhood_attention", op, device);
}

}  // namespace surrogate::sphere
