// BSA as a registered Model (architecture "bsa"): its plan (plan.hpp) per point set (positions and
// samples; BSA passes no messages, so edges are never used), the network on the plan on the CPU or a CUDA
// device (cuda/device.hpp), optionally inside the ShapeNet-Car wrapper (/config wrapper = "shapenet_car":
// inputs are the positions only, one output). Docs: share/docs/balltree.md ("Running BSA").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "../balltree/point_cloud_model.hpp"
#include "../device_support.hpp"
#include "cuda/device.hpp"
#include "plan.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"

namespace surrogate::bsa {
namespace {

const char* attention_name(AttentionType t) {
  switch (t) {
    case AttentionType::sparse: return "sparse (BSA: local + coarse + fine, gated)";
    case AttentionType::ball: return "ball";
    case AttentionType::global: break;
  }
  return "global";
}

class BsaModel final : public PointCloudModel {
 public:
  BsaModel(const ModelFile& file, Network net)
      : PointCloudModel(file, wrapped(net) ? 0 : net.in_channels(), wrapped(net) ? 1 : net.out_channels(),
                        net.config().dimensionality, /*uses_edges=*/false),
        net_(std::move(net)) {}

  index_t parameter_count() const override { return net_.parameter_count(); }

  std::vector<std::pair<std::string, std::string>> describe() const override {
    const Config& c = net_.config();
    auto number = [](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%g", v);
      return std::string(text);
    };
    auto yes = [](bool b) { return std::string(b ? "yes" : "no"); };
    std::vector<std::pair<std::string, std::string>> d = {
        {"wrapper", wrapped(net_) ? "shapenet_car (inputs: positions only; Fourier features, prediction head)" : "none"},
        {"dimensionality", std::to_string(c.dimensionality)},
        {"c_in / c_hidden", std::to_string(c.c_in) + " / " + std::to_string(c.c_hidden)},
        {"depth / heads", std::to_string(c.depth) + " / " + std::to_string(c.num_heads)},
        {"block_size (long residual)", std::to_string(c.block_size)},
        {"mlp_ratio", std::to_string(c.mlp_ratio)},
        {"ball_size", std::to_string(c.ball_size)},
        {"rotation", c.should_rotate ? number(c.rotation_angle) + " degrees (odd layers)" : "none"},
        {"attention", attention_name(c.attention_type)}};
    if (c.attention_type == AttentionType::sparse) {
      d.emplace_back("compress_block_size / selected_blocks", std::to_string(c.compress_block_size) + " / " +
                                                                  std::to_string(c.selected_blocks_number));
      d.emplace_back("compression", c.use_compress_mlp ? "MLP (expand " + number(c.compress_mlp_expand_factor) + ")"
                                                       : "block mean");
      d.emplace_back("group selection", c.use_group_selection ? "groups of " + std::to_string(c.group_selection_size)
                                                              : "per token");
      d.emplace_back("coarse q attention / importance", yes(c.use_coarse_q_attn) + " / " + yes(c.use_coarse_q_importance));
      d.emplace_back("mask own-ball blocks", yes(c.should_mask_blocks_in_ball));
      d.emplace_back("gate", c.use_token_gated_attention ? "token" : "static");
    } else if (c.attention_type == AttentionType::ball) {
      d.emplace_back("attention_ball_size", std::to_string(c.attention_ball_size));
    }
    d.emplace_back("input", "every sample must pad (next power of two) to the same size, a multiple of ball_size");
    d.emplace_back("multi-rank mode",
                   std::string("distributed ball tree (every rank its slots; rotated layers exchanged, ") +
                       (c.attention_type == AttentionType::global
                            ? "the keys and values of the samples a rank holds part of fetched whole"
                            : "compressed blocks all-gathered, selected blocks fetched from their owners") +
                       "; the canonical order is routed through the ranks owning the ids, no rank gathers the "
                       "batch; the plan is built once per point set and reused by every predict on it; bitwise "
                       "equal to one process)");
    d.emplace_back("device forward",
                   "CUDA, fp32 / tf32 / bf16 (tf32 / bf16: the dense layers and the local branch's ball attention "
                   "on the tensor cores); the ball trees' node selections and the layers on the device; several "
                   "ranks: each on its slots of the distributed tree, the exchanges device to device (NCCL) or "
                   "staged through host memory" +
                       std::string(wrapped(net_) ? "; the wrapper's Fourier features and head on the device too" : ""));
    return d;
  }

 protected:
  std::unique_ptr<Plan> build_plan(const Comm& comm, Plan::Basis basis, const RunOptions& options) override {
    // On a CUDA device the ball trees are finished there (the same trees).
    balltree::NodeFinisher* trees = nullptr;
    if (options.cuda_device >= 0) {
      use_device(comm, options);
      trees = device_trees_.for_run(device_->device(), device_->stream());
    }
    return std::make_unique<detail::BsaPlan>(comm, std::move(basis), *this, net_, options.threads, trees);
  }

