// Dense layer y = act(x W^T + b) [+ add1] [+ add2] with a register-blocked micro-kernel: R rows times
// NV vectors of output channels are accumulated in registers while k runs over the input channels, and
// the bias, activation and residuals are applied before the single store (no second pass over y).
#pragma once

#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

// Register blocking, chosen per instruction set by the including translation unit.
inline constexpr int kLinearRows = SURROGATE_LINEAR_ROWS;
inline constexpr int kLinearVecs = SURROGATE_LINEAR_VECS;

inline simd::vf apply_activation(Activation act, simd::vf v) {
  switch (act) {
    case Activation::gelu_tanh: return simd::gelu_tanh(v);
    case Activation::gelu_erf: return simd::gelu_erf(v);
    case Activation::silu: return simd::silu(v);
    case Activation::relu: return simd::relu(v);
    case Activation::none: break;
  }
  return v;
}

template <int R, int NV, class F>
[[gnu::always_inline]] inline void activate_block(simd::vf (&acc)[R][NV], F f) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) acc[r][j] = f(acc[r][j]);
}

template <int R, int NV>
inline void linear_block(const LinearArgs& a, index_t r0, int j0) {
  using namespace simd;
  const PackedLinear& layer = *a.layer;
  const int K = layer.in();
  const index_t ldw = layer.out_pad();
  const float* wt = layer.wt() + j0;
  const float* xr[R];
  for (int r = 0; r < R; ++r) xr[r] = a.x + (r0 + r) * a.ldx;

  vf acc[R][NV];
#pragma GCC unroll 8
  for (int j = 0; j < NV; ++j) {
    const vf b = load(layer.bias() + j0 + j * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) acc[r][j] = b;
  }
  for (int k = 0; k < K; ++k) {
    vf w[NV];
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) w[j] = load(wt + k * ldw + j * W);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const vf xb = splat(xr[r][k]);
#pragma GCC unroll 8
      for (int j = 0; j < NV; ++j) acc[r][j] += xb * w[j];
    }
  }
  // The activation over the whole block at once: R * NV independent chains the core can overlap (one
  // switch per block; per element the same operations as apply_activation).
  switch (a.act) {
    case Activation::gelu_tanh: activate_block<R, NV>(acc, [](vf v) { return gelu_tanh(v); }); break;
    case Activation::gelu_erf: activate_block<R, NV>(acc, [](vf v) { return gelu_erf(v); }); break;
    case Activation::silu: activate_block<R, NV>(acc, [](vf v) { return silu(v); }); break;
    case Activation::relu: activate_block<R, NV>(acc, [](vf v) { return relu(v); }); break;
    case Activation::none: break;
  }
  // The residuals and the output through locals: a vector store may alias anything, so fields of `a`
  // read after one would be reloaded (with their row offsets recomputed) for every vector.
  const float* const add1 = a.add1 ? a.add1 + r0 * a.ld_add1 + j0 : nullptr;
  const float* const add2 = a.add2 ? a.add2 + r0 * a.ld_add2 + j0 : nullptr;
  float* const y = a.y + r0 * a.ldy + j0;
  const index_t ld1 = a.ld_add1, ld2 = a.ld_add2, ldy = a.ldy;
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
#pragma GCC unroll 8
    for (int j = 0; j < NV; ++j) {
      vf v = acc[r][j];
      if (add1) v += load(add1 + r * ld1 + j * W);
      if (add2) v += load(add2 + r * ld2 + j * W);
      store(y + r * ldy + j * W, v);
    }
  }
}

template <int NV>
inline void linear_columns(const LinearArgs& a, int j0) {
  index_t r0 = 0;
  for (; r0 + kLinearRows <= a.rows; r0 += kLinearRows) linear_block<kLinearRows, NV>(a, r0, j0);
  // Tail rows: one smaller block with the same per-row arithmetic.
  switch (a.rows - r0) {
    case 0: break;
    case 1: linear_block<1, NV>(a, r0, j0); break;
    case 2: linear_block<2, NV>(a, r0, j0); break;
    case 3: linear_block<3, NV>(a, r0, j0); break;
    case 4: if constexpr (kLinearRows > 4) linear_block<4, NV>(a, r0, j0); break;
    case 5: if constexpr (kLinearRows > 5) linear_block<5, NV>(a, r0, j0); break;
    default:
      for (; r0 < a.rows; ++r0) linear_block<1, NV>(a, r0, j0);
  }
}

inline void linear(const LinearArgs& a) {
  const int out_pad = a.layer->out_pad();
  constexpr int step = kLinearVecs * simd::W;
  int j0 = 0;
  for (; j0 + step <= out_pad; j0 += step) linear_columns<kLinearVecs>(a, j0);
  // Remaining output vectors (out_pad is a multiple of kPad, hence of W).
  const int rest = (out_pad - j0) / simd::W;
  if constexpr (kLinearVecs > 1) {
    switch (rest) {
      case 0: break;
      case 1: linear_columns<1>(a, j0); break;
      case 2: if constexpr (kLinearVecs > 2) linear_columns<2>(a, j0); break;
      case 3: if constexpr (kLinearVecs > 3) linear_columns<3>(a, j0); break;
      default: break;
    }
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
