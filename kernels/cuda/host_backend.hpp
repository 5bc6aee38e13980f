// The host backend's launchers (namespace cuda::host): the public launchers of surrogate/kernels/cuda*.hpp
// compiled from the same .cu sources by the host compiler. Declared here with the public declarations'
// types (decltype), so that a launcher whose signature changes fails to build or link, never drifts.
#pragma once

#include <cstddef>
#include <cstdint>

#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/kernels/cuda_ball_geometry.hpp"
#include "surrogate/kernels/cuda_ball_tree.hpp"
#include "surrogate/kernels/cuda_bsa_gate.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"
#include "surrogate/kernels/cuda_hept_plan.hpp"
#include "surrogate/kernels/cuda_nearest.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"
#include "surrogate/kernels/cuda_tree_attention.hpp"
#include "surrogate/kernels/cuda_tree_layers.hpp"
#include "surrogate/kernels/cuda_voxel_hierarchy.hpp"

#define SURROGATE_CUDA_LAUNCHERS(X)                                                                        \
  X(gather_caller_input) X(scatter_caller_output) X(norm) X(mlp) X(mlp_tensor_cores) X(mlp_tensor_core_smem) \
  X(mlp_streamed_smem)                                                                                      \
  X(latent_encode_partials) X(latent_encode_merge) X(latent_encode_rescale) X(latent_encode_finalize)      \
  X(latent_max_partials) X(latent_max_merge) X(latent_encode_exact) X(latent_exact_finalize)               \
  X(latent_decode) X(ball_attention) X(coarse_attention) X(selected_block_attention) X(select_blocks)      \
  X(coarse_attention_and_select)                                                                           \
  X(row_map) X(gated_sum) X(dense) X(dense_tensor_cores) X(copy_rows) X(row_binary) X(batch_norm) X(segment_mean)                \
  X(fourier_features)                                                                                      \
  X(sphere_global_attention) X(sphere_neighborhood_attention) X(sphere_head_norm_scale) X(grid_row_sums)  \
  X(grid_norm_stats) X(channel_affine) X(relu_rows) X(disco_contraction) X(grouped_linear) X(resample)     \
  X(sht_fourier_analysis) X(sht_fourier_synthesis) X(sht_legendre_analysis) X(sht_legendre_synthesis)       \
  X(segment_sort) X(segment_sort_f64) X(gaussian_buckets) X(gaussian_buckets_f64) X(gaussian_bucket_sums)     \
  X(gaussian_buckets_combine)                                                                               \
  X(lsh_projections) X(lsh_ranges) X(lsh_keys) X(tree_attention) X(tree_norm) X(tree_pool) X(tree_mix)         \
  X(tree_sums) X(tree_layer_norm_relu) X(point_conv_max) X(hept_axis_keys) X(hept_regions) X(hept_row_max)             \
  X(hept_region_codes) X(hept_tag_codes) X(hept_code_keys) X(hept_code_keys_f64) X(hept_padding)           \
  X(hept_gather_columns) X(hept_pad_rows) X(nearest_lists) X(ball_tree) X(voxel_hierarchy)   \
  X(group_means) X(group_offsets) X(edges_by_receiver)

namespace surrogate::kernels::cuda::host {

#define SURROGATE_CUDA_DECLARE_HOST_LAUNCHER(name) decltype(::surrogate::kernels::cuda::name) name;
SURROGATE_CUDA_LAUNCHERS(SURROGATE_CUDA_DECLARE_HOST_LAUNCHER)
#undef SURROGATE_CUDA_DECLARE_HOST_LAUNCHER
void fill(std::int32_t* dst, std::size_t n, std::int32_t value, cudaStream_t stream);
void fill(float* dst, std::size_t n, float value, cudaStream_t stream);

/// The runtime checks as the host backend's launchers see them (the emulator's errors).
void check(cudaError_t code, const char* call);
void check_launch(const char* kernel);

}  // namespace surrogate::kernels::cuda::host
