// Latent (FLARE) attention for one head: encode (softmax over the points, streamed; optionally selecting
// each latent's top-S keys, BSA) and decode (softmax over the latents; the reproducible encode: latent_exact_impl.hpp);
// ball attention (Erwin, BSA) on the decode. Points are processed W at a time
// (one per SIMD lane) after transposing a chunk of the head's k/v columns; the latent queries are
// broadcast from memory. A point's logits, exponentials and weights are computed by the same arithmetic
// in every lane, chunk and call.
#pragma once


#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "top_set_impl.hpp"
#include "transpose_impl.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline constexpr int kMaxHeadDim = kMaxAttentionHeadDim;
inline constexpr int kChunkFloats = 4096;  // per transposed operand: E x chunk <= 16 KiB
inline constexpr int kMaxChunkRows = 1024;
inline constexpr int kDecodeLatentBlock = 256;

/// Points per chunk for head width E: a multiple of W with E * chunk <= kChunkFloats.
inline int chunk_rows(int E) {
  const int rows = static_cast<int>(simd::imin(kChunkFloats / simd::imax(E, 1), kMaxChunkRows)) / simd::W * simd::W;
  return static_cast<int>(simd::imax(rows, simd::W));
}

/// dst[e * ld + i] = src[i * lds + e] for i < rows; zero for rows <= i < padded (register tiles of
/// transpose_impl.hpp; pure data movement, exact into double).
template <class T>
[[gnu::always_inline]] inline void transpose_in(const float* src, index_t lds, int rows, int E, T* dst, int ld) {
  transpose_block(src, lds, dst, ld, rows, E);
  const int padded = static_cast<int>(round_up(rows, simd::W));
  for (int e = 0; e < E; ++e)
    for (int i = rows; i < padded; ++i) dst[e * ld + i] = T(0);
}

/// dst[i * ldd + e] = src[e * ld + i] for i < rows.
inline void transpose_out(const float* src, int ld, int rows, int E, float* dst, index_t ldd) {
  transpose_block(src, ld, dst, ldd, E, rows);
}

/// l = sum_e q[e] * kt[e] (one fused multiply-add chain in e order).
template <int EC>
inline simd::vf logit(const float* q, const float* kt, int ld, int E) {
  using namespace simd;
  constexpr int kE = EC;
  const int n = kE ? kE : E;
  vf l = splat(q[0]) * load(kt);
#pragma GCC unroll 16
  for (int e = 1; e < n; ++e) l += splat(q[e]) * load(kt + e * ld);
  return l;
}

// ---------------------------------------------------------------------------------------------------
// Encode, streaming form: each term 2^(l log2 e - ref) is a float whose bits depend on l only (the
// exponent shift is exact) and is accumulated in double, so splitting the points differently changes
// the sums only by double rounding.

typedef float vfh __attribute__((vector_size(simd::W * 2)));

inline void to_double(simd::vf v, simd::vd out[2]) {
#if defined(__AVX512F__)
  out[0] = _mm512_maskz_cvtps_pd(0xFF, simd::low_half(v));  // one vcvtps2pd ymm -> zmm each (maskz: GCC 12 warning)
  out[1] = _mm512_maskz_cvtps_pd(0xFF, simd::high_half(v));
  return;
#elif defined(__AVX2__)
  out[0] = _mm256_cvtps_pd(_mm256_castps256_ps128(v));  // (the generic halves go through the stack here)
  out[1] = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
  return;
#endif
  vfh half[2];
  std::memcpy(half, &v, sizeof v);
  out[0] = __builtin_convertvector(half[0], simd::vd);
  out[1] = __builtin_convertvector(half[1], simd::vd);
}

inline double hsum_double(simd::vd a, simd::vd b) {
  const simd::vd s = a + b;
  double total = 0;
  for (int i = 0; i < simd::W / 2; ++i) total += s[i];
  return total;
}

