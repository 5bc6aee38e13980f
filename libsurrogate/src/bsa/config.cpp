// BSA configuration (/config attributes) and the official state_dict shapes.
#include <string>

#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::bsa {
namespace {

bool flag(const AttributeMap& a, const char* name, bool fallback) { return a.has(name) ? a.get_bool(name) : fallback; }
int integer(const AttributeMap& a, const char* name, int fallback) {
  return static_cast<int>(a.get_size_or(name, fallback, -kMaxConfigSize, kMaxConfigSize));
}

}  // namespace

int Config::compress_hidden() const {
  return static_cast<int>(compress_mlp_expand_factor * static_cast<double>(compress_block_size * head_dim()));
}

Config Config::from_attributes(const AttributeMap& a) {
  Config c;
  c.c_in = static_cast<int>(a.get_size("c_in", 1));
  c.c_hidden = static_cast<int>(a.get_size("c_hidden", 1));
  c.depth = static_cast<int>(a.get_size("depth", 1));
  c.num_heads = static_cast<int>(a.get_size("num_heads", 1));
  c.block_size = integer(a, "block_size", c.block_size);
  c.mlp_ratio = static_cast<int>(a.get_size_or("mlp_ratio", c.mlp_ratio, 1, 64));
  c.dimensionality = static_cast<int>(a.get_size_or("dimensionality", c.dimensionality, 1, 64));
  c.ball_size = integer(a, "ball_size", c.ball_size);
  c.should_rotate = flag(a, "should_rotate", c.should_rotate);
  c.rotation_angle = a.get_double("rotation_angle", c.rotation_angle);
  const std::string type = a.has("attention_type") ? a.get_string("attention_type") : "global";
  if (type == "sparse") c.attention_type = AttentionType::sparse;
  else if (type == "ball") c.attention_type = AttentionType::ball;
  else if (type == "global") c.attention_type = AttentionType::global;
  else if (type == "lucidrains_sparse")
    throw Error(ErrorCode::unsupported, "attribute 'attention_type' in " + a.group() +
                                            ": 'lucidrains_sparse' (the lucidrains NSA port) is not supported");
  else
    throw Error(ErrorCode::format, "attribute 'attention_type' in " + a.group() +
                                       " must be 'sparse', 'ball' or 'global', found '" + type + "'");
  c.compress_block_size = integer(a, "compress_block_size", c.compress_block_size);
  c.selected_blocks_number = integer(a, "selected_blocks_number", c.selected_blocks_number);
  c.use_compress_mlp = flag(a, "use_compress_mlp", c.use_compress_mlp);
  c.compress_mlp_expand_factor = a.get_double("compress_mlp_expand_factor", c.compress_mlp_expand_factor);
  c.use_group_selection = flag(a, "use_group_selection", c.use_group_selection);
  c.group_selection_size = integer(a, "group_selection_size", c.group_selection_size);
  c.should_mask_blocks_in_ball = flag(a, "should_mask_blocks_in_ball", c.should_mask_blocks_in_ball);
  c.use_token_gated_attention = flag(a, "use_token_gated_attention", c.use_token_gated_attention);
  c.use_coarse_q_attn = flag(a, "use_coarse_q_attn", c.use_coarse_q_attn);
  c.use_coarse_q_importance = flag(a, "use_coarse_q_importance", c.use_coarse_q_importance);
  c.attention_ball_size = integer(a, "attention_ball_size", c.attention_ball_size);
  const std::string wrapper = a.has("wrapper") ? a.get_string("wrapper") : "none";
  if (wrapper == "none") c.wrapper = Wrapper::none;
  else if (wrapper == "shapenet_car") c.wrapper = Wrapper::shapenet_car;
  else
    throw Error(ErrorCode::format, "attribute 'wrapper' in " + a.group() + " must be 'none' or 'shapenet_car', found '" +
                                       wrapper + "'");
  c.validate();
  return c;
}

