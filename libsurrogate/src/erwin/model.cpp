// Erwin as a registered Model (architecture "erwin"): its plan (plan.hpp) per point set, the network on
// the plan on the CPU or a CUDA device, optionally inside the ShapeNet-Car wrapper of the official
// experiments (/config wrapper = "shapenet_car": inputs are the positions only, features = [cos(pos A^T),
// sin(pos A^T)] with A = pos_enc.linear.weight, output = pred_head.2(GELU_erf(pred_head.0(erwin(...)))),
// one channel). Docs: share/docs/balltree.md, "Running Erwin".
#include <algorithm>
#include <memory>

#include "../balltree/point_cloud_model.hpp"
#include "../balltree/shapenet_wrapper.hpp"
#include "../device_support.hpp"
#include "../layers.hpp"
#include "cuda/device.hpp"
#include "plan.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::erwin {
namespace {

constexpr const char* kShapenetCar = "shapenet_car";
const char* const kWrapperKeys[] = {"pos_enc.linear.weight", "pred_head.0.weight", "pred_head.0.bias",
                                    "pred_head.2.weight", "pred_head.2.bias"};

bool is_wrapper(const ModelFile& file) {
  if (!file.config.has("wrapper")) return false;
  const std::string w = file.config.get_string("wrapper");
  if (w == kShapenetCar) return true;
  if (w == "none") return false;
  throw Error(ErrorCode::format, "'" + file.path + "': /config wrapper = '" + w + "' (expected shapenet_car or none)");
}

/// The file without the wrapper's tensors (what erwin::Network checks and reads).
ModelFile core_file(const ModelFile& file, bool wrapper) {
  if (!wrapper) return file;
  ModelFile core = file;
  for (const char* key : kWrapperKeys) core.weights.erase(key);
  return core;
}


class ErwinModel final : public PointCloudModel {
 public:
  ErwinModel(const ModelFile& file, bool wrapper, Network net)
      : PointCloudModel(file, wrapper ? 0 : net.in_channels(), wrapper ? 1 : net.out_channels(),
                        net.config().dimensionality, net.config().mp_steps > 0),
        net_(std::move(net)),
        wrapper_(wrapper) {
    if (!wrapper_) return;
    const Config& c = net_.config();
    if (c.c_in % 2 != 0)
      throw Error(ErrorCode::format, "'" + file.path + "': the ShapeNet-Car wrapper needs an even c_in (cos and sin "
                                                       "halves), got " + std::to_string(c.c_in));
    const std::int64_t d = c.c_hidden.front(), half = c.c_in / 2;
    ModelFile head;
    head.path = file.path;
    for (const char* key : kWrapperKeys)
      if (file.weights.count(key)) head.weights[key] = file.weights.at(key);
    head.check_weights({{"pos_enc.linear.weight", {half, c.dimensionality}},
                        {"pred_head.0.weight", {d, d}},
                        {"pred_head.0.bias", {d}},
                        {"pred_head.2.weight", {1, d}},
                        {"pred_head.2.bias", {1}}});
    wrapper_layers_ = balltree::wrapper::read(file);
    parameters_ = half * c.dimensionality + d * d + d + d + 1;
  }

  index_t parameter_count() const override { return net_.parameter_count() + parameters_; }

  std::vector<std::pair<std::string, std::string>> describe() const override {
    const Config& c = net_.config();
    auto ints = [](const std::vector<int>& v) {
      std::string t;
      for (const int x : v) t += (t.empty() ? "" : ", ") + std::to_string(x);
      return "[" + t + "]";
    };
    char rotate[32];
    std::snprintf(rotate, sizeof rotate, "%g", c.rotate);
    std::vector<std::pair<std::string, std::string>> d = {
        {"variant", c.variant == Variant::erwin ? "erwin" : "erwin_flash"},
        {"wrapper", wrapper_ ? "shapenet_car (inputs: positions only; Fourier features, prediction head)" : "none"},
        {"dimensionality", std::to_string(c.dimensionality)},
        {"c_in", std::to_string(c.c_in)},
        {"c_hidden", ints(c.c_hidden)},
        {"ball_sizes", ints(c.ball_sizes)},
        {"enc_num_heads / enc_depths", ints(c.enc_num_heads) + " / " + ints(c.enc_depths)},
        {"dec_num_heads / dec_depths", ints(c.dec_num_heads) + " / " + ints(c.dec_depths)},
        {"strides", ints(c.strides)},
        {"rotate", std::string(rotate) + " degrees"},
        {"mlp_ratio", std::to_string(c.mlp_ratio)},
        {"mp_steps", std::to_string(c.mp_steps)},
        {"graph", c.mp_steps > 0 ? graph_rule().describe() : "not used (mp_steps 0)"},
        {"multi-rank mode",
         "distributed ball tree (every rank runs its subtrees and its points' message passing; the canonical "
         "order is routed through the ranks owning the ids, no rank gathers the batch; the plan is built once "
         "per point set and reused by every predict on it; bitwise equal to one process)"},
        {"device forward",
         "CUDA, fp32 / tf32 / bf16 (tf32 / bf16: the dense layers and the ball attention on the tensor cores), any "
         "rank count (cuda_device >= 0: the "
         "plan built on the host with its ball trees' node selections on the device, each rank's block and slots "
         "on its device, the exchanges device to device (NCCL) or staged through host memory; bitwise the "
         "one-process device forward)" +
             std::string(wrapper_ ? "; the wrapper's Fourier features and head on the device too" : "")}};
    return d;
  }

