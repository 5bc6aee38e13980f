// The distance tile of a ball (BallDistanceArgs): dist[i*ld + j] = sqrt(sum_c (p_ic - p_jc)^2) in float,
// the squares added from c = 0 in order, each square rounded before it is added (no fused multiply-add:
// this translation unit is compiled with -ffp-contract=fast, so each square goes through an empty asm
// that the compiler cannot see into), the square root correctly rounded. Every lane performs the scalar
// definition's operations in the scalar definition's order, so the tile is bitwise the same on every
// instruction set and equal to the plain loop. Columns j are the vector lanes: the coordinates of up to
// kColumns points are transposed into a stack block once per block of columns, row i's coordinates are
// broadcast. (p_ic - p_jc)^2 == (p_jc - p_ic)^2 exactly, the subtraction being negated exactly.
#pragma once

#include <immintrin.h>

#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

namespace ball_distance_detail {

using simd::vf;
using simd::W;
using simd::rounded;

inline vf vsqrt(vf v) {
#if defined(__AVX512F__)
  return _mm512_maskz_sqrt_ps(0xFFFF, v);  // (_mm512_sqrt_ps trips GCC 12's -Wmaybe-uninitialized)
#elif defined(__AVX2__)
  return _mm256_sqrt_ps(v);
#else
  return _mm_sqrt_ps(v);
#endif
}

inline constexpr int kColumns = 64;  // a multiple of every W
inline constexpr int kMaxDim = 8;    // dimensions above this take the scalar loop (the same arithmetic)

/// Row i of the columns in `cols` (coordinate c of column j at cols[c * kColumns + j]), lanes j .. j + W - 1.
template <int D>
inline vf lane_distances(const float* p_i, const float* cols, int dim, int j) {
  const int dims = D > 0 ? D : dim;
  const vf d0 = simd::splat(p_i[0]) - simd::load(cols + j);
  vf sum = rounded(d0 * d0);
  for (int c = 1; c < dims; ++c) {
    const vf d = simd::splat(p_i[c]) - simd::load(cols + c * kColumns + j);
    sum = sum + rounded(d * d);
  }
  return vsqrt(sum);
}

template <int D>
inline void tile(const BallDistanceArgs& a) {
  alignas(64) float cols[kMaxDim * kColumns];
  const int m = a.m, dim = a.dim;
  for (int j0 = 0; j0 < m; j0 += kColumns) {
    const int width = m - j0 < kColumns ? m - j0 : kColumns;
    const int padded = (width + W - 1) / W * W;
    for (int c = 0; c < dim; ++c) {
      for (int j = 0; j < width; ++j) cols[c * kColumns + j] = a.pos[(j0 + j) * dim + c];
      for (int j = width; j < padded; ++j) cols[c * kColumns + j] = 0.0f;
    }
    for (int i = 0; i < m; ++i) {
      const float* p_i = a.pos + static_cast<index_t>(i) * dim;
      float* row = a.dist + static_cast<index_t>(i) * a.ld_dist + j0;
      int j = 0;
      for (; j + W <= width; j += W) simd::store(row + j, lane_distances<D>(p_i, cols, dim, j));
      if (j < width) {
        float lanes[W];
        simd::store(lanes, lane_distances<D>(p_i, cols, dim, j));
        for (int l = 0; j + l < width; ++l) row[j + l] = lanes[l];
      }
    }
  }
}

}  // namespace ball_distance_detail

inline void ball_distances(const BallDistanceArgs& a) {
  using namespace ball_distance_detail;
  if (a.m <= 0) return;
  switch (a.dim) {
    case 2: tile<2>(a); return;
    case 3: tile<3>(a); return;
    default: break;
  }
  if (a.dim >= 1 && a.dim <= kMaxDim) {
    tile<0>(a);
    return;
  }
  for (int i = 0; i < a.m; ++i)  // dim > kMaxDim (or 0: all distances 0)
    for (int j = 0; j < a.m; ++j) {
      float sum = 0.0f;
      for (int c = 0; c < a.dim; ++c) {
        const float diff = simd::rounded(a.pos[i * a.dim + c] - a.pos[j * a.dim + c]);
        sum += simd::rounded(diff * diff);  // the square rounded, not fused with the addition
      }
      a.dist[static_cast<index_t>(i) * a.ld_dist + j] = __builtin_sqrtf(sum);
    }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
