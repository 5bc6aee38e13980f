// The ball-tree geometry on the device (surrogate/kernels/cuda_ball_geometry.hpp): a thread per value for
// the group means (the host's torch_order_sum, shared) and the offsets; the edges grouped by receiver as
// one sort of unique keys (receiver, edge), which orders them as the host's stable counting sort does,
// then a thread per edge (gather) and per receiver (its first edge: a binary search of the sorted keys).
// A device flag holds the first edge out of range; the kernels after the check do nothing when it is set.
// Sort: CUB on the GPU; std::sort on one emulated thread on the host backend.
#include <algorithm>
#include <cstdint>
#include <string>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_geometry.hpp"
#include "surrogate/kernels/torch_order_sum.hpp"

#if !defined(SURROGATE_CUDA_HOST_BACKEND)
#include <cub/device/device_radix_sort.cuh>
#endif

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr long long kNoBadEdge = 0x7fffffffffffffffLL;  // the flag while no edge is out of range
using u64 = unsigned long long;

__global__ void __launch_bounds__(kThreads) group_means_kernel(const GroupMeansArgs a) {
  const index_t i = flat_index();
  if (i >= a.groups * a.dim) return;
  const index_t g = i / a.dim, c = i % a.dim;
  a.out[i] = torch_order_sum(a.rows + g * a.group * a.dim + c, a.dim, a.group) / static_cast<float>(a.group);
}

__global__ void __launch_bounds__(kThreads) group_offsets_kernel(const GroupOffsetsArgs a) {
  const index_t i = flat_index();
  if (i >= a.n * a.dim) return;
  const index_t r = i / a.dim, c = i % a.dim;
  a.rel[i] = a.rows[i] - a.centres[(r / a.group) * a.dim + c];
}

__global__ void flag_kernel(long long* flag, long long value) { *flag = value; }

/// The check of edge e, and its key (receiver << ebits) | e (receiver clamped: the keys of a bad batch
/// are sorted and then ignored).
__global__ void __launch_bounds__(kThreads) edge_keys_kernel(const EdgeOrderArgs a, int ebits, u64* keys) {
  const index_t e = flat_index();
  if (e >= a.edges) return;
  const std::int64_t s = a.edge_index[e], d = a.edge_index[a.edges + e];
  const bool bad = s < 0 || s >= a.sources || d < 0 || d >= a.receivers;
  if (bad) atomicMin(reinterpret_cast<long long*>(a.first_bad), static_cast<long long>(e));
  const u64 receiver = bad ? 0 : static_cast<u64>(d);
  keys[e] = (receiver << ebits) | static_cast<u64>(e);
}

/// Edge q of the order: its source, receiver and p_src - p_dst.
__global__ void __launch_bounds__(kThreads) edge_gather_kernel(const EdgeOrderArgs a, int ebits, const u64* keys) {
  const index_t q = flat_index();
  if (q >= a.edges || *a.first_bad != kNoBadEdge) return;
  const u64 key = keys[q];
  const auto e = static_cast<index_t>(key & ((u64{1} << ebits) - 1));
  const auto d = static_cast<std::int64_t>(key >> ebits), s = a.edge_index[e];
  a.src[q] = s;
  a.dst[q] = d;
  for (int c = 0; c < a.dim; ++c) a.rel[q * a.dim + c] = a.positions[s * a.dim + c] - a.positions[d * a.dim + c];
}

/// start[i] = the number of edges into receivers below i (a lower bound in the sorted keys).
__global__ void __launch_bounds__(kThreads) edge_start_kernel(const EdgeOrderArgs a, int ebits, const u64* keys) {
  const index_t i = flat_index();
  if (i > a.receivers || *a.first_bad != kNoBadEdge) return;
  const u64 first = static_cast<u64>(i) << ebits;
  index_t lo = 0, hi = a.edges;
  while (lo < hi) {
    const index_t mid = lo + (hi - lo) / 2;
    if (keys[mid] < first) lo = mid + 1;
    else hi = mid;
  }
  a.start[i] = lo;
}

__global__ void flag_result_kernel(std::int64_t* flag) {
  if (*flag == kNoBadEdge) *flag = -1;
}

#if defined(SURROGATE_CUDA_HOST_BACKEND)
__global__ void host_sort_kernel(const u64* in, index_t n, u64* out) {
  std::copy(in, in + n, out);
  std::sort(out, out + n);
}
#endif

}  // namespace

