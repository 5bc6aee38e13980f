// The registered Sequoia model (architecture "sequoia"; root attribute model_class TreeTransformerSeg or
// TreeTransformerCls): the plan (plan.hpp: whole samples on owner ranks) and the CPU forward (network.cpp).
// share/docs/sequoia.md.
#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

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
    d.emplace_back("multi-rank", "whole samples on owner ranks (about N / P points each; a sample on one rank)");
    d.emplace_back("device forward", "none (CPU only)");
    return d;
  }

 protected:
  std::unique_ptr<surrogate::Plan> build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                              const RunOptions&) override {
    auto plan = std::make_unique<Plan>(std::move(basis));
    plan->set_owners(detail::SampleOwners::build(comm, plan->layout(), plan->geometry().global_ids));
    detail::SampleOwners& owners = plan->owners();
    // The positions of the owned samples, each sample's points by increasing global id.
    std::vector<float> positions(static_cast<std::size_t>(std::max<index_t>(1, owners.rows() * 3)));
    owners.rows_plan().forward(plan->geometry().positions, 3, positions.data());
    collectively(comm, [&] {
      if (owners.owned().empty()) return;
      std::vector<SampleHierarchy> samples;
      std::vector<index_t> ids;
      for (const detail::SampleOwners::Owned& o : owners.owned()) {
        samples.push_back(build_sample_hierarchy(positions.data() + o.begin * 3, o.end - o.begin, cfg_.divide,
                                                 cfg_.depth, "sample " + std::to_string(o.sample)));
        ids.push_back(o.sample);
      }
      Hierarchy h = collate(samples, std::move(ids));
      network_.check(h);
      plan->set_hierarchy(std::move(h));
    });
    return plan;
  }

  void forward(const Comm& comm, surrogate::Plan& base, const Io& io, const RunOptions& options) override {
    if (io.device) refuse_device_arrays(comm);
    if (options.cuda_device >= 0)
      collectively(comm, [&] { surrogate::detail::refuse_device_for_cpu_only_family("sequoia", options.cuda_device); });
    auto& plan = static_cast<Plan&>(base);
    detail::SampleOwners& owners = plan.owners();
    const auto& owned = owners.owned();
    // The owned samples' features to this rank (owner order), their class vectors by global sample id.
    const index_t rows = owners.rows();
    std::vector<float> features(static_cast<std::size_t>(std::max<index_t>(1, rows * cfg_.c)));
    owners.rows_plan().forward(io.in, io.ld_in, features.data(), cfg_.c, cfg_.c);
    std::vector<float> classes;  // owned samples x n_class, dense
    for (std::size_t b = 0; b < owned.size() && sample_in_channels() > 0; ++b) {
      const float* row = io.sample_in + owned[b].sample * io.ld_sample_in;
      classes.insert(classes.end(), row, row + cfg_.n_class);
    }
    std::vector<float> result;
    collectively(comm, [&] {
      if (!owned.empty()) result = network_.forward(plan.hierarchy(), features.data(), classes.data());
    });
    // Per-point outputs back to the rows' ranks; per-sample outputs to every rank, in sample order.
    result.resize(std::max<std::size_t>(1, result.size()));
    if (segmentation(cfg_))
      owners.rows_plan().backward(result.data(), cfg_.n_part, io.out, io.ld_out, cfg_.n_part);
    else
      owners.samples_to_all().forward(result.data(), cfg_.classes, io.sample_out, io.ld_sample_out, cfg_.classes);
  }

 private:
  Config cfg_;
  Network network_;
  index_t parameters_ = 0;
};

}  // namespace

std::unique_ptr<surrogate::Model> make_model(const ModelFile& file) { return std::make_unique<Model>(file); }

}  // namespace surrogate::sequoia
