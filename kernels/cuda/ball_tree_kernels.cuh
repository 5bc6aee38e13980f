// The device code of the ball trees (ball_tree.cu has the launcher and the schedule of the levels;
// surrogate/kernels/cuda_ball_tree.hpp says what they compute): the level's nodes a block each (the split
// dimension by block reductions, libstdc++'s introselect rounds with each Hoare partition computed from its
// stop positions by block scans), the small nodes a thread each with the replica. The top levels' nodes of
// many blocks each are ball_tree_wide.cuh.
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/introselect.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace ball_tree_kernels {

namespace replica = surrogate::kernels::introselect;

constexpr int kThreads = 256;        // one thread per point
constexpr int kMaxThreads = 1024;    // a block per large node: 32 to 1024 threads, by the level's nodes
constexpr int kMaxWarps = kMaxThreads / 32;
constexpr int kSerialThreads = 128;  // a thread per small node
constexpr int kMaxStack = 96;        // a serial subtree's pending nodes (two per level at most)
constexpr int kSpreadDims = 4;       // coordinates whose spreads one pass over a node's points finds

struct Entry {
  float key;
  int point;
};

struct ByKey {
  __host__ __device__ __forceinline__ bool operator()(const Entry& a, const Entry& b) const { return a.key < b.key; }
};

/// A sample as the kernels see it: its rows [begin, begin + n) of the working order, its levels (the
/// tree's depth, or the partition's target level), the level from which its nodes are finished by one
/// thread each, and its first slot (the tree).
struct SampleShape {
  long long begin, slot_begin;
  int n, levels, serial_level;
};

/// One sample's nodes in a launch: its 2^level nodes are the launch's units unit_begin, unit_begin + 1, ...
struct LaunchSample {
  long long unit_begin;
  int sample, level;
};

struct Context {
  const float* positions;
  int dim;
  bool tree;
  Entry* work;  // points entries
  int* lefts;   // points: a round's left stops, relative to its first position
  int* rights;  // points: its right stops from the end
  const SampleShape* shapes;
  std::int64_t* index;
  std::uint8_t* mask;
};

/// The sample and node of launch unit u (the last LaunchSample starting at or before u).
__device__ __forceinline__ LaunchSample find_unit(const LaunchSample* list, int count, long long u, long long& node) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (list[mid].unit_begin <= u) lo = mid;
    else hi = mid - 1;
  }
  node = u - list[lo].unit_begin;
  return list[lo];
}

/// The point range [start, end) of node `node` of `level` in a sample of n points (each split at the
/// middle, (start + end) / 2).
__device__ __forceinline__ void node_range(int n, int level, long long node, int& start, int& end) {
  start = 0;
  end = n;
  for (int k = level - 1; k >= 0; --k) {
    const int mid = (start + end) / 2;
    if ((node >> k) & 1) start = mid;
    else end = mid;
  }
}

__global__ void __launch_bounds__(kThreads) identity_kernel(Entry* work, index_t points) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < points) work[i] = Entry{0.0f, static_cast<int>(i)};
}

// ---- a block per node -------------------------------------------------------------------------------
// Any block size that is a multiple of 32, up to kMaxThreads; scans and reductions by warp shuffles, the
// warps' totals in shared memory.

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ int lane() { return static_cast<int>(threadIdx.x) % 32; }
__device__ __forceinline__ int warp() { return static_cast<int>(threadIdx.x) / 32; }
__device__ __forceinline__ int warps() { return static_cast<int>(blockDim.x) / 32; }

/// The warp's inclusive prefix sum of v.
__device__ __forceinline__ int warp_inclusive_sum(int v) {
  for (int offset = 1; offset < 32; offset *= 2) {
    const int other = __shfl_up_sync(kFull, v, offset);
    if (lane() >= offset) v += other;
  }
  return v;
}

/// The exclusive prefix sum of v over the block's threads; `total` gets the sum. `totals`: kMaxWarps ints
/// that no other thread reads or writes until the block's next barrier but one (callers alternate two).
__device__ int block_exclusive_scan(int v, int* totals, int& total) {
  const int inclusive = warp_inclusive_sum(v);
  if (lane() == 31) totals[warp()] = inclusive;
  __syncthreads();
  if (warp() == 0) {
    const int t = lane() < warps() ? totals[lane()] : 0;
    const int scanned = warp_inclusive_sum(t);
    if (lane() < warps()) totals[lane()] = scanned;
  }
  __syncthreads();
  total = totals[warps() - 1];
  return inclusive - v + (warp() > 0 ? totals[warp() - 1] : 0);
}

/// The block's min and max of [lo, hi] (every thread gets them); `scratch`: 2 kMaxWarps doubles.
__device__ void block_min_max(double& lo, double& hi, double* scratch) {
  for (int offset = 16; offset >= 1; offset /= 2) {
    const double l = __shfl_xor_sync(kFull, lo, offset), h = __shfl_xor_sync(kFull, hi, offset);
    lo = l < lo ? l : lo;
    hi = h > hi ? h : hi;
  }
  if (lane() == 0) {
    scratch[warp()] = lo;
    scratch[kMaxWarps + warp()] = hi;
  }
  __syncthreads();
  for (int w = 0; w < warps(); ++w) {
    lo = scratch[w] < lo ? scratch[w] : lo;
    hi = scratch[kMaxWarps + w] > hi ? scratch[kMaxWarps + w] : hi;
  }
  __syncthreads();
}

