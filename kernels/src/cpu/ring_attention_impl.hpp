// Ring attention (RingAttentionArgs): NeighborhoodAttentionS2's softmax for W consecutive output
// longitudes at a time, one query per SIMD lane. Because the neighbour list of output longitude wo is
// the list of longitude 0 shifted by wo ring positions, one neighbour entry is, for the W queries, W
// consecutive positions of a transposed key/value row: the logits of an entry are E fused multiply-adds
// of contiguous vectors, with no gather and no mask. The softmax uses the streaming encode's terms
// (softmax_term, a power-of-two reference per query) chunk by chunk over the entries (kRingChunk): pass 1
// the chunk's logits and per-lane maxima, then an exact rescale of the double sums when a reference
// grows, pass 2 the terms times the quadrature weight and their float sum, pass 3 the weighted values
// summed in float registers (one fused multiply-add per value and lane pair); each chunk's float sums
// are added to the double sums. A list of one chunk (most rows of a default-cutoff neighbourhood) skips
// the double sums: its quotient is formed in float.
#pragma once

#include "latent_impl.hpp"
#include "transpose_impl.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline constexpr int kRingChunk = 32;  // entries per chunk: float sums within a chunk, double across chunks

/// W/2 doubles at p.
inline simd::vd load_double(const double* p) {
  simd::vd v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// 2^d for integer-valued d <= 0, exactly (0 below the normal double range).
inline simd::vd power_of_two(simd::vd d) {
  using namespace simd;
  const vd floor = vd{} - 1023.0;
  const vd clamped = d > floor ? d : floor;
  const vl biased = __builtin_convertvector(clamped, vl) + 1023;
  return __builtin_bit_cast(vd, biased << 52);
}

/// The double sums at acc (W lanes: two halves of W/2) plus the float lanes x, or set to x when first.
inline void add_to_double(double* acc, simd::vf x, bool first) {
  using namespace simd;
  vd h[2];
  to_double(x, h);
  for (int i = 0; i < 2; ++i) {
    if (!first) h[i] += load_double(acc + i * (W / 2));
    std::memcpy(acc + i * (W / 2), &h[i], sizeof(vd));
  }
}

/// Pass 1 for entries [n0, n0 + chunk) and the W queries of ring position `base` on (channel-major in qt):
/// the logits (one fused multiply-add chain in channel order per entry) into `logits`, each entry's value
/// offset into value_at; returns the per-lane maxima.
template <int EK>
inline simd::vf ring_logits(const RingAttentionArgs& a, const float* qt, int base, index_t n0, int chunk,
                            float* logits, index_t* value_at) {
  using namespace simd;
  const int ek = EK ? EK : a.ek;
  vf lane_max = splat(-__builtin_inff());
  for (int j = 0; j < chunk; ++j) {
    const index_t n = n0 + j;
    int pos = a.ring_pos[n] + base;
    if (pos >= a.ring) pos -= a.ring;
    value_at[j] = a.value_base[n] + pos;
    const float* k = a.kt + a.key_base[n] + pos;
    vf l = load(qt) * load(k);
#pragma GCC unroll 32
    for (int e = 1; e < ek; ++e) l += load(qt + e * W) * load(k + e * a.ld_ring);
    store(logits + j * W, l);
    lane_max = vmax(lane_max, l);
  }
  return lane_max;
}

template <int EK, int EV>
inline void ring_attention_impl(const RingAttentionArgs& a) {
  using namespace simd;
  constexpr int kHalf = W / 2;
  constexpr int kGroup = W == 16 ? 16 : 8;  // value channels accumulated in registers at a time
  const int ek = EK ? EK : a.ek, ev = EV ? EV : a.ev;
  alignas(64) float qt[kMaxHeadDim * W];
  alignas(64) float logits[kRingChunk * W];       // pass 1's logits, then pass 2's terms in their place
  alignas(64) double acc[(kMaxHeadDim + 1) * W];  // channel c (0: the sum, 1 + e: value e), lane i at c*W + i
  index_t value_at[kRingChunk];
  for (int i0 = 0; i0 < a.count; i0 += W) {
    const int lanes = static_cast<int>(imin(W, a.count - i0));
    // The queries channel-major (lanes past `count` zero).
    transpose_block(a.q + i0 * a.ldq, a.ldq, qt, W, lanes, ek);
    if (lanes < W)
      for (int e = 0; e < ek; ++e)
        for (int i = lanes; i < W; ++i) qt[e * W + i] = 0.0f;
    const int base = a.first + i0;
    if (a.entries > 0 && a.entries <= kRingChunk) {
      // One chunk: its float sums are the sums; out = weighted * (1 / sum) in float.
      const int chunk = static_cast<int>(a.entries);
      const vf ref = exp_exponent(ring_logits<EK>(a, qt, base, 0, chunk, logits, value_at));
      vf S = splat(0.0f);
      for (int j = 0; j < chunk; ++j) {
        const vf t = softmax_term(load(logits + j * W), ref) * splat(a.weight[j]);
        S += t;
        store(logits + j * W, t);
      }
      const vf inv = splat(1.0f) / S;
      for (int e0 = 0; e0 < ev; e0 += kGroup) {
        const int group = static_cast<int>(imin(kGroup, ev - e0));
        vf U[kGroup];
        for (int g = 0; g < kGroup; ++g) U[g] = splat(0.0f);
        for (int j = 0; j < chunk; ++j) {
          const vf t = load(logits + j * W);
          const float* v = a.vt + value_at[j] + e0 * a.ld_ring;
          if (EV != 0 && group == kGroup) {
#pragma GCC unroll 16
            for (int g = 0; g < kGroup; ++g) U[g] += t * load(v + g * a.ld_ring);
          } else {
            for (int g = 0; g < group; ++g) U[g] += t * load(v + g * a.ld_ring);
          }
        }
        for (int g = 0; g < group; ++g) store(qt + (e0 + g) * W, U[g] * inv);
      }
      transpose_block(qt, W, a.out + i0 * a.ldo, a.ldo, ev, lanes);
      continue;
    }
    if (a.entries == 0)
      for (int c = 0; c < (1 + ev) * W; ++c) acc[c] = 0.0;
    vf ref = splat(0.0f);
    for (index_t n0 = 0; n0 < a.entries; n0 += kRingChunk) {
      const int chunk = static_cast<int>(imin(kRingChunk, a.entries - n0));
      const bool first_chunk = n0 == 0;
      // Pass 1: logits and their per-lane maxima.
      const vf lane_max = ring_logits<EK>(a, qt, base, n0, chunk, logits, value_at);
      // References: the exponent of each lane's largest term; exact rescale of the sums when one grows.
      const vf chunk_ref = exp_exponent(lane_max);
      if (first_chunk) {
        ref = chunk_ref;
      } else {
        const vf grown = vmax(ref, chunk_ref);
        if (any(grown > ref)) {
          vd shift[2], scale[2];
          to_double(ref - grown, shift);
          scale[0] = power_of_two(shift[0]);
          scale[1] = power_of_two(shift[1]);
          for (int c = 0; c <= ev; ++c)
            for (int h = 0; h < 2; ++h) {
              vd x;
              std::memcpy(&x, acc + c * W + h * kHalf, sizeof x);
              x *= scale[h];
              std::memcpy(acc + c * W + h * kHalf, &x, sizeof x);
            }
        }
        ref = grown;
      }
      // Pass 2: the terms times the entry's quadrature weight (rounded to float), summed in float.
      vf S = splat(0.0f);
      for (int j = 0; j < chunk; ++j) {
        const vf t = softmax_term(load(logits + j * W), ref) * splat(a.weight[n0 + j]);
        S += t;
        store(logits + j * W, t);
      }
      add_to_double(acc, S, first_chunk);
      // Pass 3: the weighted values summed in float, kGroup channels at a time, then added in double.
      for (int e0 = 0; e0 < ev; e0 += kGroup) {
        const int group = static_cast<int>(imin(kGroup, ev - e0));
        vf U[kGroup];
        for (int g = 0; g < kGroup; ++g) U[g] = splat(0.0f);
        for (int j = 0; j < chunk; ++j) {
          const vf t = load(logits + j * W);
          const float* v = a.vt + value_at[j] + e0 * a.ld_ring;
          if (EV != 0 && group == kGroup) {
#pragma GCC unroll 16
            for (int g = 0; g < kGroup; ++g) U[g] += t * load(v + g * a.ld_ring);
          } else {
            for (int g = 0; g < group; ++g) U[g] += t * load(v + g * a.ld_ring);
          }
        }
        for (int g = 0; g < group; ++g) add_to_double(acc + (1 + e0 + g) * W, U[g], first_chunk);
      }
    }
    // out = weighted * (1 / sum) per lane (no entries: 0 * inf = NaN, as torch-harmonics' 0 / 0), staged
    // channel-major in `qt` (free until the next block of queries), then written row by row.
    vd inv[2];
    for (int h = 0; h < 2; ++h) {
      std::memcpy(&inv[h], acc + h * kHalf, sizeof(vd));
      inv[h] = 1.0 / inv[h];
    }
    for (int e = 0; e < ev; ++e)
      for (int h = 0; h < 2; ++h) {
        vd x;
        std::memcpy(&x, acc + (1 + e) * W + h * kHalf, sizeof x);
        const vfh y = __builtin_convertvector(x * inv[h], vfh);
        std::memcpy(qt + e * W + h * kHalf, &y, sizeof y);
      }
    transpose_block(qt, W, a.out + i0 * a.ldo, a.ldo, ev, lanes);
  }
}

inline void ring_attention(const RingAttentionArgs& a) {
  if (a.ek == a.ev) {
    switch (a.ek) {
      case 4: ring_attention_impl<4, 4>(a); return;
      case 8: ring_attention_impl<8, 8>(a); return;
      case 16: ring_attention_impl<16, 16>(a); return;
      case 32: ring_attention_impl<32, 32>(a); return;
      default: break;
    }
  }
  ring_attention_impl<0, 0>(a);
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
