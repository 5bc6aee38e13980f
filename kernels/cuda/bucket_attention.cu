// HEPT's bucket sorts and Gaussian bucket attention (surrogate/kernels/cuda_bucket_attention.hpp).
// Sorts: CUB radix sorts of the keys' order-preserving images with positions as values (stable: ties keep
// position order), float keys in one flat sort with the segment above the key bits; on the host backend
// kernels::stable_key_sort. The attention's device code: bucket_attention_kernels.cuh; in tf32 / bf16 the
// bucket sums run on the tensor cores (bucket_tc_kernel below, mma_softmax.cuh with a zero reference:
// HEPT's weights exp(min(0, l)) are not normalised per table): a block of 4 warps takes 64 sorted queries of
// one bucket and row, each warp 16 as mma A fragments; the bucket's k̂, v and half squares are gathered
// through the permutation into shared memory 64 keys at a time.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "launch.cuh"
#include "bucket_attention_kernels.cuh"
#include "mma_softmax.cuh"
#include "latent_softmax.cuh"  // detail::dispatch_head_width
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"

#if defined(SURROGATE_CUDA_HOST_BACKEND)
#include "surrogate/kernels/stable_key_sort.hpp"
#else
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>
#endif

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using bucket_kernels::kThreads;

template <class T>
void check_sort(const SegmentSortLaunchOf<T>& a, const char* name) {
  if (a.rows < 0 || a.points < 0 || a.segments < 1 || !a.first || !a.keys || !a.perm || !a.work)
    throw std::invalid_argument(std::string("cuda::") + name + ": need rows, points >= 0, segments >= 1, and the "
                                "first, keys, perm and work arrays");
  if (static_cast<double>(a.rows) * static_cast<double>(a.points) > 2147483647.0 ||
      static_cast<double>(a.rows) * a.segments >= 2147483647.0)
    throw std::invalid_argument(std::string("cuda::") + name + ": " + std::to_string(a.rows) + " x " +
                                std::to_string(a.points) + " keys exceed the sort's 2^31 - 1");
}

#if defined(SURROGATE_CUDA_HOST_BACKEND)
/// The whole sort on one emulated thread (the launch keeps it in stream order): the CPU's radix sort.
template <class T>
__global__ void host_sort_kernel(const SegmentSortLaunchOf<T> a) {
  StableKeySortWork<T> work;
  for (int r = 0; r < a.rows; ++r)
    for (int g = 0; g < a.segments; ++g) {
      const std::int64_t b0 = a.first[g], b1 = a.first[g + 1];
      const index_t row = static_cast<index_t>(r) * a.points;
      stable_key_sort(a.keys + row + b0, b1 - b0, b0, a.perm + row + b0, work);
    }
}

template <class T>
void sort(const SegmentSortLaunchOf<T>& a, cudaStream_t stream) {
  launch(host_sort_kernel<T>, dim3(1), dim3(1), 0, stream, a);
  check_launch("host_sort_kernel");
}
#else
template <class T>
using Bits = std::conditional_t<sizeof(T) == 4, unsigned int, unsigned long long>;

/// The key's order-preserving image (-0 first made +0, so that the zeros tie) and its position in the row.
template <class T>
__global__ void __launch_bounds__(kThreads) bits_kernel(const SegmentSortLaunchOf<T> a, Bits<T>* bits, std::int64_t* pos) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<index_t>(a.rows) * a.points) return;
  const T key = a.keys[i] + T(0);
  Bits<T> b;
  if constexpr (sizeof(T) == 4) b = __float_as_uint(key);
  else b = static_cast<Bits<T>>(__double_as_longlong(key));
  constexpr Bits<T> sign = Bits<T>(1) << (8 * sizeof(T) - 1);
  bits[i] = (b & sign) ? ~b : (b | sign);
  pos[i] = i % a.points;
}

/// Segment (r, g) of the flattened rows starts at r * points + first[g]; the last offset is rows * points.
template <class T>
__global__ void __launch_bounds__(kThreads) offsets_kernel(const SegmentSortLaunchOf<T> a, std::int64_t* offsets) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  const index_t count = static_cast<index_t>(a.rows) * a.segments;
  if (i > count) return;
  offsets[i] = i == count ? count / a.segments * a.points : (i / a.segments) * a.points + a.first[i % a.segments];
}

