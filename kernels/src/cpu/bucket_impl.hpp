// HEPT's bucket attention in float32 and float64 (the semantics: surrogate/kernels/bucket_attention.hpp):
// the template's loops vectorised along the keys (logits, exp) and along the value columns; every sum of a
// value keeps its ascending order (the logit over t, the denominator and numerators over keys).
#pragma once

#include <cstdint>
#include <cstring>

#include "simd_double.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "transpose_impl.hpp"

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
  static V load_first(const float* p, int n) {  // lanes [0, n) from p, zeros after; reads nothing past p + n
#if defined(__AVX512F__)
    return _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << n) - 1u), p);
#elif defined(__AVX2__)
    return _mm256_maskload_ps(p, __builtin_bit_cast(__m256i, simd::first_lanes(n)));
#else
    V v = splat(0.0f);
    for (int i = 0; i < n; ++i) v[i] = p[i];
    return v;
#endif
  }
  static void store(float* p, V v) { simd::store(p, v); }
  static V fma(V a, V b, V c) { return simd::fused_multiply_add(a, b, c); }
  static V vmin(V a, V b) { return simd::vmin(a, b); }
  static V exp(V x) { return simd::exp_nonpositive_accurate(x); }  // (x <= 0 here)
};
template <>
struct BucketOps<double> {
  using V = simd::vd;
  static constexpr int W = simd::WD;
  static V splat(double s) { return simd::splatd(s); }
  static V load(const double* p) { return simd::loadd(p); }
  static V load_first(const double* p, int n) {
#if defined(__AVX512F__)
    return _mm512_maskz_loadu_pd(static_cast<__mmask8>((1u << n) - 1u), p);
#elif defined(__AVX2__)
    return _mm256_maskload_pd(p, _mm256_set_epi64x(n > 3 ? -1 : 0, n > 2 ? -1 : 0, n > 1 ? -1 : 0, n > 0 ? -1 : 0));
#else
    V v = splat(0.0);
    for (int i = 0; i < n; ++i) v[i] = p[i];
    return v;
#endif
  }
  static void store(double* p, V v) { simd::stored(p, v); }
  static V fma(V a, V b, V c) { return simd::fmad(a, b, c); }
  static V vmin(V a, V b) { return simd::vmind(a, b); }
  static V exp(V x) { return simd::exp(x); }
};

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

/// Rows x[rows[u] * ld] of n <= W gathered rows (the other lanes zero) as columns: cols[t * ldc + u] for
/// t < dh when cols is given, and half_sq[u] = -1/2 their squared norm summed over t in order with fused
/// multiply-adds, through W x W register tiles.
template <class T>
[[gnu::always_inline]] inline void gathered_columns(const T* x, index_t ld, const std::int64_t* rows, int n, int dh,
                                                    T* cols, index_t ldc, T* half_sq) {
  using O = BucketOps<T>;
  using V = typename O::V;
  constexpr int W = O::W;
  const T* p[W];
  for (int u = 0; u < n; ++u) p[u] = x + rows[u] * ld;
  V s = O::splat(T(0));
  for (int t0 = 0; t0 < dh; t0 += W) {
    const int c = dh - t0 < W ? dh - t0 : W;
    V r[W];
#pragma GCC unroll 16
    for (int u = 0; u < W; ++u)
      r[u] = u >= n ? O::splat(T(0)) : c == W ? O::load(p[u] + t0) : O::load_first(p[u] + t0, c);
    transpose_square<W>(r);
#pragma GCC unroll 16
    for (int t = 0; t < c; ++t) {
      if (cols) O::store(cols + (t0 + t) * ldc, r[t]);
      s = O::fma(r[t], r[t], s);
    }
  }
  O::store(half_sq, O::splat(T(-0.5)) * s);
}

/// The cache lines of up to three byte ranges, asked of the caches a few at a time (GaussianBucketArgsOf::next).
class LinePrefetcher {
 public:
  LinePrefetcher(const void* const* p, const std::size_t* bytes) {
    for (int r = 0; r < 3; ++r) {
      if (!p[r] || bytes[r] == 0) continue;
      const auto first = reinterpret_cast<std::uintptr_t>(p[r]) / kLine;
      next_[r] = first * kLine;
      end_[r] = (reinterpret_cast<std::uintptr_t>(p[r]) + bytes[r] - 1) / kLine * kLine + kLine;
      lines_ += (end_[r] - next_[r]) / kLine;
    }
  }
  std::size_t lines() const { return lines_; }
  /// The next n lines.
  void ask(std::size_t n) {
    for (; n > 0 && range_ < 3; ++range_) {
      for (; n > 0 && next_[range_] < end_[range_]; --n, next_[range_] += kLine)
        __builtin_prefetch(reinterpret_cast<const void*>(next_[range_]));
      if (next_[range_] < end_[range_]) return;
    }
  }

 private:
  static constexpr std::uintptr_t kLine = 64;
  std::uintptr_t next_[3] = {}, end_[3] = {};
  std::size_t lines_ = 0;
  int range_ = 0;
};

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
  // Keys and queries W at a time as columns of register tiles: the keys transposed into kt, the squared
  // norms of both summed over t in order (a lane per row). Padding keys are zero.
  for (int j0 = 0; j0 < mp; j0 += W) {
    const int n = m - j0 < W ? m - j0 : W;
    gathered_columns(a.k, a.ldk, a.krow + j0, n, dh, kt + j0, mp, ksq + j0);
    gathered_columns<T>(a.q, a.ldq, a.qrow + j0, n, dh, nullptr, 0, qsq_all + j0);
  }
  for (int j = 0; j < m; ++j) {
    const T* vj = a.v + a.krow[j] * a.ldv;
    T* row = vs + static_cast<index_t>(j) * dvp;
    for (int d0 = 0; d0 < dvp; d0 += W) {
      const int c = dv - d0;
      BucketOps<T>::store(row + d0, c >= W  ? BucketOps<T>::load(vj + d0)
                                    : c > 0 ? BucketOps<T>::load_first(vj + d0, c)
                                            : BucketOps<T>::splat(T(0)));
    }
    row[dv] = T(1);
  }
  LinePrefetcher next(a.next, a.next_bytes);
  const auto groups = static_cast<std::size_t>((m + G - 1) / G);
  const std::size_t lines_per_group = groups ? (next.lines() + groups - 1) / groups : 0;
  // G queries at a time (the last group repeats its last query): independent FMA chains hide the
  // latency, and each value's sum stays in order.
  for (int i0 = 0; i0 < m; i0 += G) {
    next.ask(lines_per_group);
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
