// Latent (FLARE) attention for one head: encode (softmax over the points, streamed) and decode (softmax
// over the latents), plus the two passes of the reproducible encode. Points are processed W at a time
// (one per SIMD lane) after transposing a chunk of the head's k/v columns; the latent queries are
// broadcast from memory. A point's logits, exponentials and weights are computed by the same arithmetic
// in every lane, chunk and call.
#pragma once


#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline constexpr int kMaxHeadDim = 64;
inline constexpr int kChunkFloats = 4096;  // per transposed operand: E x chunk <= 16 KiB
inline constexpr int kDecodeLatentBlock = 256;

/// Points per chunk for head width E: a multiple of W with E * chunk <= kChunkFloats.
inline int chunk_rows(int E) {
  const int rows = kChunkFloats / static_cast<int>(simd::imax(E, 1)) / simd::W * simd::W;
  return static_cast<int>(simd::imax(rows, simd::W));
}

/// dst[e * ld + i] = src[i * lds + e] for i < rows; zero for rows <= i < padded.
inline void transpose_in(const float* src, index_t lds, int rows, int E, float* dst, int ld) {
  const int padded = static_cast<int>(round_up(rows, simd::W));
  for (int e = 0; e < E; ++e) {
    float* d = dst + e * ld;
    for (int i = 0; i < rows; ++i) d[i] = src[i * lds + e];
    for (int i = rows; i < padded; ++i) d[i] = 0.0f;
  }
}

inline void transpose_out(const float* src, int ld, int rows, int E, float* dst, index_t ldd) {
  for (int i = 0; i < rows; ++i)
    for (int e = 0; e < E; ++e) dst[i * ldd + e] = src[e * ld + i];
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
// Encode, streaming form.

template <int EC, int MB>
inline void encode_latent_group(const float* q, int m0, int E_runtime, const float* kt, const float* vt, int ld,
                                int nvec, int tail_lanes, float* running_max, float* sum, float* weighted) {
  using namespace simd;
  constexpr int kE = EC ? EC : kMaxHeadDim;
  const int E = EC ? EC : E_runtime;
  const float neg_inf = -__builtin_inff();
  float mu[MB], mu_start[MB];
  vf S[MB], U[MB][kE];
  for (int b = 0; b < MB; ++b) {
    mu[b] = mu_start[b] = running_max[m0 + b];
    S[b] = splat(0.0f);
    for (int e = 0; e < E; ++e) U[b][e] = splat(0.0f);
  }
  const vi last = first_lanes(tail_lanes);
  for (int iv = 0; iv < nvec; ++iv) {
    const float* kv = kt + iv * W;
    const float* vv = vt + iv * W;
    vf l[MB];
#pragma GCC unroll 4
    for (int b = 0; b < MB; ++b) l[b] = logit<EC>(q + (m0 + b) * E, kv, ld, E);
    if (tail_lanes && iv == nvec - 1)
      for (int b = 0; b < MB; ++b) l[b] = select(last, l[b], splat(neg_inf));
#pragma GCC unroll 4
    for (int b = 0; b < MB; ++b) {
      if (any(l[b] > splat(mu[b]))) {  // a new maximum: rescale what was accumulated (rare)
        const float m_new = fmaxf(mu[b], hmax(l[b]));
        const vf scale = splat(__builtin_expf(mu[b] - m_new));
        S[b] *= scale;
        for (int e = 0; e < E; ++e) U[b][e] *= scale;
        mu[b] = m_new;
      }
      const vf p = exp(l[b] - splat(mu[b]));
      S[b] += p;
#pragma GCC unroll 16
      for (int e = 0; e < E; ++e) U[b][e] += p * load(vv + e * ld);
    }
  }
  for (int b = 0; b < MB; ++b) {
    const int m = m0 + b;
    // Earlier chunks of this call were accumulated relative to mu_start.
    const float carry = mu[b] == mu_start[b] ? 1.0f : __builtin_expf(mu_start[b] - mu[b]);
    running_max[m] = mu[b];
    sum[m] = sum[m] * carry + hsum(S[b]);
    for (int e = 0; e < E; ++e) weighted[m * E + e] = weighted[m * E + e] * carry + hsum(U[b][e]);
  }
}

template <int EC, int MB>
inline void latent_encode_impl(const LatentEncodeArgs& a) {
  const int E = a.E;
  const int rows_per_chunk = chunk_rows(E);
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * simd::W];
  alignas(64) float vt[kChunkFloats + kMaxHeadDim * simd::W];
  for (int m = 0; m < a.M; ++m) a.sum[m] = 0.0f;
  for (int i = 0; i < a.M * E; ++i) a.weighted[i] = 0.0f;
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, simd::W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    transpose_in(a.v + r0 * a.ldv, a.ldv, rows, E, vt, ld);
    const int nvec = ld / simd::W;
    const int tail = rows % simd::W;
    int m0 = 0;
    for (; m0 + MB <= a.M; m0 += MB)
      encode_latent_group<EC, MB>(a.q, m0, E, kt, vt, ld, nvec, tail, a.running_max, a.sum, a.weighted);
    for (; m0 < a.M; ++m0)
      encode_latent_group<EC, 1>(a.q, m0, E, kt, vt, ld, nvec, tail, a.running_max, a.sum, a.weighted);
  }
}

