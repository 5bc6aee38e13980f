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
  SphereTransformerCuda(const SphericalTransformer& net, const ModelFile& file, int device);
  void forward(int batch, const float* in, float* out) override;
  void forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in, float* out,
                     index_t ld_out) override {
    run(comm, plan.transformer().exchanges(), &plan.outputs(), in, ld_in, plan.layout().local_points(), out, ld_out);
  }
  int device() const override { return device_; }

 private:
  friend class DeviceExec;
  /// Collective. This rank's input rows (n of them at row stride ld_in) uploaded, the program, the band's
  /// output moved to the input's rows by `outputs` (nullptr: the band is the output) and downloaded.
  void run(const Comm& comm, const TransformerBands::Exchanges& bands, const ExchangePlan* outputs, const float* in,
           index_t ld_in, index_t n, float* out, index_t ld_out);

  const SphericalTransformer& net_;
  TransformerConfig cfg_;
  int device_ = -1;
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;  // the dense, norm and vector layers' weights
  program::Layers<SphereCudaOps> layers_;
  // The forward's buffers (program::Buf), the input and output rows of this rank, the band's output.
  cu::DeviceBuffer<float> floats_[static_cast<std::size_t>(program::Buf::count)];
  cu::DeviceBuffer<double> doubles_[static_cast<std::size_t>(program::Buf::count)];
  cu::DeviceBuffer<float> pieces_in_, pieces_out_, band_out_;
};

/// program.hpp's Exec on a device: every stage once over all the band's rows, on the forward's stream; a
/// failed launch is kept as pending and agreed over the ranks before the next exchange (and at the end),
/// so a failure on any rank is the same Error on every rank.
class DeviceExec {
 public:
  using Ops = SphereCudaOps;
  struct Work {
    DeviceExec* e;
    Rows rows(program::Buf b, index_t rows, int width) const { return e->rows(b, rows, width); }
  };

  DeviceExec(SphereTransformerCuda& f, const Comm& comm, const TransformerBands::Exchanges& bands)
      : f_(f), comm_(comm), bands_(bands), ops_(f.weights_.data(), f.stream_.get()),
        place_{f.device_, f.stream_.get(), &comm.device_transport(f.device_)} {}

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
  Rows rows(program::Buf b, index_t rows, int width) {
    auto& buf = f_.floats_[static_cast<std::size_t>(b)];
    launch([&] { buf.resize(std::max<std::size_t>(static_cast<std::size_t>(rows * width), 1), f_.device_); });
    return {buf.data(), width, rows, width, ops::Place::device};
  }
  double* sums(program::Buf b, index_t count) {
    auto& buf = f_.doubles_[static_cast<std::size_t>(b)];
    launch([&] { buf.resize(std::max<std::size_t>(static_cast<std::size_t>(count), 1), f_.device_); });
    return buf.data();
  }
  void exchange(const ExchangePlan& plan, const Rows& src, const Rows& dst, int width) {
    settle();
    plan.forward(src.data, src.ld, dst.data, dst.ld, width, place_);
  }
  /// Doubles move as two floats each (the bytes unchanged).
  void exchange(const ExchangePlan& plan, const double* src, double* dst, int width) {
    settle();
    plan.forward(reinterpret_cast<const float*>(src), 2 * width, reinterpret_cast<float*>(dst), 2 * width, 2 * width,
                 place_);
  }
  struct NoPhase {};
  NoPhase phase(program::Stage) const { return {}; }

  /// Runs `work` unless an earlier launch failed; a failure is kept as pending.
  template <class F>
  void launch(F&& work) {
    if (!pending_.ok()) return;
    try {
      work();
    } catch (...) {
      pending_ = surrogate::detail::status_of_current_cuda_error(kModel, f_.device_);
    }
  }
  /// Collective: the stream's work done and the pending failure, if any rank has one, raised on every rank.
  void settle() {
    launch([&] { f_.stream_.synchronize(); });
    const Status local = std::move(pending_);
    pending_ = {};
    comm_.agree_or_throw(local);
  }