/// The minima and maxima (in double) of coordinates d0 .. d0 + dims - 1 (dims <= kSpreadDims) of the points
/// e[0] and e[i] for i = first, first + stride, ... < count.
__device__ __forceinline__ void coordinate_extremes(const Context& c, const Entry* e, int count, int first, int stride,
                                                    int d0, int dims, double* lo, double* hi) {
  for (int k = 0; k < dims; ++k)
    lo[k] = hi[k] = static_cast<double>(c.positions[static_cast<long long>(e[0].point) * c.dim + d0 + k]);
  for (int i = first; i < count; i += stride) {
    const float* p = c.positions + static_cast<long long>(e[i].point) * c.dim + d0;
    for (int k = 0; k < dims; ++k) {
      const double v = static_cast<double>(p[k]);
      lo[k] = v < lo[k] ? v : lo[k];
      hi[k] = v > hi[k] ? v : hi[k];
    }
  }
}

/// Splitter::split_dimension: the first dimension of strictly largest max - min, one pass over the node's
/// points per kSpreadDims coordinates. This thread visits points first, first + stride, ...; `combine`
/// merges the threads' minima and maxima (BlockMinMax, or nothing when one thread visits them all).
template <class Combine>
__device__ int split_dimension(const Context& c, const Entry* e, int count, int first, int stride, Combine combine) {
  int best = 0;
  double best_spread = 0.0;
  for (int d0 = 0; d0 < c.dim; d0 += kSpreadDims) {
    const int dims = c.dim - d0 < kSpreadDims ? c.dim - d0 : kSpreadDims;
    double lo[kSpreadDims], hi[kSpreadDims];
    coordinate_extremes(c, e, count, first, stride, d0, dims, lo, hi);
    for (int k = 0; k < dims; ++k) {
      combine(lo[k], hi[k]);
      const double spread = __dsub_rn(hi[k], lo[k]);
      if (spread > best_spread) {
        best_spread = spread;
        best = d0 + k;
      }
    }
  }
  return best;
}

struct BlockMinMax {
  double* scratch;
  __device__ void operator()(double& lo, double& hi) const { block_min_max(lo, hi, scratch); }
};
struct OneThread {
  __device__ void operator()(double&, double&) const {}
};

/// Element i of a round's range e[0, m) (pivot e[0]): a left stop (i > 0, key not less than the pivot:
/// bit 0) and a right stop (the pivot not less than the key: bit 16).
__device__ __forceinline__ int stop_bits(const Entry* e, int i, int m, float pivot) {
  if (i >= m) return 0;
  const float key = e[i].key;
  return (i > 0 && !(key < pivot) ? 1 : 0) | (!(pivot < key) ? 1 << 16 : 0);
}

