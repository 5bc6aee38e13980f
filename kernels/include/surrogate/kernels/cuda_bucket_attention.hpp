// CUDA kernels of HEPT's LSH bucket attention (CUDA builds only; share/docs/cuda.md "Bucket attention"):
// the stable bucket sorts of the hash keys and the Gaussian bucket attention of
// surrogate/kernels/bucket_attention.hpp with the gather of q̂, k̂ and v fused, every hash table and head
// in one launch, float or double. Launchers enqueue on the stream and throw std::invalid_argument on
// sizes they do not support before anything is enqueued.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

/// Largest q̂/k̂ width (dh) and value width (dv) of the bucket attention.
inline constexpr int kMaxBucketWidth = 64;

/// Scratch of a segment sort, grown on demand and reused across launches (device memory).
struct SegmentSortWork {
  DeviceBuffer<unsigned char> bytes;
};

/// Stable sorts of `rows` rows of `points` keys each, cut into the same segments: segment g of every row
/// holds positions first[g] .. first[g + 1] - 1 (first: device array of segments + 1 values, 0 first and
/// `points` last). perm[r * points + first[g] + i] = the position (within the row) of the i-th smallest
/// key of segment g of row r, ties by position: std::stable_sort's order with operator< (-0 and +0 tie;
/// keys NaN-free, +-inf allowed). HEPT: one row per (hash table, head), one segment per graph.
template <class T>
struct SegmentSortLaunchOf {
  int rows = 0;
  index_t points = 0;
  int segments = 0;
  const std::int64_t* first = nullptr;  // device, segments + 1 values
  const T* keys = nullptr;              // device, rows x points
  std::int64_t* perm = nullptr;         // device, rows x points
  SegmentSortWork* work = nullptr;      // host object holding device scratch
};
void segment_sort(const SegmentSortLaunchOf<float>& a, cudaStream_t stream);
void segment_sort_f64(const SegmentSortLaunchOf<double>& a, cudaStream_t stream);

/// The Gaussian bucket attention of every (hash table c, head h) row r = c * heads + h, OR-combined over
/// the tables. Row r's sorted queries perm_q[r * points + s] and keys perm_k[r * points + s] (padded point
/// indices) are cut into buckets of `bucket` consecutive sorted positions; in each bucket every query i
/// attends to the bucket's keys j:
///   A_ij = exp(min(0, (<q̂_i, k̂_j> + (-1/2 |q̂_i|^2)) + (-1/2 |k̂_j|^2))),
///   num_i += sum_j A_ij v_j,  den_i += (sum_j A_ij) + 1e-20   (over the tables in order c = 0, 1, ...),
/// and out[p * ldo + h * dv + d] = num_p[d] / den_p. q̂ and k̂ of head h, point p: qh/kh + (h * points + p)
/// * dh; v: v + p * ldv + h * dv. Every sum in ascending order (keys j, table c), products as fused
/// multiply-adds: the result does not depend on the launch geometry. `work` holds
/// gaussian_buckets_work(tables, heads, points, dv) values of T.
/// precision tf32 / bf16 (float only; compute capability >= 8.0): each bucket's two products on the tensor
/// cores, <q̂_i, k̂_j> and A_ij v_j, operands rounded to the format and FP32 sums (not in key order: the
/// same bits run to run, not across launch geometries); the half squares, the min and the exp FP32; the
/// tables combined as in fp32.
template <class T>
struct GaussianBucketsLaunchOf {
  int tables = 0, heads = 0;
  index_t points = 0;  // a multiple of bucket
  int bucket = 0;
  int dh = 0, dv = 0;  // 1 .. kMaxBucketWidth
  const T* qh = nullptr;
  const T* kh = nullptr;
  const T* v = nullptr;
  index_t ldv = 0;
  const std::int64_t* perm_q = nullptr;
  const std::int64_t* perm_k = nullptr;
  T* out = nullptr;
  index_t ldo = 0;
  T* work = nullptr;
  MlpPrecision precision = MlpPrecision::fp32;  // float launches only
};
/// Values of T the work array of gaussian_buckets needs: each row's numerators and denominators, each
/// head's -|q̂|^2/2 and -|k̂|^2/2.
inline std::size_t gaussian_buckets_work(int tables, int heads, index_t points, int dv) {
  const auto n = static_cast<std::size_t>(points), rows = static_cast<std::size_t>(tables) * static_cast<std::size_t>(heads);
  return rows * n * (static_cast<std::size_t>(dv) + 1) + 2 * static_cast<std::size_t>(heads) * n;
}
void gaussian_buckets(const GaussianBucketsLaunchOf<float>& a, cudaStream_t stream);
void gaussian_buckets_f64(const GaussianBucketsLaunchOf<double>& a, cudaStream_t stream);

