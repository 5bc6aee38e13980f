// FLARE (Fast Low-rank Attention Routing Engine; vpuri3/FLARE.py): the configuration of a model file, for
// tools that write or inspect FLARE model files. Semantics: share/docs/model-format.md §4.1; the model
// itself is registered as architecture "flare" (libsurrogate/src/flare/).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "surrogate/model_file.hpp"

namespace surrogate::flare {

/// The /config attributes of a FLARE model file (the constructor arguments of FLARE.py's FLAREModel).
struct Config {
  enum class Activation { gelu_tanh, silu };
  enum class KeyLayout { current, paper };

  int in_dim = 0, out_dim = 0;
  int channel_dim = 64, num_blocks = 8, num_heads = 8, num_latents = 64;
  Activation act = Activation::gelu_tanh;
  bool rmsnorm = false, out_proj_norm = true, qk_norm = false;
  double attn_scale = 1.0;
  int num_layers_in_out_proj = 2, in_proj_hidden_dim = 64, out_proj_hidden_dim = 64;
  int num_layers_k_proj = 3, k_proj_hidden_dim = 64;
  int num_layers_v_proj = 3, v_proj_hidden_dim = 64;
  int num_layers_ffn = 3, ffn_hidden_dim = 64;
  KeyLayout key_layout = KeyLayout::current;
  double layernorm_eps = 1e-5;
  double rmsnorm_eps = 1.1920928955078125e-07;

  int head_dim() const { return channel_dim / num_heads; }
  /// Reads and checks /config; every problem is an Error(format) naming the attribute.
  static Config from_attributes(const AttributeMap& config);
  /// Every tensor name and shape the configuration implies.
  ExpectedShapes expected_shapes() const;
  std::vector<std::pair<std::string, std::string>> describe() const;
};

}  // namespace surrogate::flare