 protected:
  /// predict_device keeps the rows on the device (the ShapeNet-Car wrapper's features and head run there).
  DeviceInput device_input() const override { return DeviceInput::device_rows; }
  void* device_stream(const Comm& comm, const RunOptions& options) override {
    prepare_device(comm, options);
    return device_->stream();
  }

  std::unique_ptr<Plan> build_plan(const Comm& comm, Plan::Basis basis, const RunOptions& options) override {
    // On a CUDA device the ball trees are finished there (the same trees).
    balltree::NodeFinisher* trees = nullptr;
    if (options.cuda_device >= 0) {
      prepare_device(comm, options);
      trees = device_trees_.for_run(device_->device(), device_->stream());
    }
    return std::make_unique<detail::ErwinPlan>(comm, std::move(basis), *this, net_, options.threads, trees);
  }

  /// The network on the plan (plan.hpp): the features moved to this rank's block, the network there (on
  /// the CPU, or with cuda_device >= 0 on the device: cuda/device.hpp, the plan's geometry uploaded by the
  /// first device forward), the result moved back to the caller's rows; the wrapper's Fourier features and
  /// head where the network runs.
  void forward(const Comm& comm, Plan& base, const Io& io, const RunOptions& options) override {
    auto& plan = static_cast<detail::ErwinPlan&>(base);
    const bool on_device = options.cuda_device >= 0;
    if (on_device) prepare_device(comm, options);
    if (io.on_device) {  // predict_device's rows: to the block, the network and back, all on the device
      device_->forward_rows(plan, io.in, io.ld_in, io.out, io.ld_out);
      return;
    }
    if (on_device) {  // (the wrapper's features from the plan's positions on the device: no input rows)
      const std::vector<float> y =
          device_->forward(plan, wrapper_ ? std::vector<float>{} : plan.to_block(io.in, io.ld_in, in_channels()));
      plan.to_solver(y, out_channels(), io.out, io.ld_out);
      return;
    }
    const int d = net_.config().dimensionality, D = net_.config().c_hidden.front();
    const std::vector<float> block_features =
        wrapper_ ? balltree::wrapper::fourier(wrapper_layers_, plan.block_positions(), d, options.threads)
                 : plan.to_block(io.in, io.ld_in, in_channels());
    std::vector<float> y = plan.forward(net_, block_features, options.threads);
    if (wrapper_) y = balltree::wrapper::head(wrapper_layers_, y, D, options.threads);
    plan.to_solver(y, out_channels(), io.out, io.ld_out);
  }

 private:
  /// The checks of a device forward and the CUDA forward object (cuda/device.hpp) on the requested
  /// device; errors agreed (every rank has the same options, so the same refusal everywhere).
  void prepare_device(const Comm& comm, const RunOptions& options) {
    const Config& c = net_.config();
    collectively(comm, [&] {
      if (c.rotate > 0 && c.dimensionality != 2 && c.dimensionality != 3)
        throw Error(ErrorCode::unsupported, "erwin: rotated blocks need dimensionality 2 or 3 (the official rotation)");
      if (!device_ || device_->device() != options.cuda_device) {
        device_.reset();
#if SURROGATE_HAVE_CUDA
        device_ = detail::make_erwin_cuda_forward(net_, options.cuda_device, detail::kDefaultEdgeChunk,
                                                  wrapper_ ? &wrapper_layers_ : nullptr);
#else
        surrogate::detail::refuse_without_cuda_backend("erwin", options.cuda_device);
#endif
      }
      device_->set_precision(options.precision);  // fp32, or tf32 / bf16 dense layers on the tensor cores
    });
  }

  Network net_;
  bool wrapper_;
  std::unique_ptr<detail::ErwinDeviceForward> device_;  // the weights on a device, once a device was asked for
  balltree::DeviceTrees device_trees_;                  // the plans' trees on that device (on its stream)
  balltree::wrapper::Layers<ops::HostOps> wrapper_layers_;  // with the wrapper
  index_t parameters_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_model(const ModelFile& file) {
  const bool wrapper = is_wrapper(file);
  return std::make_unique<ErwinModel>(file, wrapper, Network(core_file(file, wrapper)));
}

}  // namespace surrogate::erwin