/// float keys: (segment r * segments + g) << 32 | the key's image, so that one flat stable sort orders
/// every segment in place (CUB's segmented sort gives each segment one thread block: 24 blocks for HEPT).
__global__ void __launch_bounds__(kThreads) flat_bits_kernel(const SegmentSortLaunchOf<float> a,
                                                             unsigned long long* bits, std::int64_t* pos) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= static_cast<index_t>(a.rows) * a.points) return;
  const index_t r = i / a.points, p = i % a.points;
  int g = 0, last = a.segments - 1;  // the last segment starting at or before p (empty ones skipped)
  while (g < last) {
    const int mid = (g + last + 1) / 2;
    if (a.first[mid] <= p) g = mid;
    else last = mid - 1;
  }
  const unsigned int b = __float_as_uint(a.keys[i] + 0.0f);
  const unsigned int image = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  bits[i] = (static_cast<unsigned long long>(r * a.segments + g) << 32) | image;
  pos[i] = p;
}

void sort(const SegmentSortLaunchOf<float>& a, cudaStream_t stream) {
  using U = unsigned long long;
  const auto n = static_cast<std::size_t>(a.rows) * static_cast<std::size_t>(a.points);
  const auto segments = static_cast<unsigned long long>(a.rows) * static_cast<unsigned long long>(a.segments);
  int end_bit = 32;
  while (end_bit < 64 && (segments - 1) >> (end_bit - 32) != 0) ++end_bit;
  std::size_t temp = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<const U*>(nullptr), static_cast<U*>(nullptr),
                                        static_cast<const std::int64_t*>(nullptr), static_cast<std::int64_t*>(nullptr),
                                        static_cast<int>(n), 0, end_bit, stream),
        "cub::DeviceRadixSort::SortPairs (size)");
  const std::size_t keys_bytes = aligned(n * sizeof(U)), pos_bytes = aligned(n * sizeof(std::int64_t));
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  a.work->bytes.resize(2 * keys_bytes + pos_bytes + temp, device);
  unsigned char* base = a.work->bytes.data();
  auto* bits_in = reinterpret_cast<U*>(base);
  auto* bits_out = reinterpret_cast<U*>(base + keys_bytes);
  auto* pos = reinterpret_cast<std::int64_t*>(base + 2 * keys_bytes);
  void* scratch = base + 2 * keys_bytes + pos_bytes;
  launch(flat_bits_kernel, dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)), kThreads, 0, stream, a, bits_in,
         pos);
  check_launch("flat_bits_kernel");
  check(cub::DeviceRadixSort::SortPairs(scratch, temp, bits_in, bits_out, pos, a.perm, static_cast<int>(n), 0, end_bit,
                                        stream),
        "cub::DeviceRadixSort::SortPairs");
}