#if defined(__AVX512F__) || defined(__AVX2__)
/// c[i] = lane i of s[0 .. L), L = W / 2 (an L x L transposition of doubles).
inline void transpose_lanes(const simd::vd* s, simd::vd* c) {
#if defined(__AVX512F__)
  simd::vd t[8], u[8];
  for (int k = 0; k < 8; k += 2) {  // lanes 2i of rows k, k + 1 interleaved; then lanes 2i + 1
    t[k] = __builtin_shufflevector(s[k], s[k + 1], 0, 8, 2, 10, 4, 12, 6, 14);
    t[k + 1] = __builtin_shufflevector(s[k], s[k + 1], 1, 9, 3, 11, 5, 13, 7, 15);
  }
  for (int k = 0; k < 8; k += 4) {  // u[k + m]: lanes m and m + 4 of rows k .. k + 3, for m = 0, 2, 1, 3
    u[k] = __builtin_shufflevector(t[k], t[k + 2], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 1] = __builtin_shufflevector(t[k], t[k + 2], 2, 3, 10, 11, 6, 7, 14, 15);
    u[k + 2] = __builtin_shufflevector(t[k + 1], t[k + 3], 0, 1, 8, 9, 4, 5, 12, 13);
    u[k + 3] = __builtin_shufflevector(t[k + 1], t[k + 3], 2, 3, 10, 11, 6, 7, 14, 15);
  }
  constexpr int lane_of[4] = {0, 2, 1, 3};
  for (int m = 0; m < 4; ++m) {
    c[lane_of[m]] = __builtin_shufflevector(u[m], u[4 + m], 0, 1, 2, 3, 8, 9, 10, 11);
    c[lane_of[m] + 4] = __builtin_shufflevector(u[m], u[4 + m], 4, 5, 6, 7, 12, 13, 14, 15);
  }
#else
  const simd::vd t0 = __builtin_shufflevector(s[0], s[1], 0, 4, 2, 6), t1 = __builtin_shufflevector(s[0], s[1], 1, 5, 3, 7),
                 t2 = __builtin_shufflevector(s[2], s[3], 0, 4, 2, 6), t3 = __builtin_shufflevector(s[2], s[3], 1, 5, 3, 7);
  c[0] = __builtin_shufflevector(t0, t2, 0, 1, 4, 5);
  c[1] = __builtin_shufflevector(t1, t3, 0, 1, 4, 5);
  c[2] = __builtin_shufflevector(t0, t2, 2, 3, 6, 7);
  c[3] = __builtin_shufflevector(t1, t3, 2, 3, 6, 7);
#endif
}
#endif

/// out[j] += hsum_double(s[j], 0) for j < n: the same additions in the same order (0 + lane 0 + lane 1 +
/// ...), L = W / 2 accumulators at a time with their lanes transposed, so that one vector addition
/// advances L sums (the scalar chains took a third of the encode at head width 16).
inline void add_lane_sums(const simd::vd* s, int n, double* out) {
  int j = 0;
#if defined(__AVX512F__) || defined(__AVX2__)
  constexpr int L = simd::W / 2;
  for (; j + L <= n; j += L) {
    simd::vd c[L], total{}, o;
    transpose_lanes(s + j, c);
    for (int i = 0; i < L; ++i) total += c[i];
    std::memcpy(&o, out + j, sizeof o);
    o += total;
    std::memcpy(out + j, &o, sizeof o);
  }
#endif
  for (; j < n; ++j) out[j] += hsum_double(s[j], simd::vd{});
}

/// The first n (< W) floats at p, zeros in the other lanes (reads nothing past p + n).
inline simd::vf load_first(const float* p, int n) {
  float lanes[simd::W] = {};
  for (int i = 0; i < n; ++i) lanes[i] = p[i];
  return simd::load(lanes);
}

/// The selection of the selecting encode (LatentEncodeArgs::select_S): the running top-S set of every
/// latent, the logit scale and the masks; `first_key` is the chunk's first key.
struct EncodeSelection {
  TopKeys* top = nullptr;  // [M]
  float scale = 1.0f;
  const index_t* mask_begin = nullptr;
  const index_t* mask_end = nullptr;
  index_t first_key = 0;
};