 private:
  SphereTransformerCuda& f_;
  const Comm& comm_;
  const TransformerBands::Exchanges& bands_;
  SphereCudaOps ops_;
  Place place_;
  Status pending_;
};

SphereTransformerCuda::SphereTransformerCuda(const SphericalTransformer& net, const ModelFile& file, int device)
    : net_(net), cfg_(net.config()), device_(device) {
  try {
    cu::DeviceGuard guard(device_);  // the uploads below run on this device whatever the caller's current one
    stream_ = cu::Stream(device_);
    SphereCudaOps::Upload upload{ops::CudaOps::Upload{&weights_}, &file, device_, stream_.get()};
    layers_ = program::convert<SphereCudaOps>(TransformerInternals::layers(net), upload);
    weights_.upload(device_, stream_.get());
  } catch (...) {
    surrogate::detail::raise_current_cuda_error(kModel, device_);
  }
}

void SphereTransformerCuda::forward(int batch, const float* in, float* out) {
  if (batch < 1 || !in || !out)
    throw Error(ErrorCode::invalid_argument, "sphere_transformer: CUDA forward needs batch >= 1 and host arrays");
  const SelfComm self;
  const RowRange whole{0, static_cast<index_t>(batch) * cfg_.nlat * cfg_.nlon};
  const std::int64_t first_row = 0;
  const TransformerBands bands = net_.plan_bands(self, batch, balanced_bands(cfg_.nlat, 1),
                                                 std::span<const RowRange>(&whole, 1),
                                                 std::span<const std::int64_t>(&first_row, 1), whole.end);
  run(self, bands.exchanges(), nullptr, in, cfg_.in_chans, whole.end, out, cfg_.out_chans);
}

void SphereTransformerCuda::run(const Comm& comm, const TransformerBands::Exchanges& bands, const ExchangePlan* outputs,
                                const float* in, index_t ld_in, index_t n, float* out, index_t ld_out) {
  const int cin = cfg_.in_chans, cout = cfg_.out_chans;
  const index_t band_rows = static_cast<index_t>(bands.batch) * (bands.g1 - bands.g0) * cfg_.nlon;
  std::vector<float> host(static_cast<std::size_t>(n) * static_cast<std::size_t>(std::max(cin, cout)));
  std::optional<cu::DeviceGuard> guard;
  DeviceExec exec(*this, comm, bands);
  exec.launch([&] {  // this rank's input rows, dense, to the device
    guard.emplace(device_);
    for (index_t r = 0; r < n; ++r) std::copy_n(in + r * ld_in, cin, host.data() + r * cin);
    pieces_in_.resize(std::max<std::size_t>(static_cast<std::size_t>(n * cin), 1), device_);
    pieces_out_.resize(std::max<std::size_t>(static_cast<std::size_t>(n * cout), 1), device_);
    band_out_.resize(std::max<std::size_t>(static_cast<std::size_t>(band_rows * cout), 1), device_);
    cu::copy_to_device(pieces_in_.data(), host.data(), static_cast<std::size_t>(n * cin) * sizeof(float),
                       stream_.get());
  });
  const Rows band_out{band_out_.data(), cout, band_rows, cout, ops::Place::device};
  program::forward(exec, {pieces_in_.data(), cin, n, cin, ops::Place::device}, band_out);
  Rows result = band_out;  // the whole grid's rows are the input's
  if (outputs != nullptr) {  // the output band back to this rank's rows
    result = {pieces_out_.data(), cout, n, cout, ops::Place::device};
    exec.exchange(*outputs, band_out, result, cout);
  }
  exec.launch([&] {
    cu::copy_to_host(host.data(), result.data, static_cast<std::size_t>(n * cout) * sizeof(float), stream_.get());
  });
  exec.settle();
  for (index_t r = 0; r < n; ++r) std::copy_n(host.data() + r * cout, cout, out + r * ld_out);
}

}  // namespace

std::unique_ptr<SphereTransformerDeviceForward> make_sphere_transformer_device_forward(const SphericalTransformer& net,
                                                                                      const ModelFile& file, int device) {
  return std::make_unique<SphereTransformerCuda>(net, file, device);
}

}  // namespace surrogate::sphere
