// The device code of the Gaussian bucket attention (bucket_attention.cu has the launchers and the sorts;
// surrogate/kernels/cuda_bucket_attention.hpp says what they compute). One block per (bucket, hash table
// and head), one thread per sorted query; the bucket's keys and values gathered through the permutation
// into shared memory a chunk at a time (share/docs/cuda.md, "Bucket attention (HEPT)").
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "surrogate/kernels/cuda_bucket_attention.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace bucket_kernels {

constexpr int kThreads = 128;
constexpr int kGatherBatch = 4;  // key elements a thread gathers before storing them

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

/// Keys staged in shared memory per pass: 64 float or 32 double rows of k̂ and v (32 KiB at width 64).
template <class T>
inline constexpr int kKeyChunk = sizeof(T) == 4 ? 64 : 32;

/// Blocks per (bucket, row): the bucket's queries in groups of kThreads.
__host__ __device__ inline int query_groups(int bucket) { return (bucket + kThreads - 1) / kThreads; }

/// Row r = blockIdx.y; blockIdx.x = bucket b times query_groups + group g. Thread i of the group takes
/// sorted position s = b bucket + g kThreads + i: the bucket's sums for query perm_q[s], written to that
/// query's slot of row r (num: dv values, then den in the row's denominator array). Every thread runs the
/// same sequence per key as one thread per query reading global memory did (the fma chain in t order,
/// (dot + qs) + ksq, exp, the keys in sorted order): the zero padding of the staged rows beyond dh and dv
/// adds +0 to a sum that is never -0, so the bits are unchanged.
template <class T, int kMax>
__global__ void __launch_bounds__(kThreads)
    bucket_kernel(const GaussianBucketsLaunchOf<T> a, const T* qsq, const T* ksq, T* num, T* den) {
  constexpr int kChunk = kKeyChunk<T>;
  __align__(16) __shared__ T k_tile[kChunk][kMax];
  __align__(16) __shared__ T v_tile[kChunk][kMax];
  __shared__ T ksq_tile[kChunk];
  const int groups = query_groups(a.bucket);
  const index_t b = static_cast<index_t>(blockIdx.x) / groups;
  const int i = static_cast<int>(blockIdx.x - b * groups) * kThreads + static_cast<int>(threadIdx.x);
  const bool active = i < a.bucket;  // inactive threads still stage keys
  const int r = static_cast<int>(blockIdx.y);
  const int h = r % a.heads;
  const std::int64_t* pq = a.perm_q + static_cast<index_t>(r) * a.points;
  const std::int64_t* pk = a.perm_k + static_cast<index_t>(r) * a.points;
  const index_t head = static_cast<index_t>(h) * a.points;
  const index_t b0 = b * a.bucket;
  const index_t qrow = active ? pq[b0 + i] : 0;
  T q[kMax];
  const T* qr = a.qh + (head + qrow) * a.dh;
#pragma unroll
  for (int t = 0; t < kMax; ++t) q[t] = t < a.dh ? qr[t] : T(0);
  const T qs = qsq[head + qrow];
  T acc[kMax];
#pragma unroll
  for (int d = 0; d < kMax; ++d) acc[d] = T(0);
  T total = 0;
  for (int j0 = 0; j0 < a.bucket; j0 += kChunk) {
    const int n = a.bucket - j0 < kChunk ? a.bucket - j0 : kChunk;
    __syncthreads();  // nobody reads the previous chunk any more
    // A thread's gathers in batches of kGatherBatch, issued before their stores (their trips overlap).
    for (int idx0 = static_cast<int>(threadIdx.x); idx0 < n * kMax; idx0 += kGatherBatch * kThreads) {
      T kv[kGatherBatch], vv[kGatherBatch];
#pragma unroll
      for (int s = 0; s < kGatherBatch; ++s) {
        const int idx = idx0 + s * kThreads, j = idx / kMax, t = idx % kMax;
        const index_t krow = idx < n * kMax ? pk[b0 + j0 + j] : 0;
        kv[s] = idx < n * kMax && t < a.dh ? a.kh[(head + krow) * a.dh + t] : T(0);
        vv[s] = idx < n * kMax && t < a.dv ? a.v[krow * a.ldv + static_cast<index_t>(h) * a.dv + t] : T(0);
      }
#pragma unroll
      for (int s = 0; s < kGatherBatch; ++s) {
        const int idx = idx0 + s * kThreads;
        if (idx < n * kMax) {
          k_tile[idx / kMax][idx % kMax] = kv[s];
          v_tile[idx / kMax][idx % kMax] = vv[s];
        }
      }
    }
    for (int j = static_cast<int>(threadIdx.x); j < n; j += kThreads) ksq_tile[j] = ksq[head + pk[b0 + j0 + j]];
    __syncthreads();
    if (!active) continue;
    for (int j = 0; j < n; ++j) {
      T dot = 0;
#pragma unroll
      for (int t = 0; t < kMax; ++t) dot = fused(q[t], k_tile[j][t], dot);
      T x = (dot + qs) + ksq_tile[j];
      x = x < T(0) ? x : T(0);
      const T w = exponential(x);
      total += w;
#pragma unroll
      for (int d = 0; d < kMax; ++d) acc[d] = fused(w, v_tile[j][d], acc[d]);
    }
  }
  if (!active) return;
  const index_t slot = static_cast<index_t>(r) * a.points + qrow;
  T* out = num + slot * a.dv;
#pragma unroll
  for (int d = 0; d < kMax; ++d)
    if (d < a.dv) out[d] = acc[d];
  den[slot] = total + T(1e-20);
}

/// Output (point p, head h, column d), d fastest over the threads (coalesced numerators and outputs): the
/// tables' sums added in table order, then divided.
template <class T>
__global__ void __launch_bounds__(kThreads) combine_kernel(const GaussianBucketsLaunchOf<T> a, const T* num, const T* den) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<index_t>(a.heads) * a.points * a.dv) return;
  const index_t ph = i / a.dv;
  const int d = static_cast<int>(i - ph * a.dv);
  const index_t p = ph / a.heads;
  const int h = static_cast<int>(ph - p * a.heads);
  T total = 0, sum = 0;
  for (int c = 0; c < a.tables; ++c) {
    const index_t slot = static_cast<index_t>(c * a.heads + h) * a.points + p;
    total += den[slot];
    sum += num[slot * a.dv + d];
  }
  a.out[p * a.ldo + static_cast<index_t>(h) * a.dv + d] = sum / total;
}

}  // namespace bucket_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
