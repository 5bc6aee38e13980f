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
typedef std::uint32_t vu __attribute__((vector_size(W * 4)));     // exponent-field arithmetic (wraps, no UB)
typedef double vd __attribute__((vector_size(W * 4)));            // W/2 doubles
typedef std::int64_t vl __attribute__((vector_size(W * 4)));      // W/2 int64

// Broadcasts. (vf{} + s would cost a scalar addition first: 0 + s is not s for s = -0.)
#if defined(__AVX512F__)
inline vf splat(float s) { return _mm512_set1_ps(s); }
inline vi splati(std::int32_t s) { return __builtin_bit_cast(vi, _mm512_set1_epi32(s)); }
#elif defined(__AVX2__)
inline vf splat(float s) { return _mm256_set1_ps(s); }
inline vi splati(std::int32_t s) { return __builtin_bit_cast(vi, _mm256_set1_epi32(s)); }
#else
inline vf splat(float s) {
  vf v;
  for (int i = 0; i < W; ++i) v[i] = s;
  return v;
}
inline vi splati(std::int32_t s) {
  vi v;
  for (int i = 0; i < W; ++i) v[i] = s;
  return v;
}
#endif
inline vf load(const float* p) {
  vf v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store(float* p, vf v) { std::memcpy(p, &v, sizeof v); }
inline vf as_float(vi v) { return __builtin_bit_cast(vf, v); }
inline vi as_int(vf v) { return __builtin_bit_cast(vi, v); }
// vmaxps/vminps return the second operand when the comparison fails (NaN included): exactly the
// ternaries below, in one instruction where GCC would emit a compare and a blend.
#if defined(__AVX512F__)
inline vf vmax(vf a, vf b) { return _mm512_maskz_max_ps(0xFFFF, a, b); }
inline vf vmin(vf a, vf b) { return _mm512_maskz_min_ps(0xFFFF, a, b); }
#elif defined(__AVX2__)
inline vf vmax(vf a, vf b) { return _mm256_max_ps(a, b); }
inline vf vmin(vf a, vf b) { return _mm256_min_ps(a, b); }
#else
inline vf vmax(vf a, vf b) { return a > b ? a : b; }
inline vf vmin(vf a, vf b) { return a < b ? a : b; }
#endif
inline vf select(vi mask, vf a, vf b) { return mask ? a : b; }

// Horizontal reductions in a fixed pairwise order (the same on every call for a given W).
#if defined(__AVX2__)
inline float hsum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}
inline float hmax8(__m256 v) {
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_max_ss(s, _mm_movehdup_ps(s)));
}
#endif
#if defined(__AVX512F__)
// (the _mm512_cast/extract intrinsics trip GCC 12's -Wmaybe-uninitialized; shuffles do not)
inline __m256 low_half(vf v) { return __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7); }
inline __m256 high_half(vf v) { return __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15); }
#endif
inline float hsum(vf v) {
#if defined(__AVX512F__)
  return hsum8(_mm256_add_ps(low_half(v), high_half(v)));
#elif defined(__AVX2__)
  return hsum8(v);
#else
  float lanes[W];
  store(lanes, v);
  for (int width = W / 2; width >= 1; width /= 2)
    for (int i = 0; i < width; ++i) lanes[i] += lanes[i + width];
  return lanes[0];
#endif
}
inline float hmax(vf v) {
#if defined(__AVX512F__)
  return hmax8(_mm256_max_ps(low_half(v), high_half(v)));
#elif defined(__AVX2__)
  return hmax8(v);
#else
  float lanes[W];
  store(lanes, v);
  float m = lanes[0];
  for (int i = 1; i < W; ++i) m = lanes[i] > m ? lanes[i] : m;
  return m;
#endif
}
inline bool any(vi mask) {
#if defined(__AVX512F__)
  return _mm512_test_epi32_mask(__m512i(mask), __m512i(mask)) != 0;
#elif defined(__AVX2__)
  return _mm256_movemask_ps(__m256(as_float(mask))) != 0;
#else
  for (int i = 0; i < W; ++i)
    if (mask[i]) return true;
  return false;
#endif
}
/// Bit i set where lane i of the mask is set.
inline unsigned lane_bits(vi mask) {
#if defined(__AVX512F__)
  return _mm512_test_epi32_mask(__m512i(mask), __m512i(mask));
#elif defined(__AVX2__)
  return static_cast<unsigned>(_mm256_movemask_ps(__m256(as_float(mask))));
#else
  unsigned bits = 0;
  for (int i = 0; i < W; ++i) bits |= mask[i] ? 1u << i : 0u;
  return bits;
#endif
}
/// Bit i set where a[i] > b[i] (false for NaN): one compare into a mask, not a vector of lanes.
inline unsigned greater_bits(vf a, vf b) {
#if defined(__AVX512F__)
  return _mm512_cmp_ps_mask(__m512(a), __m512(b), _CMP_GT_OQ);
#elif defined(__AVX2__)
  return static_cast<unsigned>(_mm256_movemask_ps(_mm256_cmp_ps(__m256(a), __m256(b), _CMP_GT_OQ)));
#else
  return lane_bits(a > b);
#endif
}