/// double keys (their 64 bits leave no room for the segment): CUB's segmented sort.
template <class T>
void sort(const SegmentSortLaunchOf<T>& a, cudaStream_t stream) {
  using U = Bits<T>;
  const auto n = static_cast<std::size_t>(a.rows) * static_cast<std::size_t>(a.points);
  const auto segments = static_cast<std::size_t>(a.rows) * static_cast<std::size_t>(a.segments);
  std::size_t temp = 0;
  check(cub::DeviceSegmentedRadixSort::SortPairs(nullptr, temp, static_cast<const U*>(nullptr), static_cast<U*>(nullptr),
                                                 static_cast<const std::int64_t*>(nullptr),
                                                 static_cast<std::int64_t*>(nullptr), static_cast<int>(n),
                                                 static_cast<int>(segments), static_cast<const std::int64_t*>(nullptr),
                                                 static_cast<const std::int64_t*>(nullptr), 0, 8 * sizeof(U), stream),
        "cub::DeviceSegmentedRadixSort::SortPairs (size)");
  const std::size_t keys_bytes = aligned(n * sizeof(U)), pos_bytes = aligned(n * sizeof(std::int64_t)),
                    offsets_bytes = aligned((segments + 1) * sizeof(std::int64_t));
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  a.work->bytes.resize(2 * keys_bytes + pos_bytes + offsets_bytes + temp, device);
  unsigned char* base = a.work->bytes.data();
  auto* bits_in = reinterpret_cast<U*>(base);
  auto* bits_out = reinterpret_cast<U*>(base + keys_bytes);
  auto* pos = reinterpret_cast<std::int64_t*>(base + 2 * keys_bytes);
  auto* offsets = reinterpret_cast<std::int64_t*>(base + 2 * keys_bytes + pos_bytes);
  void* scratch = base + 2 * keys_bytes + pos_bytes + offsets_bytes;
  launch(bits_kernel<T>, dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)), kThreads, 0, stream, a, bits_in, pos);
  check_launch("bits_kernel");
  launch(offsets_kernel<T>, dim3(static_cast<unsigned>((segments + kThreads) / kThreads)), kThreads, 0, stream, a, offsets);
  check_launch("offsets_kernel");
  check(cub::DeviceSegmentedRadixSort::SortPairs(scratch, temp, bits_in, bits_out, pos, a.perm, static_cast<int>(n),
                                                 static_cast<int>(segments), offsets, offsets + 1, 0, 8 * sizeof(U), stream),
        "cub::DeviceSegmentedRadixSort::SortPairs");
}
#endif

// What a launcher runs: the whole attention, its sums only, or its combine only (no bucket, no rows in).
enum class Step { whole, sums, combine };

template <class T>
void check_buckets(const GaussianBucketsLaunchOf<T>& a, const char* name, Step step, const void* num = nullptr,
                   const void* den = nullptr) {
  const std::string kernel = std::string("cuda::") + name;
  if (a.tables < 1 || a.heads < 1 || a.tables > 65535 / a.heads)
    throw std::invalid_argument(kernel + ": " + std::to_string(a.tables) + " tables x " + std::to_string(a.heads) +
                                " heads, need 1..65535 rows");
  if ((step != Step::combine && (a.dh < 1 || a.dh > kMaxBucketWidth)) || a.dv < 1 || a.dv > kMaxBucketWidth)
    throw std::invalid_argument(kernel + ": widths dh " + std::to_string(a.dh) + ", dv " + std::to_string(a.dv) +
                                " outside 1.." + std::to_string(kMaxBucketWidth));
  if (a.points < 0 || (step != Step::combine && (a.bucket < 1 || a.points % a.bucket != 0)))
    throw std::invalid_argument(kernel + ": " + std::to_string(a.points) + " points are not buckets of " +
                                std::to_string(a.bucket));
  const index_t width = static_cast<index_t>(a.heads) * a.dv;
  if ((step != Step::combine && a.ldv < width) || (step != Step::sums && a.ldo < width))
    throw std::invalid_argument(kernel + ": row strides ldv " + std::to_string(a.ldv) + ", ldo " + std::to_string(a.ldo) +
                                " below heads x dv = " + std::to_string(width));
  if ((step != Step::combine && a.bucket > 0 &&
       static_cast<double>(a.points / a.bucket) * bucket_kernels::query_groups(a.bucket) > 2147483647.0) ||
      (a.points + kThreads - 1) / kThreads > 2147483647 ||
      static_cast<double>(a.heads) * static_cast<double>(a.points) * a.dv > 2147483647.0 * kThreads)
    throw std::invalid_argument(kernel + ": " + std::to_string(a.points) + " points exceed the grid");
  const bool inputs = step == Step::combine || (a.qh && a.kh && a.v && a.perm_q && a.perm_k && a.work);
  const bool outputs = step == Step::whole ? a.out != nullptr : step == Step::sums ? num && den : a.out && num && den;
  if (a.points > 0 && (!inputs || !outputs)) throw std::invalid_argument(kernel + ": a null array");
}

constexpr int kTcWarps = 4;              // warps per block, 16 sorted queries each
constexpr int kTcQueries = 16 * kTcWarps;  // queries of a bucket per block
constexpr int kTcKeys = 64;               // keys staged per pass

