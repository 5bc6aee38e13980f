// HEPT's bucket attention in float32 and float64 (the semantics: surrogate/kernels/bucket_attention.hpp):
// the template's loops vectorised along the keys (logits, exp) and along the value columns; every sum of a
// value keeps its ascending order (the logit over t, the denominator and numerators over keys).
#pragma once

#include <cmath>
#include <cstring>

#include "simd_double.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

// The vector operations of one element type (float: simd.hpp; double: simd_double.hpp).
template <class T>
struct BucketOps;
template <>
struct BucketOps<float> {
  using V = simd::vf;
  static constexpr int W = simd::W;
  static V splat(float s) { return simd::splat(s); }
  static V load(const float* p) { return simd::load(p); }
  static void store(float* p, V v) { simd::store(p, v); }
  static V fma(V a, V b, V c) { return simd::fused_multiply_add(a, b, c); }
  static V vmin(V a, V b) { return simd::vmin(a, b); }
  static V exp(V x) { return simd::exp(x); }
};
template <>
struct BucketOps<double> {
  using V = simd::vd;
  static constexpr int W = simd::WD;
  static V splat(double s) { return simd::splatd(s); }
  static V load(const double* p) { return simd::loadd(p); }
  static void store(double* p, V v) { simd::stored(p, v); }
  static V fma(V a, V b, V c) { return simd::fmad(a, b, c); }
  static V vmin(V a, V b) { return simd::vmind(a, b); }
  static V exp(V x) { return simd::exp(x); }
};

/// s + x y as BucketOps::fma computes a lane: one rounding with FMA (AVX2, AVX-512), two otherwise.
template <class T>
inline T scalar_fma(T x, T y, T s) {
#if defined(__FMA__)
  return std::fma(x, y, s);
#else
  return s + x * y;
#endif
}

// Four queries per pass: 4 x VL chains of logits and 4 x 2 chains of numerators, at least the 8
// independent FMA chains that two FMA pipes of latency 4 need, and few idle ones in the last vectors of
// keys or values (100 keys are 7 vectors of 16 floats, 13 of 8; 24 values and the ones are 2 or 4).
// AVX-512's 32 registers hold VL = 4 key vectors, AVX2's 16 hold 2.
#if defined(__AVX512F__)
inline constexpr int kBucketKeyVectors = 4;
#else
inline constexpr int kBucketKeyVectors = 2;
#endif

/// The kernel values w[u][j0 ..] of G queries against NV key vectors from j0 (kt: dh x mp, keys
/// transposed): G NV independent chains of FMAs over t, then exp(min(0, (l + qsq) + ksq)).
template <class T, int G, int NV>
[[gnu::always_inline]] inline void bucket_logits(const T* const* qi, const T* qsq, const T* kt, const T* ksq, int dh,
                                                 int mp, int j0, T* w) {
  using O = BucketOps<T>;
  using vf = typename O::V;
  constexpr int W = O::W;
  vf l[G][NV];
#pragma GCC unroll 4
  for (int u = 0; u < G; ++u)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) l[u][c] = O::splat(T(0));
  for (int t = 0; t < dh; ++t) {
    const T* row = kt + static_cast<index_t>(t) * mp + j0;
    vf kv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) kv[c] = O::load(row + c * W);
#pragma GCC unroll 4
    for (int u = 0; u < G; ++u) {
      const vf qv = O::splat(qi[u][t]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) l[u][c] = O::fma(qv, kv[c], l[u][c]);
    }
  }
#pragma GCC unroll 4
  for (int c = 0; c < NV; ++c) {
    const vf kk = O::load(ksq + j0 + c * W);
#pragma GCC unroll 4
    for (int u = 0; u < G; ++u)
      O::store(w + u * mp + j0 + c * W, O::exp(O::vmin(O::splat(T(0)), (l[u][c] + O::splat(qsq[u])) + kk)));
  }
}

/// The sums over the m keys of G queries' weights times NV value vectors from column d0 (vs: m x dvp),
/// each in key order, into lanes[u][NV W].
template <class T, int G, int NV>
[[gnu::always_inline]] inline void bucket_numerators(const T* w, int mp, const T* vs, int dvp, int m, int d0,
                                                     T (*lanes)[2 * BucketOps<T>::W]) {
  static_assert(NV <= 2, "lanes hold two vectors per query");
  using O = BucketOps<T>;
  using vf = typename O::V;
  constexpr int W = O::W;
  vf acc[G][NV];
#pragma GCC unroll 4
  for (int u = 0; u < G; ++u)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) acc[u][c] = O::splat(T(0));
  for (int j = 0; j < m; ++j) {
    const T* row = vs + static_cast<index_t>(j) * dvp + d0;
    vf vv[NV];
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) vv[c] = O::load(row + c * W);
#pragma GCC unroll 4
    for (int u = 0; u < G; ++u) {
      const vf wv = O::splat(w[u * mp + j]);
#pragma GCC unroll 4
      for (int c = 0; c < NV; ++c) acc[u][c] = O::fma(wv, vv[c], acc[u][c]);
    }
  }
#pragma GCC unroll 4
  for (int u = 0; u < G; ++u)
#pragma GCC unroll 4
    for (int c = 0; c < NV; ++c) O::store(lanes[u] + c * W, acc[u][c]);
}

