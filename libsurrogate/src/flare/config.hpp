// FLARE's configuration (surrogate/flare.hpp) and what the CPU network and the CUDA forward derive from it
// alike: the tensor names of both key layouts, the activation, the norms' epsilon and the latent queries.
// share/docs/model-format.md §4.1.
#pragma once

#include <string>
#include <vector>

#include "surrogate/flare.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::flare {

/// The MLPs' activation as the kernels name it.
kernels::Activation kernel_activation(const Config& cfg);
/// The epsilon of every norm of the model (RMSNorm's or LayerNorm's).
double norm_eps(const Config& cfg);

/// Tensor-name prefixes of the layers (model-format.md §4.1; the paper-era key layout names four of them
/// differently).
struct LayerNames {
  explicit LayerNames(const Config& cfg) : paper(cfg.key_layout == Config::KeyLayout::paper) {}
  static std::string block(int b) { return "blocks." + std::to_string(b) + "."; }
  std::string norm1(int b) const { return block(b) + (paper ? "ln1" : "norm1"); }
  std::string norm2(int b) const { return block(b) + (paper ? "ln2" : "norm2"); }
  std::string out_norm() const { return paper ? "out_proj.ln" : "out_proj.0"; }
  std::string out_mlp() const { return paper ? "out_proj.mlp" : "out_proj.1"; }
  bool paper;
};

/// The latent queries of block b as both forwards use them, [H][M][E]: latent_q (C, M) reinterpreted by a
/// raw row-major reshape, each query normalised by q_norm (with qk_norm), then times attn_scale.
std::vector<float> latent_queries(const ModelFile& file, const Config& cfg, int b);

}  // namespace surrogate::flare