  /// The network on the plan (plan.hpp): the features moved to this rank's block, the layers there (on the
  /// CPU, or with cuda_device >= 0 on the device), the result moved back to the caller's rows; the
  /// wrapper's Fourier features and head where the layers run. On one rank the device runs the one-process forward
  /// on the block (the whole batch in canonical order) with the trees of the batch; on several, every rank
  /// its slots of the distributed tree. Either way the device geometry is uploaded by the first device
  /// forward on the plan and kept in it.
  void forward(const Comm& comm, Plan& base, const Io& io, const RunOptions& options) override {
    auto& plan = static_cast<detail::BsaPlan&>(base);
    const bool on_device = options.cuda_device >= 0;
    if (on_device) use_device(comm, options);
    if (io.on_device) {  // predict_device's rows: to the network's rows and back, all on the device
      if (comm.size() > 1) return device_->forward_rows(plan, nullptr, io.in, io.ld_in, io.out, io.ld_out);
      on_batch(comm, plan, [&](balltree::DeviceGeometry& batch) {
        device_->forward_rows(plan, &batch, io.in, io.ld_in, io.out, io.ld_out);
      });
      return;
    }
    if (on_device) {  // (the wrapper's features from the plan's positions on the device: no input rows)
      const std::vector<float> block_features =
          wrapped(net_) ? std::vector<float>{} : plan.to_block(io.in, io.ld_in, in_channels());
      const std::vector<float> y = comm.size() == 1 ? forward_one_rank(comm, plan, block_features)
                                                    : plan.forward_on_device(*device_, net_, block_features);
      plan.to_solver(y, out_channels(), io.out, io.ld_out);
      return;
    }
    const std::vector<float> block_features = wrapped(net_)
                                                  ? detail::Stages::fourier(net_, plan.block_positions(), options.threads)
                                                  : plan.to_block(io.in, io.ld_in, in_channels());
    std::vector<float> y = plan.forward(net_, block_features, options.threads);
    if (wrapped(net_)) y = detail::Stages::head(net_, y, options.threads);
    plan.to_solver(y, out_channels(), io.out, io.ld_out);
  }

 private:
  static bool wrapped(const Network& net) { return net.config().wrapper == Wrapper::shapenet_car; }

  /// predict_device keeps the rows on the device (the ShapeNet-Car wrapper's features and head run there).
  DeviceInput device_input() const override { return DeviceInput::device_rows; }
  void* device_stream(const Comm& comm, const RunOptions& options) override {
    use_device(comm, options);
    return device_->stream();
  }

  /// The device forward for options.cuda_device (made, and the weights uploaded, on first use) in its
  /// precision: fp32, or the dense layers in tf32 / bf16 on the tensor cores. Collective: a refusal or a
  /// device error on one rank is the same Error on all.
  void use_device(const Comm& comm, const RunOptions& options) {
    collectively(comm, [&] {
      surrogate::detail::refuse_fp64_on_device("bsa", options.precision);
      if (!device_ || device_->device() != options.cuda_device) {
        device_.reset();
#if SURROGATE_HAVE_CUDA
        device_ = detail::make_bsa_cuda_forward(net_, options.cuda_device);
#else
        surrogate::detail::refuse_without_cuda_backend("bsa", options.cuda_device);
#endif
      }
      device_->set_precision(options.precision);
    });
  }

  /// One rank: the one-process device forward on the plan's block (the whole batch in canonical order).
  std::vector<float> forward_one_rank(const Comm& comm, detail::BsaPlan& plan, const std::vector<float>& features) {
    std::vector<float> y;
    on_batch(comm, plan, [&](balltree::DeviceGeometry& batch) { y = device_->forward(batch, features); });
    return y;
  }

  /// One rank: `run(geometry)` on the one-process device geometry of the plan's batch, uploaded by the
  /// first call and kept in the plan; a failure drops it (the next call uploads it again, not reusing work
  /// arrays left half written). The batch's trees are the plan's: at one rank the distributed tree and its
  /// rotated orders are the one-process ones (integer equality, balltree_distributed.hpp). Errors agreed.
  template <class Run>
  void on_batch(const Comm& comm, detail::BsaPlan& plan, Run&& run) {
    std::unique_ptr<balltree::DeviceGeometry>& kept = plan.device_geometry();
    collectively(comm, [&] {
      try {
        if (!kept || kept->device() != device_->device()) {
          kept.reset();
          kept = upload_batch(plan);
        }
        run(*kept);
      } catch (...) {
        kept.reset();
        throw;
      }
    });
  }
  std::unique_ptr<balltree::DeviceGeometry> upload_batch(const detail::BsaPlan& plan) {
    const balltree::DistributedRotatedTrees& distributed = plan.trees();
    balltree::RotatedTrees trees;
    trees.tree.index = distributed.tree.index;
    trees.tree.mask = distributed.tree.mask;
    trees.tree.slot_offsets = distributed.tree.slot_offsets;
    trees.rotated = distributed.rotations.rotated;
    trees.target_levels = distributed.rotations.target_levels;
    std::vector<std::int64_t> offsets{0};
    for (const index_t size : plan.layout().sample_sizes()) offsets.push_back(offsets.back() + size);
    return device_->upload_geometry(trees, plan.block_positions(), balltree::Batch::from_offsets(offsets));
  }

  Network net_;
  std::unique_ptr<detail::BsaDeviceForward> device_;  // the weights on a device, once a device was asked for
  balltree::DeviceTrees device_trees_;                // the plans' trees on that device (on its stream)
};

}  // namespace

std::unique_ptr<Model> make_model(const ModelFile& file) { return std::make_unique<BsaModel>(file, Network(file)); }

}  // namespace surrogate::bsa