/// Grid (bucket x query tile, row); kE: max(dh, dv) padded to a multiple of 8. The sums of sorted
/// positions s of the bucket, written to the slots of their queries perm_q[s] as bucket_kernel writes them.
template <MlpPrecision P, int kE>
__global__ void __launch_bounds__(kTcWarps * 32)
    bucket_tc_kernel(const GaussianBucketsLaunchOf<float> a, int tiles, const float* qsq, const float* ksq, float* num,
                     float* den) {
  using Sums = detail::MmaSoftmax<P, kE, true>;
  __shared__ float ks[kTcKeys * Sums::kPad];
  __shared__ float vs[kTcKeys * kE];
  __shared__ float ksq_tile[kTcKeys];
  const int B = a.bucket, r = static_cast<int>(blockIdx.y), h = r % a.heads;
  const index_t b0 = static_cast<index_t>(blockIdx.x / static_cast<unsigned>(tiles)) * B;  // the bucket's first
  const int first = static_cast<int>(blockIdx.x % static_cast<unsigned>(tiles)) * kTcQueries +
                    16 * (static_cast<int>(threadIdx.x) / 32);
  const std::int64_t* pq = a.perm_q + static_cast<index_t>(r) * a.points + b0;
  const std::int64_t* pk = a.perm_k + static_cast<index_t>(r) * a.points + b0;
  const index_t head = static_cast<index_t>(h) * a.points;
  Sums sm;
  sm.start([&](int i, int e) { return first + i < B && e < a.dh ? a.qh[(head + pq[first + i]) * a.dh + e] : 0.0f; });
  float qs[2] = {0.0f, 0.0f};  // -|q̂|^2 / 2 of the lane's rows g and g + 8
  for (int i = 0; i < 2; ++i)
    if (first + sm.g + 8 * i < B) qs[i] = qsq[head + pq[first + sm.g + 8 * i]];
  for (int j0 = 0; j0 < B; j0 += kTcKeys) {
    const int count = min(kTcKeys, B - j0);
    __syncthreads();
    detail::stage_columns<kTcKeys, Sums::kPad>(ks, count, a.dh, [&](int j, int e) {
      return a.kh[(head + pk[j0 + j]) * a.dh + e];
    });
    detail::stage_columns<kTcKeys, kE>(vs, count, a.dv, [&](int j, int e) {
      return a.v[pk[j0 + j] * a.ldv + static_cast<index_t>(h) * a.dv + e];
    });
    for (int j = static_cast<int>(threadIdx.x); j < count; j += kTcWarps * 32) ksq_tile[j] = ksq[head + pk[j0 + j]];
    __syncthreads();
    if (first >= B) continue;  // no queries for this warp (it still joins the barriers)
    for (int l0 = 0; l0 < count; l0 += 16)
      sm.add(ks, vs, l0, count, [&](int i, int column, float dot) {
        return fminf((dot + qs[i]) + ksq_tile[column], 0.0f);
      });
  }
  if (first >= B) return;
  sm.finish();
  index_t slot[2] = {0, 0};  // of the lane's rows' queries
  for (int i = 0; i < 2; ++i)
    if (first + sm.g + 8 * i < B) {
      slot[i] = static_cast<index_t>(r) * a.points + pq[first + sm.g + 8 * i];
      if (sm.t == 0) den[slot[i]] = sm.row_sum[i] + 1e-20f;
    }
  sm.for_each_value(a.dv, [&](int i, int c, float value) {
    if (first + sm.g + 8 * i < B) num[slot[i] * a.dv + c] = value;
  });
}

template <MlpPrecision P>
void launch_bucket_tensor_cores(const GaussianBucketsLaunchOf<float>& a, const float* qsq, const float* ksq, float* num,
                                float* den, cudaStream_t stream) {
  const int tiles = (a.bucket + kTcQueries - 1) / kTcQueries;
  const dim3 grid(static_cast<unsigned>(a.points / a.bucket * tiles),
                  static_cast<unsigned>(static_cast<index_t>(a.tables) * a.heads));
  detail::dispatch_mma_width(std::max(a.dh, a.dv), [&](auto width) {
    launch(bucket_tc_kernel<P, decltype(width)::value>, grid, kTcWarps * 32, 0, stream, a, tiles, qsq, ksq, num, den);
  });
}

