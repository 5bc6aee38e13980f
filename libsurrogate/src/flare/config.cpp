// FLARE's /config: reading and checking it, the tensors it implies, its description (`surrogate info`),
// and the layer names and latent queries both forwards use. share/docs/model-format.md §4.1.
#include "config.hpp"

#include <cmath>
#include <sstream>

#include "../layers.hpp"

namespace surrogate::flare {
namespace {

std::string mlp_prefix_text(int layers) { return layers == -1 ? "single linear" : std::to_string(layers) + " hidden"; }

/// Tensor names of a ResidualMLP under `prefix`.
void add_mlp(ExpectedShapes& shapes, const std::string& prefix, int in, int hidden, int out, int layers) {
  if (layers == -1) {
    shapes[prefix + ".fc.weight"] = {out, in};
    shapes[prefix + ".fc.bias"] = {out};
    return;
  }
  shapes[prefix + ".fc1.weight"] = {hidden, in};
  shapes[prefix + ".fc1.bias"] = {hidden};
  for (int j = 0; j < layers; ++j) {
    shapes[prefix + ".fcs." + std::to_string(j) + ".weight"] = {hidden, hidden};
    shapes[prefix + ".fcs." + std::to_string(j) + ".bias"] = {hidden};
  }
  shapes[prefix + ".fc2.weight"] = {out, hidden};
  shapes[prefix + ".fc2.bias"] = {out};
}

void add_norm(ExpectedShapes& shapes, const std::string& prefix, int dim, bool rms) {
  shapes[prefix + ".weight"] = {dim};
  if (!rms) shapes[prefix + ".bias"] = {dim};
}

}  // namespace

Config Config::from_attributes(const AttributeMap& a) {
  Config c;
  auto positive = [&](const char* name) {
    const std::int64_t v = a.get_int(name);
    if (v < 1 || v > (1 << 24))
      throw Error(ErrorCode::format, "/config attribute '" + std::string(name) + "' must be a positive integer, found " +
                                         std::to_string(v));
    return static_cast<int>(v);
  };
  auto layers = [&](const char* name) {
    const std::int64_t v = a.get_int(name);
    if (v < -1 || v > 1024)
      throw Error(ErrorCode::format, "/config attribute '" + std::string(name) + "' must be -1 or a number of layers, found " +
                                         std::to_string(v));
    return static_cast<int>(v);
  };
  c.in_dim = positive("in_dim");
  c.out_dim = positive("out_dim");
  c.channel_dim = positive("channel_dim");
  c.num_blocks = positive("num_blocks");
  c.num_heads = positive("num_heads");
  c.num_latents = positive("num_latents");
  const std::string act = a.get_string("act");
  if (act == "gelu") c.act = Activation::gelu_tanh;
  else if (act == "silu") c.act = Activation::silu;
  else throw Error(ErrorCode::format, "/config attribute 'act' must be 'gelu' or 'silu', found '" + act + "'");
  c.rmsnorm = a.get_bool("rmsnorm");
  c.out_proj_norm = a.get_bool("out_proj_norm");
  c.qk_norm = a.get_bool("qk_norm");
  c.attn_scale = a.get_double("attn_scale");
  if (!(c.attn_scale > 0.0) || !std::isfinite(c.attn_scale))
    throw Error(ErrorCode::format, "/config attribute 'attn_scale' must be a positive number");
  c.num_layers_in_out_proj = layers("num_layers_in_out_proj");
  c.in_proj_hidden_dim = positive("in_proj_hidden_dim");
  c.out_proj_hidden_dim = positive("out_proj_hidden_dim");
  c.num_layers_k_proj = layers("num_layers_k_proj");
  c.k_proj_hidden_dim = positive("k_proj_hidden_dim");
  c.num_layers_v_proj = layers("num_layers_v_proj");
  c.v_proj_hidden_dim = positive("v_proj_hidden_dim");
  c.num_layers_ffn = layers("num_layers_ffn");
  c.ffn_hidden_dim = positive("ffn_hidden_dim");
  const std::string layout = a.get_string("key_layout");
  if (layout == "current") c.key_layout = KeyLayout::current;
  else if (layout == "paper") c.key_layout = KeyLayout::paper;
  else throw Error(ErrorCode::format, "/config attribute 'key_layout' must be 'current' or 'paper', found '" + layout + "'");
  c.layernorm_eps = a.get_double("layernorm_eps", c.layernorm_eps);
  c.rmsnorm_eps = a.get_double("rmsnorm_eps", c.rmsnorm_eps);
  if (!(c.layernorm_eps > 0.0) || !(c.rmsnorm_eps > 0.0))
    throw Error(ErrorCode::format, "/config attributes 'layernorm_eps' and 'rmsnorm_eps' must be positive");
  if (c.channel_dim % c.num_heads != 0)
    throw Error(ErrorCode::format, "/config: channel_dim " + std::to_string(c.channel_dim) +
                                       " is not divisible by num_heads " + std::to_string(c.num_heads));
  if (c.head_dim() > 64)
    throw Error(ErrorCode::unsupported, "/config: head width channel_dim/num_heads = " + std::to_string(c.head_dim()) +
                                            " exceeds the supported maximum of 64");
  if (c.key_layout == KeyLayout::paper && (c.qk_norm || c.rmsnorm || c.attn_scale != 1.0))
    throw Error(ErrorCode::format, "/config: the paper-era key layout has no qk_norm, no rmsnorm and attn_scale 1");
  return c;
}

ExpectedShapes Config::expected_shapes() const {
  ExpectedShapes s;
  const int C = channel_dim;
  const LayerNames names(*this);
  add_mlp(s, "in_proj", in_dim, in_proj_hidden_dim, C, num_layers_in_out_proj);
  for (int b = 0; b < num_blocks; ++b) {
    const std::string p = LayerNames::block(b);
    add_norm(s, names.norm1(b), C, rmsnorm);
    add_norm(s, names.norm2(b), C, rmsnorm);
    s[p + "att.latent_q"] = {C, num_latents};
    if (qk_norm) {
      add_norm(s, p + "att.q_norm", head_dim(), rmsnorm);
      add_norm(s, p + "att.k_norm", head_dim(), rmsnorm);
    }
    add_mlp(s, p + "att.k_proj", C, k_proj_hidden_dim, C, num_layers_k_proj);
    add_mlp(s, p + "att.v_proj", C, v_proj_hidden_dim, C, num_layers_v_proj);
    s[p + "att.out_proj.weight"] = {C, C};
    s[p + "att.out_proj.bias"] = {C};
    add_mlp(s, p + "mlp", C, ffn_hidden_dim, C, num_layers_ffn);
  }
  if (out_proj_norm) add_norm(s, names.out_norm(), C, rmsnorm);
  add_mlp(s, names.out_mlp(), C, out_proj_hidden_dim, out_dim, num_layers_in_out_proj);
  return s;
}

std::vector<std::pair<std::string, std::string>> Config::describe() const {
  auto num = [](double v) {
    std::ostringstream o;
    o << v;
    return o.str();
  };
  auto mlp = [&](int layers, int hidden) { return mlp_prefix_text(layers) + " layers, width " + std::to_string(hidden); };
  return {
      {"in_dim / out_dim", std::to_string(in_dim) + " / " + std::to_string(out_dim)},
      {"channel_dim (C)", std::to_string(channel_dim)},
      {"num_blocks", std::to_string(num_blocks)},
      {"num_heads (H) / head_dim (E)", std::to_string(num_heads) + " / " + std::to_string(head_dim())},
      {"num_latents (M)", std::to_string(num_latents)},
      {"act", act == Activation::gelu_tanh ? "gelu (tanh approximation)" : "silu"},
      {"norm", rmsnorm ? "RMSNorm (eps " + num(rmsnorm_eps) + ")" : "LayerNorm (eps " + num(layernorm_eps) + ")"},
      {"qk_norm / out_proj_norm", std::string(qk_norm ? "yes" : "no") + " / " + (out_proj_norm ? "yes" : "no")},
      {"attn_scale", num(attn_scale)},
      {"in/out projections", mlp(num_layers_in_out_proj, in_proj_hidden_dim) + " / width " + std::to_string(out_proj_hidden_dim)},
      {"k / v projections", mlp(num_layers_k_proj, k_proj_hidden_dim) + " / " + mlp(num_layers_v_proj, v_proj_hidden_dim)},
      {"feed-forward", mlp(num_layers_ffn, ffn_hidden_dim)},
      {"key layout", key_layout == KeyLayout::current ? "current (FLARE.py >= 33108d6)" : "paper (FLARE.py <= de5ba64)"},
  };
}

kernels::Activation kernel_activation(const Config& cfg) {
  return cfg.act == Config::Activation::silu ? kernels::Activation::silu : kernels::Activation::gelu_tanh;
}

double norm_eps(const Config& cfg) { return cfg.rmsnorm ? cfg.rmsnorm_eps : cfg.layernorm_eps; }

std::vector<float> latent_queries(const ModelFile& file, const Config& cfg, int b) {
  const std::string p = LayerNames::block(b);
  const int E = cfg.head_dim();
  std::vector<float> q = file.weight(p + "att.latent_q").values;  // (C, M) read as (H, M, E)
  if (cfg.qk_norm) {
    const NormLayer q_norm(file, p + "att.q_norm", E, cfg.rmsnorm, norm_eps(cfg));
    for (std::size_t hm = 0; hm < static_cast<std::size_t>(cfg.num_heads) * cfg.num_latents; ++hm)
      q_norm.apply_vector(q.data() + hm * static_cast<std::size_t>(E));
  }
  const auto scale = static_cast<float>(cfg.attn_scale);
  for (float& v : q) v *= scale;
  return q;
}

}  // namespace surrogate::flare
