// The registered Sequoia model (architecture "sequoia"; root attribute model_class TreeTransformerSeg or
// TreeTransformerCls): the plan (plan.hpp) and the CPU forward (network.cpp). share/docs/sequoia.md.
#include <memory>

#include "../balltree/point_cloud_model.hpp"
#include "../device_support.hpp"
#include "plan.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia {
namespace {

const ModelFile& checked(const ModelFile& file, const Config& cfg) {
  file.check_weights(cfg.expected_shapes());
  return file;
}

bool segmentation(const Config& c) { return c.kind == Config::Kind::segmentation; }

class Model final : public PointCloudModel {
 public:
  explicit Model(const ModelFile& file) : Model(file, Config::from_file(file)) {}
  Model(const ModelFile& file, const Config& cfg)
      : PointCloudModel(file, cfg.c, segmentation(cfg) ? cfg.n_part : 0, 3, false),
        cfg_(cfg),
        network_(checked(file, cfg), cfg) {
    for (const auto& [name, tensor] : file.weights) parameters_ += tensor.numel();
  }
  index_t parameter_count() const override { return parameters_; }
  int sample_in_channels() const override { return segmentation(cfg_) ? cfg_.n_class : 0; }
  int sample_out_channels() const override { return segmentation(cfg_) ? 0 : cfg_.classes; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    auto d = cfg_.describe();
    d.emplace_back("multi-rank", "every rank gathers the whole batch and runs it (exact, not distributed)");
    d.emplace_back("device forward", "none (CPU only)");
    return d;
  }

 protected:
  std::unique_ptr<surrogate::Plan> build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                              const RunOptions& options) override {
    auto plan = std::make_unique<Plan>(std::move(basis));
    CanonicalBatch all = gather_canonical(comm, plan->layout(), plan->geometry(), nullptr, 0, false, false, options.threads);
    collectively(comm, [&] {
      Hierarchy h = build_hierarchy(all.positions.data(), all.batch.offsets(), cfg_.divide, cfg_.depth);
      network_.check(h);
      plan->set(std::move(all), std::move(h));
    });
    return plan;
  }

  void forward(const Comm& comm, surrogate::Plan& base, const Io& io, const RunOptions& options) override {
    if (io.device) refuse_device_arrays(comm);
    if (options.cuda_device >= 0)
      collectively(comm, [&] {
#if SURROGATE_HAVE_CUDA
        throw Error(ErrorCode::unsupported, "sequoia: no CUDA forward yet (run it with device \"cpu\")");
#else
        detail::refuse_without_cuda_backend("sequoia", options.cuda_device);
#endif
      });
    auto& plan = static_cast<Plan&>(base);
    const SampleLayout& layout = plan.layout();
    // Every rank gets every point's features in canonical order and runs the whole batch.
    const CanonicalBatch features = gather_canonical(comm, layout, plan.geometry(), io.in, io.ld_in, true, false,
                                                     options.threads);
    std::vector<float> classes;  // B x n_class, dense
    for (index_t b = 0; b < layout.num_samples() && sample_in_channels() > 0; ++b)
      classes.insert(classes.end(), io.sample_in + b * io.ld_sample_in, io.sample_in + b * io.ld_sample_in + cfg_.n_class);
    std::vector<float> result;
    collectively(comm, [&] { result = network_.forward(plan.hierarchy(), features.features.data(), classes.data()); });
    const index_t n = layout.local_points();
    if (segmentation(cfg_)) {
      for (index_t row = 0; row < n; ++row) {
        const index_t k = features.canonical_of_row[static_cast<std::size_t>(row)];
        std::copy(result.begin() + k * cfg_.n_part, result.begin() + (k + 1) * cfg_.n_part, io.out + row * io.ld_out);
      }
    } else {
      for (index_t b = 0; b < layout.num_samples(); ++b)
        std::copy(result.begin() + b * cfg_.classes, result.begin() + (b + 1) * cfg_.classes,
                  io.sample_out + b * io.ld_sample_out);
    }
  }

 private:
  Config cfg_;
  Network network_;
  index_t parameters_ = 0;
};

}  // namespace

std::unique_ptr<surrogate::Model> make_model(const ModelFile& file) { return std::make_unique<Model>(file); }

}  // namespace surrogate::sequoia