inline void latent_encode(const LatentEncodeArgs& a) {
  switch (a.E) {
    case 4: latent_encode_impl<4, 4>(a); break;
    case 8: latent_encode_impl<8, 2>(a); break;
    case 16: latent_encode_impl<16, 1>(a); break;
    default: latent_encode_impl<0, 1>(a); break;
  }
}

// ---------------------------------------------------------------------------------------------------
// Decode.

template <int EC>
inline void latent_decode_impl(const LatentDecodeArgs& a) {
  using namespace simd;
  constexpr int kE = EC ? EC : kMaxHeadDim;
  const int E = EC ? EC : a.E;
  const int rows_per_chunk = chunk_rows(E);
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) float yt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) float logits[kDecodeLatentBlock * W];
  const float neg_inf = -__builtin_inff();
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    for (int iv = 0; iv < ld / W; ++iv) {
      const float* kv = kt + iv * W;
      vf run_max = splat(neg_inf);
      vf S = splat(0.0f);
      vf Y[kE];
      for (int e = 0; e < E; ++e) Y[e] = splat(0.0f);
      for (int m0 = 0; m0 < a.M; m0 += kDecodeLatentBlock) {
        const int mb = static_cast<int>(simd::imin(kDecodeLatentBlock, a.M - m0));
        vf block_max = splat(neg_inf);
        for (int m = 0; m < mb; ++m) {
          const vf l = logit<EC>(a.q + (m0 + m) * E, kv, ld, E);
          store(logits + m * W, l);
          block_max = vmax(block_max, l);
        }
        if (m0 > 0) {  // more than kDecodeLatentBlock latents: per-lane online rescale
          const vf new_max = vmax(run_max, block_max);
          const vf scale = exp(run_max - new_max);
          S *= scale;
          for (int e = 0; e < E; ++e) Y[e] *= scale;
          run_max = new_max;
        } else {
          run_max = block_max;
        }
        for (int m = 0; m < mb; ++m) {
          const vf p = exp(load(logits + m * W) - run_max);
          S += p;
          const float* zm = a.z + (m0 + m) * E;
#pragma GCC unroll 16
          for (int e = 0; e < E; ++e) Y[e] += p * splat(zm[e]);
        }
      }
      const vf inv = splat(1.0f) / S;
      for (int e = 0; e < E; ++e) store(yt + e * ld + iv * W, Y[e] * inv);
    }
    transpose_out(yt, ld, rows, E, a.y + r0 * a.ldy, a.ldy);
  }
}

inline void latent_decode(const LatentDecodeArgs& a) {
  switch (a.E) {
    case 4: latent_decode_impl<4>(a); break;
    case 8: latent_decode_impl<8>(a); break;
    case 16: latent_decode_impl<16>(a); break;
    default: latent_decode_impl<0>(a); break;
  }
}

