// Erwin (maxxxzdn/erwin, ErwinTransformer of models/erwin.py and models/erwin_flash.py): forward pass on
// the CPU, one process. A U-Net over the levels of the ball tree (surrogate/balltree.hpp): embedding
// (Linear + optional message passing), per level transformer blocks with ball attention (distance bias)
// and SwiGLU, rotated blocks, ball pooling / unpooling with eval BatchNorm, output in input order.
// Semantics and status: share/docs/balltree.md; specification: docs/reference-models.md §1.3-1.6.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::erwin {

namespace detail {
struct Stages;  // the forward's stages, shared by the single-process and distributed paths (internal)
}

/// Which official file trained the checkpoint (share/docs/balltree.md):
/// erwin        models/erwin.py: q/k/v interleaved in `qkv` (channel 3*(h*E+e)+s), distance bias
///              sigma_att[h] * |p_i - p_j|, affine LayerNorms in the message passing (`message_fns`);
/// erwin_flash  models/erwin_flash.py: q/k/v grouped (rows [0,D) q, [D,2D) k, [2D,3D) v), no distance
///              bias, LayerNorms without parameters (`fused_message_update`). Computed here in float32
///              (the official variant runs FlashAttention in bfloat16).
enum class Variant { erwin, erwin_flash };

/// The constructor arguments of ErwinTransformer (the attributes of a model file's /config group; the
/// official `decode` must be true: the decoder is always run).
struct Config {
  int c_in = 0;
  std::vector<int> c_hidden, ball_sizes, enc_num_heads, enc_depths;  // one per level (last: bottleneck)
  std::vector<int> dec_num_heads, dec_depths, strides;               // one per level transition
  double rotate = 0.0;  // degrees; <= 0: no rotated blocks
  int mlp_ratio = 4;
  int dimensionality = 3;
  int mp_steps = 3;
  Variant variant = Variant::erwin;

  int levels() const { return static_cast<int>(ball_sizes.size()); }
  /// From /config attributes; `mlp_ratio`, `dimensionality`, `mp_steps`, `variant` are optional
  /// (defaults of the official constructor, variant "erwin"). Throws Error(format) naming the attribute.
  static Config from_attributes(const AttributeMap& attributes);
  /// Throws Error(format) naming the first inconsistent field.
  void validate() const;
};

/// The official state_dict keys and shapes (without num_batches_tracked) of a configuration.
ExpectedShapes expected_shapes(const Config& config);

/// An Erwin network with its weights packed for the CPU kernels.
class Network {
 public:
  /// Reads the configuration from file.config and checks every weight (Error(format) / Error(weights)).
  explicit Network(const ModelFile& file);
  ~Network();
  Network(Network&&) noexcept;
  Network& operator=(Network&&) noexcept;

  const Config& config() const;
  int in_channels() const { return config().c_in; }
  int out_channels() const { return config().c_hidden.front(); }
  std::int64_t parameter_count() const;

  /// Forward pass. `features` (points x c_in) and `positions` (points x dimensionality) row-major, in the
  /// caller's order; `batch` groups the points into samples (contiguous, as the official batch_idx).
  /// `edge_index` holds 2 x E entries (E sources j, then E receivers i, PyG's source_to_target order)
  /// and is required when mp_steps > 0 (ignored otherwise). Builds the ball tree with rotations as the
  /// official build_balltree_with_rotations does and returns points x c_hidden[0] values in input order.
  /// `threads` = 0 uses the OpenMP default. Throws Error(input) naming the argument for wrong sizes,
  /// NaN/Inf, out-of-range edges, samples of one point, or level sizes not divisible by a ball size or
  /// stride.
  std::vector<float> forward(std::span<const float> features, std::span<const float> positions,
                             const balltree::Batch& batch, std::span<const std::int64_t> edge_index,
                             int threads = 0) const;
  /// The same with the trees given (for example from balltree::build_with_rotations once per mesh).
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch,
                             std::span<const std::int64_t> edge_index, int threads = 0) const;

 private:
  friend struct detail::Stages;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::erwin
