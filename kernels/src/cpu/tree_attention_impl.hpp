// Sequoia's tree attention (TreeAttentionArgs, surrogate/kernels/tree_attention.hpp): the scalar
// definition's double arithmetic operation for operation, with channels in vector lanes, so the result is
// bitwise the same on every instruction set and on the CUDA kernel. Products of two floats are exact in
// double, so a fused multiply-add changes nothing there; the two products that are rounded (tau * count in
// float, alpha (v + pi)) go through an empty asm that the compiler cannot fuse into the next addition.
#pragma once

#include <cmath>

#include "simd_double.hpp"
#include "surrogate/kernels/tree_attention.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

namespace tree_attention_detail {

using simd::vd;
using simd::WD;
typedef float vfd __attribute__((vector_size(WD * 4)));  // WD floats, converted to a vd
typedef double vd4 __attribute__((vector_size(32)));      // the logit's four partial sums
typedef float vf4 __attribute__((vector_size(16)));
using simd::rounded;

// (GCC 12 splits __builtin_convertvector into halves here: one vcvtps2pd with the intrinsics)
inline vd load_floats(const float* p) {
#if defined(__AVX512F__)
  return _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(p));  // (maskz: GCC 12's -Wmaybe-uninitialized)
#elif defined(__AVX2__)
  return _mm256_cvtps_pd(_mm_loadu_ps(p));
#else
  vfd f;
  std::memcpy(&f, p, sizeof f);
  return __builtin_convertvector(f, vd);
#endif
}
inline vd4 load_floats4(const float* p) {
#if defined(__AVX2__)
  return _mm256_cvtps_pd(_mm_loadu_ps(p));
#else
  vf4 f;
  std::memcpy(&f, p, sizeof f);
  return __builtin_convertvector(f, vd4);
#endif
}
/// Each lane rounded to float (as stored by the scalar definition), back in double.
inline vd to_float_and_back(vd v) {
#if defined(__AVX512F__)
  return _mm512_maskz_cvtps_pd(0xFF, _mm512_maskz_cvtpd_ps(0xFF, v));
#elif defined(__AVX2__)
  return _mm256_cvtps_pd(_mm256_cvtpd_ps(v));
#else
  return __builtin_convertvector(__builtin_convertvector(v, vfd), vd);
#endif
}
inline vd4 load4(const double* p) {
  vd4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The positional MLP's hidden layer relu(BN(W1 d + b1)), d = pa - p_key, for the edges keys[0 .. n),
/// n <= 4, edge t in lane t (the other lanes unused): each lane the scalar operations, d in float, the sums
/// in double, each layer rounded to float.
inline void pe_hidden4(const TreeAttentionArgs& a, const float* pa, const std::int64_t* keys, int n, vd4 h[3]) {
  vd4 d[3];
  for (int i = 0; i < 3; ++i) {
    vf4 pk = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int t = 0; t < n; ++t) pk[t] = a.key_positions[keys[t] * 3 + i];
    d[i] = __builtin_convertvector(vf4{pa[i], pa[i], pa[i], pa[i]} - pk, vd4);
  }
  for (int o = 0; o < 3; ++o) {
    const double b = a.pe_b1[o], scale = a.bn_scale[o], shift = a.bn_shift[o];
    vd4 s = vd4{b, b, b, b};
    for (int i = 0; i < 3; ++i) {
      const double w = a.pe_w1[o * 3 + i];
      s = s + vd4{w, w, w, w} * d[i];
    }
    const vd4 x = __builtin_convertvector(__builtin_convertvector(s, vf4), vd4);
    const vf4 y = __builtin_convertvector(x * vd4{scale, scale, scale, scale} + vd4{shift, shift, shift, shift}, vf4);
    const vf4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
    h[o] = __builtin_convertvector(y < zero ? zero : y, vd4);  // relu: std::max(y, 0.0f), -0 and NaN kept
  }
}

/// pi = W3 h + b3 for one edge's hidden layer h: e values, each rounded to float as the CPU's
/// PositionalMlp stores it.
inline void pe_out(const TreeAttentionArgs& a, double h0, double h1, double h2, double* pi) {
  const int e = a.e;
  const double *w0 = a.pe_w3, *w1 = w0 + e, *w2 = w1 + e;
  int c = 0;
  for (; c + WD <= e; c += WD) {
    vd p = simd::loadd(a.pe_b3 + c) + simd::loadd(w0 + c) * simd::splatd(h0);
    p = p + simd::loadd(w1 + c) * simd::splatd(h1);
    p = p + simd::loadd(w2 + c) * simd::splatd(h2);
    simd::stored(pi + c, to_float_and_back(p));
  }
  for (; c < e; ++c) pi[c] = static_cast<double>(static_cast<float>(a.pe_b3[c] + w0[c] * h0 + w1[c] * h1 + w2[c] * h2));
}

