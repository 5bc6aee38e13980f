// HEPT's LSH projections, ranges and sort keys on the device (surrogate/kernels/cuda_bucket_attention.hpp):
// one thread per (point, head) or per key, __fmul_rn / __fadd_rn where the CPU forward rounds each
// product and sum (no contraction), so that the keys and hence the buckets are the CPU's. The ranges: one
// block per row, min / max (exact in any order).
#include <cmath>
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 128;
constexpr int kRangeThreads = 256;

/// Thread (point p, head h): q̂ = [q_h ; s_h x] and k̂ written once, then every table's projections from
/// registers (kMax >= dq + cd; 0: any width, re-read from the rows just written). The same products and sums
/// in the same order either way.
template <int kMax>
__global__ void __launch_bounds__(kThreads, kMax == 64 ? 2 : 4) projection_kernel(const LshProjectionArgs a) {
  const index_t i = flat_index();
  if (i >= a.points * a.heads) return;
  const index_t p = i / a.heads;
  const int h = static_cast<int>(i - p * a.heads), dh = a.dq + a.cd;
  float* qr = a.qh + (static_cast<index_t>(h) * a.points + p) * dh;
  float* kr = a.kh + (static_cast<index_t>(h) * a.points + p) * dh;
  const bool zero = a.zero && a.zero[p];
  const float* q = a.q + p * a.ldqk + static_cast<index_t>(h) * a.dq;
  const float* k = a.k + p * a.ldqk + static_cast<index_t>(h) * a.dq;
  constexpr int kRegs = kMax > 0 ? kMax : 1;
  float qv[kRegs], kv[kRegs];
  const auto element = [&](int t, float& qt, float& kt) {
    if (t < a.dq) {
      qt = zero ? 0.0f : q[t];
      kt = zero ? 0.0f : k[t];
    } else {
      qt = kt = zero ? 0.0f : __fmul_rn(a.scale[h * a.cd + t - a.dq], a.coords[p * a.ldc + t - a.dq]);
    }
  };
  if constexpr (kMax > 0) {
#pragma unroll
    for (int t = 0; t < kMax; ++t) {
      qv[t] = kv[t] = 0.0f;
      if (t < dh) {
        element(t, qv[t], kv[t]);
        qr[t] = qv[t];
        kr[t] = kv[t];
      }
    }
  } else {
    for (int t = 0; t < dh; ++t) element(t, qr[t], kr[t]);
  }
  for (int c = 0; c < a.tables; ++c) {
    float sq = 0.0f, sk = 0.0f;
    if constexpr (kMax > 0) {
#pragma unroll
      for (int t = 0; t < kMax; ++t)
        if (t < dh) {
          const float w = a.alpha[(static_cast<index_t>(h) * dh + t) * a.tables + c];
          sq = __fadd_rn(sq, __fmul_rn(qv[t], w));
          sk = __fadd_rn(sk, __fmul_rn(kv[t], w));
        }
    } else {
      for (int t = 0; t < dh; ++t) {
        const float w = a.alpha[(static_cast<index_t>(h) * dh + t) * a.tables + c];
        sq = __fadd_rn(sq, __fmul_rn(qr[t], w));
        sk = __fadd_rn(sk, __fmul_rn(kr[t], w));
      }
    }
    const index_t slot = static_cast<index_t>(c * a.heads + h) * a.points + p;
    a.pq[slot] = sq;
    a.pk[slot] = sk;
  }
  if (zero && a.v)
    for (int d = 0; d < a.dq; ++d) a.v[p * a.ldv + static_cast<index_t>(h) * a.dq + d] = 0.0f;
}

__global__ void __launch_bounds__(kRangeThreads)
    range_kernel(index_t points, const float* pq, const float* pk, float* lo, float* hi) {
  __shared__ float smin[kRangeThreads], smax[kRangeThreads];
  const index_t row = static_cast<index_t>(blockIdx.x) * points;
  float mn = INFINITY, mx = -INFINITY;
  for (index_t p = threadIdx.x; p < points; p += kRangeThreads) {
    mn = fminf(mn, fminf(pq[row + p], pk[row + p]));
    mx = fmaxf(mx, fmaxf(pq[row + p], pk[row + p]));
  }
  smin[threadIdx.x] = mn;
  smax[threadIdx.x] = mx;
  __syncthreads();
  for (int half = kRangeThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      smin[threadIdx.x] = fminf(smin[threadIdx.x], smin[threadIdx.x + half]);
      smax[threadIdx.x] = fmaxf(smax[threadIdx.x], smax[threadIdx.x + half]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    lo[blockIdx.x] = smin[0];
    hi[blockIdx.x] = smax[0];
  }
}

__global__ void __launch_bounds__(kThreads) key_kernel(const LshKeyArgs a) {
  const index_t i = flat_index();
  if (i >= static_cast<index_t>(a.rows) * a.points) return;
  const index_t r = i / a.points, p = i - r * a.points;
  if (a.pad && a.pad[p]) {
    a.pq[i] = a.pk[i] = INFINITY;
    return;
  }
  const float d = __fsub_rn(a.hi[r], a.lo[r]);
  float shift = __fmul_rn(static_cast<float>(a.a[i]), d);
  if (a.factor) shift = __fadd_rn(__fmul_rn(shift, a.factor[r]), __fmul_rn(static_cast<float>(a.b[i]), d));
  a.pq[i] = __fadd_rn(a.pq[i], shift);
  a.pk[i] = __fadd_rn(a.pk[i], shift);
}

}  // namespace

void lsh_projections(const LshProjectionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, lsh_projections(a, stream));
  if (a.points == 0) return;
  require(a.points > 0 && a.heads > 0 && a.tables > 0 && a.dq > 0 && a.cd > 0, "lsh_projections",
          "need points, heads, tables, dq, cd > 0");
  require(a.ldqk >= static_cast<index_t>(a.heads) * a.dq && a.ldc >= a.cd && (!a.v || a.ldv >= static_cast<index_t>(a.heads) * a.dq),
          "lsh_projections", "row strides below the rows' widths");
  const dim3 grid = blocks_for("lsh_projections", a.points * a.heads, kThreads);
  const int dh = a.dq + a.cd;
  if (dh <= 32)
    launch(projection_kernel<32>, grid, kThreads, 0, stream, a);
  else if (dh <= 64)
    launch(projection_kernel<64>, grid, kThreads, 0, stream, a);
  else
    launch(projection_kernel<0>, grid, kThreads, 0, stream, a);
  check_launch("projection_kernel");
}

void lsh_ranges(int rows, index_t points, const float* pq, const float* pk, float* lo, float* hi, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, lsh_ranges(rows, points, pq, pk, lo, hi, stream));
  if (rows == 0) return;
  require(rows > 0 && points >= 0, "lsh_ranges", "need rows > 0 and points >= 0");
  launch(range_kernel, dim3(static_cast<unsigned>(rows)), kRangeThreads, 0, stream, points, pq, pk, lo, hi);
  check_launch("range_kernel");
}

void lsh_keys(const LshKeyArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, lsh_keys(a, stream));
  if (a.rows == 0 || a.points == 0) return;
  require(a.rows > 0 && a.points > 0 && a.lo && a.hi && a.a && (!a.factor || a.b), "lsh_keys",
          "need rows, points > 0, lo, hi, a, and b with factor");
  launch(key_kernel, blocks_for("lsh_keys", static_cast<index_t>(a.rows) * a.points, kThreads), kThreads, 0, stream, a);
  check_launch("key_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