/// gaussian_buckets in its two steps, for sums that move between them (HEPT with graphs split over the
/// ranks' devices). gaussian_bucket_sums: row r's numerators num[(r points + p) dv + d] and denominators
/// den[r points + p] of every query p (out and ldo unused; work: 2 heads points values).
/// gaussian_buckets_combine: the tables' sums added in table order and divided into out (reads tables,
/// heads, points, dv, out, ldo; points any count). Together they give gaussian_buckets' bits.
void gaussian_bucket_sums(const GaussianBucketsLaunchOf<float>& a, float* num, float* den, cudaStream_t stream);
void gaussian_buckets_combine(const GaussianBucketsLaunchOf<float>& a, const float* num, const float* den,
                              cudaStream_t stream);

/// HEPT's LSH projections of one layer (lsh_keys.cu), float: for point p and head h, q̂ = [q_h ; s_h x]
/// and k̂ = [k_h ; s_h x] (dh = dq + cd; s_h: the RBF scales, x: the point's cd coordinates), and for
/// every table c the projections P[(c heads + h) points + p] = sum_t q̂_t alpha[(h dh + t) tables + c]
/// (likewise for k̂), t ascending, each product and sum rounded on its own: the CPU forward's bits. Points
/// with zero[p] != 0 (the src layout's zero pads): q̂, k̂, their projections and v's row all zero.
struct LshProjectionArgs {
  int heads = 0, tables = 0, dq = 0, cd = 0;
  index_t points = 0;
  const float* q = nullptr;  // head h of point p at q + p * ldqk + h * dq
  const float* k = nullptr;
  index_t ldqk = 0;
  const float* coords = nullptr;  // point p at coords + p * ldc
  index_t ldc = 0;
  const float* scale = nullptr;   // heads x cd
  const float* alpha = nullptr;   // heads x dh x tables
  const std::uint8_t* zero = nullptr;  // points flags, or nullptr
  float* v = nullptr;                  // with zero: v rows (stride ldv, heads * dq values) zeroed
  index_t ldv = 0;
  float* qh = nullptr;  // heads x points x dh
  float* kh = nullptr;
  float* pq = nullptr;  // (tables heads) x points
  float* pk = nullptr;
};
void lsh_projections(const LshProjectionArgs& a, cudaStream_t stream);

/// lo[r] and hi[r]: the minimum and maximum of rows r < rows of pq and pk together (points each).
void lsh_ranges(int rows, index_t points, const float* pq, const float* pk, float* lo, float* hi, cudaStream_t stream);

/// The sort keys, in place: row r, point p of pq and pk becomes +inf where pad[p] != 0, else
/// key + s with s = a[r points + p] delta, or with `factor` (src) s = (a delta) factor[r] + b delta, where
/// delta = hi[r] - lo[r] (the row's range, lsh_ranges' or reduced over ranks)
/// (each operation rounded on its own, as the CPU forward). a, b: the plan's region codes (example) or
/// region indices (src), each rounded to the nearest float as the CPU forward converts them.
struct LshKeyArgs {
  int rows = 0;
  index_t points = 0;
  const float* lo = nullptr;            // rows
  const float* hi = nullptr;            // rows
  const std::int64_t* a = nullptr;      // rows x points
  const std::int64_t* b = nullptr;      // rows x points (with factor)
  const float* factor = nullptr;  // rows, or nullptr
  const std::uint8_t* pad = nullptr;  // points flags, or nullptr
  float* pq = nullptr;
  float* pk = nullptr;
};
void lsh_keys(const LshKeyArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
