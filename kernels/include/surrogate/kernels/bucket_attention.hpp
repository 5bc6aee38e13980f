// Bucket attention with an unnormalised Gaussian kernel (HEPT, share/docs/hept.md "Bucket attention"):
// no scale, no max subtraction, numerator and denominator returned separately so that several hash
// tables can be summed before dividing. Header-only, float or double.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace surrogate::kernels {

/// One bucket: queries q[i] (rows of width dh at stride ldq, gathered by qrow[i], i < m) against keys
/// k[j] and values v[j] (gathered by krow[j], j < m; values of width dv at stride ldv). For every query:
///   A_ij = exp(min(0, (<q_i, k_j> + (-1/2 |q_i|^2)) + (-1/2 |k_j|^2)))
///   num_i = sum_j A_ij v_j (j ascending),  den_i = (sum_j A_ij) + 1e-20,
/// written to num[i * dv + d] and den[i]. `scratch` holds 2 m values. The official evaluation order.
template <class T>
void gaussian_bucket_attention(const T* q, std::int64_t ldq, const std::int64_t* qrow, const T* k, std::int64_t ldk,
                               const std::int64_t* krow, const T* v, std::int64_t ldv, int m, int dh, int dv, T* num,
                               T* den, T* scratch) {
  T* ksq = scratch;
  T* a = scratch + m;
  for (int j = 0; j < m; ++j) {
    const T* kj = k + krow[j] * ldk;
    T s = 0;
    for (int t = 0; t < dh; ++t) s += kj[t] * kj[t];
    ksq[j] = T(-0.5) * s;
  }
  for (int i = 0; i < m; ++i) {
    const T* qi = q + qrow[i] * ldq;
    T s = 0;
    for (int t = 0; t < dh; ++t) s += qi[t] * qi[t];
    const T qsq = T(-0.5) * s;
    T total = 0;
    for (int j = 0; j < m; ++j) {
      const T* kj = k + krow[j] * ldk;
      T dot = 0;
      for (int t = 0; t < dh; ++t) dot += qi[t] * kj[t];
      a[j] = std::exp(std::min(T(0), (dot + qsq) + ksq[j]));
      total += a[j];
    }
    den[i] = total + T(1e-20);
    T* out = num + static_cast<std::int64_t>(i) * dv;
    std::fill(out, out + dv, T(0));
    for (int j = 0; j < m; ++j) {
      const T* vj = v + krow[j] * ldv;
      for (int d = 0; d < dv; ++d) out[d] += a[j] * vj[d];
    }
  }
}

}  // namespace surrogate::kernels
