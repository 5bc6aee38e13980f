// The registered HEPT model (architecture "hept"): its plan of a point set (plan.hpp) and the CPU forward
// (surrogate/hept.hpp) in fp32 or fp64. share/docs/hept.md, share/docs/model-format.md §4.5.
#include <memory>
#include <span>
#include <string>

#include "plan.hpp"
#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"
#include "../device_support.hpp"

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
  std::unique_ptr<surrogate::Plan> build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                              const RunOptions& options) override;
  void forward(const Comm& comm, surrogate::Plan& plan, const Io& io, const RunOptions& options) override;

 private:
  template <class T>
  void run(const Comm& comm, Plan& plan, const Network<T>& network, const Io& io, int threads) const;

  Config cfg_;
  index_t parameters_ = 0;
  Network<float> network32_;
  Network<double> network64_;
};

const ModelFile& checked(const ModelFile& file, const Config& cfg) {
  file.check_weights(cfg.expected_shapes());
  return file;
}

Model::Model(const ModelFile& file)
    : surrogate::Model(file, static_cast<int>(file.config.get_int("in_dim")),
                       Config::from_attributes(file.config).out_dim()),
      cfg_(Config::from_attributes(file.config)),
      network32_(checked(file, cfg_), cfg_),
      network64_(file, cfg_) {
  for (const auto& [name, tensor] : file.weights) parameters_ += tensor.numel();
}

std::unique_ptr<surrogate::Plan> Model::build_plan(const Comm& comm, surrogate::Plan::Basis basis, const RunOptions&) {
  return std::make_unique<Plan>(comm, std::move(basis), cfg_, network32_.regions());
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
    const BucketStage<T> buckets = [&](const T* kq, const T* kk, const T* qh, const T* kh, const T* vh, T* num,
                                       T* den) { split.attend(comm, kq, kk, qh, kh, vh, num, den, threads); };
    network.forward(g, x.data(), split.coords(fp64).data(), out.data(), nullptr, &range, threads, &buckets);
    std::vector<float> y;
    for (std::size_t p = 0; p < np; ++p)
      if (g.unpad[p]) y.insert(y.end(), out.begin() + static_cast<std::ptrdiff_t>(p * od), out.begin() + static_cast<std::ptrdiff_t>((p + 1) * od));
    y.resize(std::max<std::size_t>(y.size(), 1));
    split.outputs().backward(y.data(), od, io.out, io.ld_out, od);
    return;
  }
  // The inputs to the samples' owners (global-id order), the forward there, the outputs back.
  ExchangePlan& rows = plan.owners().rows_plan();
  const auto m = static_cast<std::size_t>(plan.owners().rows());
  std::vector<float> x(std::max<std::size_t>(m, 1) * static_cast<std::size_t>(cfg_.in_dim));
  rows.forward(io.in, io.ld_in, x.data(), cfg_.in_dim, cfg_.in_dim);
  std::vector<T> out(std::max<std::size_t>(m, 1) * static_cast<std::size_t>(od));
  network.forward(plan.geometry_of(fp64), x.data(), plan.coords().data(), out.data(), nullptr, &range, threads);
  std::vector<float> y(out.begin(), out.end());
  rows.backward(y.data(), od, io.out, io.ld_out, od);
}

void Model::forward(const Comm& comm, surrogate::Plan& plan, const Io& io, const RunOptions& options) {
  if (options.cuda_device >= 0 || io.device) {
    collectively(comm, [&] { surrogate::detail::refuse_device_for_cpu_only_family("hept", options.cuda_device); });
  }
  // Model::predict refuses a plan of another model, and this model builds hept::Plans.
  auto& p = static_cast<Plan&>(plan);
  if (options.precision == Precision::fp64) run(comm, p, network64_, io, options.threads);
  else run(comm, p, network32_, io, options.threads);
}

}  // namespace

std::unique_ptr<surrogate::Model> make_model(const ModelFile& file) { return std::make_unique<Model>(file); }

}  // namespace surrogate::hept