// Every row's numerators and denominators of every query (qsq: 2 heads points values of scratch).
template <class T>
void sums(const GaussianBucketsLaunchOf<T>& a, T* num, T* den, T* qsq, cudaStream_t stream) {
  const auto n = a.points;
  const index_t rows = static_cast<index_t>(a.tables) * a.heads, per_head = static_cast<index_t>(a.heads) * n;
  T* ksq = qsq + per_head;
  const dim3 flat(static_cast<unsigned>((per_head + kThreads - 1) / kThreads));
  launch(bucket_kernels::half_squares_kernel<T>, flat, kThreads, 0, stream, a, qsq, ksq);
  check_launch("half_squares_kernel");
  if constexpr (std::is_same_v<T, float>) {
    if (a.precision != MlpPrecision::fp32) {
      require_tensor_cores("gaussian_buckets");
      if (a.precision == MlpPrecision::bf16)
        launch_bucket_tensor_cores<MlpPrecision::bf16>(a, qsq, ksq, num, den, stream);
      else
        launch_bucket_tensor_cores<MlpPrecision::tf32>(a, qsq, ksq, num, den, stream);
      check_launch("bucket_tc_kernel");
      return;
    }
  }
  const dim3 grid(static_cast<unsigned>(n / a.bucket * bucket_kernels::query_groups(a.bucket)),
                  static_cast<unsigned>(rows));
  detail::dispatch_head_width(std::max(a.dh, a.dv), [&](auto width) {
    launch(bucket_kernels::bucket_kernel<T, decltype(width)::value>, grid, kThreads, 0, stream, a,
           static_cast<const T*>(qsq), static_cast<const T*>(ksq), num, den);
  });
  check_launch("bucket_kernel");
}

template <class T>
void combine(const GaussianBucketsLaunchOf<T>& a, const T* num, const T* den, cudaStream_t stream) {
  const index_t outputs = static_cast<index_t>(a.heads) * a.points * a.dv;
  const dim3 flat(static_cast<unsigned>((outputs + kThreads - 1) / kThreads));
  launch(bucket_kernels::combine_kernel<T>, flat, kThreads, 0, stream, a, num, den);
  check_launch("combine_kernel");
}

template <class T>
void buckets(const GaussianBucketsLaunchOf<T>& a, cudaStream_t stream) {
  if (a.points == 0) return;
  const index_t rows = static_cast<index_t>(a.tables) * a.heads;
  T* num = a.work;
  T* den = num + rows * a.points * a.dv;
  sums(a, num, den, den + rows * a.points, stream);
  combine(a, static_cast<const T*>(num), static_cast<const T*>(den), stream);
}

}  // namespace

void segment_sort(const SegmentSortLaunchOf<float>& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, segment_sort(a, stream));
  check_sort(a, "segment_sort");
  if (a.rows > 0 && a.points > 0) sort(a, stream);
}

void segment_sort_f64(const SegmentSortLaunchOf<double>& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, segment_sort_f64(a, stream));
  check_sort(a, "segment_sort_f64");
  if (a.rows > 0 && a.points > 0) sort(a, stream);
}

void gaussian_buckets(const GaussianBucketsLaunchOf<float>& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, gaussian_buckets(a, stream));
  check_buckets(a, "gaussian_buckets", Step::whole);
  buckets(a, stream);
}

void gaussian_buckets_f64(const GaussianBucketsLaunchOf<double>& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, gaussian_buckets_f64(a, stream));
  check_buckets(a, "gaussian_buckets_f64", Step::whole);
  buckets(a, stream);
}

void gaussian_bucket_sums(const GaussianBucketsLaunchOf<float>& a, float* num, float* den, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, gaussian_bucket_sums(a, num, den, stream));
  check_buckets(a, "gaussian_bucket_sums", Step::sums, num, den);
  if (a.points > 0) sums(a, num, den, a.work, stream);
}

void gaussian_buckets_combine(const GaussianBucketsLaunchOf<float>& a, const float* num, const float* den,
                              cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, gaussian_buckets_combine(a, num, den, stream));
  check_buckets(a, "gaussian_buckets_combine", Step::combine, num, den);
  if (a.points > 0) combine(a, num, den, stream);
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