/// Pass 1 for MB latents: their logits over the chunk into `logits`, and
/// their maxima. Select: the logits are scaled after the dot product and then offered to the latents'
/// top-S from the stored rows (a pass of its own keeps the dot products' registers free), once the set is
/// full only where the chunk's largest logit beats its S-th best.
// (always_inline: with the selecting variants GCC would otherwise call these per chunk)
template <int EC, int MB, bool Select = false>
[[gnu::always_inline]] inline void encode_logits(const float* q, int m0, int E, const float* kt, int ld, int nvec,
                                                 int tail_lanes, float (*logits)[kMaxChunkRows], float* max_logit,
                                                 const EncodeSelection* selection = nullptr) {
  using namespace simd;
  const vi last = first_lanes(tail_lanes);
  vf lane_max[MB];
  [[maybe_unused]] vf best[MB];  // Select: each lane's largest logit, NaN skipped (vmax(l, best) keeps best)
  [[maybe_unused]] const vf scale = splat(Select ? selection->scale : 1.0f);
  for (int b = 0; b < MB; ++b) lane_max[b] = best[b] = splat(-__builtin_inff());
  for (int iv = 0; iv < nvec; ++iv) {
#pragma GCC unroll 4
    for (int b = 0; b < MB; ++b) {
      vf l = logit<EC>(q + (m0 + b) * E, kt + iv * W, ld, E);
      if constexpr (Select) l *= scale;
      if (tail_lanes && iv == nvec - 1) l = select(last, l, splat(-__builtin_inff()));
      store(logits[b] + iv * W, l);
      lane_max[b] = vmax(lane_max[b], l);
      if constexpr (Select) best[b] = vmax(l, best[b]);
    }
  }
  for (int b = 0; b < MB; ++b) max_logit[b] = hmax(lane_max[b]);
  if constexpr (Select) {
    const index_t n = static_cast<index_t>(nvec - (tail_lanes ? 1 : 0)) * W + tail_lanes;
    for (int b = 0; b < MB; ++b) {
      const int m = m0 + b;
      const index_t mb = selection->mask_begin ? selection->mask_begin[m] : 0;
      const index_t me = selection->mask_begin ? selection->mask_end[m] : 0;
      TopKeys& top = selection->top[m];
      if (top.count < top.S)  // filling: offer what reaches the chunk's floor
        offer_scores(logits[b], n, selection->first_key, mb, me, top,
                     selection_floor(logits[b], n, selection->first_key, mb, me, top));
      else if (greater_bits(best[b], splat(top.score[top.S - 1])))  // some logit beats the S-th best
        offer_scores(logits[b], n, selection->first_key, mb, me, top);
    }
  }
}

/// The chunk's softmax terms of MB latents in place of their logits (0 in the lanes past the tail). A
/// pass of its own: the exponentials are independent chains the core overlaps, where inside the
/// accumulation loop each would wait on its latency.
template <int MB>
[[gnu::always_inline]] inline void softmax_terms_in_place(float (*logits)[kMaxChunkRows], int nvec, int tail_lanes,
                                                          const std::int32_t* ref) {
  using namespace simd;
  const vi last = first_lanes(tail_lanes);
  for (int b = 0; b < MB; ++b) {
    const vf r = splat(static_cast<float>(ref[b]));
#pragma GCC unroll 2
    for (int iv = 0; iv < nvec; ++iv) {
      vf l = load(logits[b] + iv * W);
      const bool partial = tail_lanes && iv == nvec - 1;
      if (partial) l = select(last, l, splat(0.0f));  // finite values for the masked lanes
      vf p = softmax_term(l, r);
      if (partial) p = select(last, p, splat(0.0f));
      store(logits[b] + iv * W, p);
    }
  }
}

