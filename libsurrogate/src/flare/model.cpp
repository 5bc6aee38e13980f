// The registered FLARE model (architecture "flare"): its plan of a point set (plan.hpp) and the forward on
// the CPU (network.hpp) or on a CUDA device (cuda/forward.hpp). share/docs/model-format.md §4.1.
#include <memory>

#include "config.hpp"
#include "network.hpp"
#include "plan.hpp"
#if SURROGATE_HAVE_CUDA
#include "cuda/forward.hpp"
#else
#include "../device_support.hpp"
#endif

namespace surrogate::flare {
namespace {

class Model final : public surrogate::Model {
 public:
  explicit Model(const ModelFile& file);
  index_t parameter_count() const override { return parameters_; }
  std::vector<std::pair<std::string, std::string>> describe() const override {
    auto d = cfg_.describe();
    d.emplace_back("device forward", "CUDA, fp32 / tf32 / bf16 (tf32 / bf16: the MLPs and the latent encode and decode "
                                     "on the tensor cores), any rank count; heads up to 64 wide, MLPs up to 256");
    return d;
  }
  bool supports_cpu_bf16() const override { return true; }

 protected:
  DeviceInput device_input() const override { return DeviceInput::caller_arrays; }
  std::unique_ptr<surrogate::Plan> build_plan(const Comm& comm, surrogate::Plan::Basis basis,
                                              const RunOptions& options) override;
  void forward(const Comm& comm, surrogate::Plan& plan, const Io& io, const RunOptions& options) override;

 private:
  void forward_on_device(const Comm& comm, Plan& plan, const Io& io, const RunOptions& options);

  Config cfg_;
  index_t parameters_ = 0;
  Network network_;
#if SURROGATE_HAVE_CUDA
  std::unique_ptr<cuda::Forward> device_forward_;  // of the device of the last device forward
#endif
};

/// The file, after checking its tensors against the configuration (Error(weights) naming each problem).
const ModelFile& checked(const ModelFile& file, const Config& cfg) {
  file.check_repeat_count("num_blocks", cfg.num_blocks, 4);  // two norms, latent_q, out_proj at least
  file.check_weights(cfg.expected_shapes());
  return file;
}

Model::Model(const ModelFile& file)
    : surrogate::Model(file, static_cast<int>(file.config.get_size("in_dim", 1)),
                       static_cast<int>(file.config.get_size("out_dim", 1))),
      cfg_(Config::from_attributes(file.config)),
      network_(checked(file, cfg_), cfg_) {
  for (const auto& [name, tensor] : file.weights) parameters_ += tensor.numel();
}

std::unique_ptr<surrogate::Plan> Model::build_plan(const Comm& comm, surrogate::Plan::Basis basis, const RunOptions&) {
  std::unique_ptr<surrogate::Plan> plan;
  collectively(comm, [&] { plan = std::make_unique<Plan>(std::move(basis)); });
  return plan;
}

void Model::forward(const Comm& comm, surrogate::Plan& plan, const Io& io, const RunOptions& options) {
  // Model::predict / predict_device refuse a plan of another model, and this model builds flare::Plans.
  auto& flare_plan = static_cast<Plan&>(plan);
  if (options.cuda_device >= 0) forward_on_device(comm, flare_plan, io, options);
  else network_.forward(comm, flare_plan, io.in, io.ld_in, io.out, io.ld_out, options);
}

void Model::forward_on_device(const Comm& comm, Plan& plan, const Io& io, const RunOptions& options) {
  const int device = options.cuda_device;
#if SURROGATE_HAVE_CUDA
  collectively(comm, [&] {
    if (!device_forward_ || device_forward_->device() != device)
      device_forward_ = std::make_unique<cuda::Forward>(cfg_, network_, normalization(), device);
  });
  if (io.device)
    device_forward_->forward_device_arrays(comm, plan, *io.device, options, io.check_inputs, io.check_outputs);
  else device_forward_->forward_host_arrays(comm, plan, io.in, io.ld_in, io.out, io.ld_out, options);
#else
  (void)plan, (void)io;
  collectively(comm, [&] { detail::refuse_without_cuda_backend("flare", device); });
#endif
}

}  // namespace

std::unique_ptr<surrogate::Model> make_model(const ModelFile& file) { return std::make_unique<Model>(file); }

}  // namespace surrogate::flare