/// The swaps of a Hoare partition from its stops (lefts[0, left_total), rights[0, right_total), both
/// ascending): the most pairs k whose k-th left stop lies before the k-th right stop from the end.
__device__ __forceinline__ int hoare_pairs(const int* lefts, int left_total, const int* rights, int right_total) {
  int lo = 0, hi = left_total < right_total ? left_total : right_total;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (lefts[mid - 1] < rights[right_total - mid]) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// Where the Hoare scan of n elements ends after `pairs` swaps: the next left stop, or the last swapped
/// right stop when it comes first.
__device__ __forceinline__ int hoare_cut(const int* lefts, int left_total, const int* rights, int right_total, int n,
                                         int pairs) {
  int cut = pairs < left_total ? lefts[pairs] : n;
  if (pairs > 0 && rights[right_total - pairs] < cut) cut = rights[right_total - pairs];
  return cut;
}

/// One Hoare partition of e[0, n) around e[0].key from its stop positions; returns the cut. One pass lists
/// the left stops (lefts[k]: the k-th from the start) and the right stops (rights[k]: the k-th from the
/// start, so the k-th from the end is rights[R - 1 - k]); the swaps are the pairs that have not crossed,
/// a prefix of k (the left stops increase, the right ones from the end decrease), found by a search.
__device__ int block_partition(Entry* e, int n, int* lefts, int* rights, int* shared) {
  const int t = static_cast<int>(threadIdx.x), threads = static_cast<int>(blockDim.x);
  const float pivot = e[0].key;
  int left_total = 0, right_total = 0, parity = 0;
  for (int tile = 0; tile < n; tile += threads, parity ^= 1) {
    const int i = tile + t, bits = stop_bits(e, i, n, pivot);
    int total = 0;
    const int before = block_exclusive_scan(bits, shared + parity * kMaxWarps, total);
    if (bits & 1) lefts[left_total + (before & 0xffff)] = i;
    if (bits >> 16) rights[right_total + (before >> 16)] = i;
    left_total += total & 0xffff;
    right_total += total >> 16;
  }
  __syncthreads();
  int* pairs_at = shared + 2 * kMaxWarps;
  if (t == 0) *pairs_at = hoare_pairs(lefts, left_total, rights, right_total);
  __syncthreads();
  const int pairs = *pairs_at;
  for (int k = t; k < pairs; k += threads) replica::swap_at(e + lefts[k], e + rights[right_total - 1 - k]);
  const int cut = hoare_cut(lefts, left_total, rights, right_total, n, pairs);
  __syncthreads();
  return cut;
}

/// The rest of std::nth_element(e, e + nth, e + count) by the block from the state of a round (the range
/// [first, last) still to select in and the depth limit left; at the start 0, count and
/// depth_limit(count)), with the replica's element order.
__device__ void block_select(Entry* e, int nth, int first, int last, long long depth, int* lefts, int* rights,
                             int* shared) {
  const int t = static_cast<int>(threadIdx.x);
  while (last - first > 3) {
    if (depth == 0) {
      if (t == 0) {
        replica::heap_select(e + first, e + nth + 1, e + last, ByKey{});
        replica::swap_at(e + first, e + nth);
      }
      __syncthreads();
      return;
    }
    --depth;
    if (t == 0) replica::pivot_to_first(e + first, e + last, ByKey{});
    __syncthreads();
    const int cut = first + block_partition(e + first, last - first, lefts, rights, shared);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  if (t == 0) replica::insertion_sort(e + first, e + last, ByKey{});
  __syncthreads();
}

/// Every node of a level of the listed samples (a block each): split dimension, keys, selection.
__global__ void __launch_bounds__(kMaxThreads) split_level_kernel(const Context c, const LaunchSample* list, int count) {
  __shared__ int shared[2 * kMaxWarps + 1];
  __shared__ double scratch[2 * kMaxWarps];
  long long node = 0;
  const LaunchSample ls = find_unit(list, count, static_cast<long long>(blockIdx.x), node);
  const SampleShape s = c.shapes[ls.sample];
  int start = 0, end = 0;
  node_range(s.n, ls.level, node, start, end);
  Entry* e = c.work + s.begin + start;
  const int n = end - start;
  const int d =
      split_dimension(c, e, n, static_cast<int>(threadIdx.x), static_cast<int>(blockDim.x), BlockMinMax{scratch});
  for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x))
    e[i].key = c.positions[static_cast<long long>(e[i].point) * c.dim + d];
  __syncthreads();
  block_select(e, (start + end) / 2 - start, 0, n, replica::depth_limit(n), c.lefts + s.begin + start,
               c.rights + s.begin + start, shared);
}

// ---- a thread per node --------------------------------------------------------------------------------

struct Pending {
  int start, end, level;
  long long out;  // the node's first slot (tree) in its sample
};

/// Every node of the listed samples' serial level (a thread each): its whole subtree, depth first, as
/// TreeBuilder::build / Partitioner::part.
__global__ void __launch_bounds__(kSerialThreads) finish_kernel(const Context c, const LaunchSample* list, int count,
                                                                 long long units) {
  const long long u = static_cast<long long>(blockIdx.x) * kSerialThreads + threadIdx.x;
  if (u >= units) return;
  long long node = 0;
  const LaunchSample ls = find_unit(list, count, u, node);
  const SampleShape s = c.shapes[ls.sample];
  Pending stack[kMaxStack];
  int top = 0;
  {
    int start = 0, end = 0;
    node_range(s.n, ls.level, node, start, end);
    stack[top++] = Pending{start, end, ls.level, node << (s.levels - ls.level + 1)};
  }
  Entry* const w = c.work + s.begin;
  while (top > 0) {
    const Pending p = stack[--top];
    const int n = p.end - p.start;
    Entry* e = w + p.start;
    if (c.tree && p.level == s.levels) {  // a leaf: 1 or 2 points, the first repeated as padding
      const long long slot = s.slot_begin + p.out;
      c.index[slot] = e[0].point;
      c.mask[slot] = 1;
      c.index[slot + 1] = e[n == 1 ? 0 : 1].point;
      c.mask[slot + 1] = n == 1 ? 0 : 1;
      continue;
    }
    if (!c.tree && (p.level == s.levels || n <= 1)) {
      for (int i = 0; i < n; ++i) c.index[s.begin + p.start + i] = e[i].point;
      continue;
    }
    const int d = split_dimension(c, e, n, 1, 1, OneThread{});
    for (int i = 0; i < n; ++i) e[i].key = c.positions[static_cast<long long>(e[i].point) * c.dim + d];
    const int mid = (p.start + p.end) / 2;
    if (n > 1) replica::nth_element(e, e + (mid - p.start), e + n, ByKey{});
    const long long child_slots = 1LL << (s.levels - p.level);
    stack[top++] = Pending{mid, p.end, p.level + 1, c.tree ? p.out + child_slots : 0};
    stack[top++] = Pending{p.start, mid, p.level + 1, p.out};
  }
}

}  // namespace ball_tree_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
