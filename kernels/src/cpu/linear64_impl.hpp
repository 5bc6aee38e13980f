// Dense layer y = x W^T (+ b) in float64 (CpuKernels::linear_f64) on a PackedLinear's float W^T and bias,
// widened exactly as they are loaded: R rows times NV vectors of output channels accumulated in registers
// while i runs over the inputs in ascending order, the bias added last.
// Each output is one chain of FMAs per lane, so its bits do not depend on the blocking of rows.
#pragma once

#include "linear_impl.hpp"
#include "simd_double.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

template <int R, int NV>
inline void linear_f64_block(const LinearF64Args& a, index_t r0, int j0) {
  using namespace simd;
  const double* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = a.x + (r0 + r) * a.ldx;
  vd acc[R][NV];
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[r][j] = splatd(0.0);
  const PackedLinear& l = *a.layer;
  const float* bias = l.has_bias() ? l.bias() : nullptr;
  for (int i = 0; i < l.in(); ++i) {
    const float* wi = l.wt() + static_cast<index_t>(i) * l.out_pad() + j0;
    vd w[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) w[j] = load_widened(wi + j * WD);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const vd xb = splatd(xr[r][i]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j] = fmad(xb, w[j], acc[r][j]);
    }
  }
  for (int r = 0; r < R; ++r) {
    double* y = a.y + (r0 + r) * a.ldy;
    for (int j = 0; j < NV; ++j) {
      const int col = j0 + j * WD;
      vd v = acc[r][j];
      if (bias) v += load_widened(bias + col);
      if (col + WD <= l.out()) {
        stored(y + col, v);
      } else {
        double lanes[WD];
        stored(lanes, v);
        for (int c = col; c < l.out(); ++c) y[c] = lanes[c - col];
      }
    }
  }
}

template <int NV>
inline void linear_f64_columns(const LinearF64Args& a, int j0) {
  constexpr int R = kLinearRows;
  index_t r0 = 0;
  for (; r0 + R <= a.rows; r0 += R) linear_f64_block<R, NV>(a, r0, j0);
  for (; r0 < a.rows; ++r0) linear_f64_block<1, NV>(a, r0, j0);
}

inline void linear_f64(const LinearF64Args& a) {
  constexpr int NV = kLinearVecs, step = NV * simd::WD;
  const int vecs = (a.layer->out() + simd::WD - 1) / simd::WD;
  int j0 = 0;
  for (; j0 + step <= vecs * simd::WD; j0 += step) linear_f64_columns<NV>(a, j0);
  switch ((vecs * simd::WD - j0) / simd::WD) {
    case 1: linear_f64_columns<1>(a, j0); break;
    case 2: if constexpr (NV > 2) linear_f64_columns<2>(a, j0); break;
    case 3: if constexpr (NV > 3) linear_f64_columns<3>(a, j0); break;
    default: break;
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
