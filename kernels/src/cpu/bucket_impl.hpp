// HEPT's bucket attention in float32 and float64 (the semantics: surrogate/kernels/bucket_attention.hpp):
// the template's loops vectorised along the keys (logits, exp) and along the value columns; every sum of a
// value keeps its ascending order (the logit over t, the denominator and numerators over keys).
#pragma once

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

template <class T>
inline void gaussian_bucket_of(const GaussianBucketArgsOf<T>& a) {
  using O = BucketOps<T>;
  using vf = typename O::V;
  constexpr int W = O::W;
  const int m = a.m, dh = a.dh, dv = a.dv;
  const int mp = (m + W - 1) / W * W, dvp = (dv + W) / W * W;  // dvp > dv: a column of ones gives den
  T* kt = a.scratch;                                  // dh x mp: keys transposed, padded with 0
  T* ksq = kt + static_cast<index_t>(dh) * mp;        // mp: -1/2 |k_j|^2
  T* w = ksq + mp;                                    // 2 x mp: the kernel values of two queries
  T* vs = w + 2 * mp;                                 // m x dvp: values gathered, 1, then 0
  T qsq[2];
  for (int j = 0; j < mp; ++j) {
    if (j >= m) {
      for (int t = 0; t < dh; ++t) kt[static_cast<index_t>(t) * mp + j] = T(0);
      ksq[j] = T(0);
      continue;
    }
    const T* kj = a.k + a.krow[j] * a.ldk;
    T s = T(0);
    for (int t = 0; t < dh; ++t) {
      s += kj[t] * kj[t];
      kt[static_cast<index_t>(t) * mp + j] = kj[t];
    }
    ksq[j] = T(-0.5) * s;
    const T* vj = a.v + a.krow[j] * a.ldv;
    T* row = vs + static_cast<index_t>(j) * dvp;
    for (int d = 0; d < dvp; ++d) row[d] = d < dv ? vj[d] : d == dv ? T(1) : T(0);
  }
  // Two queries at a time: independent FMA chains hide the latency (each value's sum stays in order).
  for (int i0 = 0; i0 < m; i0 += 2) {
    const int nq = i0 + 1 < m ? 2 : 1;
    const T* qi[2] = {a.q + a.qrow[i0] * a.ldq, a.q + a.qrow[i0 + nq - 1] * a.ldq};
    T* wq[2] = {w, w + mp};
    for (int u = 0; u < 2; ++u) {
      T s = T(0);
      for (int t = 0; t < dh; ++t) s += qi[u][t] * qi[u][t];
      qsq[u] = T(-0.5) * s;
    }
    // Logits of 4 key vectors x 2 queries: 8 independent chains of FMAs over t.
    for (int j0 = 0; j0 < mp; j0 += 4 * W) {
      const int nv = (mp - j0) / W < 4 ? (mp - j0) / W : 4;
      vf l[2][4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) l[0][c] = l[1][c] = O::splat(T(0));
      for (int t = 0; t < dh; ++t) {
        const T* row = kt + static_cast<index_t>(t) * mp + j0;
        const vf q0 = O::splat(qi[0][t]), q1 = O::splat(qi[1][t]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          if (c >= nv) break;
          const vf kv = O::load(row + c * W);
          l[0][c] = O::fma(q0, kv, l[0][c]);
          l[1][c] = O::fma(q1, kv, l[1][c]);
        }
      }
      for (int c = 0; c < nv; ++c) {
        const vf kk = O::load(ksq + j0 + c * W);
        O::store(wq[0] + j0 + c * W, O::exp(O::vmin(O::splat(T(0)), (l[0][c] + O::splat(qsq[0])) + kk)));
        O::store(wq[1] + j0 + c * W, O::exp(O::vmin(O::splat(T(0)), (l[1][c] + O::splat(qsq[1])) + kk)));
      }
    }
    // Numerators of up to 4 value vectors x 2 queries: up to 8 independent chains over the keys. The
    // column of ones sums the weights themselves in key order, w * 1 + acc being rounded as w + acc: den.
    for (int d0 = 0; d0 < dvp; d0 += 4 * W) {
      const int nv = (dvp - d0) / W < 4 ? (dvp - d0) / W : 4;
      vf acc[2][4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[0][c] = acc[1][c] = O::splat(T(0));
      for (int j = 0; j < m; ++j) {
        const T* row = vs + static_cast<index_t>(j) * dvp + d0;
        const vf w0 = O::splat(wq[0][j]), w1 = O::splat(wq[1][j]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          if (c >= nv) break;
          const vf vv = O::load(row + c * W);
          acc[0][c] = O::fma(w0, vv, acc[0][c]);
          acc[1][c] = O::fma(w1, vv, acc[1][c]);
        }
      }
      for (int u = 0; u < nq; ++u) {
        T lanes[4 * W];
        for (int c = 0; c < nv; ++c) O::store(lanes + c * W, acc[u][c]);
        T* out = a.num + static_cast<index_t>(i0 + u) * dv;
        for (int d = d0; d < dv && d < d0 + nv * W; ++d) out[d] = lanes[d - d0];
        if (dv >= d0 && dv < d0 + nv * W) a.den[i0 + u] = lanes[dv - d0] + T(1e-20);
      }
    }
  }
}

inline void gaussian_bucket(const GaussianBucketArgs& a) { gaussian_bucket_of<float>(a); }
inline void gaussian_bucket_f64(const GaussianBucketArgs64& a) { gaussian_bucket_of<double>(a); }

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
