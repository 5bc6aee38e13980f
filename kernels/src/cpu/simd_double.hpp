// Float64 vectors for the kernels' double-precision paths (share/docs/hept.md "Precision"): vd holds W/2
// doubles (8 with AVX-512, 4 with AVX2, 2 otherwise). Lanes never interact, as in simd.hpp.
#pragma once

#include "simd.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS::simd {

inline constexpr int WD = W / 2;

#if defined(__AVX512F__)
inline vd splatd(double s) { return _mm512_set1_pd(s); }
inline vd vmind(vd a, vd b) { return _mm512_maskz_min_pd(0xFF, a, b); }
#elif defined(__AVX2__)
inline vd splatd(double s) { return _mm256_set1_pd(s); }
inline vd vmind(vd a, vd b) { return _mm256_min_pd(a, b); }
#else
inline vd splatd(double s) {
  vd v;
  for (int i = 0; i < WD; ++i) v[i] = s;
  return v;
}
inline vd vmind(vd a, vd b) { return a < b ? a : b; }  // (vminpd: the second operand unless a < b)
#endif
inline vd loadd(const double* p) {
  vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void stored(double* p, vd v) { std::memcpy(p, &v, sizeof v); }
/// WD floats widened to doubles (exactly).
inline vd load_widened(const float* p) {
  typedef float vf_lanes __attribute__((vector_size(WD * sizeof(float))));
  vf_lanes v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, vd);
}
inline vl as_long(vd v) { return __builtin_bit_cast(vl, v); }
inline vd as_double(vl v) { return __builtin_bit_cast(vd, v); }
inline vd selectd(vl mask, vd a, vd b) { return mask ? a : b; }

/// a * b + c with one rounding where the instruction set has FMA (AVX2, AVX-512), two otherwise.
inline vd fmad(vd a, vd b, vd c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_pd(a, b, c);
#elif defined(__AVX2__)
  return _mm256_fmadd_pd(a, b, c);
#else
  return a * b + c;
#endif
}

/// exp(x) in float64 for every x. k = round(x log2 e) by the shifter 1.5 * 2^52; r = x - k ln2 by
/// Cody-Waite (ln2_hi has 21 trailing zero bits: k ln2_hi is exact); e^r on |r| <= 0.35 by its Taylor
/// polynomial of degree 13 (truncation below 0.05 ulp). 2^k is applied as two exact power-of-two factors so
/// that results in the subnormal range are rounded once, as std::exp rounds them. x is limited to
/// [-745.2, 709.79] first; below -745.2 (and -inf) the result is 0, above log(DBL_MAX) inf, NaN stays NaN.
/// Relative error against expl over the normal range (tests/kernels/test_kernels_f64.cpp, 6.5 million
/// arguments): 1.23 u (u = 2^-53) with FMA, 1.65 u without (generic); asserted at 2 u and 2.5 u.
inline vd exp(vd x) {
  constexpr double kShifter = 6755399441055744.0;  // 1.5 * 2^52
  const vd xc = vmind(x > splatd(-745.2) ? x : splatd(-745.2), splatd(709.79));
  const vd shifted = xc * splatd(1.4426950408889634) + splatd(kShifter);  // 1.5 * 2^52 + k
  const vd k = shifted - splatd(kShifter);
  vd r = xc - k * splatd(6.93147180369123816490e-01);  // ln2_hi
  r = r - k * splatd(1.90821492927058770002e-10);      // ln2_lo
  vd p = splatd(1.0 / 6227020800.0);                   // 1/13!
  p = p * r + splatd(1.0 / 479001600.0);
  p = p * r + splatd(1.0 / 39916800.0);
  p = p * r + splatd(1.0 / 3628800.0);
  p = p * r + splatd(1.0 / 362880.0);
  p = p * r + splatd(1.0 / 40320.0);
  p = p * r + splatd(1.0 / 5040.0);
  p = p * r + splatd(1.0 / 720.0);
  p = p * r + splatd(1.0 / 120.0);
  p = p * r + splatd(1.0 / 24.0);
  p = p * r + splatd(1.0 / 6.0);
  p = p * r + splatd(0.5);
  p = p * r + splatd(1.0);
  p = p * r + splatd(1.0);
  // 2^k = 2^(k - e) * 2^e with e = -537 for k < 0 (k >= -1075), 1 otherwise (k <= 1024): both factors are
  // normal, and p 2^(k - e) is exact. The shifter image of k - e is shifted - e (exact); its bit pattern
  // shifted left by 52 is (k - e) << 52 (the shifter's low 12 bits are 0), added to 1.0's exponent field.
  const vl negative = k < splatd(0.0);
  const vd e = selectd(negative, splatd(-537.0), splatd(1.0));
  const vl bits = (as_long(shifted - e) << 52) + as_long(splatd(1.0));
  vd y = (p * as_double(bits)) * selectd(negative, splatd(0x1p-537), splatd(2.0));
  y = selectd(x < splatd(-745.2), splatd(0.0), y);
  y = selectd(x > splatd(7.09782712893383973096e+02), splatd(__builtin_inf()), y);
  return selectd(x != x, x, y);
}

