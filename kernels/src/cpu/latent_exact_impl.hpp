// Reproducible encode (LatentMaxArgs, LatentExactArgs in cpu.hpp): pass 1, the maximum logit per latent;
// pass 2, the exact fixed-point sums of the weights and weighted values. Both passes use logit<0>, so the
// logits of pass 2 are bit-identical to those whose maximum was taken. share/docs/reproducibility.md.
#pragma once

#include "latent_impl.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline void latent_max(const LatentMaxArgs& a) {
  using namespace simd;
  const int E = a.E;
  const int rows_per_chunk = chunk_rows(E);
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * W];
  const float neg_inf = -__builtin_inff();
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    const int nvec = ld / W;
    const vi last = first_lanes(rows % W);
    for (int m = 0; m < a.M; ++m) {
      vf mx = splat(neg_inf);
      for (int iv = 0; iv < nvec; ++iv) {
        vf l = logit<0>(a.q + m * E, kt + iv * W, ld, E);
        if (rows % W && iv == nvec - 1) l = select(last, l, splat(neg_inf));
        mx = vmax(mx, l);
      }
      a.max[m] = fmaxf(a.max[m], hmax(mx));
    }
  }
}

// Fixed-point images. AVX2 has no packed double <-> int64 conversions (GCC converts lane by lane): there
// trunc is vroundpd, and an integer-valued double below 2^51 becomes an int64 by adding 1.5 2^52 and
// subtracting the bits; larger ones (up to 2^63) by shifting the mantissa by the exponent.
#if defined(__AVX2__) && !defined(__AVX512F__)
inline constexpr bool kShiftConversions = true;

