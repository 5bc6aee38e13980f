// The CPU layers shared by the ball-tree families (Erwin, BSA): kernel calls with the common arguments,
// and the distance tile of a ball (share/docs/balltree.md, "Code layout").
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>

#include "../layers.hpp"

namespace surrogate::balltree::layers {

/// Distances |p_i - p_j| between the m points of a ball (dim coordinates each, row-major) into the m x m
/// tile `dist`, computed as torch.cdist does for up to 25 rows: sqrt(sum_c (p_ic - p_jc)^2) in float32
/// (for more rows cdist uses |p|^2 + |q|^2 - 2 p.q, which differs by float32 rounding of |p|^2; the
/// differences are exact). The kernel (CpuKernels::ball_distances) is bitwise the plain loop on every ISA.
inline void ball_distances(const CpuKernels& k, const float* pos, int m, int dim, float* dist) {
  kernels::BallDistanceArgs a;
  a.pos = pos;
  a.m = m;
  a.dim = dim;
  a.dist = dist;
  a.ld_dist = m;
  k.ball_distances(a);
}

inline void run_linear(const CpuKernels& k, const kernels::PackedLinear& layer, const float* x, index_t ldx, float* y,
                       index_t ldy, index_t rows, kernels::Activation act = kernels::Activation::none,
                       const float* add = nullptr, index_t ld_add = 0) {
  k.linear({.layer = &layer, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .rows = rows, .act = act, .add1 = add, .ld_add1 = ld_add});
}

inline void run_norm(const CpuKernels& k, const float* x, index_t ldx, float* y, index_t ldy, index_t rows, int dim,
                     const AlignedBuffer<float>& weight, const AlignedBuffer<float>* bias, float eps, bool rms) {
  kernels::NormArgs a;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.dim = dim;
  a.weight = weight.data();
  a.bias = bias ? bias->data() : nullptr;
  a.eps = eps;
  a.rms = rms;
  k.norm(a);
}

/// Row i of `out` (stride ld_out) = row order[i] of `rows` (stride ld_in), `width` values each: the tree
/// order, the rotated order and back to the input order, on `threads` OpenMP threads.
inline void gather_rows(const float* rows, index_t ld_in, std::span<const std::int64_t> order, int width, float* out,
                        index_t ld_out, int threads) {
  const auto n = static_cast<index_t>(order.size());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t i = 0; i < n; ++i)
    std::copy_n(rows + order[static_cast<std::size_t>(i)] * ld_in, width, out + i * ld_out);
}

/// Row order[i] of `out` = row i of `rows`, for a permutation `order` (every row written once, so the
/// rows split over the threads): the inverse of gather_rows.
inline void scatter_rows(const float* rows, index_t ld_in, std::span<const std::int64_t> order, int width, float* out,
                         index_t ld_out, int threads) {
  const auto n = static_cast<index_t>(order.size());
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t i = 0; i < n; ++i)
    std::copy_n(rows + i * ld_in, width, out + order[static_cast<std::size_t>(i)] * ld_out);
}

}  // namespace surrogate::balltree::layers
