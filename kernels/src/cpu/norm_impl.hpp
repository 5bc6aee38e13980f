// LayerNorm and RMSNorm over the channels of each row.
#pragma once

#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline void norm(const NormArgs& a) {
  using namespace simd;
  const int dim = a.dim;
  const int full = dim / W * W;
  const vi tail = first_lanes(dim - full);
  const int padded = static_cast<int>(round_up(dim, W));
  for (index_t r = 0; r < a.rows; ++r) {
    const float* x = a.x + r * a.ldx;
    float* y = a.y + r * a.ldy;
    float shift = 0.0f;
    if (!a.rms) {
      vf s = splat(0.0f);
      for (int c = 0; c < full; c += W) s += load(x + c);
      if (full < dim) s += select(tail, load(x + full), splat(0.0f));
      shift = hsum(s) / static_cast<float>(dim);
    }
    const vf mean = splat(shift);
    vf ss = splat(0.0f);
    for (int c = 0; c < full; c += W) {
      const vf d = load(x + c) - mean;
      ss = fused_multiply_add(d, d, ss);
    }
    if (full < dim) {
      const vf d = select(tail, load(x + full) - mean, splat(0.0f));
      ss = fused_multiply_add(d, d, ss);
    }
    const float var = hsum(ss) / static_cast<float>(dim);
    const vf rstd = splat(1.0f / __builtin_sqrtf(var + a.eps));
    // The roundings are spelled out rather than left to contraction: xhat * w + bias is one fused
    // multiply-add (as in cuda/norm.cu), whatever the compiler does with the branch on the bias.
    const float* const weight = a.weight;
    if (const float* const bias = a.bias) {
      for (int c = 0; c < padded; c += W)
        store(y + c, fused_multiply_add((load(x + c) - mean) * rstd, load(weight + c), load(bias + c)));
    } else {
      for (int c = 0; c < padded; c += W) store(y + c, (load(x + c) - mean) * rstd * load(weight + c));
    }
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