/// The logits of heads [h0, h0 + G) for one edge: per head sum_c (q_c k_c + pi_c) in four partial sums
/// (lane t takes c = t mod 4, the remainder channels lane 0), (s0 + s1) + (s2 + s3), over denom. The G
/// heads' sums are independent chains; the divisions are one vector division.
template <int G>
[[gnu::always_inline]] inline void head_logits(const double* q, const float* k, const double* pi, int e, double denom,
                                               double* out) {
  vd4 s[G];
  for (int g = 0; g < G; ++g) s[g] = vd4{0.0, 0.0, 0.0, 0.0};
  int c = 0;
  for (; c + 4 <= e; c += 4) {
    const vd4 p = load4(pi + c);
    for (int g = 0; g < G; ++g) s[g] = s[g] + (load4(q + g * e + c) * load_floats4(k + g * e + c) + p);
  }
  const vd4 divisor = {denom, denom, denom, denom};
  if constexpr (G == 4) {
    if (c == e) {  // lane g of t_l = s[g][l] (a 4 x 4 transposition), then the four heads' sums at once
      const vd4 u0 = __builtin_shufflevector(s[0], s[1], 0, 4, 2, 6), u1 = __builtin_shufflevector(s[0], s[1], 1, 5, 3, 7),
                u2 = __builtin_shufflevector(s[2], s[3], 0, 4, 2, 6), u3 = __builtin_shufflevector(s[2], s[3], 1, 5, 3, 7);
      const vd4 t0 = __builtin_shufflevector(u0, u2, 0, 1, 4, 5), t1 = __builtin_shufflevector(u1, u3, 0, 1, 4, 5),
                t2 = __builtin_shufflevector(u0, u2, 2, 3, 6, 7), t3 = __builtin_shufflevector(u1, u3, 2, 3, 6, 7);
      const vd4 l = ((t0 + t1) + (t2 + t3)) / divisor;
      std::memcpy(out, &l, sizeof l);
      return;
    }
  }
  double r[4] = {0.0, 0.0, 0.0, 0.0};
  for (int g = 0; g < G; ++g) {
    double s0 = s[g][0];
    for (int t = c; t < e; ++t) s0 += q[g * e + t] * static_cast<double>(k[g * e + t]) + pi[t];
    r[g] = (s0 + s[g][1]) + (s[g][2] + s[g][3]);
  }
  const vd4 l = load4(r) / divisor;
  for (int g = 0; g < G; ++g) out[g] = l[g];
}

/// The softmax weights over a query's edges, in place of the logits (count x heads): four heads at a time
/// in the lanes of one vector, each lane the scalar loop's operations (max as mx < l ? l : mx, std::exp,
/// the sum in edge order, one division per weight).
inline void softmax_weights(double* logit, std::int64_t count, int heads) {
  int h = 0;
  for (; h + 4 <= heads; h += 4) {
    vd4 mx = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, sum = {0.0, 0.0, 0.0, 0.0};
    for (std::int64_t j = 0; j < count; ++j) {
      const vd4 l = load4(logit + j * heads + h);
      mx = mx < l ? l : mx;
    }
    for (std::int64_t j = 0; j < count; ++j) {
      double* lj = logit + j * heads + h;
      const vd4 x = load4(lj) - mx;
      const vd4 w = {std::exp(x[0]), std::exp(x[1]), std::exp(x[2]), std::exp(x[3])};
      sum = sum + w;
      std::memcpy(lj, &w, sizeof w);
    }
    for (std::int64_t j = 0; j < count; ++j) {
      const vd4 w = load4(logit + j * heads + h) / sum;
      std::memcpy(logit + j * heads + h, &w, sizeof w);
    }
  }
  for (; h < heads; ++h) {
    double mx = -INFINITY;
    for (std::int64_t j = 0; j < count; ++j) mx = mx < logit[j * heads + h] ? logit[j * heads + h] : mx;
    double sum = 0.0;
    for (std::int64_t j = 0; j < count; ++j) {
      double& l = logit[j * heads + h];
      l = std::exp(l - mx);
      sum += l;
    }
    for (std::int64_t j = 0; j < count; ++j) logit[j * heads + h] /= sum;
  }
}