/// Lanes [0, n) set, the rest clear.
inline vi first_lanes(int n) {
  vi idx;
  for (int i = 0; i < W; ++i) idx[i] = i;
  return idx < splati(n);
}

/// 1/d for normal d with normal 1/d. AVX-512: 14-bit estimate refined by one Newton step (relative error
/// below 2^-27). AVX2: 12-bit estimate (vrcpps, error at most 1.5 * 2^-12) and one Newton step r + r (1 - d r)
/// with the residual fused (error below 2^-22 + 2^-24); vdivps would cost a third of the GELU layers' time.
[[gnu::always_inline]] inline vf reciprocal(vf d) {
#if defined(__AVX512F__)
  vf r = _mm512_maskz_rcp14_ps(0xFFFF, d);  // (maskz form: the unmasked one trips -Wmaybe-uninitialized in GCC 12)
  return r * (splat(2.0f) - d * r);
#elif defined(__AVX2__)
  const vf r = _mm256_rcp_ps(d);
  return _mm256_fmadd_ps(r, _mm256_fnmadd_ps(d, r, splat(1.0f)), r);
#else
  return splat(1.0f) / d;
#endif
}

/// a * b + c with one rounding where the instruction set has FMA (AVX2, AVX-512), two otherwise.
inline vf fused_multiply_add(vf a, vf b, vf c) {
#if defined(__AVX512F__)
  return _mm512_fmadd_ps(a, b, c);
#elif defined(__AVX2__)
  return _mm256_fmadd_ps(a, b, c);
#else
  return a * b + c;
#endif
}

/// v, with the compiler unable to see how it was computed (an empty asm): a product passed through it is
/// rounded on its own, not fused into a later addition (the kernels are compiled with -ffp-contract=fast).
template <class V>
[[gnu::always_inline]] inline V rounded(V v) {
  asm("" : "+v"(v));
  return v;
}