inline simd::vd trunc_double(simd::vd x) {
  const __m256d whole = _mm256_round_pd(__builtin_bit_cast(__m256d, x), _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  return __builtin_bit_cast(simd::vd, whole);
}

/// An integer-valued x, |x| < 2^51, as int64.
inline simd::vl small_int64(simd::vd x) {
  const simd::vd magic = simd::vd{} + 0x1.8p52;
  return __builtin_bit_cast(simd::vl, x + magic) - __builtin_bit_cast(simd::vl, magic);
}

/// trunc(x) as int64, |x| < 2^63 (shifts by 64 or more give 0).
inline simd::vl trunc_int64(simd::vd x) {
  const __m256i bits = __builtin_bit_cast(__m256i, x);
  const __m256i exponent = _mm256_and_si256(_mm256_srli_epi64(bits, 52), _mm256_set1_epi64x(0x7ff));
  const __m256i mantissa = _mm256_or_si256(_mm256_and_si256(bits, _mm256_set1_epi64x((std::int64_t{1} << 52) - 1)),
                                           _mm256_set1_epi64x(std::int64_t{1} << 52));
  const __m256i bias = _mm256_set1_epi64x(1075);  // x = mantissa 2^(exponent - 1075)
  const __m256i magnitude = _mm256_or_si256(_mm256_sllv_epi64(mantissa, _mm256_sub_epi64(exponent, bias)),
                                            _mm256_srlv_epi64(mantissa, _mm256_sub_epi64(bias, exponent)));
  const __m256i negative = _mm256_cmpgt_epi64(_mm256_setzero_si256(), bits);
  return __builtin_bit_cast(simd::vl, _mm256_sub_epi64(_mm256_xor_si256(magnitude, negative), negative));
}
#else
inline constexpr bool kShiftConversions = false;
inline simd::vl trunc_int64(simd::vd x) { return __builtin_convertvector(x, simd::vl); }
inline simd::vd trunc_double(simd::vd x) { return __builtin_convertvector(trunc_int64(x), simd::vd); }
inline simd::vl small_int64(simd::vd x) { return trunc_int64(x); }
#endif

/// How quantize_add treats its terms: checked (a term may not fit), or known to fit (|image| < 2^62),
/// or known to be small (|image| < 2^51 and lo images below 2^51: AVX2's short conversions).
enum class Fit { checked, fits, small };

/// Adds the fixed-point images (hi, lo) of the W/2 terms t to the lane accumulators. Checked: a term
/// whose image does not fit the scale (NaN, Inf, beyond the declared maximum) adds 0, and 1 to `bad`.
template <Fit F>
inline void quantize_add(simd::vd t, double hi_mult, double lo_mult, simd::vl& hi, simd::vl& lo, simd::vl& bad) {
  using namespace simd;
  vd scaled = t * hi_mult;  // exact: power of two
  if constexpr (F == Fit::checked) {
    const vl fits = (scaled < 0x1p62) & (scaled > -0x1p62);  // false for NaN
    bad += ~fits & 1;  // (a true lane of the mask is -1)
    scaled = fits ? scaled : vd{};
  }
  const vd whole = trunc_double(scaled);
  const vd rem = scaled - whole;  // exact fractional part, |rem| < 1
  if constexpr (F == Fit::small) {
    hi += small_int64(whole);
    lo += small_int64(trunc_double(rem * lo_mult));
  } else {
    hi += trunc_int64(scaled);
    lo += trunc_int64(rem * lo_mult);
  }
}

inline std::int64_t lane_sum(simd::vl v) {
  std::int64_t s = 0;
  for (int i = 0; i < simd::W / 2; ++i) s += v[i];
  return s;
}

/// The lane accumulators of one latent: [channel][hi/lo][half], channel 0 the sum, 1 + e the values.
struct ExactLanes {
  simd::vl acc[kMaxHeadDim + 1][2][2];
  simd::vl bad;
};

/// The E + 1 terms of W points with weights p (values transposed at vt + e * ld): the sum term p and
/// the exact products p v, quantised into the lanes.
template <Fit F>
inline void add_exact_terms(simd::vf p, const float* vt, int ld, int E, const double* mult, ExactLanes& lanes) {
  using namespace simd;
  vfh ph[2];
  std::memcpy(ph, &p, sizeof p);
  for (int h = 0; h < 2; ++h) {
    const vd pd = __builtin_convertvector(ph[h], vd);
    quantize_add<F>(pd, mult[0], mult[1], lanes.acc[0][0][h], lanes.acc[0][1][h], lanes.bad);
    for (int e = 0; e < E; ++e) {
      vfh vh[2];
      const vf ve = load(vt + e * ld);
      std::memcpy(vh, &ve, sizeof ve);
      const vd prod = pd * __builtin_convertvector(vh[h], vd);  // exact: 24 x 24 bits
      quantize_add<F>(prod, mult[2], mult[3], lanes.acc[1 + e][0][h], lanes.acc[1 + e][1][h], lanes.bad);
    }
  }
}

/// Whether every |value| of the chunk (E rows of ld at vt) is below `limit` (false with a NaN).
inline bool values_below(const float* vt, int ld, int E, float limit) {
  using namespace simd;
  vi outside = splati(0);
  for (int e = 0; e < E; ++e)
    for (int i = 0; i < ld; i += W) {
      const vf magnitude = as_float(as_int(load(vt + e * ld + i)) & splati(0x7fffffff));
      outside |= ~(magnitude < splat(limit));
    }
  return !any(outside);
}

inline void latent_encode_exact(const LatentExactArgs& a) {
  using namespace simd;
  const int E = a.E;
  const int rows_per_chunk = chunk_rows(E);
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) float vt[kChunkFloats + kMaxHeadDim * W];
  const double mult[4] = {__builtin_ldexp(1.0, a.sum_scale.hi_bits), __builtin_ldexp(1.0, a.sum_scale.lo_bits),
                          __builtin_ldexp(1.0, a.value_scale.hi_bits), __builtin_ldexp(1.0, a.value_scale.lo_bits)};
  // Every term fits when the weights are in [0, 1] below the sum scale's limit and the |values| below the
  // value scale's: then a vector of points needs no per-term check (the same sums: nothing is left out).
  // (A limit beyond the float range converts to Inf, one below it to 0: both keep the test exact.)
  const float weight_limit = static_cast<float>(__builtin_ldexp(1.0, 62 - a.sum_scale.hi_bits));
  const float value_limit = static_cast<float>(__builtin_ldexp(1.0, 62 - a.value_scale.hi_bits));
  // AVX2's short conversions: weights in [0, 1] below 2^51 after scaling, and the values' below it too.
  const bool small_weights = kShiftConversions && a.sum_scale.hi_bits <= 50 && a.sum_scale.lo_bits <= 51 &&
                             a.value_scale.lo_bits <= 51;
  const float small_value_limit = static_cast<float>(__builtin_ldexp(1.0, 51 - a.value_scale.hi_bits));
  const float neg_inf = -__builtin_inff();
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    transpose_in(a.v + r0 * a.ldv, a.ldv, rows, E, vt, ld);
    const bool values_fit = values_below(vt, ld, E, value_limit);
    const bool small = small_weights && values_fit && values_below(vt, ld, E, small_value_limit);
    const int nvec = ld / W;
    const vi last = first_lanes(rows % W);
    for (int m = 0; m < a.M; ++m) {
      ExactLanes lanes;
      lanes.bad = vl{};
      for (int c = 0; c <= E; ++c)
        for (int h = 0; h < 2; ++h) lanes.acc[c][0][h] = lanes.acc[c][1][h] = vl{};
      const vf ref = splat(a.ref_max[m]);
      for (int iv = 0; iv < nvec; ++iv) {
        vf l = logit<0>(a.q + m * E, kt + iv * W, ld, E);
        if (rows % W && iv == nvec - 1) l = select(last, l, splat(neg_inf));
        const vf p = exp(l - ref);
        if (__builtin_expect(!values_fit || any(~((p <= splat(1.0f)) & (p < splat(weight_limit)))), 0))
          add_exact_terms<Fit::checked>(p, vt + iv * W, ld, E, mult, lanes);
        else if (small)
          add_exact_terms<Fit::small>(p, vt + iv * W, ld, E, mult, lanes);
        else
          add_exact_terms<Fit::fits>(p, vt + iv * W, ld, E, mult, lanes);
      }
      for (int c = 0; c <= E; ++c) {
        std::int64_t* out = a.acc + (static_cast<index_t>(m) * (E + 1) + c) * 2;
        out[0] += lane_sum(lanes.acc[c][0][0]) + lane_sum(lanes.acc[c][0][1]);
        out[1] += lane_sum(lanes.acc[c][1][0]) + lane_sum(lanes.acc[c][1][1]);
      }
      if (a.bad) a.bad[m] += lane_sum(lanes.bad);
    }
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