// ---------------------------------------------------------------------------------------------------
// Reproducible encode: pass 1 (maximum logit per latent) and pass 2 (exact fixed-point sums).
// Both passes use logit<0>, so the logits of pass 2 are bit-identical to those whose maximum was taken.

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

typedef float vfh __attribute__((vector_size(simd::W * 2)));

/// Adds the fixed-point images (hi, lo) of the W/2 terms t to the lane accumulators.
inline void quantize_add(simd::vd t, double hi_mult, double lo_mult, simd::vl& hi, simd::vl& lo) {
  using namespace simd;
  const vd scaled = t * hi_mult;  // exact: power of two
  const vl h = __builtin_convertvector(scaled, vl);
  const vd rem = scaled - __builtin_convertvector(h, vd);  // exact fractional part, |rem| < 1
  hi += h;
  lo += __builtin_convertvector(rem * lo_mult, vl);
}

inline std::int64_t lane_sum(simd::vl v) {
  std::int64_t s = 0;
  for (int i = 0; i < simd::W / 2; ++i) s += v[i];
  return s;
}

inline void latent_encode_exact(const LatentExactArgs& a) {
  using namespace simd;
  const int E = a.E;
  const int rows_per_chunk = chunk_rows(E);
  alignas(64) float kt[kChunkFloats + kMaxHeadDim * W];
  alignas(64) float vt[kChunkFloats + kMaxHeadDim * W];
  const double s_hi = __builtin_ldexp(1.0, a.sum_scale.hi_bits), s_lo = __builtin_ldexp(1.0, a.sum_scale.lo_bits);
  const double v_hi = __builtin_ldexp(1.0, a.value_scale.hi_bits), v_lo = __builtin_ldexp(1.0, a.value_scale.lo_bits);
  const float neg_inf = -__builtin_inff();
  for (index_t r0 = 0; r0 < a.rows; r0 += rows_per_chunk) {
    const int rows = static_cast<int>(simd::imin(rows_per_chunk, a.rows - r0));
    const int ld = static_cast<int>(round_up(rows, W));
    transpose_in(a.k + r0 * a.ldk, a.ldk, rows, E, kt, ld);
    transpose_in(a.v + r0 * a.ldv, a.ldv, rows, E, vt, ld);
    const int nvec = ld / W;
    const vi last = first_lanes(rows % W);
    for (int m = 0; m < a.M; ++m) {
      vl acc[kMaxHeadDim + 1][2][2];  // [channel][hi/lo][half]
      for (int c = 0; c <= E; ++c)
        for (int h = 0; h < 2; ++h) acc[c][0][h] = acc[c][1][h] = vl{};
      const vf ref = splat(a.ref_max[m]);
      for (int iv = 0; iv < nvec; ++iv) {
        vf l = logit<0>(a.q + m * E, kt + iv * W, ld, E);
        if (rows % W && iv == nvec - 1) l = select(last, l, splat(neg_inf));
        const vf p = exp(l - ref);
        vfh ph[2];
        std::memcpy(ph, &p, sizeof p);
        for (int h = 0; h < 2; ++h) {
          const vd pd = __builtin_convertvector(ph[h], vd);
          quantize_add(pd, s_hi, s_lo, acc[0][0][h], acc[0][1][h]);
          for (int e = 0; e < E; ++e) {
            vfh vh[2];
            const vf ve = load(vt + e * ld + iv * W);
            std::memcpy(vh, &ve, sizeof ve);
            const vd prod = pd * __builtin_convertvector(vh[h], vd);  // exact: 24 x 24 bits
            quantize_add(prod, v_hi, v_lo, acc[1 + e][0][h], acc[1 + e][1][h]);
          }
        }
      }
      for (int c = 0; c <= E; ++c) {
        std::int64_t* out = a.acc + (static_cast<index_t>(m) * (E + 1) + c) * 2;
        out[0] += lane_sum(acc[c][0][0]) + lane_sum(acc[c][0][1]);
        out[1] += lane_sum(acc[c][1][0]) + lane_sum(acc[c][1][1]);
      }
    }
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
