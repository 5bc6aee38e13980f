// Local attention on the sphere: torch-harmonics' NeighborhoodAttentionS2 (semantics of v0.9.1 - 0.9.3:
// scale applied to q after the projection and the optional qk-norm) on the CPU, in both modes of the
// official module: gather (nlon_in a multiple of nlon_out: self-attention and downsampling) and
// upsampling (nlon_out a multiple of nlon_in, not the reverse: the query grid finer than the key grid).
// Semantics, options and version notes: share/docs/sphere.md; specification: docs/reference-models.md §5.4.
//
//   q = s * norm(W_q x_q + b_q),  k = norm(W_k x_k + b_k),  v = W_v x_v + b_v      (1x1 convolutions)
//   per head h (channel c belongs to head c / (C / num_heads)), norm = optional RMS qk-norm (weight 1 + w):
//   o_{h,o} = sum_{j in N(o)} exp(q_{h,o}.k_{h,j}) w_lat(j) v_{h,j} / sum_{j in N(o)} exp(q_{h,o}.k_{h,j}) w_lat(j)
//   y = W_proj o + b_proj
// with N(o) the input points within (1 + 1e-3) theta_cutoff of output point o (gather mode:
// neighborhood_csr, shifted in longitude; upsampling: the same relation as torch-harmonics builds it
// from the input side, neighborhood_csr_scatter) and w_lat the float32 quadrature weight 2 pi w /
// nlon_in of the input latitude. The softmax is streamed over each output point's neighbours by the
// shared ring-attention kernel of the CPU kernels (kernels::CpuKernels::ring_attention).
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood.hpp"

namespace surrogate::sphere {

/// The constructor arguments of NeighborhoodAttentionS2 (torch-harmonics 0.9.3).
struct NeighborhoodAttentionS2Config {
  int in_channels = 0;
  int num_heads = 1;
  int nlat_in = 0, nlon_in = 0;    // key / value grid (in_shape)
  int nlat_out = 0, nlon_out = 0;  // query / output grid (out_shape); one of nlon_in, nlon_out a multiple of the other
  Grid grid_in = Grid::equiangular;
  Grid grid_out = Grid::equiangular;
  bool bias = true;
  bool use_qknorm = false;
  int k_channels = 0;    // 0: in_channels
  int out_channels = 0;  // 0: in_channels
  /// standard: s = 1/sqrt(k_channels/num_heads) (v0.9.1+); value / tensor: the given float. In every mode
  /// the scale multiplies q after the projection and the qk-norm (v0.9.1+ placement).
  ScaleMode scale_mode = ScaleMode::standard;
  float scale = 0.0f;
  /// Radius of the geodesic disc in radians; 0: torch-harmonics 0.9.3's default, the largest colatitude
  /// gap of the coarser grid: default_theta_cutoff(nlat_out, grid_out) in the gather mode,
  /// default_theta_cutoff(nlat_in, grid_in) in the upsampling mode.
  double theta_cutoff = 0.0;
};

/// Same state_dict names and shapes as AttentionS2.
using NeighborhoodAttentionS2Weights = AttentionS2Weights;

class NeighborhoodAttentionS2 {
 public:
  /// Validates the configuration and every tensor (Error naming the argument or tensor) and builds the
  /// neighbour lists. nlon_in % nlon_out == 0: gather mode; otherwise nlon_out % nlon_in == 0 is required
  /// (upsampling mode), else Error(invalid_argument).
  NeighborhoodAttentionS2(const NeighborhoodAttentionS2Config& config, const NeighborhoodAttentionS2Weights& weights);
  ~NeighborhoodAttentionS2();
  NeighborhoodAttentionS2(NeighborhoodAttentionS2&&) noexcept;
  NeighborhoodAttentionS2& operator=(NeighborhoodAttentionS2&&) noexcept;
  NeighborhoodAttentionS2(const NeighborhoodAttentionS2&) = delete;
  NeighborhoodAttentionS2& operator=(const NeighborhoodAttentionS2&) = delete;

  /// One forward for `batch` samples, channels last as AttentionS2::forward: query[(b*Po + p)*in_channels
  /// + c], p = lat*nlon_out + lon; key/value on the input grid (nullptr: self-attention, which needs
  /// in_shape == out_shape); out[(b*Po + p)*out_channels + c]. OpenMP threads over output points; the
  /// result does not depend on the number of threads. An output point without neighbours (possible only
  /// with an explicit cutoff smaller than the grid spacing) gives NaN, as 0/0 does in torch-harmonics.
  void forward(int batch, const float* query, const float* key, const float* value, float* out) const;

  /// The input latitude rows [first, second) that the neighbourhoods of output rows [lat_begin, lat_end)
  /// reach ({lat_begin, lat_begin} when none).
  std::pair<int, int> input_rows(int lat_begin, int lat_end) const;
  /// forward() for the output latitude rows [lat_begin, lat_end) only (latitude bands): query and out hold
  /// those rows of every sample (sample-major, row-major); key and value hold the input rows [in_begin,
  /// in_end) of every sample, which must contain input_rows(lat_begin, lat_end) (nullptr: self-attention
  /// on the whole grid only). Every output value is bitwise the one forward() computes.
  void forward_rows(int batch, int lat_begin, int lat_end, const float* query, int in_begin, int in_end,
                    const float* key, const float* value, float* out) const;

  /// The configuration with the defaults filled in (k_channels, out_channels, theta_cutoff).
  const NeighborhoodAttentionS2Config& config() const noexcept;
  /// The scale s that multiplies q.
  float scale() const noexcept;
  /// The neighbour lists (psi_roff_idx / psi_col_idx): neighborhood_csr in the gather mode (CSR over the
  /// output latitudes), neighborhood_csr_scatter in the upsampling mode (CSR over the input latitudes,
  /// columns on the output grid; see there for its fields).
  const NeighborhoodCsr& neighbors() const noexcept;
  /// The float32 quadrature weight of each input latitude (the official quad_weights buffer).
  const std::vector<float>& quad_weights() const noexcept;
  /// The weights as the constructor took them (read back from the operator's packed copy, exactly).
  NeighborhoodAttentionS2Weights weights() const;

  /// The forward's scratch (padded inputs, projected operands, attention results) is kept between
  /// forwards and reused, one workspace per concurrent forward. It is freed when the operator (the last
  /// one sharing it) is destroyed, or by release_workspace(), which frees the workspaces no forward is
  /// using at the time. workspace_bytes(): the bytes kept by those not in use.
  void release_workspace() const noexcept;
  std::size_t workspace_bytes() const;
  /// From now on this operator uses `other`'s workspaces (operators run one after another, e.g. the
  /// blocks of a transformer, then hold one set of buffers). Not while either runs a forward.
  void share_workspace(const NeighborhoodAttentionS2& other) const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sphere