void Config::validate() const {
  auto fail = [](const std::string& what) { throw Error(ErrorCode::format, "bsa config: " + what); };
  auto refuse = [](const std::string& what) { throw Error(ErrorCode::unsupported, "bsa config: " + what); };
  auto positive = [&](int v, const char* name) {
    if (v < 1) fail(std::string(name) + " = " + std::to_string(v) + " must be at least 1");
  };
  positive(c_in, "c_in");
  positive(c_hidden, "c_hidden");
  positive(depth, "depth");
  positive(num_heads, "num_heads");
  positive(block_size, "block_size");
  positive(mlp_ratio, "mlp_ratio");
  positive(dimensionality, "dimensionality");
  positive(ball_size, "ball_size");
  if (!(compress_mlp_expand_factor > 0.0 && compress_mlp_expand_factor <= 1024.0))
    fail("compress_mlp_expand_factor = " + std::to_string(compress_mlp_expand_factor) + " must lie in (0, 1024]");
  if (c_hidden % num_heads != 0)
    fail("c_hidden = " + std::to_string(c_hidden) + " is not divisible by num_heads = " + std::to_string(num_heads));
  if (head_dim() > kernels::kMaxAttentionHeadDim)
    fail("head width c_hidden / num_heads = " + std::to_string(head_dim()) + " exceeds the supported maximum of " +
         std::to_string(kernels::kMaxAttentionHeadDim));
  if (should_rotate && (dimensionality < 2 || dimensionality > 3))
    refuse("should_rotate needs dimensionality 2 or 3 (the official rotation matrices)");
  if (should_rotate && !(rotation_angle > 0.0))
    refuse("should_rotate with rotation_angle <= 0: the official build returns no rotated tree and the rotated "
           "layers fail");
  if (attention_type == AttentionType::ball) positive(attention_ball_size, "attention_ball_size");
  if (wrapper == Wrapper::shapenet_car && c_in % 2 != 0)
    fail("the ShapeNet-Car wrapper needs an even c_in (cos and sin features), found " + std::to_string(c_in));
  if (attention_type != AttentionType::sparse) return;
  positive(compress_block_size, "compress_block_size");
  positive(selected_blocks_number, "selected_blocks_number");
  positive(group_selection_size, "group_selection_size");
  if (ball_size % compress_block_size != 0)
    refuse("ball_size = " + std::to_string(ball_size) + " is not a multiple of compress_block_size = " +
           std::to_string(compress_block_size) + " (blocks would straddle balls)");
  if (use_coarse_q_attn && !use_coarse_q_importance)
    fail("use_coarse_q_attn needs use_coarse_q_importance (asserted by the official constructor)");
  if (use_coarse_q_attn && !use_group_selection)
    fail("use_coarse_q_attn needs use_group_selection (asserted by the official constructor)");
  if (block_level_importance() && !use_group_selection)
    refuse("use_coarse_q_importance without use_group_selection: the official code then reshapes the per-block "
           "selection into S keys per token, mixing blocks; not supported");
  if (block_level_importance() && group_selection_size != compress_block_size)
    fail("group_selection_size = " + std::to_string(group_selection_size) + " must equal compress_block_size = " +
         std::to_string(compress_block_size) + " with block-level importance (official assert)");
  if (use_compress_mlp && compress_hidden() < 1)
    fail("compress_mlp_expand_factor = " + std::to_string(compress_mlp_expand_factor) +
         " gives a compression MLP without hidden units");
}

ExpectedShapes expected_shapes(const Config& c) {
  c.validate();
  ExpectedShapes s;
  const std::int64_t D = c.c_hidden, H = c.num_heads, E = c.head_dim(), d = c.dimensionality, r = c.mlp_ratio;
  auto linear = [&](const std::string& name, std::int64_t out, std::int64_t in, bool bias = true) {
    s[name + ".weight"] = {out, in};
    if (bias) s[name + ".bias"] = {out};
  };
  linear("embed", D, c.c_in);
  for (int l = 0; l < c.depth; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "attn.";
    s[p + "norm1.weight"] = {D};
    s[p + "norm2.weight"] = {D};
    linear(a + "qkv", 3 * D, D);
    linear(a + "out_proj", D, D);
    linear(a + "position_proj", D, d);
    if (c.attention_type != AttentionType::global) s[a + "sigma_att"] = {1, H, 1, 1};
    if (c.attention_type == AttentionType::sparse) {
      if (c.use_compress_mlp) {
        const std::int64_t CE = static_cast<std::int64_t>(c.compress_block_size) * E, h = c.compress_hidden();
        std::vector<std::string> mlps{"k", "v"};
        if (c.block_level_importance()) mlps.emplace_back("q");
        for (const auto& m : mlps) {
          linear(a + m + "_compress_mlp.0", h, CE);
          linear(a + m + "_compress_mlp.2", E, h);
        }
      }
      if (c.use_token_gated_attention) linear(a + "gated_attention.to_strategy.0", 3 * H, D);
      else s[a + "gated_attention.gates"] = {1, H, 2, 1, 1};
    }
    linear(p + "mlp.w1", D * r, D);
    linear(p + "mlp.w2", D * r, D);
    linear(p + "mlp.w3", D, D * r);
  }
  if (c.wrapper == Wrapper::shapenet_car) {
    linear("pos_enc.linear", c.c_in / 2, d, false);
    linear("pred_head.0", D, D);
    linear("pred_head.2", 1, D);
  }
  return s;
}

}  // namespace surrogate::bsa
