// BSA, Ball Sparse Attention (erwinxnsa/models/transformer.py, class Transformer with TransformerConfig;
// the operator NativeSparseAttention): forward pass on the CPU, one process. A flat transformer over
// the leaves of Erwin's ball tree (surrogate/balltree.hpp); every layer is RMSNorm + attention + RMSNorm
// + SwiGLU, odd layers see the rotated tree's order, a long residual every `block_size` layers. The
// sparse attention fuses three branches per head with a gate: local (ball attention with distance
// bias), coarse (attention to compressed blocks of C tokens) and fine (the tokens of the S blocks with
// the largest importance scores outside the own ball). Semantics and status: share/docs/balltree.md
// (section "BSA"); specification: docs/reference-models.md §1.7.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::bsa {

namespace detail {
struct Stages;  // the forward's stages, shared by the single-process and distributed paths (internal)
}

/// TransformerConfig.attention_type: "sparse" = BSA (NativeSparseAttention), "ball" = ball attention
/// only (BallAttention), "global" = full attention per sample (GlobalAttention). "lucidrains_sparse" is
/// not supported.
enum class AttentionType { sparse, ball, global };

/// The task wrapper around the model: none, or the ShapeNet-Car wrapper (pos_enc, pred_head keys).
enum class Wrapper { none, shapenet_car };

/// The fields of the official TransformerConfig plus the NativeSparseAttention keyword options (the
/// attributes of a model file's /config; attention_kwargs flattened). Defaults are the official ones.
struct Config {
  int c_in = 0, c_hidden = 0, depth = 0, num_heads = 0;
  int block_size = 6;
  int mlp_ratio = 4;
  int dimensionality = 3;
  int ball_size = 256;  // P: balls of the local branch and of the rotated tree
  bool should_rotate = true;
  double rotation_angle = 45.0;  // degrees
  AttentionType attention_type = AttentionType::global;
  // NativeSparseAttention options (attention_type sparse).
  int compress_block_size = 8;     // C
  int selected_blocks_number = 4;  // S
  bool use_compress_mlp = true;
  double compress_mlp_expand_factor = 2.0;
  bool use_group_selection = true;
  int group_selection_size = 8;  // G
  bool should_mask_blocks_in_ball = true;
  bool use_token_gated_attention = true;
  bool use_coarse_q_attn = true;
  bool use_coarse_q_importance = true;
  // attention_type ball: attention_kwargs["ball_size"] (its own ball size; default 256).
  int attention_ball_size = 256;
  Wrapper wrapper = Wrapper::none;

  int head_dim() const { return c_hidden / num_heads; }
  /// Hidden width of the compression MLPs: int(expand * C * E), as the official constructor.
  int compress_hidden() const;
  /// Importance scores per compressed block (coarse q) rather than per token.
  bool block_level_importance() const { return use_coarse_q_attn || use_coarse_q_importance; }

  /// From /config attributes: c_in, c_hidden, depth, num_heads required, the rest optional (official
  /// defaults; attention_type defaults to "global" as in TransformerConfig). Throws Error(format).
  static Config from_attributes(const AttributeMap& attributes);
  /// Throws Error(format) naming the first inconsistent field, Error(unsupported) for combinations the
  /// library refuses (see share/docs/balltree.md).
  void validate() const;
};

/// The official state_dict keys and shapes of a configuration (keys of the compiled sparse module
/// without `_orig_mod.`; with the wrapper's keys when wrapper = shapenet_car).
ExpectedShapes expected_shapes(const Config& config);

/// A BSA network with its weights packed for the CPU kernels.
class Network {
 public:
  /// Reads the configuration from file.config and checks every weight (Error(format) / Error(weights)).
  explicit Network(const ModelFile& file);
  ~Network();
  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;

  const Config& config() const;
  int in_channels() const { return config().c_in; }
  int out_channels() const { return config().c_hidden; }
  std::int64_t parameter_count() const;

  /// Forward pass of the Transformer. `features` (points x c_in) and `positions` (points x
  /// dimensionality) row-major in the caller's order; `batch` groups the points into samples (as the
  /// official batch_idx). Builds the ball tree (and, with should_rotate, the rotated tree of
  /// build_balltree_with_rotations(pos, batch_idx, [1], [P, P], angle), whose level-1 permutation the odd
  /// layers use) and returns points x c_hidden values in input order. `threads` = 0 uses the OpenMP
  /// default; the result does not depend on it. Throws Error(input) naming the argument for wrong sizes,
  /// NaN/Inf, samples of one point, samples whose padded sizes (next power of two) differ, and padded
  /// sizes not divisible by the ball size, C or G or holding fewer than S blocks.
  std::vector<float> forward(std::span<const float> features, std::span<const float> positions,
                             const balltree::Batch& batch, int threads = 0) const;
  /// The trees forward(features, positions, batch) builds: the ball tree of `positions`, and with
  /// should_rotate also the rotated one (build_with_rotations with strides [1]).
  balltree::RotatedTrees build_trees(std::span<const float> positions, const balltree::Batch& batch) const;
  /// The same with the trees given (trees.rotated must hold the two permutations of the official
  /// build_balltree_with_rotations with strides [1] when should_rotate).
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch, int threads = 0) const;

  /// The ShapeNet-Car wrapper (wrapper = shapenet_car): features [cos(p A^T), sin(p A^T)] of the
  /// positions, the Transformer, then pred_head (Linear, exact GELU, Linear to 1). Returns one value per
  /// point in input order. Error(unsupported) when the model file has no wrapper.
  std::vector<float> forward_shapenet(std::span<const float> positions, const balltree::Batch& batch,
                                      int threads = 0) const;

 private:
  friend struct detail::Stages;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::bsa