/// Pass 2 for MB latents (the logits become the terms): accumulate the chunk's terms relative to
/// 2^ref[b] into the double sums (vtd: the chunk's values, transposed and converted to double). Each
/// point's term is a float whose bits depend only on its logit; both halves of a vector go into the same
/// double lanes, so a latent needs E + 1 double registers and the value loads are shared by the MB latents.
template <int EC, int MB>
[[gnu::always_inline]] inline void encode_accumulate(float (*logits)[kMaxChunkRows], int E_runtime, const double* vtd,
                                                     int ld, int nvec, int tail_lanes, const std::int32_t* ref,
                                                     double* sum, double* weighted) {
  using namespace simd;
  constexpr int kE = EC ? EC : kMaxHeadDim;
  const int E = EC ? EC : E_runtime;
  vd S[MB], U[MB][kE];
  for (int b = 0; b < MB; ++b) {
    S[b] = vd{};
    for (int e = 0; e < E; ++e) U[b][e] = vd{};
  }
  softmax_terms_in_place<MB>(logits, nvec, tail_lanes, ref);
  for (int iv = 0; iv < nvec; ++iv) {
    vd pd[MB][2];
#pragma GCC unroll 4
    for (int b = 0; b < MB; ++b) {
      to_double(load(logits[b] + iv * W), pd[b]);
      S[b] += pd[b][0] + pd[b][1];
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
#pragma GCC unroll 16
      for (int e = 0; e < E; ++e) {
        vd v;
        std::memcpy(&v, vtd + e * ld + iv * W + h * (W / 2), sizeof v);
#pragma GCC unroll 4
        for (int b = 0; b < MB; ++b) U[b][e] += pd[b][h] * v;  // float x float is exact in double
      }
    }
  }
  for (int b = 0; b < MB; ++b) {
    sum[b] += hsum_double(S[b], vd{});
    add_lane_sums(U[b], E, weighted + b * E);
  }
}

/// Pass 2 of the selecting encode (LatentEncodeArgs::select_S): the same terms summed in float lanes
/// within the chunk (vt: the chunk's values transposed, float), each lane's sum then converted to double
/// and added to the double sums. A query's sums depend only on its logits and the chunking of the keys
/// (fixed by E and the key count), not on the other queries.
template <int EC, int MB>
[[gnu::always_inline]] inline void encode_accumulate_float(float (*logits)[kMaxChunkRows], int E_runtime,
                                                           const float* vt, int ld, int nvec, int tail_lanes,
                                                           const std::int32_t* ref, double* sum, double* weighted) {
  using namespace simd;
  constexpr int kE = EC ? EC : kMaxHeadDim;
  const int E = EC ? EC : E_runtime;
  vf S[MB], U[MB][kE];
  for (int b = 0; b < MB; ++b) {
    S[b] = splat(0.0f);
    for (int e = 0; e < E; ++e) U[b][e] = splat(0.0f);
  }
  softmax_terms_in_place<MB>(logits, nvec, tail_lanes, ref);
  for (int iv = 0; iv < nvec; ++iv) {
    vf p[MB];
#pragma GCC unroll 4
    for (int b = 0; b < MB; ++b) {
      p[b] = load(logits[b] + iv * W);
      S[b] += p[b];
    }
#pragma GCC unroll 16
    for (int e = 0; e < E; ++e) {
      const vf v = load(vt + e * ld + iv * W);
#pragma GCC unroll 4
      for (int b = 0; b < MB; ++b) U[b][e] += p[b] * v;
    }
  }
  for (int b = 0; b < MB; ++b) {
    vd d[2], lanes[kE];
    to_double(S[b], d);
    sum[b] += hsum_double(d[0], d[1]);
    for (int e = 0; e < E; ++e) {
      to_double(U[b][e], d);
      lanes[e] = d[0] + d[1];
    }
    add_lane_sums(lanes, E, weighted + b * E);
  }
}

