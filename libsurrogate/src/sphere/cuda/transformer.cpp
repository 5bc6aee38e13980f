// The SphericalTransformer's device forward (transformer.hpp): the CPU network's layers converted to
// SphereCudaOps (ops.hpp) and ../transformer/program.hpp's forward, the CPU's, through DeviceExec: every
// stage once over the band's rows on the object's stream, every exchange an ExchangePlan device move. The
// whole grid is one band of one rank (SelfComm), as on the CPU. Agrees with the CPU forward within float32
// rounding, not bitwise: share/docs/sphere.md, "CUDA forward of the SphericalTransformer".
#include "transformer.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../transformer/internals.hpp"
#include "exec.hpp"
#include "ops.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sphere {
namespace {

namespace cu = kernels::cuda;
using ops::Rows;

constexpr const char* kModel = "sphere_transformer";

class SphereTransformerCuda final : public SphereTransformerDeviceForward {
 public:
  SphereTransformerCuda(const SphericalTransformer& net, int device);
  void forward(int batch, const float* in, float* out) override;
  void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                     index_t ld_out, bool on_device) override {
    run(comm, plan.transformer().exchanges(), &plan.outputs(), in, ld_in, plan.layout().local_points(), out, ld_out,
        on_device);
  }
  int device() const override { return device_; }
  void* stream() const override { return stream_.get(); }
  void set_precision(Precision precision) override {
    for (program::Block<SphereCudaOps>& b : layers_.blocks) b.attention->set_precision(precision);
    precision_ = surrogate::device::tensor_core_precision(precision);
  }

 private:
  friend class DeviceExec;
  /// Collective. This rank's input rows (n of them at row stride ld_in) uploaded, the program, the band's
  /// output moved to the input's rows by `outputs` (nullptr: the band is the output) and downloaded.
  void run(const Comm& comm, const TransformerBands::Exchanges& bands, const ExchangePlan* outputs, const float* in,
           index_t ld_in, index_t n, float* out, index_t ld_out, bool on_device = false);

  const SphericalTransformer& net_;
  TransformerConfig cfg_;
  SelfComm self_;                              // the whole-grid forward's one rank
  int whole_batch_ = 0;                        // the batch whole_ was planned for (0: none yet)
  std::optional<TransformerBands> whole_;      // its one band, planned once per batch size
  int device_ = -1;
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;  // the dense, norm and vector layers' weights
  program::Layers<SphereCudaOps> layers_;
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the dense layers and the attention's projections
  DeviceBuffers buffers_;
  surrogate::device::ComputeGraph graph_;  // run()'s stages on one rank
};

/// program.hpp's Exec on a device: every stage once over all the band's rows, on the forward's stream
/// (DeviceRun: the buffers, the pending failures agreed before each exchange, the moves).
class DeviceExec : public DeviceRun {
 public:
  using Ops = SphereCudaOps;
  struct Work {
    DeviceExec* e;
    Rows rows(program::Buf b, index_t rows, int width) const { return e->rows(b, rows, width); }
  };

  DeviceExec(SphereTransformerCuda& f, const Comm& comm, const TransformerBands::Exchanges& bands)
      : DeviceRun(kModel, f.device_, f.stream_.get(), comm, f.buffers_), f_(f), bands_(bands),
        ops_(f.weights_, f.stream_.get(), f.precision_) {}

  const TransformerConfig& config() const { return f_.cfg_; }
  const program::Layers<Ops>& layers() const { return f_.layers_; }
  const TransformerBands::Exchanges& bands() const { return bands_; }

  template <class F>
  void tiles(index_t n, index_t /*tile*/, F&& f) {
    if (n == 0) return;
    Work work{this};
    launch([&] { f(ops_, work, index_t{0}, n); });
  }
  template <class F>
  void once(F&& f) {
    launch([&] { f(ops_); });
  }

 private:
  SphereTransformerCuda& f_;
  const TransformerBands::Exchanges& bands_;
  SphereCudaOps ops_;
};

SphereTransformerCuda::SphereTransformerCuda(const SphericalTransformer& net, int device)
    : net_(net), cfg_(net.config()), device_(device) {
  try {
    cu::DeviceGuard guard(device_);  // the uploads below run on this device whatever the caller's current one
    stream_ = cu::Stream(device_);
    SphereCudaOps::Upload upload{ops::CudaOps::Upload{&weights_}, device_, stream_.get()};
    layers_ = program::convert<SphereCudaOps>(TransformerInternals::layers(net), upload);
    weights_.upload(device_, stream_.get());
  } catch (...) {
    surrogate::detail::raise_current_cuda_error(kModel, device_);
  }
}

void SphereTransformerCuda::forward(int batch, const float* in, float* out) {
  if (batch < 1 || !in || !out)
    throw Error(ErrorCode::invalid_argument, "sphere_transformer: CUDA forward needs batch >= 1 and host arrays");
  const RowRange whole{0, static_cast<index_t>(batch) * cfg_.nlat * cfg_.nlon};
  if (!whole_ || whole_batch_ != batch) {  // host work only when the batch size changes
    const std::int64_t first_row = 0;
    whole_.reset();
    whole_.emplace(net_.plan_bands(self_, batch, balanced_bands(cfg_.nlat, 1), std::span<const RowRange>(&whole, 1),
                                   std::span<const std::int64_t>(&first_row, 1), whole.end));
    whole_batch_ = batch;
  }
  run(self_, whole_->exchanges(), nullptr, in, cfg_.in_chans, whole.end, out, cfg_.out_chans);
}

void SphereTransformerCuda::run(const Comm& comm, const TransformerBands::Exchanges& bands, const ExchangePlan* outputs,
                                const float* in, index_t ld_in, index_t n, float* out, index_t ld_out, bool on_device) {
  const int cout = cfg_.out_chans;
  DeviceExec exec(*this, comm, bands);
  exec.rows_on_device = on_device;
  const Rows input = exec.upload(in, ld_in, n, cfg_.in_chans);
  const index_t band_rows = static_cast<index_t>(bands.batch) * (bands.g1 - bands.g0) * cfg_.nlon;
  const Rows band_out = exec.rows(program::Buf::out, band_rows, cout);
  Rows result = band_out;  // the whole grid: the band's rows are the input's
  if (outputs != nullptr) result = exec.output(n, cout);  // the output band back to this rank's rows
  // One rank: every stage and exchange is device work on the stream, one captured graph on kept bands
  // (the key: the bands and the rows in and out; the forward's buffers grow in a direct run only).
  exec.run_graph(
      graph_,
      [&] {
        return surrogate::device::ComputeGraph::key(
            {bands.serial.value(), static_cast<std::uintptr_t>(n), static_cast<std::uintptr_t>(precision_)},
            {input.data, result.data, outputs});
      },
      [&] {
        program::forward(exec, input, band_out);
        if (outputs != nullptr) exec.exchange(*outputs, band_out, result, cout);
      });
  exec.download(result, out, ld_out);
}

}  // namespace

std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer& net,
                                                                                      int device) {
  return std::make_unique<SphereTransformerCuda>(net, device);
}

}  // namespace surrogate::sphere
