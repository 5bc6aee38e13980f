// Bucket attention with an unnormalised Gaussian kernel (HEPT, share/docs/hept.md "Bucket attention"):
// no scale, no max subtraction, numerator and denominator returned separately so that several hash
// tables can be summed before dividing. Header-only, float or double: the reference; the model runs the
// vectorised CpuKernels::gaussian_bucket and gaussian_bucket_f64 (surrogate/kernels/cpu.hpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace surrogate::kernels {

/// Values of scratch gaussian_bucket_attention (and the CPU kernels CpuKernels::gaussian_bucket and
/// gaussian_bucket_f64, which pad keys to their vector width, at most 16, and value columns with a column
/// of ones beyond) needs for a bucket of m keys.
inline std::int64_t gaussian_bucket_scratch(int m, int dh, int dv) {
  const std::int64_t mp = (m + 15) / 16 * 16, dvp = (dv + 16) / 16 * 16;
  return mp * (dh + 6) + static_cast<std::int64_t>(m) * dvp;
}

/// One bucket: queries q[i] (rows of width dh at stride ldq, gathered by qrow[i], i < m) against keys
/// k[j] and values v[j] (gathered by krow[j], j < m; values of width dv at stride ldv). For every query:
///   A_ij = exp(min(0, (<q_i, k_j> + (-1/2 |q_i|^2)) + (-1/2 |k_j|^2)))
///   num_i = sum_j A_ij v_j (j ascending),  den_i = (sum_j A_ij) + 1e-20,
/// written to num[i * dv + d] and den[i]; every sum in ascending index order (the result does not depend
/// on the vector width). `scratch` holds gaussian_bucket_scratch(m, dh, dv) values.
template <class T>
void gaussian_bucket_attention(const T* q, std::int64_t ldq, const std::int64_t* qrow, const T* k, std::int64_t ldk,
                               const std::int64_t* krow, const T* v, std::int64_t ldv, int m, int dh, int dv, T* num,
                               T* den, T* scratch) {
  T* kt = scratch;  // dh x m: the keys transposed, so that the loops over keys are contiguous
  T* vs = kt + static_cast<std::int64_t>(dh) * m;  // m x dv: the values gathered
  T* ksq = vs + static_cast<std::int64_t>(m) * dv;
  T* a = ksq + m;
  for (int j = 0; j < m; ++j) {
    const T* kj = k + krow[j] * ldk;
    T s = 0;
    for (int t = 0; t < dh; ++t) {
      s += kj[t] * kj[t];
      kt[static_cast<std::int64_t>(t) * m + j] = kj[t];
    }
    ksq[j] = T(-0.5) * s;
    std::copy(v + krow[j] * ldv, v + krow[j] * ldv + dv, vs + static_cast<std::int64_t>(j) * dv);
  }
  for (int i = 0; i < m; ++i) {
    const T* qi = q + qrow[i] * ldq;
    T s = 0;
    for (int t = 0; t < dh; ++t) s += qi[t] * qi[t];
    const T qsq = T(-0.5) * s;
    std::fill(a, a + m, T(0));
    for (int t = 0; t < dh; ++t) {
      const T qt = qi[t];
      const T* row = kt + static_cast<std::int64_t>(t) * m;
      for (int j = 0; j < m; ++j) a[j] += qt * row[j];
    }
    T total = 0;
    for (int j = 0; j < m; ++j) {
      a[j] = std::exp(std::min(T(0), (a[j] + qsq) + ksq[j]));
      total += a[j];
    }
    den[i] = total + T(1e-20);
    T* out = num + static_cast<std::int64_t>(i) * dv;
    std::fill(out, out + dv, T(0));
    for (int j = 0; j < m; ++j) {
      const T aj = a[j];
      const T* vj = vs + static_cast<std::int64_t>(j) * dv;
      for (int d = 0; d < dv; ++d) out[d] += aj * vj[d];
    }
  }
}

}  // namespace surrogate::kernels
