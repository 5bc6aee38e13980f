#include "random_models.hpp"

#include <cmath>
#include <random>

namespace surrogate::testing {

AttributeMap flare_attributes(const flare::Config& c) {
  AttributeMap a("/config");
  auto i = [&](const char* name, std::int64_t v) { a.set(name, v); };
  i("in_dim", c.in_dim);
  i("out_dim", c.out_dim);
  i("channel_dim", c.channel_dim);
  i("num_blocks", c.num_blocks);
  i("num_heads", c.num_heads);
  i("num_latents", c.num_latents);
  a.set("act", std::string(c.act == flare::Config::Activation::silu ? "silu" : "gelu"));
  i("rmsnorm", c.rmsnorm);
  i("out_proj_norm", c.out_proj_norm);
  i("qk_norm", c.qk_norm);
  a.set("attn_scale", c.attn_scale);
  i("num_layers_in_out_proj", c.num_layers_in_out_proj);
  i("in_proj_hidden_dim", c.in_proj_hidden_dim);
  i("out_proj_hidden_dim", c.out_proj_hidden_dim);
  i("num_layers_k_proj", c.num_layers_k_proj);
  i("k_proj_hidden_dim", c.k_proj_hidden_dim);
  i("num_layers_v_proj", c.num_layers_v_proj);
  i("v_proj_hidden_dim", c.v_proj_hidden_dim);
  i("num_layers_ffn", c.num_layers_ffn);
  i("ffn_hidden_dim", c.ffn_hidden_dim);
  a.set("key_layout", std::string(c.key_layout == flare::Config::KeyLayout::paper ? "paper" : "current"));
  a.set("layernorm_eps", c.layernorm_eps);
  a.set("rmsnorm_eps", c.rmsnorm_eps);
  return a;
}

ModelFile random_flare_file(const flare::Config& cfg, std::uint64_t seed) {
  ModelFile f;
  f.path = "(random FLARE model)";
  f.architecture = "flare";
  f.source = "surrogate-tests@none";
  f.config = flare_attributes(cfg);
  std::mt19937_64 gen(seed);
  for (const auto& [name, shape] : cfg.expected_shapes()) {
    Tensor32 t;
    t.shape = shape;
    t.values.resize(static_cast<std::size_t>(t.numel()));
    const bool is_bias = name.size() > 5 && name.compare(name.size() - 5, 5, ".bias") == 0;
    const bool is_norm = name.find("norm") != std::string::npos || name.find(".ln") != std::string::npos ||
                         name.find("out_proj.0.") != std::string::npos;
    float mean = 0.0f, stddev = 0.1f;
    if (name.find("latent_q") != std::string::npos) stddev = 0.7f;
    else if (is_norm && !is_bias) mean = 1.0f, stddev = 0.2f;
    else if (!is_bias && shape.size() == 2) stddev = 1.2f / std::sqrt(static_cast<float>(shape[1]));
    std::normal_distribution<float> dist(mean, stddev);
    for (auto& v : t.values) v = dist(gen);
    f.weights.emplace(name, std::move(t));
  }
  return f;
}

flare::Config elasticity_config() {
  flare::Config c;
  c.in_dim = 2;
  c.out_dim = 1;
  return c;  // the remaining defaults are the official ones
}

}  // namespace surrogate::testing
