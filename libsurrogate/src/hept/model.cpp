// The registered HEPT model (architecture "hept"): its plan of a point set (plan.hpp) and the forward on
// the CPU (surrogate/hept.hpp) in fp32 or fp64, or on a CUDA device in fp32 (cuda/device.hpp), by whole
// graphs or with the graphs split over the ranks.
// share/docs/hept.md, share/docs/model-format.md §4.5.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <sstream>
#include <span>
#include <string>
#include <type_traits>

#include "cuda/device.hpp"
#include "plan.hpp"
#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"
#include "../device_support.hpp"
#if SURROGATE_HAVE_CUDA
#include "../cuda_errors.hpp"
#include "surrogate/exchange.hpp"
#endif

namespace surrogate::hept {
namespace {

class Model final : public surrogate::Model {
 public:
  explicit Model(const ModelFile& file);
  index_t parameter_count() const override { return parameters_; }
  std::vector<std::pair<std::string, std::string>> describe() const override { return cfg_.describe(); }
  int position_dim() const override { return cfg_.coords_dim; }
  bool supports_fp64() const override { return true; }

 protected:
  DeviceInput device_input() const override { return DeviceInput::device_rows; }
  InputRange checked_input_range() const override {
    if (cfg_.task != Config::Task::pileup) return {};
    return {cfg_.in_dim - 1, kPidClassLow, kPidClassHigh};
  }
  void refuse_input(float value, index_t row) const override { refuse_particle_class(cfg_, value, row); }
  void* device_stream(const Comm& comm, const RunOptions& options) override {
    prepare_device(comm, options);
    return device_->stream();
  }
  std::unique_ptr<surrogate::Plan> build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                              const RunOptions& options) override;
  void forward(const Comm& comm, surrogate::Plan& plan, const Io& io, const RunOptions& options) override;

 private:
  template <class T>
  void run(const Comm& comm, Plan& plan, const Network<T>& network, const Io& io, int threads) const;
  void prepare_device(const Comm& comm, const RunOptions& options);
  void run_device(const Comm& comm, Plan& plan, const Io& io);

  Config cfg_;
  index_t parameters_ = 0;
  Network<float> network32_;
  Network<double> network64_;  // on network32_'s weights (one copy)
  std::unique_ptr<gpu::DeviceForward> device_;  // the fp32 weights on a device, once one was asked for
};

const ModelFile& checked(const ModelFile& file, const Config& cfg) {
  file.check_weights(cfg.expected_shapes());
  return file;
}

Model::Model(const ModelFile& file)
    : surrogate::Model(file, Config::from_attributes(file.config).in_dim,
                       Config::from_attributes(file.config).out_dim()),
      cfg_(Config::from_attributes(file.config)),
      network32_(checked(file, cfg_), cfg_),
      network64_(network32_) {
  for (const auto& [name, tensor] : file.weights) parameters_ += tensor.numel();
  // The pileup task's class channel is looked up in pids_enc after the library's input normalisation:
  // anything but the identity there would turn class 3 into another class, or into an error.
  const Normalization& norm = normalization();
  const auto column = static_cast<std::size_t>(cfg_.in_dim - 1);
  if (cfg_.task == Config::Task::pileup && norm.has_input() &&
      (norm.input_mean[column] != 0.0 || norm.input_std[column] != 1.0)) {
    std::ostringstream values;
    values << "mean " << norm.input_mean[column] << ", std " << norm.input_std[column];
    throw Error(ErrorCode::format, "'" + file.path + "': /normalization/input_mean and input_std of channel " +
                                       std::to_string(column) + " (the pileup task's particle-id class) are " +
                                       values.str() + "; the class channel must not be normalised (mean 0, std 1)");
  }
}

std::unique_ptr<surrogate::Plan> Model::build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                                   const RunOptions&) {
  // The CPU and the device forward run the same plans.
  return std::make_unique<Plan>(comm, std::move(basis), cfg_, network32_.regions());
}