/// exp(x) = mantissa * 2^k with mantissa in [0.7, 1.42] and k = round(x log2 e): k by the shifter
/// 1.5 * 2^23 in one fused multiply-add (x log2 e + 1.5 * 2^23 lies in [2^23, 2^24), where floats are the
/// integers, so `shifted` is 1.5 * 2^23 + k exactly and its low mantissa bits hold k), Cody-Waite
/// reduction with two constants and a degree-6 polynomial fitted for relative error: the general exp
/// (erf, HEPT's Gaussian kernel); the softmax's cheaper form is softmax_exp_parts below. |x| is limited to
/// 2^20 first (exp_argument). The same arithmetic (bitwise) on every instruction set with FMA (AVX2,
/// AVX-512). Maximum relative error of mantissa * 2^k against exp(x), measured over every float in
/// [-87, 88.38]: 1.53 u (u = 2^-24) with FMA, 1.92 u without (generic); tests/kernels/test_kernels.cpp
/// asserts 1.6 u and 2 u.
struct ExpParts {
  vf mantissa;
  vf k;        // an integer, as a float
  vf shifted;  // 1.5 * 2^23 + k
};
inline constexpr float kExpShifter = 12582912.0f;  // 1.5 * 2^23
/// x limited to [-2^20, 2^20] (NaN to -2^20, as fmaxf does on the device): keeps every integer in the
/// shifter's range, so no input reaches undefined behaviour or a wrong exponent field (issue 19).
inline vf exp_argument(vf x) { return vmin(vmax(x, splat(-1048576.0f)), splat(1048576.0f)); }
inline vf exp_shifted(vf x) { return x * splat(1.44269504088896341f) + splat(kExpShifter); }
/// round(x log2 e) as exp_parts computes it (callers take softmax references from it).
inline vf exp_exponent(vf x) { return exp_shifted(exp_argument(x)) - splat(kExpShifter); }
inline vf exp_polynomial(vf r) {  // e^r on [-ln2/2, ln2/2]
  vf p = splat(1.3840249739587307e-3f);
  p = p * r + splat(8.375746197998524e-3f);
  p = p * r + splat(4.166821762919426e-2f);
  p = p * r + splat(1.6666407883167267e-1f);
  p = p * r + splat(4.9999991059303284e-1f);
  p = p * r + splat(1.0f);
  return p * r + splat(1.0f);
}
/// exp_parts for x already within [-2^20, 2^20].
[[gnu::always_inline]] inline ExpParts exp_parts_limited(vf x) {
  const vf shifted = exp_shifted(x);
  const vf k = shifted - splat(kExpShifter);
  vf r = x - k * splat(0.693359375f);  // two-constant reduction: r is accurate for any |k| <= 2^15
  r = r - k * splat(-2.12194440e-4f);
  return {exp_polynomial(r), k, shifted};
}
/// The softmax's exp (softmax_term, exp_nonpositive; latent_softmax.cuh's exp_parts on the device): the
/// same k and shifter, then f = x log2 e - k in one fused multiply-add (one rounding, but log2 e in float
/// is 1.3e-8 short, which costs 0.225 |x| u) and 2^f by a degree-5 polynomial (3.1 u in float arithmetic).
/// Relative error at most (3.3 + 0.225 |x|) u, measured over every float with |x| <= 88.37 (22.9 u);
/// in a softmax the |x|-proportional part scales every logit alike (share/docs/reproducibility.md, "The
/// exponential"). Without FMA (generic) f comes from the two-constant reduction above: 3.8 u measured.
inline vf exp2_polynomial(vf f) {  // 2^f on [-1/2, 1/2], fitted for relative error
  vf p = splat(1.365022617e-3f);
  p = p * f + splat(9.684677236e-3f);
  p = p * f + splat(5.549710989e-2f);
  p = p * f + splat(2.402191758e-1f);
  p = p * f + splat(6.931474209e-1f);
  return p * f + splat(1.00000011920928955f);
}
/// softmax_exp_parts for x already within [-2^20, 2^20].
inline ExpParts softmax_exp_parts_limited(vf x) {
  const vf shifted = exp_shifted(x);
  const vf k = shifted - splat(kExpShifter);
#if defined(__FMA__)
  const vf f = fused_multiply_add(x, splat(1.44269504088896341f), -k);
#else
  vf r = x - k * splat(0.693359375f);
  r = r - k * splat(-2.12194440e-4f);
  const vf f = r * splat(1.44269504088896341f);
#endif
  return {exp2_polynomial(f), k, shifted};
}
inline ExpParts softmax_exp_parts(vf x) { return softmax_exp_parts_limited(exp_argument(x)); }
/// mantissa * 2^s for a shifter image `shifted` = 1.5 * 2^23 + s (s an integer, the exponent field of the
/// result stays in [1, 254]): an unsigned exponent-field addition, exact. The low 9 bits of the shifter's
/// bit pattern are 0, so shifting the pattern left by 23 leaves s << 23 (mod 2^32).
inline vf add_exponent(vf mantissa, vf shifted) {
  const vu bits = __builtin_bit_cast(vu, shifted) << 23;
  return __builtin_bit_cast(vf, __builtin_bit_cast(vu, mantissa) + bits);
}
/// The parts' mantissa * 2^(k - ref) for integer-valued ref >= k (ref - k < 2^22); 0 below 2^-125 times the
/// mantissa (k - ref < -125). The bits depend only on x's parts and ref.
inline vf scale_down_parts(const ExpParts& e, vf ref) {
  const vf shifted = e.shifted - ref;  // 1.5 * 2^23 + (k - ref), exact
  // (lanes below the range wrap in the unsigned addition and are replaced by 0)
  return select(shifted < splat(kExpShifter - 125.0f), splat(0.0f), add_exponent(e.mantissa, shifted));
}
/// One term of the streaming softmax: exp(x) 2^-ref for an integer-valued reference ref at least the
/// exponent exp_exponent(x), a float whose bits depend only on x and ref. It is
/// scale_down_parts(softmax_exp_parts(x), ref), bitwise, one operation shorter with FMA: the shifter
/// 1.5 * 2^23 - ref (exact) gives 1.5 * 2^23 + k - ref in the first fused multiply-add, whose rounding to an
/// integer is that of x log2 e alone (no ties for |x| <= 2^20: a tie needs |x log2 e| >= 6.05e6, log2 e's
/// float mantissa being odd), so the scaling's subtraction goes.
[[gnu::always_inline]] inline vf softmax_term(vf x, vf ref) {
#if defined(__FMA__)
  x = exp_argument(x);
  const vf shifter = splat(kExpShifter) - ref;
  const vf shifted = fused_multiply_add(x, splat(1.44269504088896341f), shifter);
  const vf k = shifted - shifter;
  const vf mantissa = exp2_polynomial(fused_multiply_add(x, splat(1.44269504088896341f), -k));
  return select(shifted < splat(kExpShifter - 125.0f), splat(0.0f), add_exponent(mantissa, shifted));
#else
  return scale_down_parts(softmax_exp_parts(x), ref);
#endif
}