template <int EC, int MB, bool Select>
inline void latent_encode_impl(const LatentEncodeArgs& a) {
  using namespace simd;
  constexpr bool FloatSums = Select;  // (the selecting encode sums in float lanes within each chunk)
  const int E = a.E;
  [[maybe_unused]] TopKeys top[Select ? kMaxSelectLatents : 1];
  [[maybe_unused]] EncodeSelection selection;
  if constexpr (Select) {
    for (int m = 0; m < a.M; ++m) {
      top[m].count = 0;
      top[m].S = a.select_S;
    }
    selection = {top, a.logit_scale, a.mask_begin, a.mask_end, 0};
  }
  // (double sums: vtd holds the chunk's values in double, so half the rows)
  const int rows_per_chunk = FloatSums ? chunk_rows(E) : static_cast<int>(simd::imax(chunk_rows(E) / 2, W));
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) double vtd[FloatSums ? 1 : kChunkFloats / 2 + kMaxHeadDim * W];
  [[maybe_unused]] alignas(64) float vtf[FloatSums ? kChunkFloats + kMaxHeadDim * W : 1];  // float sums: float values
  alignas(64) float logits[MB][kMaxChunkRows];
  float max_logit[MB];
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    if constexpr (FloatSums) {
      transpose_in(a.v + r0 * a.ldv, a.ldv, rows, E, vtf, ld);
    } else {
      transpose_in(a.v + r0 * a.ldv, a.ldv, rows, E, vtd, ld);
    }
    const int nvec = ld / W;
    const int tail = rows % W;
    selection.first_key = r0;
    for (int m0 = 0; m0 < a.M; m0 += MB) {
      const int group = static_cast<int>(simd::imin(MB, a.M - m0));
      if constexpr (MB == 1)  // (no remainder loop: GCC's -Warray-bounds misreads it under sanitizers)
        encode_logits<EC, 1, Select>(a.q, m0, E, kt, ld, nvec, tail, logits, max_logit, &selection);
      else if (group == MB)
        encode_logits<EC, MB, Select>(a.q, m0, E, kt, ld, nvec, tail, logits, max_logit, &selection);
      else
        for (int b = 0; b < group; ++b)
          encode_logits<EC, 1, Select>(a.q, m0 + b, E, kt, ld, nvec, tail, logits + b, max_logit + b, &selection);
      for (int b = 0; b < group; ++b) {
        const int m = m0 + b;
        // The chunk's reference: the exponent of its largest term (same arithmetic as the terms).
        const auto chunk_exp = static_cast<std::int32_t>(exp_exponent(splat(max_logit[b]))[0]);
        if (a.ref_exp[m] == kNoExponent || chunk_exp > a.ref_exp[m]) {
          if (a.ref_exp[m] != kNoExponent) {  // exact rescale of what is already summed
            const double scale = __builtin_ldexp(1.0, a.ref_exp[m] - chunk_exp);
            a.sum[m] *= scale;
            for (int e = 0; e < E; ++e) a.weighted[m * E + e] *= scale;
          }
          a.ref_exp[m] = chunk_exp;
        }
      }
      if constexpr (FloatSums) {
        if (group == MB)
          encode_accumulate_float<EC, MB>(logits, E, vtf, ld, nvec, tail, a.ref_exp + m0, a.sum + m0,
                                          a.weighted + m0 * E);
        else
          for (int b = 0; b < group; ++b)
            encode_accumulate_float<EC, 1>(logits + b, E, vtf, ld, nvec, tail, a.ref_exp + m0 + b, a.sum + m0 + b,
                                           a.weighted + (m0 + b) * E);
      } else if (group == MB) {
        encode_accumulate<EC, MB>(logits, E, vtd, ld, nvec, tail, a.ref_exp + m0, a.sum + m0, a.weighted + m0 * E);
      } else {
        for (int b = 0; b < group; ++b)
          encode_accumulate<EC, 1>(logits + b, E, vtd, ld, nvec, tail, a.ref_exp + m0 + b, a.sum + m0 + b,
                                   a.weighted + (m0 + b) * E);
      }
    }
  }
  if constexpr (Select)
    for (int m = 0; m < a.M; ++m) top[m].write_sorted(a.sel + static_cast<index_t>(m) * a.select_S);
}