void group_means(const GroupMeansArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, group_means(a, stream));
  require(a.groups >= 0 && a.dim >= 1 && a.group >= 1, "group_means", "need groups >= 0, dim >= 1 and group >= 1");
  if (a.groups == 0) return;
  require(a.rows && a.out, "group_means", "a null array");
  launch(group_means_kernel, dim3(blocks_for("group_means", a.groups * a.dim, kThreads)), kThreads, 0, stream, a);
  check_launch("group_means_kernel");
}

void group_offsets(const GroupOffsetsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, group_offsets(a, stream));
  require(a.n >= 0 && a.dim >= 1 && a.group >= 1 && a.n % a.group == 0, "group_offsets",
          "need n >= 0, dim >= 1, group >= 1 and n a multiple of group (n " + std::to_string(a.n) + ", group " +
              std::to_string(a.group) + ")");
  if (a.n == 0) return;
  require(a.rows && a.centres && a.rel, "group_offsets", "a null array");
  launch(group_offsets_kernel, dim3(blocks_for("group_offsets", a.n * a.dim, kThreads)), kThreads, 0, stream, a);
  check_launch("group_offsets_kernel");
}

void edges_by_receiver(const EdgeOrderArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, edges_by_receiver(a, stream));
  constexpr index_t kMost = 2147483647;
  require(a.edges >= 0 && a.edges < kMost && a.receivers >= 0 && a.receivers <= a.sources && a.sources < kMost &&
              a.dim >= 1,
          "edges_by_receiver", "need 0 <= edges < 2^31 - 1, 0 <= receivers <= sources < 2^31 - 1 and dim >= 1");
  require(a.first_bad && a.start && a.work && (a.edges == 0 || (a.edge_index && a.positions && a.src && a.dst && a.rel)),
          "edges_by_receiver", "a null array");
  const int ebits = bits_for(static_cast<u64>(a.edges > 0 ? a.edges - 1 : 0));
  const auto n = static_cast<std::size_t>(a.edges);
  std::size_t sort_bytes = 0;
#if !defined(SURROGATE_CUDA_HOST_BACKEND)
  const int end_bit = ebits + bits_for(static_cast<u64>(a.receivers));
  check(cub::DeviceRadixSort::SortKeys(nullptr, sort_bytes, static_cast<const u64*>(nullptr), static_cast<u64*>(nullptr),
                                       static_cast<int>(n), 0, end_bit, stream),
        "cub::DeviceRadixSort::SortKeys (size)");
#endif
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const std::size_t key_bytes = aligned(std::max<std::size_t>(n, 1) * sizeof(u64));
  a.work->bytes.resize(2 * key_bytes + aligned(sort_bytes), device);
  auto* keys = reinterpret_cast<u64*>(a.work->bytes.data());
  auto* sorted = reinterpret_cast<u64*>(a.work->bytes.data() + key_bytes);
  void* scratch = a.work->bytes.data() + 2 * key_bytes;
  launch(flag_kernel, dim3(1), dim3(1), 0, stream, reinterpret_cast<long long*>(a.first_bad), kNoBadEdge);
  check_launch("flag_kernel");
  if (a.edges > 0) {
    const dim3 grid(blocks_for("edges_by_receiver", a.edges, kThreads));
    launch(edge_keys_kernel, grid, kThreads, 0, stream, a, ebits, keys);
    check_launch("edge_keys_kernel");
#if defined(SURROGATE_CUDA_HOST_BACKEND)
    (void)scratch;
    launch(host_sort_kernel, dim3(1), dim3(1), 0, stream, static_cast<const u64*>(keys), a.edges, sorted);
    check_launch("host_sort_kernel");
#else
    check(cub::DeviceRadixSort::SortKeys(scratch, sort_bytes, keys, sorted, static_cast<int>(n), 0, end_bit, stream),
          "cub::DeviceRadixSort::SortKeys");
#endif
    launch(edge_gather_kernel, grid, kThreads, 0, stream, a, ebits, static_cast<const u64*>(sorted));
    check_launch("edge_gather_kernel");
  }
  launch(edge_start_kernel, dim3(blocks_for("edges_by_receiver", a.receivers + 1, kThreads)), kThreads, 0, stream, a,
         ebits, static_cast<const u64*>(sorted));
  check_launch("edge_start_kernel");
  launch(flag_result_kernel, dim3(1), dim3(1), 0, stream, a.first_bad);
  check_launch("flag_result_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