/// Channels [c, c + B WD) of one head's output: sum_j alpha_j (v_j + pi_j) from 0 in edge order, B vectors
/// held in registers over the edges, then rounded to float.
template <int B>
[[gnu::always_inline]] inline void weighted_values(const TreeAttentionArgs& a, const std::int64_t* keys,
                                                   std::int64_t count, const double* alpha, const double* pi,
                                                   int col, int c, float* o) {
  vd acc[B];
  for (int b = 0; b < B; ++b) acc[b] = simd::splatd(0.0);
  for (std::int64_t j = 0; j < count; ++j) {
    const vd w = simd::splatd(alpha[j * a.heads]);
    const float* vv = a.v + keys[j] * a.ldkv + col + c;
    const double* pj = pi + j * a.e + c;
    for (int b = 0; b < B; ++b) acc[b] = acc[b] + rounded(w * (load_floats(vv + b * WD) + simd::loadd(pj + b * WD)));
  }
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < WD; ++t) o[col + c + b * WD + t] = static_cast<float>(acc[b][t]);
}

inline void prefetch_row(const float* row, int count) {
  for (int c = 0; c < count; c += 16) __builtin_prefetch(row + c);  // one 64-byte line per 16 floats
}

}  // namespace tree_attention_detail

inline void tree_attention(const TreeAttentionArgs& a) {
  using namespace tree_attention_detail;
  const int heads = a.heads, e = a.e, d = heads * e;
  double* qd = a.scratch;
  double* logit = qd + d;  // count x heads: the logits, then the weights
  for (index_t i = 0; i < a.queries; ++i) {
    const std::int64_t b0 = a.first[i], count = a.first[i + 1] - b0;
    const std::int64_t* keys = a.keys + b0;
    float* o = a.out + i * a.ldo;
    if (i + 1 < a.queries) prefetch_row(a.q + (i + 1) * a.ldq, d);
    if (count == 0) {  // no keys: 0
      for (int c = 0; c < d; ++c) o[c] = 0.0f;
      continue;
    }
    const double denom = a.fixed_denom > 0 ? static_cast<double>(a.fixed_denom)
                                           : static_cast<double>(rounded(a.tau * static_cast<float>(count)) + 1e-8f);
    double* pi = logit + count * heads;  // count x e
    const float* pa = a.query_positions + i * 3;
    const float* qa = a.q + i * a.ldq;
    for (int c = 0; c < d; ++c) qd[c] = static_cast<double>(qa[c]);
    // The key rows are gathered from anywhere in the level: their k and v rows are fetched while the
    // positional vectors are computed.
    for (std::int64_t j0 = 0; j0 < count; j0 += 4) {  // (apart from the logits: many edges in flight)
      const int n = static_cast<int>(count - j0 < 4 ? count - j0 : 4);
      vd4 hid[3];
      pe_hidden4(a, pa, keys + j0, n, hid);
      for (int t = 0; t < n; ++t) {
        prefetch_row(a.k + keys[j0 + t] * a.ldkv, d);
        prefetch_row(a.v + keys[j0 + t] * a.ldkv, d);
        pe_out(a, hid[0][t], hid[1][t], hid[2][t], pi + (j0 + t) * e);
      }
    }
    for (std::int64_t j = 0; j < count; ++j) {
      const double* pij = pi + j * e;
      const float* kk = a.k + keys[j] * a.ldkv;
      double* lj = logit + j * heads;
      int h = 0;
      for (; h + 4 <= heads; h += 4) head_logits<4>(qd + h * e, kk + h * e, pij, e, denom, lj + h);
      for (; h + 2 <= heads; h += 2) head_logits<2>(qd + h * e, kk + h * e, pij, e, denom, lj + h);
      if (h < heads) head_logits<1>(qd + h * e, kk + h * e, pij, e, denom, lj + h);
    }
    softmax_weights(logit, count, heads);
    for (int h = 0; h < heads; ++h) {
      const double* alpha = logit + h;
      const int col = h * e;
      int c = 0;
      for (; c + 4 * WD <= e; c += 4 * WD) weighted_values<4>(a, keys, count, alpha, pi, col, c, o);
      for (; c + WD <= e; c += WD) weighted_values<1>(a, keys, count, alpha, pi, col, c, o);
      for (; c < e; ++c) {
        double acc = 0.0;
        for (std::int64_t j = 0; j < count; ++j)
          acc += rounded(alpha[j * heads] * (static_cast<double>(a.v[keys[j] * a.ldkv + col + c]) + pi[j * e + c]));
        o[col + c] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
