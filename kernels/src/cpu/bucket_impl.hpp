// HEPT's bucket attention in float32 (the semantics: surrogate/kernels/bucket_attention.hpp): the
// template's loops vectorised along the keys (logits, exp) and along the value columns; every sum of a
// value keeps its ascending order (the logit over t, the denominator and numerators over keys).
#pragma once

#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline void gaussian_bucket(const GaussianBucketArgs& a) {
  using namespace simd;
  const int m = a.m, dh = a.dh, dv = a.dv;
  const int mp = (m + W - 1) / W * W, dvp = (dv + W - 1) / W * W;
  float* kt = a.scratch;                                  // dh x mp: keys transposed, padded with 0
  float* ksq = kt + static_cast<index_t>(dh) * mp;        // mp: -1/2 |k_j|^2
  float* w = ksq + mp;                                    // 2 x mp: the kernel values of two queries
  float* vs = w + 2 * mp;                                 // m x dvp: values gathered, padded with 0
  float qsq[2];
  for (int j = 0; j < mp; ++j) {
    if (j >= m) {
      for (int t = 0; t < dh; ++t) kt[static_cast<index_t>(t) * mp + j] = 0.0f;
      ksq[j] = 0.0f;
      continue;
    }
    const float* kj = a.k + a.krow[j] * a.ldk;
    float s = 0.0f;
    for (int t = 0; t < dh; ++t) {
      s += kj[t] * kj[t];
      kt[static_cast<index_t>(t) * mp + j] = kj[t];
    }
    ksq[j] = -0.5f * s;
    const float* vj = a.v + a.krow[j] * a.ldv;
    float* row = vs + static_cast<index_t>(j) * dvp;
    for (int d = 0; d < dvp; ++d) row[d] = d < dv ? vj[d] : 0.0f;
  }
  // Two queries at a time: independent FMA chains hide the latency (each value's sum stays in order).
  for (int i0 = 0; i0 < m; i0 += 2) {
    const int nq = i0 + 1 < m ? 2 : 1;
    const float* qi[2] = {a.q + a.qrow[i0] * a.ldq, a.q + a.qrow[i0 + nq - 1] * a.ldq};
    float* wq[2] = {w, w + mp};
    for (int u = 0; u < 2; ++u) {
      float s = 0.0f;
      for (int t = 0; t < dh; ++t) s += qi[u][t] * qi[u][t];
      qsq[u] = -0.5f * s;
    }
    // Logits of 4 key vectors x 2 queries: 8 independent chains of FMAs over t.
    for (int j0 = 0; j0 < mp; j0 += 4 * W) {
      const int nv = (mp - j0) / W < 4 ? (mp - j0) / W : 4;
      vf l[2][4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) l[0][c] = l[1][c] = splat(0.0f);
      for (int t = 0; t < dh; ++t) {
        const float* row = kt + static_cast<index_t>(t) * mp + j0;
        const vf q0 = splat(qi[0][t]), q1 = splat(qi[1][t]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          if (c >= nv) break;
          const vf kv = load(row + c * W);
          l[0][c] = fused_multiply_add(q0, kv, l[0][c]);
          l[1][c] = fused_multiply_add(q1, kv, l[1][c]);
        }
      }
      for (int c = 0; c < nv; ++c) {
        const vf kk = load(ksq + j0 + c * W);
        store(wq[0] + j0 + c * W, simd::exp(vmin(splat(0.0f), (l[0][c] + splat(qsq[0])) + kk)));
        store(wq[1] + j0 + c * W, simd::exp(vmin(splat(0.0f), (l[1][c] + splat(qsq[1])) + kk)));
      }
    }
    for (int u = 0; u < nq; ++u) {
      float total = 0.0f;
      for (int j = 0; j < m; ++j) total += wq[u][j];
      a.den[i0 + u] = total + 1e-20f;
    }
    // Numerators of up to 4 value vectors x 2 queries: up to 8 independent chains over the keys.
    for (int d0 = 0; d0 < dvp; d0 += 4 * W) {
      const int nv = (dvp - d0) / W < 4 ? (dvp - d0) / W : 4;
      vf acc[2][4];
#pragma GCC unroll 4
      for (int c = 0; c < 4; ++c) acc[0][c] = acc[1][c] = splat(0.0f);
      for (int j = 0; j < m; ++j) {
        const float* row = vs + static_cast<index_t>(j) * dvp + d0;
        const vf w0 = splat(wq[0][j]), w1 = splat(wq[1][j]);
#pragma GCC unroll 4
        for (int c = 0; c < 4; ++c) {
          if (c >= nv) break;
          const vf vv = load(row + c * W);
          acc[0][c] = fused_multiply_add(w0, vv, acc[0][c]);
          acc[1][c] = fused_multiply_add(w1, vv, acc[1][c]);
        }
      }
      for (int u = 0; u < nq; ++u) {
        float lanes[4 * W];
        for (int c = 0; c < nv; ++c) store(lanes + c * W, acc[u][c]);
        float* out = a.num + static_cast<index_t>(i0 + u) * dv;
        for (int d = d0; d < dv && d < d0 + nv * W; ++d) out[d] = lanes[d - d0];
      }
    }
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
