// Global attention on the sphere: torch-harmonics' AttentionS2 (0.9.x, HEAD semantics; eval mode) on
// the CPU. Semantics, options and version notes: share/docs/sphere.md; specification:
// docs/reference-models.md §5.3.
//
//   q = W_q x_q + b_q,  k = W_k x_k + b_k,  v = W_v x_v + b_v          (1x1 convolutions)
//   per head h (channel c belongs to head c / (C / num_heads)), optional RMS qk-norm with weight 1 + w:
//   o_{h,i} = sum_j exp(s q_{h,i}.k_{h,j} + log w_lat(j)) v_{h,j} / sum_j exp(s q_{h,i}.k_{h,j} + log w_lat(j))
//   y = W_proj o + b_proj
// with w_lat the float32 quadrature weight 2 pi w / nlon of the KEY grid's latitude. The softmax is
// streamed over the keys (online, no score matrix) by the shared latent-attention primitive of the CPU
// kernels (kernels::CpuKernels::latent_encode); the additive log weight rides in one extra key column.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

/// How the attention scale s is given (torch-harmonics' `scale` argument).
enum class ScaleMode {
  standard,  // scale=None: SDPA's default 1 / sqrt(k_channels / num_heads)
  value,     // a Python float: passed to SDPA as its scale
  tensor,    // a torch.Tensor: multiplied into q (after the qk-norm), SDPA scale 1
};

/// The constructor arguments of AttentionS2 (eval mode: drop_rate has no effect from v0.9.2 on).
struct AttentionS2Config {
  int in_channels = 0;
  int num_heads = 1;
  int nlat_in = 0, nlon_in = 0;    // key / value grid (in_shape)
  int nlat_out = 0, nlon_out = 0;  // query / output grid (out_shape)
  Grid grid_in = Grid::equiangular;
  Grid grid_out = Grid::equiangular;  // recorded; only the key grid's quadrature enters the computation
  bool bias = true;
  bool use_qknorm = false;
  int k_channels = 0;    // 0: in_channels
  int out_channels = 0;  // 0: in_channels
  ScaleMode scale_mode = ScaleMode::standard;
  float scale = 0.0f;  // for ScaleMode::value and ScaleMode::tensor
};

/// The state_dict of AttentionS2, each tensor flat in PyTorch's (row-major) order.
struct AttentionS2Weights {
  std::vector<float> q_weights, k_weights;  // (k_channels, in_channels, 1, 1)
  std::vector<float> v_weights;             // (out_channels, in_channels, 1, 1)
  std::vector<float> proj_weights;          // (out_channels, out_channels, 1, 1)
  std::vector<float> q_bias, k_bias;        // (k_channels) if bias
  std::vector<float> v_bias, proj_bias;     // (out_channels) if bias
  std::vector<float> q_norm_weights, k_norm_weights;  // (k_channels / num_heads) if use_qknorm
};

class AttentionS2 {
 public:
  /// Validates the configuration and every tensor's size (Error naming the argument or tensor).
  AttentionS2(const AttentionS2Config& config, const AttentionS2Weights& weights);
  ~AttentionS2();
  AttentionS2(AttentionS2&&) noexcept;
  AttentionS2& operator=(AttentionS2&&) noexcept;
  AttentionS2(const AttentionS2&) = delete;
  AttentionS2& operator=(const AttentionS2&) = delete;

  /// One forward for `batch` samples. Layout, channels last: query[(b*Po + p)*in_channels + c] with
  /// p = lat*nlon_out + lon (latitude 0 = north side), key/value likewise on the input grid (nullptr:
  /// self-attention, key = value = query, which needs in_shape == out_shape); out[(b*Po + p)*out_channels
  /// + c]. Po = nlat_out*nlon_out. OpenMP threads over samples, heads and query blocks.
  void forward(int batch, const float* query, const float* key, const float* value, float* out) const;

  /// forward() for the output latitude rows [lat_begin, lat_end) only (latitude bands): query and out hold
  /// those rows of every sample (sample-major, row-major), key and value the whole input grid of every
  /// sample (nullptr only when the rows are the whole grid of a self-attention). Every output value is
  /// bitwise the one forward() computes (a query's softmax does not depend on the other queries).
  void forward_rows(int batch, int lat_begin, int lat_end, const float* query, const float* key, const float* value,
                    float* out) const;

  const AttentionS2Config& config() const noexcept;
  /// The attention scale s applied to the logits.
  float scale() const noexcept;
  /// The per-latitude log quadrature weights of the key grid (float32, as the official buffer).
  const std::vector<float>& log_quad_weights() const noexcept;
  /// The weights as the constructor took them (read back from the operator's packed copy, exactly).
  AttentionS2Weights weights() const;

  /// The forward's scratch (padded inputs, projected operands, attention results) is kept between
  /// forwards and reused, one workspace per concurrent forward. It is freed when the operator (the last
  /// one sharing it) is destroyed, or by release_workspace(), which frees the workspaces no forward is
  /// using at the time. workspace_bytes(): the bytes kept by those not in use.
  void release_workspace() const noexcept;
  std::size_t workspace_bytes() const;
  /// From now on this operator uses `other`'s workspaces (operators run one after another, e.g. the
  /// blocks of a transformer, then hold one set of buffers). Not while either runs a forward.
  void share_workspace(const AttentionS2& other) const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sphere
