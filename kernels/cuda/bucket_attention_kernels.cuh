// The device code of the Gaussian bucket attention (bucket_attention.cu has the launchers and the sorts;
// surrogate/kernels/cuda_bucket_attention.hpp says what they compute). One thread per (sorted query,
// hash table and head), the bucket's keys and values read through the permutations (the gather fused:
// the threads of a warp share their bucket, so the loads are broadcasts); no shared memory.
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "surrogate/kernels/cuda_bucket_attention.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace bucket_kernels {

constexpr int kThreads = 128;

template <class T>
__device__ __forceinline__ T fused(T a, T b, T c) {
  if constexpr (sizeof(T) == 4) return fmaf(a, b, c);
  else return fma(a, b, c);
}
template <class T>
__device__ __forceinline__ T exponential(T x) {
  if constexpr (sizeof(T) == 4) return expf(x);
  else return exp(x);
}

/// -|x|^2 / 2 of every head's q̂ and k̂ rows, at h * points + p.
template <class T>
__global__ void __launch_bounds__(kThreads) half_squares_kernel(const GaussianBucketsLaunchOf<T> a, T* qsq, T* ksq) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<index_t>(a.heads) * a.points) return;
  const T* q = a.qh + i * a.dh;
  const T* k = a.kh + i * a.dh;
  T sq = 0, sk = 0;
  for (int t = 0; t < a.dh; ++t) {
    sq = fused(q[t], q[t], sq);
    sk = fused(k[t], k[t], sk);
  }
  qsq[i] = T(-0.5) * sq;
  ksq[i] = T(-0.5) * sk;
}

/// Row r = blockIdx.y, sorted query position s: the bucket's sums for query perm_q[s], written to that
/// query's slot of row r (num: dv values, then den in the row's denominator array).
template <class T, int kMax>
__global__ void __launch_bounds__(kThreads)
    bucket_kernel(const GaussianBucketsLaunchOf<T> a, const T* qsq, const T* ksq, T* num, T* den) {
  const index_t s = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (s >= a.points) return;
  const int r = static_cast<int>(blockIdx.y);
  const int h = r % a.heads;
  const std::int64_t* pq = a.perm_q + static_cast<index_t>(r) * a.points;
  const std::int64_t* pk = a.perm_k + static_cast<index_t>(r) * a.points;
  const index_t head = static_cast<index_t>(h) * a.points;
  const index_t qrow = pq[s];
  T q[kMax];
  const T* qr = a.qh + (head + qrow) * a.dh;
#pragma unroll
  for (int t = 0; t < kMax; ++t) q[t] = t < a.dh ? qr[t] : T(0);
  const T qs = qsq[head + qrow];
  T acc[kMax];
#pragma unroll
  for (int d = 0; d < kMax; ++d) acc[d] = T(0);
  T total = 0;
  const index_t b0 = s / a.bucket * a.bucket;
  for (int j = 0; j < a.bucket; ++j) {
    const index_t krow = pk[b0 + j];
    const T* kr = a.kh + (head + krow) * a.dh;
    T dot = 0;
#pragma unroll
    for (int t = 0; t < kMax; ++t)
      if (t < a.dh) dot = fused(q[t], kr[t], dot);
    T x = (dot + qs) + ksq[head + krow];
    x = x < T(0) ? x : T(0);
    const T w = exponential(x);
    total += w;
    const T* vr = a.v + krow * a.ldv + static_cast<index_t>(h) * a.dv;
#pragma unroll
    for (int d = 0; d < kMax; ++d)
      if (d < a.dv) acc[d] = fused(w, vr[d], acc[d]);
  }
  const index_t slot = static_cast<index_t>(r) * a.points + qrow;
  T* out = num + slot * a.dv;
#pragma unroll
  for (int d = 0; d < kMax; ++d)
    if (d < a.dv) out[d] = acc[d];
  den[slot] = total + T(1e-20);
}

/// Point p = flat index / heads, head h: the tables' sums added in table order, then divided.
template <class T>
__global__ void __launch_bounds__(kThreads) combine_kernel(const GaussianBucketsLaunchOf<T> a, const T* num, const T* den) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<index_t>(a.heads) * a.points) return;
  const index_t p = i / a.heads;
  const int h = static_cast<int>(i - p * a.heads);
  T total = 0;
  for (int c = 0; c < a.tables; ++c) total += den[static_cast<index_t>(c * a.heads + h) * a.points + p];
  T* out = a.out + p * a.ldo + static_cast<index_t>(h) * a.dv;
  for (int d = 0; d < a.dv; ++d) {
    T sum = 0;
    for (int c = 0; c < a.tables; ++c) sum += num[(static_cast<index_t>(c * a.heads + h) * a.points + p) * a.dv + d];
    out[d] = sum / total;
  }
}

}  // namespace bucket_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