// Latents per accumulate pass: MB (E + 1) double accumulators plus 2 MB converted terms must fit the
// register file (32 vectors with AVX-512, 16 otherwise: more spills them to the stack in the inner loop).
// The grouping changes no result: each latent's sums are the same operations in the same order.
#if defined(__AVX512F__)
inline constexpr int kEncodeGroup4 = 4, kEncodeGroup8 = 2;
#else
inline constexpr int kEncodeGroup4 = 2, kEncodeGroup8 = 1;
#endif

template <bool Select>
inline void latent_encode_width(const LatentEncodeArgs& a) {
  switch (a.E) {
    case 4: latent_encode_impl<4, kEncodeGroup4, Select>(a); break;
    case 8: latent_encode_impl<8, kEncodeGroup8, Select>(a); break;
    case 16: latent_encode_impl<16, 1, Select>(a); break;
    default: latent_encode_impl<0, 1, Select>(a); break;
  }
}

inline void latent_encode(const LatentEncodeArgs& a) {
  if (a.select_S > 0) latent_encode_width<true>(a);
  else latent_encode_width<false>(a);
}

// ---------------------------------------------------------------------------------------------------
// Decode.

/// t[0 .. W) *= the lanes of scale (W / 2 each).
inline void scale_doubles(double* t, const simd::vd* scale) {
  for (int h = 0; h < 2; ++h) {
    simd::vd v;
    std::memcpy(&v, t + h * (simd::W / 2), sizeof v);
    v *= scale[h];
    std::memcpy(t + h * (simd::W / 2), &v, sizeof v);
  }
}

/// t[0 .. W) += the lanes of x, converted to double.
inline void add_doubles(double* t, simd::vf x) {
  simd::vd d[2];
  to_double(x, d);
  for (int h = 0; h < 2; ++h) {
    simd::vd v;
    std::memcpy(&v, t + h * (simd::W / 2), sizeof v);
    v += d[h];
    std::memcpy(t + h * (simd::W / 2), &v, sizeof v);
  }
}

/// The decode's optional logit bias (LatentDecodeArgs): none, a latent-major tile, one value per latent.
enum class DecodeBias { none, tile, latent };