/// exp(x) in float32, max relative error that of exp_parts for x in [-87, 88.38]; 0 below -87 (including
/// -inf), inf above, NaN for NaN. Vectors whose lanes are all in range (the usual case) skip the clamps;
/// the other path gives the same bits on the in-range lanes.
inline vf exp_clamped(vf x) {
  const vf lo = splat(-87.0f);
  const vf hi = splat(88.3762626647949f);
  const vi underflow = x < lo;
  const vi overflow = x > hi;
  const ExpParts e = exp_parts_limited(vmin(vmax(x, lo), hi));
  vf y = add_exponent(e.mantissa, e.shifted);
  y = select(underflow, splat(0.0f), y);
  y = select(overflow, splat(__builtin_inff()), y);
  return select(x != x, x, y);
}
// (always_inline: in a register-blocked caller, such as the bucket kernel's 16 logit vectors, a call
// spills every live vector register)
[[gnu::always_inline]] inline vf exp(vf x) {
  const vf magnitude = as_float(as_int(x) & splati(0x7fffffff));
  if (__builtin_expect(any(~(magnitude <= splat(87.0f))), 0)) return exp_clamped(x);  // NaN included
  const ExpParts e = exp_parts_limited(x);
  return add_exponent(e.mantissa, e.shifted);
}

/// exp(x) for x <= 0 or NaN, exp's bits without its branch, for callers whose lanes often fall below -87
/// (the Gaussian kernel's distant pairs), where that branch to exp_clamped mispredicts.
inline vf exp_nonpositive_accurate(vf x) {
  const vf lo = splat(-87.0f);
  const ExpParts e = exp_parts_limited(vmax(x, lo));
  const vf y = select(x < lo, splat(0.0f), add_exponent(e.mantissa, e.shifted));
  return select(x != x, x, y);
}

/// exp(x) for softmax weights, x <= 0: results below the normal range are not guaranteed to be 0 (x is
/// raised to -87 first, NaN included, which keeps the exponent-field addition in range).
inline vf exp_nonpositive(vf x) {
  const ExpParts e = softmax_exp_parts_limited(vmax(x, splat(-87.0f)));
  return add_exponent(e.mantissa, e.shifted);
}