template <class T>
inline void gaussian_bucket_of(const GaussianBucketArgsOf<T>& a) {
  constexpr int W = BucketOps<T>::W, G = 4, VL = kBucketKeyVectors, VN = 2;
  const int m = a.m, dh = a.dh, dv = a.dv;
  const int mp = (m + W - 1) / W * W, dvp = (dv + W) / W * W;  // dvp > dv: a column of ones gives den
  T* kt = a.scratch;                                  // dh x mp: keys transposed, padded with 0
  T* ksq = kt + static_cast<index_t>(dh) * mp;        // mp: -1/2 |k_j|^2
  T* qsq_all = ksq + mp;                              // mp: -1/2 |q_i|^2
  T* w = qsq_all + mp;                                // G x mp: the kernel values of G queries
  T* vs = w + G * mp;                                 // m x dvp: values gathered, 1, then 0
  for (int j = 0; j < mp; ++j) {
    if (j >= m) {
      for (int t = 0; t < dh; ++t) kt[static_cast<index_t>(t) * mp + j] = T(0);
      continue;
    }
    const T* kj = a.k + a.krow[j] * a.ldk;
    for (int t = 0; t < dh; ++t) kt[static_cast<index_t>(t) * mp + j] = kj[t];
    const T* vj = a.v + a.krow[j] * a.ldv;
    T* row = vs + static_cast<index_t>(j) * dvp;
    for (int d = 0; d < dvp; ++d) row[d] = d < dv ? vj[d] : d == dv ? T(1) : T(0);
  }
  // The squared norms, each summed over t in order with fused multiply-adds (a lane per key; eight
  // queries' chains interleaved), so they overlap instead of waiting on one another.
  for (int j0 = 0; j0 < mp; j0 += W) {
    typename BucketOps<T>::V s = BucketOps<T>::splat(T(0));
    for (int t = 0; t < dh; ++t) {
      const auto kv = BucketOps<T>::load(kt + static_cast<index_t>(t) * mp + j0);
      s = BucketOps<T>::fma(kv, kv, s);
    }
    BucketOps<T>::store(ksq + j0, BucketOps<T>::splat(T(-0.5)) * s);
  }
  for (int i0 = 0; i0 < m; i0 += 8) {
    T s[8] = {};
    const T* qi[8];
    for (int u = 0; u < 8; ++u) qi[u] = a.q + a.qrow[i0 + u < m ? i0 + u : m - 1] * a.ldq;
    for (int t = 0; t < dh; ++t)
      for (int u = 0; u < 8; ++u) s[u] = scalar_fma(qi[u][t], qi[u][t], s[u]);
    for (int u = 0; u < 8 && i0 + u < m; ++u) qsq_all[i0 + u] = T(-0.5) * s[u];
  }
  // G queries at a time (the last group repeats its last query): independent FMA chains hide the
  // latency, and each value's sum stays in order.
  for (int i0 = 0; i0 < m; i0 += G) {
    const int nq = m - i0 < G ? m - i0 : G;
    const T* qi[G];
    T qsq[G];
    for (int u = 0; u < G; ++u) {
      const int i = i0 + (u < nq ? u : nq - 1);
      qi[u] = a.q + a.qrow[i] * a.ldq;
      qsq[u] = qsq_all[i];
    }
    int j0 = 0;
    for (; j0 + VL * W <= mp; j0 += VL * W) bucket_logits<T, G, VL>(qi, qsq, kt, ksq, dh, mp, j0, w);
    switch ((mp - j0) / W) {  // the last key vectors
      case 3: bucket_logits<T, G, 3>(qi, qsq, kt, ksq, dh, mp, j0, w); break;
      case 2: bucket_logits<T, G, 2>(qi, qsq, kt, ksq, dh, mp, j0, w); break;
      case 1: bucket_logits<T, G, 1>(qi, qsq, kt, ksq, dh, mp, j0, w); break;
      default: break;
    }
    // The column of ones sums the weights themselves in key order, w * 1 + acc being rounded as
    // w + acc: den.
    for (int d0 = 0; d0 < dvp; d0 += VN * W) {
      const int nv = (dvp - d0) / W < VN ? (dvp - d0) / W : VN;
      T lanes[G][VN * W];
      if (nv == VN) bucket_numerators<T, G, VN>(w, mp, vs, dvp, m, d0, lanes);
      else bucket_numerators<T, G, 1>(w, mp, vs, dvp, m, d0, lanes);
      const int values = (dv < d0 + nv * W ? dv : d0 + nv * W) - d0;  // value columns among these lanes
      for (int u = 0; u < nq; ++u) {
        if (values > 0)
          std::memcpy(a.num + static_cast<index_t>(i0 + u) * dv + d0, lanes[u],
                      sizeof(T) * static_cast<std::size_t>(values));
        if (dv >= d0 && dv < d0 + nv * W) a.den[i0 + u] = lanes[u][dv - d0] + T(1e-20);
      }
    }
  }
}

inline void gaussian_bucket(const GaussianBucketArgs& a) { gaussian_bucket_of<float>(a); }
inline void gaussian_bucket_f64(const GaussianBucketArgs64& a) { gaussian_bucket_of<double>(a); }

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