template <int EC, DecodeBias Bias>
inline void latent_decode_impl(const LatentDecodeArgs& a) {
  using namespace simd;
  constexpr int kE = EC ? EC : kMaxHeadDim;
  const int E = EC ? EC : a.E;
  const index_t ldq = a.ldq ? a.ldq : E, ldz = a.ldz ? a.ldz : E;
  const int rows_per_chunk = chunk_rows(E);
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) float yt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) float logits[kDecodeLatentBlock * W];
  const float neg_inf = -__builtin_inff();
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    if (a.k_scale != 1.0f)
      for (int i = 0; i < E * ld; i += W) store(kt + i, load(kt + i) * splat(a.k_scale));
    for (int iv = 0; iv < ld / W; ++iv) {
      const float* kv = kt + iv * W;
      [[maybe_unused]] const int valid = static_cast<int>(simd::imin(W, rows - iv * W));  // (tile bias: the tail)
      vf run_max = splat(neg_inf);
      vf S = splat(0.0f);
      vf Y[kE];
      for (int e = 0; e < E; ++e) Y[e] = splat(0.0f);
      // More than one block of latents: each block's sums in float, added into per-lane double totals
      // (rescaled exactly as the maximum grows), so that float rounding grows with the block, not with M.
      const bool blocks = a.M > kDecodeLatentBlock;
      [[maybe_unused]] alignas(64) double total[(kE + 1) * W];  // the sum, then the E weighted sums
      if (blocks)
        for (int j = 0; j < (E + 1) * W; ++j) total[j] = 0.0;
      for (int m0 = 0; m0 < a.M; m0 += kDecodeLatentBlock) {
        const int mb = static_cast<int>(simd::imin(kDecodeLatentBlock, a.M - m0));
        vf block_max = splat(neg_inf);
        for (int m = 0; m < mb; ++m) {
          vf l = logit<EC>(a.q + (m0 + m) * ldq, kv, ld, E);
          if constexpr (Bias == DecodeBias::tile) {
            const float* row = a.bias + (m0 + m) * a.ld_bias + r0 + iv * W;
            l += splat(a.bias_scale) * (valid < W ? load_first(row, valid) : load(row));
          } else if constexpr (Bias == DecodeBias::latent) {
            l += splat(a.latent_bias[m0 + m]);
          }
          store(logits + m * W, l);
          block_max = vmax(block_max, l);
        }
        if (m0 > 0) {  // a later block: the totals rescaled per lane to the new maximum
          const vf new_max = vmax(run_max, block_max);
          vd scale[2];
          to_double(exp_nonpositive(run_max - new_max), scale);
          for (int j = 0; j < (E + 1) * W; j += W) scale_doubles(total + j, scale);
          S = splat(0.0f);
          for (int e = 0; e < E; ++e) Y[e] = splat(0.0f);
          run_max = new_max;
        } else {
          run_max = block_max;
        }
        // The terms first, then their weighted sums: the exponentials of different latents are
        // independent chains the core overlaps (one loop would wait on each one's latency); the same
        // operations in the same latent order either way.
#pragma GCC unroll 2
        for (int m = 0; m < mb; ++m) {
          const vf p = exp_nonpositive(load(logits + m * W) - run_max);
          S += p;
          store(logits + m * W, p);
        }
        for (int m = 0; m < mb; ++m) {
          const vf p = load(logits + m * W);
          const float* zm = a.z + (m0 + m) * ldz;
#pragma GCC unroll 16
          for (int e = 0; e < E; ++e) Y[e] += p * splat(zm[e]);
        }
        if (blocks) {
          add_doubles(total, S);
          for (int e = 0; e < E; ++e) add_doubles(total + (e + 1) * W, Y[e]);
        }
      }
      if (blocks) {
        for (int e = 0; e < E; ++e)
          for (int i = 0; i < W; ++i) yt[e * ld + iv * W + i] = static_cast<float>(total[(e + 1) * W + i] / total[i]);
      } else {
        const vf inv = splat(1.0f) / S;
        for (int e = 0; e < E; ++e) store(yt + e * ld + iv * W, Y[e] * inv);
      }
    }
    transpose_out(yt, ld, rows, E, a.y + r0 * a.ldy, a.ldy);
  }
}

template <int EC>
inline void latent_decode_with_bias(const LatentDecodeArgs& a) {
  if (a.bias) latent_decode_impl<EC, DecodeBias::tile>(a);
  else if (a.latent_bias) latent_decode_impl<EC, DecodeBias::latent>(a);
  else latent_decode_impl<EC, DecodeBias::none>(a);
}

inline void latent_decode(const LatentDecodeArgs& a) {
  switch (a.E) {
    case 4: latent_decode_with_bias<4>(a); break;
    case 8: latent_decode_with_bias<8>(a); break;
    case 16: latent_decode_with_bias<16>(a); break;
    default: latent_decode_with_bias<0>(a); break;
  }
}

// ---------------------------------------------------------------------------------------------------
// Ball attention (BallAttentionArgs): per head, the decode with the ball's queries as its points and
// the ball's keys and values as its latents; the symmetric bias tile read key-major.

inline void ball_attention(const BallAttentionArgs& a) {
  for (int h = 0; h < a.heads; ++h) {
    const index_t c0 = static_cast<index_t>(h) * a.E;
    LatentDecodeArgs d;
    d.q = a.k + c0;
    d.ldq = a.ld;
    d.z = a.v + c0;
    d.ldz = a.ld;
    d.M = a.m;
    d.E = a.E;
    d.k = a.q + c0;
    d.ldk = a.ld;
    d.k_scale = a.scale;
    d.y = a.out + c0;
    d.ldy = a.ldo;
    d.rows = a.m;
    if (a.sigma) {
      d.bias = a.bias;
      d.ld_bias = a.ld_bias;
      d.bias_scale = a.sigma[h];
    }
    latent_decode(d);
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