/// The lanes of a float vector as two double vectors (lanes [0, WD) and [WD, W)), and back (rounded once).
typedef float vf_half __attribute__((vector_size(W * 2)));
inline void widen(vf v, vd out[2]) {
  vf_half half[2];
  std::memcpy(half, &v, sizeof v);
  out[0] = __builtin_convertvector(half[0], vd);
  out[1] = __builtin_convertvector(half[1], vd);
}
inline vf narrow(vd lo, vd hi) {
  const vf_half half[2] = {__builtin_convertvector(lo, vf_half), __builtin_convertvector(hi, vf_half)};
  vf v;
  std::memcpy(&v, half, sizeof v);
  return v;
}

/// tanh(x) in double to about 3e-13 relative, for float arguments: (e - 1) / (e + 1) with e = exp(2 |x|)
/// (|x| capped at 20, where tanh is 1 in double), the sign of x copied; below 2^-12, |x| (1 - x^2 / 3)
/// (the next term is 2^-48 relative). exp's 1.23 u on e costs at most 1.23 u e / (e - 1) <= 2^-41 relative.
inline vd tanh_for_float(vd x) {
  const vl sign = as_long(splatd(-0.0));
  const vd a = as_double(as_long(x) & ~sign);
  const vd e = exp(splatd(2.0) * vmind(a, splatd(20.0)));
  const vd big = (e - splatd(1.0)) / (e + splatd(1.0));
  const vd small = a * (splatd(1.0) - a * a * splatd(1.0 / 3.0));
  const vd t = selectd(a < splatd(0x1p-12), small, big);
  return selectd(x != x, x, as_double(as_long(t) | (as_long(x) & sign)));
}

/// tanh(x) in float64, within 4 u (u = 2^-53; tests/kernels/test_kernels_f64.cpp): below |x| = 0.55 the
/// Taylor series to x^37 (coefficients 2^2n (2^2n - 1) B_2n / (2n)!, truncation below 2^-54 relative);
/// above, 1 - 2 / (exp(2 |x|) + 1) (|x| capped at 20), whose exp, sum and quotient errors (about 3.2 u) are
/// scaled by (1 - t) / t <= 1 there. The sign of x copied; NaN passes through.
inline vd tanh_f64(vd x) {
  const vl sign = as_long(splatd(-0.0));
  const vd a = as_double(as_long(x) & ~sign);
  const vd z = a * a;
  vd p = splatd(0x1.2efe8db3aff1fp-24);
  p = p * z + splatd(-0x1.75cde6563fed9p-23);
  p = p * z + splatd(0x1.cd299de4ae6bbp-22);
  p = p * z + splatd(-0x1.1c77df95c1c0dp-20);
  p = p * z + splatd(0x1.5ef2da474e5b7p-19);
  p = p * z + splatd(-0x1.b0f72d3ee24e9p-18);
  p = p * z + splatd(0x1.0b132d39a6050p-16);
  p = p * z + splatd(-0x1.497d8eea25259p-15);
  p = p * z + splatd(0x1.967e18afcafadp-14);
  p = p * z + splatd(-0x1.f57d7734d1664p-13);
  p = p * z + splatd(0x1.3558248036744p-11);
  p = p * z + splatd(-0x1.7da36452b75e3p-10);
  p = p * z + splatd(0x1.d6d3d0e157de0p-9);
  p = p * z + splatd(-0x1.226e355e6c23dp-7);
  p = p * z + splatd(0x1.664f4882c10fap-6);
  p = p * z + splatd(-0x1.ba1ba1ba1ba1cp-5);
  p = p * z + splatd(0x1.1111111111111p-3);
  p = p * z + splatd(-0x1.5555555555555p-2);
  p = p * z + splatd(1.0);
  const vd small = a * p;
  const vd big = splatd(1.0) - splatd(2.0) / (exp(splatd(2.0) * vmind(a, splatd(20.0))) + splatd(1.0));
  const vd t = selectd(a < splatd(0.55), small, big);
  return selectd(x != x, x, as_double(as_long(t) | (as_long(x) & sign)));
}

/// tanh of float lanes: tanh_for_float rounded once to float, so within 2^-24 (1 + 2^-17) relative of
/// tanh(x) (tests/kernels/test_kernels_f64.cpp checks every 211th float).
inline vf tanh(vf x) {
  vd h[2];
  widen(x, h);
  return narrow(tanh_for_float(h[0]), tanh_for_float(h[1]));
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS::simd
