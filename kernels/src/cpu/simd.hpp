// Portable SIMD layer over GCC vector extensions.
//
// This header is compiled once per instruction set (see isa_*.cpp): the vector width W follows the
// target flags of the translation unit (16 floats with AVX-512, 8 with AVX2, 4 otherwise). Every kernel
// is written in terms of `vf` so one source gives all three variants. Rules that the kernels rely on:
//  * arithmetic on a lane never depends on the other lanes, so a point's result does not depend on
//    where it sits in a vector (this is what makes predictions independent of the partition);
//  * exp/gelu/silu are our own polynomials, identical on every lane.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__AVX512F__)
#include <immintrin.h>
#define SURROGATE_SIMD_WIDTH 16
#elif defined(__AVX2__)
#include <immintrin.h>
#define SURROGATE_SIMD_WIDTH 8
#else
#define SURROGATE_SIMD_WIDTH 4
#endif

namespace surrogate::kernels::SURROGATE_ISA_NS::simd {

inline constexpr int W = SURROGATE_SIMD_WIDTH;

// Scalar helpers defined here rather than taken from <algorithm>/<cmath>: an out-of-line copy of a std
// template compiled with this translation unit's instruction set could be picked by the linker for the
// other variants (a debug build would then fault on older CPUs).
inline std::int64_t imin(std::int64_t a, std::int64_t b) { return a < b ? a : b; }
inline std::int64_t imax(std::int64_t a, std::int64_t b) { return a > b ? a : b; }
inline float fmaxf(float a, float b) { return a > b ? a : b; }
typedef float vf __attribute__((vector_size(W * 4)));
typedef std::int32_t vi __attribute__((vector_size(W * 4)));
typedef double vd __attribute__((vector_size(W * 4)));            // W/2 doubles
typedef std::int64_t vl __attribute__((vector_size(W * 4)));      // W/2 int64

inline vf splat(float s) { return vf{} + s; }
inline vi splati(std::int32_t s) { return vi{} + s; }
inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf as_float(vi v) { return __builtin_bit_cast(vf, v); }
inline vi as_int(vf v) { return __builtin_bit_cast(vi, v); }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
inline vf select(vi mask, vf a, vf b) { return mask ? a : b; }

inline float hsum(vf v) {
  // fixed pairwise order: the same on every call for a given W
  float lanes[W];
  store(lanes, v);
  for (int width = W / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
}
inline float hmax(vf v) {
  float lanes[W];
  store(lanes, v);
  float m = lanes[0];
  for (int i = 1; i < W; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
}
inline bool any(vi mask) {
  for (int i = 0; i < W; ++i)
    if (mask[i]) return true;
  return false;
}
/// Lanes [0, n) set, the rest clear.
inline vi first_lanes(int n) {
  vi idx;
  for (int i = 0; i < W; ++i) idx[i] = i;
  return idx < splati(n);
}

/// 1/d. AVX-512: 14-bit estimate refined by one Newton step (relative error below 2^-27).
inline vf reciprocal(vf d) {
#if defined(__AVX512F__)
  vf r = _mm512_maskz_rcp14_ps(0xFFFF, d);  // (maskz form: the unmasked one trips -Wmaybe-uninitialized in GCC 12)
  return r * (splat(2.0f) - d * r);
#else
  return splat(1.0f) / d;
#endif
}

/// exp(x) in float32: Cody-Waite range reduction, degree-7 polynomial, exponent by integer add.
/// Max relative error about 2 ulp for x in [-87, 88.3]; 0 below -87 (including -inf), inf above.
inline vf exp(vf x) {
  const vf lo = splat(-87.0f);
  const vf hi = splat(88.3762626647949f);
  const vi underflow = x < lo;
  const vi overflow = x > hi;
  x = vmin(vmax(x, lo), hi);
  const vf magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer in the low bits
  const vf t = x * splat(1.44269504088896341f) + magic;
  const vi k = as_int(t) - as_int(magic);
  const vf kf = t - magic;
  vf r = x - kf * splat(0.693359375f);
  r = r - kf * splat(-2.12194440e-4f);
  vf p = splat(1.9875691500e-4f);
  p = p * r + splat(1.3981999507e-3f);
  p = p * r + splat(8.3334519073e-3f);
  p = p * r + splat(4.1665795894e-2f);
  p = p * r + splat(1.6666665459e-1f);
  p = p * r + splat(5.0000001201e-1f);
  p = p * (r * r) + r + splat(1.0f);
  vf y = as_float(as_int(p) + (k << 23));
  y = select(underflow, splat(0.0f), y);
  return select(overflow, splat(__builtin_inff()), y);
}

/// GELU with the tanh approximation (PyTorch's approximate='tanh'):
/// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)),  u = sqrt(2/pi) (x + 0.044715 x^3).
/// The exponent is capped at 80 so that 1 + exp(.) stays finite (its reciprocal is then ~1e-35, not 0/NaN).
inline vf gelu_tanh(vf x) {
  const vf u2 = x * (splat(1.5957691216057308f) + splat(0.071354816272600250f) * (x * x));  // 2u
  return x * reciprocal(splat(1.0f) + exp(vmin(-u2, splat(80.0f))));
}

/// SiLU: x * sigmoid(x) = x / (1 + exp(-x)), with the same cap.
inline vf silu(vf x) { return x * reciprocal(splat(1.0f) + exp(vmin(-x, splat(80.0f)))); }

}  // namespace surrogate::kernels::SURROGATE_ISA_NS::simd
