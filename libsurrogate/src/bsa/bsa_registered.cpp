// BSA as a registered Model (architecture "bsa"): bsa::Network behind the generic predict path
// (PointCloudModel: positions and samples; BSA passes no messages, so edges are never used), optionally
// inside the ShapeNet-Car wrapper (/config wrapper = "shapenet_car": inputs are the positions only, one
// output). Every attention type runs distributed on the ball tree (bsa_distributed.hpp) at any rank count;
// with cuda_device >= 0 the network runs on the device (bsa_device.hpp; compiled and emulation-tested,
// never run on a GPU): on one rank on the gathered batch, on several ranks every rank on its slots of the
// distributed tree, the exchanges staged through host memory and MPI.
// Docs: share/docs/balltree.md ("Running BSA").
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>

#include "../balltree/point_cloud_model.hpp"
#include "../device_support.hpp"
#include "bsa_device.hpp"
#include "bsa_distributed.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/bsa.hpp"

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
                       "batch; the plan is reused while the geometry stays; bitwise equal to one process)");
    d.emplace_back("CUDA forward",
                   "fp32 (cuda_device >= 0: tree and top-S block selection on the host, the layers on the device; "
                   "several ranks: each on its slots of the distributed tree, exchanges through host memory and "
                   "MPI; compiled and emulation-tested, never run on a GPU)");
    return d;
  }

 protected:
  void forward_geometry(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const float* in,
                        index_t ld_in, float* out, index_t ld_out, const RunOptions& options) override {
    const bool on_device = options.cuda_device >= 0;
    if (on_device && comm.size() == 1) {
      forward_on_device(comm, layout, geometry, in, ld_in, out, ld_out, options);
      return;
    }
    if (on_device) use_device(comm, options);
    // The distributed ball tree (bsa_distributed.hpp): the plan (the canonical blocks, the
    // tree, the exchange plans) is built on the first call and reused while the geometry (positions,
    // global ids, samples, on every rank, compared bit for bit) stays the same.
    const index_t n = layout.local_points();
    const int cin = in_channels(), cout = out_channels();
    GeometryKey key = GeometryKey::of(comm, layout, geometry, net_.config().dimensionality);
    key.has_edges = false;  // edges are ignored
    key.edges.clear();
    const bool same = plan_ && key == plan_key_;
    if (comm.allreduce<std::int64_t>(same ? 1 : 0, ReduceOp::min) == 1) {
      plan_->rebind(comm);
    } else {
      plan_.reset();
      const CanonicalBatch all = gather_canonical(comm, layout, geometry, in, ld_in, false, true, options.threads);
      plan_ = std::make_unique<detail::DistributedPlan>(comm, net_, all, n);
      plan_key_ = std::move(key);
      ++plan_generation_;
    }
    const detail::DistributedPlan& plan = *plan_;
    std::vector<float> block_features;
    if (wrapped(net_)) {
      block_features = detail::Stages::fourier(net_, plan.block_positions(), options.threads);
    } else {
      std::vector<float> rows(static_cast<std::size_t>(std::max<index_t>(1, n * cin)));
      for (index_t r = 0; r < n; ++r) std::copy_n(in + r * ld_in, cin, rows.data() + r * cin);
      block_features.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, plan.block_rows() * cin)));
      plan.to_block(rows.data(), cin, block_features.data());
      block_features.resize(static_cast<std::size_t>(plan.block_rows() * cin));
    }
    std::vector<float> y;
    if (on_device) {
      // The device keeps this plan's geometry (positions, exchange lists) while the plan is kept.
      const bool kept_on_device = device_plan_generation_ == plan_generation_;
      device_plan_generation_ = 0;
      y = plan.forward_on_device(*device_, net_, block_features, kept_on_device, options.threads);
      device_plan_generation_ = plan_generation_;
    } else {
      y = plan.forward(net_, block_features, options.threads);
    }
    if (wrapped(net_)) y = detail::Stages::head(net_, y, options.threads);
    y.resize(static_cast<std::size_t>(std::max<std::int64_t>(1, plan.block_rows() * cout)));
    std::vector<float> rows(static_cast<std::size_t>(std::max<index_t>(1, n * cout)));
    plan.to_solver(y.data(), cout, rows.data());
    for (index_t r = 0; r < n; ++r) std::copy_n(rows.data() + r * cout, cout, out + r * ld_out);
  }

  // The gathered path of PointCloudModel (unused: forward_geometry above runs every attention type).
  std::vector<float> run_batch(std::span<const float> features, std::span<const float> positions,
                               const balltree::Batch& batch, std::span<const std::int64_t> /*edges*/,
                               int threads) const override {
    if (wrapped(net_)) return net_.forward_shapenet(positions, batch, threads);
    return net_.forward(features, positions, batch, threads);
  }

 private:
  static bool wrapped(const Network& net) { return net.config().wrapper == Wrapper::shapenet_car; }

  /// The CUDA forward (bsa_device.hpp), one rank: the batch in canonical order, the trees built on the
  /// host when the geometry changes (kept with the geometry uploaded on the device while it stays), the
  /// network on the device; the wrapper's Fourier features and head on the host.
  /// The device forward for options.cuda_device (made, and the weights uploaded, on first use); fp32
  /// only. Collective: a refusal or a device error on one rank is the same Error on all.
  void use_device(const Comm& comm, const RunOptions& options) {
    collectively(comm, [&] {
      if (options.precision != Precision::fp32)
        throw Error(ErrorCode::unsupported, std::string("bsa: the CUDA forward computes in fp32 only (precision '") +
                                                precision_name(options.precision) + "' requested)");
      if (!device_ || device_->device() != options.cuda_device) {
        device_.reset();
        device_trees_.reset();
        device_plan_generation_ = 0;
#if SURROGATE_HAVE_CUDA
        device_ = detail::make_bsa_cuda_forward(net_, options.cuda_device);
#else
        detail::refuse_without_cuda_backend("bsa", options.cuda_device);
#endif
      }
    });
  }

  void forward_on_device(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const float* in,
                         index_t ld_in, float* out, index_t ld_out, const RunOptions& options) {
    const Config& c = net_.config();
    const int dim = c.dimensionality;
    use_device(comm, options);
    const CanonicalBatch all = gather_canonical(comm, layout, geometry, in, ld_in, !wrapped(net_), false, options.threads);
    GeometryKey key = GeometryKey::of(comm, layout, geometry, dim);
    key.has_edges = false;  // edges are ignored
    key.edges.clear();
    collectively(comm, [&] {
      const bool same = device_trees_ && key == device_key_;
      if (!same) {
        device_trees_.reset();
        for (const float p : all.positions)
          if (!std::isfinite(p)) throw Error(ErrorCode::input, "bsa: positions has a NaN/Inf coordinate");
        for (std::int64_t s = 0; s < all.batch.samples(); ++s)
          if (all.batch.size(s) < 2)
            throw Error(ErrorCode::input, "bsa: batch sample " + std::to_string(s) + " has " +
                                              std::to_string(all.batch.size(s)) + " point(s); the ball tree needs at least 2");
        auto trees = std::make_unique<balltree::RotatedTrees>();
        if (c.should_rotate) {
          const std::vector<int> strides{1}, balls{c.ball_size, c.ball_size};
          *trees = balltree::build_with_rotations(all.positions, dim, all.batch, strides, balls, c.rotation_angle);
        } else {
          trees->tree = balltree::build(all.positions, dim, all.batch);
        }
        device_trees_ = std::move(trees);
        device_key_ = std::move(key);
      }
      const std::vector<float> features =
          wrapped(net_) ? detail::Stages::fourier(net_, all.positions, options.threads) : all.features;
      std::vector<float> y = device_->forward(*device_trees_, features, all.positions, all.batch, same, options.threads);
      if (wrapped(net_)) y = detail::Stages::head(net_, y, options.threads);
      const int cout = out_channels();
      for (index_t row = 0; row < layout.local_points(); ++row)
        std::copy_n(y.begin() + all.canonical_of_row[static_cast<std::size_t>(row)] * cout, cout, out + row * ld_out);
    });
  }

  Network net_;
  std::unique_ptr<detail::DistributedPlan> plan_;  // of the last geometry (plan_key_)
  GeometryKey plan_key_;
  std::uint64_t plan_generation_ = 0;         // counts the plans built
  std::uint64_t device_plan_generation_ = 0;  // the plan whose geometry device_ holds (0: none)
  std::unique_ptr<detail::BsaDeviceForward> device_;      // the CUDA forward, once a device was asked for
  std::unique_ptr<balltree::RotatedTrees> device_trees_;  // its trees, of the geometry device_key_
  GeometryKey device_key_;
};

}  // namespace

std::unique_ptr<Model> make_model(const ModelFile& file) { return std::make_unique<BsaModel>(file, Network(file)); }

}  // namespace surrogate::bsa