// The rows of the originals (g.unpad) among the padded rows of `out` (width od), in padded order.
template <class R = float, class T>
std::vector<R> unpadded_rows(const Geometry& g, const std::vector<T>& out, int od) {
  std::vector<R> y;
  for (std::size_t p = 0; p < g.unpad.size(); ++p)
    if (g.unpad[p]) y.insert(y.end(), out.begin() + static_cast<std::ptrdiff_t>(p * od), out.begin() + static_cast<std::ptrdiff_t>((p + 1) * od));
  y.resize(std::max<std::size_t>(y.size(), 1));
  return y;
}

template <class T>
void Model::run(const Comm& comm, Plan& plan, const Network<T>& network, const Io& io, int threads) const {
  const int od = cfg_.out_dim();
  const bool fp64 = sizeof(T) == sizeof(double);
  // Delta of every (table, head) spans the whole batch: min and max over the ranks (exact, any order).
  const std::function<void(std::vector<T>&, std::vector<T>&)> range = [&comm](std::vector<T>& lo,
                                                                               std::vector<T>& hi) {
    comm.allreduce(std::span<T>(lo), ReduceOp::min);
    comm.allreduce(std::span<T>(hi), ReduceOp::max);
  };
  if (plan.split()) {
    // The inputs to this rank's padded rows, each table's buckets where the plan routes them, the
    // originals' outputs back.
    const SplitGraphs& split = plan.split_graphs();
    const Geometry& g = split.geometry_of(fp64);
    const auto np = static_cast<std::size_t>(g.padded_points());
    std::vector<float> x(std::max<std::size_t>(np, 1) * static_cast<std::size_t>(cfg_.in_dim));
    split.inputs(fp64, io.in, io.ld_in, cfg_.in_dim, x.data());
    std::vector<T> out(std::max<std::size_t>(np, 1) * static_cast<std::size_t>(od));
    const BucketStage<T> buckets = [&](int table, const T* kq, const T* kk, const T* qh, const T* kh, const T* vh,
                                       T* num, T* den) { split.attend(comm, table, kq, kk, qh, kh, vh, num, den, threads); };
    network.forward(g, x.data(), split.coords(fp64).data(), out.data(), nullptr, &range, threads, &buckets,
                    &plan.work<T>());
    if constexpr (std::is_same_v<T, double>) {
      if (io.out64) {  // fp64 into double outputs: every digit kept
        const std::vector<double> y = unpadded_rows<double>(g, out, od);
        split.outputs().backward(y.data(), od, io.out64);
        return;
      }
    }
    const std::vector<float> y = unpadded_rows(g, out, od);
    split.outputs().backward(y.data(), od, io.out, io.ld_out, od);
    return;
  }
  // The inputs to the samples' owners (global-id order), the forward there, the outputs back.
  ExchangePlan& rows = plan.owners().rows_plan();
  const auto m = static_cast<std::size_t>(plan.owners().rows());
  std::vector<float> x(std::max<std::size_t>(m, 1) * static_cast<std::size_t>(cfg_.in_dim));
  rows.forward(io.in, io.ld_in, x.data(), cfg_.in_dim, cfg_.in_dim);
  std::vector<T> out(std::max<std::size_t>(m, 1) * static_cast<std::size_t>(od));
  network.forward(plan.geometry_of(fp64, comm), x.data(), plan.coords().data(), out.data(), nullptr, &range, threads,
                  nullptr, &plan.work<T>());
  if constexpr (std::is_same_v<T, double>) {
    if (io.out64) {
      rows.backward(out.data(), od, io.out64);
      return;
    }
  }
  std::vector<float> y(out.begin(), out.end());
  rows.backward(y.data(), od, io.out, io.ld_out, od);
}

