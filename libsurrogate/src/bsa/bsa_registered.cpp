// BSA as a registered Model (architecture "bsa"): bsa::Network behind the generic predict path
// (PointCloudModel: positions and samples; BSA passes no messages, so edges are never used), optionally
// inside the ShapeNet-Car wrapper (/config wrapper = "shapenet_car": inputs are the positions only, one
// output). CPU only: a CUDA device is refused. Every attention type runs distributed on the ball tree
// (bsa_distributed.hpp) at any rank count.
// Docs: share/docs/balltree.md ("Running BSA").
#include <algorithm>
#include <cstdio>
#include <memory>

#include "../balltree/point_cloud_model.hpp"
#include "bsa_distributed.hpp"
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
    return d;
  }

 protected:
  void forward_geometry(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const float* in,
                        index_t ld_in, float* out, index_t ld_out, const RunOptions& options) override {
    // Every rank has the same options, so every rank throws the same error.
    if (options.cuda_device >= 0)
      throw Error(ErrorCode::unsupported, "bsa: no CUDA forward (cuda_device " + std::to_string(options.cuda_device) +
                                              " was requested); run BSA models on the CPU (cuda_device -1)");
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
    std::vector<float> y = plan.forward(net_, block_features, options.threads);
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

  Network net_;
  std::unique_ptr<detail::DistributedPlan> plan_;  // of the last geometry (plan_key_)
  GeometryKey plan_key_;
};

}  // namespace

std::unique_ptr<Model> make_bsa_model(const ModelFile& file) { return std::make_unique<BsaModel>(file, Network(file)); }

}  // namespace surrogate::bsa