/// x / (1 + 2^t), t = x c(x), for the sigmoid activations, where only 1 + 2^t matters (the callers fold
/// log2 e into c). x is first limited to |x| <= cap, chosen by the caller so that t(cap) <= -25 (1 + 2^t
/// is then 1, as for any larger x) and t(-cap) >= 115.4, the natural form's e^80 (the result is then below
/// |x| 1.9e-35, as for any smaller x), which also keeps k = round(t) inside the exponent field. 2^(t - k)
/// by the softmax's degree-5 polynomial with t - k from one fused multiply-add, times 2^k: vrangeps,
/// vrndscaleps and vscalefps on AVX-512, the shifter elsewhere. A GELU is 17 vector operations on AVX-512
/// and 19 on AVX2 (benchmarks/RESULTS.md, "The activations in base 2").
template <class Slope>
[[gnu::always_inline]] inline vf divide_by_one_plus_exp2(vf x, float cap, Slope slope) {
#if defined(__AVX512F__)
  const vf xc = _mm512_maskz_range_ps(0xFFFF, x, splat(cap), 0x02);  // |x| <= cap, sign kept
  const vf c = slope(xc);
  const vf k = _mm512_maskz_roundscale_ps(0xFFFF, xc * c, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const vf e = _mm512_maskz_scalef_ps(0xFFFF, exp2_polynomial(fused_multiply_add(xc, c, -k)), k);
#else
  const vf xc = vmax(vmin(x, splat(cap)), splat(-cap));
  const vf c = slope(xc);
  const vf shifted = fused_multiply_add(xc, c, splat(kExpShifter));
  const vf e = add_exponent(exp2_polynomial(fused_multiply_add(xc, c, splat(kExpShifter) - shifted)), shifted);
#endif
  return x * reciprocal(splat(1.0f) + e);
}

/// GELU with the tanh approximation (PyTorch's approximate='tanh'):
/// 0.5 x (1 + tanh(u)) = x * sigmoid(2u) = x / (1 + exp(-2u)) = x / (1 + 2^t),
/// u = sqrt(2/pi) (x + 0.044715 x^3), t = -2u log2 e (the constants times -2 log2 e, rounded once);
/// t(9.675) = -115.5.
// (always_inline: inside the linear kernels' register blocks a call would cost more than the GELU)
[[gnu::always_inline]] inline vf gelu_tanh(vf x) {
  return divide_by_one_plus_exp2(
      x, 9.675f, [](vf v) { return splat(-2.302208185e+00f) + splat(-1.029432416e-01f) * (v * v); });
}

/// ReLU with NaN and -0 kept: x < 0 ? 0 : x (kernels::relu_keep_nan, lane by lane).
[[gnu::always_inline]] inline vf relu(vf x) {
  const vf zero{};
  return x < zero ? zero : x;
}

/// SiLU: x * sigmoid(x) = x / (1 + exp(-x)) = x / (1 + 2^(-x log2 e)); t(-80) = 115.4.
[[gnu::always_inline]] inline vf silu(vf x) {
  return divide_by_one_plus_exp2(x, 80.0f, [](vf) { return splat(-1.44269504088896341f); });
}

/// erf(x) in float32. |x| < 1: x (2/sqrt(pi) + x^2 Q(x^2)), with 2/sqrt(pi) split into a float and a
/// correction so that the leading term is rounded once (Q: degree 5, fitted for relative error 1.3e-9).
/// 1 <= |x|: sign(x) (1 - exp(-x^2 + R(|x| - 2.5))), |x| capped at 4 where erf rounds to 1 (R: degree 10,
/// fitted to log(erfc(a)) + a^2 on [1, 4], absolute error 1.6e-9; erfc(1) < 0.16 keeps exp's error below
/// 0.3 ulp of the result). Measured against std::erf in double over every 61st positive and 997th negative float
/// (tests/unit/test_kernels.cpp): at most 1.31 ulp with FMA (AVX2, AVX-512), 2.29 ulp without (generic);
/// the test asserts 1.5 and 2.5. NaN gives NaN, +-inf gives +-1.
/// The polynomials were fitted with share/tools/erf_fit.py. (always_inline, with a branch-free exp: inside
/// the linear kernels' register blocks a call spills every accumulator; -ac^2 + R lies in [-18, 0.001] for
/// every ac, so exp never takes its clamping branch here.)
[[gnu::always_inline]] inline vf erf(vf x) {
  const vf a = as_float(as_int(x) & splati(0x7fffffff));
  // Small arguments.
  const vf t = a * a;
  vf q = splat(7.898718e-05f);
  q = q * t + splat(-8.024826e-04f);
  q = q * t + splat(5.1901634e-03f);
  q = q * t + splat(-2.6854917e-02f);
  q = q * t + splat(1.12836175e-01f);
  q = q * t + splat(-3.761263e-01f);
  const vf small_tail = q * t + splat(-5.8635383e-08f);  // x^2 Q + (2/sqrt(pi) - 1.1283792f)
  const vf small = fused_multiply_add(x, splat(1.1283792f), x * small_tail);
  // Large arguments.
  const vf ac = vmin(a, splat(4.0f));
  const vf z = ac - splat(2.5f);
  vf r = splat(-4.3805528e-08f);
  r = r * z + splat(-6.592354e-08f);
  r = r * z + splat(1.8604738e-06f);
  r = r * z + splat(-1.2975653e-05f);
  r = r * z + splat(7.690929e-05f);
  r = r * z + splat(-4.2070774e-04f);
  r = r * z + splat(2.1655501e-03f);
  r = r * z + splat(-1.0858165e-02f);
  r = r * z + splat(5.610625e-02f);
  r = r * z + splat(-3.5268074e-01f);
  r = r * z + splat(-1.5568153e+00f);
  const ExpParts e = exp_parts_limited(fused_multiply_add(-ac, ac, r));  // exp's own path for |x| <= 87
  const vf one_minus = splat(1.0f) - add_exponent(e.mantissa, e.shifted);
  const vf large = as_float(as_int(one_minus) | (as_int(x) & splati(static_cast<std::int32_t>(0x80000000u))));
  const vf y = select(a < splat(1.0f), small, large);
  return select(x != x, x, y);  // NaN stays NaN
}

/// Exact GELU as torch.nn.GELU() computes it in float32: 0.5 x (1 + erf(x / sqrt(2))).
[[gnu::always_inline]] inline vf gelu_erf(vf x) {
  return splat(0.5f) * x * (splat(1.0f) + erf(x * splat(0.70710678118654752440f)));
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS::simd