void Model::prepare_device(const Comm& comm, const RunOptions& options) {
  collectively(comm, [&] {
    surrogate::detail::refuse_fp64_on_device("hept", options.precision);
    if (!device_ || device_->device() != options.cuda_device) {
      device_.reset();
#if SURROGATE_HAVE_CUDA
      device_ = gpu::make_cuda_forward(network32_, options.cuda_device);
#else
      surrogate::detail::refuse_without_cuda_backend("hept", options.cuda_device);
#endif
    }
    device_->set_precision(options.precision);
  });
}

void Model::run_device(const Comm& comm, Plan& plan, const Io& io) {
  // As the CPU's schemes: the inputs to the owners or to the split rows, the device forward there,
  // outputs back. A rank whose device failed hands NaN ranges to the next range (cuda/device.hpp): every
  // rank stops there, and the failing rank's error is the one agreed below.
  struct FailedElsewhere {};
  const std::function<void(std::vector<float>&, std::vector<float>&)> range = [&comm](std::vector<float>& lo,
                                                                                       std::vector<float>& hi) {
    const bool failed = std::any_of(lo.begin(), lo.end(), [](float v) { return std::isnan(v); });
    if (comm.allreduce<int>(failed ? 1 : 0, ReduceOp::max) != 0) throw FailedElsewhere{};
    comm.allreduce(std::span<float>(lo), ReduceOp::min);
    comm.allreduce(std::span<float>(hi), ReduceOp::max);
  };
  const int od = cfg_.out_dim(), in_dim = cfg_.in_dim;
  // One process: the ranges stay on the device (no host round trip per layer).
  const auto* ranges = comm.size() > 1 ? &range : nullptr;
  const auto run_agreed = [&](auto&& step) {
    Status status;
    try {
      step();
    } catch (const FailedElsewhere&) {  // this rank's part is fine; the failing rank's error is agreed
    } catch (...) {
      status = Status::from_current_exception();
    }
    comm.agree_or_throw(status);
  };
#if SURROGATE_HAVE_CUDA
  namespace cu = kernels::cuda;
  const int dev = device_->device();
  const auto s = static_cast<cudaStream_t>(device_->stream());
  const index_t local = plan.layout().local_points();
  // A step on this device; CUDA failures become the library's Errors, agreed by run_agreed.
  const auto on_device = [&](auto&& step) {
    run_agreed([&] {
      try {
        const cu::DeviceGuard guard(dev);
        step();
      } catch (...) {
        surrogate::detail::raise_current_cuda_error("hept", dev);
      }
    });
  };
#endif
  // The plan's geometry on this device: built there (or uploaded, for split graphs) by the first device
  // forward on the plan, then kept with it. Whether to build is agreed, since building is collective.
  std::unique_ptr<gpu::DeviceGeometry>& kept = plan.device_geometry();
  const bool build = comm.allreduce<int>(!kept || kept->device() != device_->device() ? 1 : 0, ReduceOp::max) != 0;
  if (build) kept.reset();
  if (plan.split()) {
    const SplitGraphs& split = plan.split_graphs();
    const Geometry& g = split.geometry_of(false);
    const auto np = static_cast<std::size_t>(g.padded_points());
    if (build)
      run_agreed([&] { kept = device_->upload_geometry(g, split.coords(false).data(), static_cast<std::int64_t>(np)); });
    // Device rows (predict_device): split graphs move their rows through the host (split_graphs.hpp).
    const float* in = io.in;
    float* out = io.out;
    std::vector<float> staged_in, staged_out;
#if SURROGATE_HAVE_CUDA
    const auto rows_bytes = [&](index_t ld) { return static_cast<std::size_t>(local * ld) * sizeof(float); };
    if (io.on_device) {
      staged_in.resize(std::max<std::size_t>(rows_bytes(io.ld_in) / sizeof(float), 1));
      staged_out.resize(std::max<std::size_t>(rows_bytes(io.ld_out) / sizeof(float), 1));
      on_device([&] {
        cu::copy_to_host(staged_in.data(), io.in, rows_bytes(io.ld_in), s);
        cu::synchronize(s);
      });
      in = staged_in.data();
      out = staged_out.data();
    }
#endif
    std::vector<float> x(std::max<std::size_t>(np, 1) * static_cast<std::size_t>(in_dim));
    split.inputs(false, in, io.ld_in, in_dim, x.data());
    std::vector<float> y_padded(std::max<std::size_t>(np, 1) * static_cast<std::size_t>(od));
    const gpu::SplitStage stage{&comm, &split};
    run_agreed([&] { device_->forward(*kept, x.data(), y_padded.data(), ranges, &stage); });
    const std::vector<float> y = unpadded_rows(g, y_padded, od);
    split.outputs().backward(y.data(), od, out, io.ld_out, od);
#if SURROGATE_HAVE_CUDA
    if (io.on_device) on_device([&] { cu::copy_to_device(io.out, staged_out.data(), rows_bytes(io.ld_out), s); });
#endif
    return;
  }
  if (build) {
    // finish_geometry's maxima over the ranks; a rank that failed before them hands in -1 (geometry.hpp).
    const gpu::ReduceMax reduce_max = [&comm](std::vector<std::int64_t>& v) {
      const bool failed = std::any_of(v.begin(), v.end(), [](std::int64_t b) { return b < 0; });
      if (comm.allreduce<int>(failed ? 1 : 0, ReduceOp::max) != 0) throw FailedElsewhere{};
      comm.allreduce(std::span<std::int64_t>(v), ReduceOp::max);
    };
    run_agreed([&] { kept = device_->build_geometry(plan.coords().data(), plan.sizes(), plan.graph_ids(), reduce_max); });
  }
  ExchangePlan& rows = plan.owners().rows_plan();
  const auto m = static_cast<std::size_t>(plan.owners().rows());
#if SURROGATE_HAVE_CUDA
  if (io.on_device) {  // the owners' rows move between the devices; nothing crosses the host
    const Place place{dev, s, &comm.device_transport(dev)};
    float *x = nullptr, *y = nullptr;
    on_device([&] {
      x = device_->input_rows(static_cast<std::int64_t>(m));
      y = device_->output_rows(static_cast<std::int64_t>(m));
    });
    rows.forward(io.in, io.ld_in, x, in_dim, in_dim, place);
    run_agreed([&] { device_->forward_on_device(*kept, x, y, ranges); });
    rows.backward(y, od, io.out, io.ld_out, od, place);  // enqueued on the device stream (Model::Io)
    return;
  }
#endif
  std::vector<float> x(std::max<std::size_t>(m, 1) * static_cast<std::size_t>(in_dim));
  rows.forward(io.in, io.ld_in, x.data(), in_dim, in_dim);
  std::vector<float> y(std::max<std::size_t>(m, 1) * static_cast<std::size_t>(od));
  run_agreed([&] { device_->forward(*kept, x.data(), y.data(), ranges); });
  rows.backward(y.data(), od, io.out, io.ld_out, od);
}

void Model::forward(const Comm& comm, surrogate::Plan& plan, const Io& io, const RunOptions& options) {
  // Model::predict refuses a plan of another model, and this model builds hept::Plans.
  auto& p = static_cast<Plan&>(plan);
  if (cfg_.task == Config::Task::pileup && !io.on_device)  // device rows: checked where they were gathered
    collectively(comm, [&] { check_particle_classes(cfg_, io.in, io.ld_in, p.layout().local_points()); });
  if (options.cuda_device >= 0) {
    prepare_device(comm, options);
    run_device(comm, p, io);
    return;
  }
  if (options.precision == Precision::fp64) run(comm, p, network64_, io, options.threads);
  else run(comm, p, network32_, io, options.threads);
}

}  // namespace

std::unique_ptr<surrogate::Model> make_model(const ModelFile& file) { return std::make_unique<Model>(file); }

}  // namespace surrogate::hept
