// The top levels of the ball trees (ball_tree.cu): a node of more than `wide` points is worked on by many
// blocks at once, so that the root of a large sample does not wait for one block. Each introselect round
// of such a node is a sequence of launches over (tile, node) blocks, the round's state kept in a WideNode
// between them: the pivot (one thread per node), the counts of each tile's left and right stops, their
// scan per node, the stops listed at their scanned places, the number of swaps found by the same search as
// block_partition's, the swaps. The same rounds as block_select's, so the same element order; once a
// node's range is down to `wide` points (or its depth limit is spent) select_rest_kernel finishes it with
// one block from the state the rounds left.
#pragma once

#include <cstdint>

#include "ball_tree_kernels.cuh"
#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/introselect.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace ball_tree_kernels {

constexpr int kWideThreads = 256;                     // a (tile, node) block
constexpr int kWidePer = 8;                           // consecutive elements per thread
constexpr int kWideTile = kWideThreads * kWidePer;    // elements per tile
constexpr int kWideNodeThreads = 128;                 // a thread per node

/// A tile's left and right stops: their numbers, then (scanned) the places of its first ones.
struct StopCounts {
  int left, right;
};

/// A wide node between the launches of its rounds. Positions (first, last, nth, the stops) are relative
/// to the node's first row.
struct WideNode {
  long long begin;  // the node's first row in the working order (its sample's first row + its start)
  int n, nth;       // its points, and the middle the selection puts in place
  int first, last;  // the range the rounds still select in
  long long depth;  // the depth limit left
  int dim;          // the split dimension
  int active;       // 1 while the wide rounds go on; 0 once select_rest_kernel is to finish the node
  int left_total, right_total, pairs, base;  // the last round's stops, swaps and range start
};

/// The node of block row blockIdx.y and the first element of this block's tile, or false when the node's
/// current range [first, last) (all of it with `whole`) ends before the tile.
__device__ __forceinline__ bool wide_tile(const WideNode* nodes, bool whole, WideNode& w, int& tile_start) {
  w = nodes[blockIdx.y];
  tile_start = static_cast<int>(blockIdx.x) * kWideTile;
  return tile_start < (whole ? w.n : w.last - w.first);
}

/// The wide nodes of a level, a thread each: their rows, middles and the selection's initial state.
__global__ void __launch_bounds__(kWideNodeThreads) wide_setup_kernel(const Context c, const LaunchSample* list,
                                                                      int count, int units, WideNode* nodes) {
  const int u = static_cast<int>(blockIdx.x) * kWideNodeThreads + static_cast<int>(threadIdx.x);
  if (u >= units) return;
  long long node = 0;
  const LaunchSample ls = find_unit(list, count, u, node);
  const SampleShape s = c.shapes[ls.sample];
  int start = 0, end = 0;
  node_range(s.n, ls.level, node, start, end);
  WideNode w{};
  w.begin = s.begin + start;
  w.n = end - start;
  w.nth = (start + end) / 2 - start;
  w.first = 0;
  w.last = w.n;
  w.depth = replica::depth_limit(w.n);
  w.active = 1;
  nodes[u] = w;
}

/// Each tile's minima and maxima of every coordinate (in double, as split_dimension): `partial` holds
/// 2 dim doubles per (node, tile), tile t of node u at (u * tiles + t).
__global__ void __launch_bounds__(kWideThreads) wide_spread_kernel(const Context c, const WideNode* nodes, int tiles,
                                                                  double* partial) {
  __shared__ double scratch[2 * kMaxWarps];
  WideNode w;
  int tile_start = 0;
  if (!wide_tile(nodes, true, w, tile_start)) return;  // uniform over the block
  const Entry* e = c.work + w.begin + tile_start;
  const int count = w.n - tile_start < kWideTile ? w.n - tile_start : kWideTile;
  double* out = partial + (static_cast<long long>(blockIdx.y) * tiles + blockIdx.x) * 2 * c.dim;
  for (int d0 = 0; d0 < c.dim; d0 += kSpreadDims) {
    const int dims = c.dim - d0 < kSpreadDims ? c.dim - d0 : kSpreadDims;
    double lo[kSpreadDims], hi[kSpreadDims];
    coordinate_extremes(c, e, count, static_cast<int>(threadIdx.x), kWideThreads, d0, dims, lo, hi);
    for (int k = 0; k < dims; ++k) {
      block_min_max(lo[k], hi[k], scratch);
      if (threadIdx.x == 0) {
        out[2 * (d0 + k)] = lo[k];
        out[2 * (d0 + k) + 1] = hi[k];
      }
    }
  }
}

/// Per node (a thread each): the tiles' extremes merged, the split dimension of strictly largest spread.
__global__ void __launch_bounds__(kWideNodeThreads) wide_dimension_kernel(const Context c, int units, int tiles,
                                                                          const double* partial, WideNode* nodes) {
  const int u = static_cast<int>(blockIdx.x) * kWideNodeThreads + static_cast<int>(threadIdx.x);
  if (u >= units) return;
  const int node_tiles = (nodes[u].n + kWideTile - 1) / kWideTile;
  const double* p = partial + static_cast<long long>(u) * tiles * 2 * c.dim;
  int best = 0;
  double best_spread = 0.0;
  for (int d = 0; d < c.dim; ++d) {
    double lo = p[2 * d], hi = p[2 * d + 1];
    for (int t = 1; t < node_tiles; ++t) {
      const double l = p[(static_cast<long long>(t) * c.dim + d) * 2], h = p[(static_cast<long long>(t) * c.dim + d) * 2 + 1];
      lo = l < lo ? l : lo;
      hi = h > hi ? h : hi;
    }
    const double spread = __dsub_rn(hi, lo);
    if (spread > best_spread) {
      best_spread = spread;
      best = d;
    }
  }
  nodes[u].dim = best;
}

/// The keys of every point of the node: its coordinate in the split dimension.
__global__ void __launch_bounds__(kWideThreads) wide_keys_kernel(const Context c, const WideNode* nodes) {
  WideNode w;
  int tile_start = 0;
  if (!wide_tile(nodes, true, w, tile_start)) return;
  Entry* e = c.work + w.begin;
  const int end = w.n - tile_start < kWideTile ? w.n : tile_start + kWideTile;
  for (int i = tile_start + static_cast<int>(threadIdx.x); i < end; i += kWideThreads)
    e[i].key = c.positions[static_cast<long long>(e[i].point) * c.dim + w.dim];
}

/// A round's start (a thread per node): past `wide` points (and with depth left) the median-of-three pivot
/// moved to the range's first place; else the node is handed to select_rest_kernel.
__global__ void __launch_bounds__(kWideNodeThreads) wide_pivot_kernel(Entry* work, int units, int wide,
                                                                      WideNode* nodes) {
  const int u = static_cast<int>(blockIdx.x) * kWideNodeThreads + static_cast<int>(threadIdx.x);
  if (u >= units || !nodes[u].active) return;
  WideNode& w = nodes[u];
  if (w.last - w.first <= wide || w.depth == 0) {
    w.active = 0;
    return;
  }
  --w.depth;
  replica::pivot_to_first(work + w.begin + w.first, work + w.begin + w.last, ByKey{});
}

/// Each tile's numbers of left and right stops (counts[u * tiles + t]: left, right).
__global__ void __launch_bounds__(kWideThreads) wide_count_kernel(const Entry* work, const WideNode* nodes, int tiles,
                                                                 StopCounts* counts) {
  __shared__ int shared[kMaxWarps];
  WideNode w;
  int tile_start = 0;
  if (!nodes[blockIdx.y].active || !wide_tile(nodes, false, w, tile_start)) return;
  const Entry* e = work + w.begin + w.first;
  const int m = w.last - w.first, i0 = tile_start + static_cast<int>(threadIdx.x) * kWidePer;
  const float pivot = e[0].key;
  int bits = 0;
  for (int r = 0; r < kWidePer; ++r) bits += stop_bits(e, i0 + r, m, pivot);
  int total = 0;
  (void)block_exclusive_scan(bits, shared, total);
  if (threadIdx.x == 0) counts[static_cast<long long>(blockIdx.y) * tiles + blockIdx.x] = StopCounts{total & 0xffff, total >> 16};
}

/// Per node (a block each): the tiles' counts scanned in place into their first left and right stop, and
/// the round's totals.
__global__ void __launch_bounds__(kWideThreads) wide_scan_kernel(int tiles, StopCounts* counts, WideNode* nodes) {
  __shared__ int shared[4 * kMaxWarps];
  WideNode& w = nodes[blockIdx.x];
  if (!w.active) return;
  const int node_tiles = (w.last - w.first + kWideTile - 1) / kWideTile;
  StopCounts* c = counts + static_cast<long long>(blockIdx.x) * tiles;
  int left_before = 0, right_before = 0, parity = 0;
  for (int t0 = 0; t0 < node_tiles; t0 += kWideThreads, parity ^= 1) {
    const int t = t0 + static_cast<int>(threadIdx.x);
    const StopCounts mine = t < node_tiles ? c[t] : StopCounts{0, 0};
    int left_total = 0, right_total = 0;
    const int left = block_exclusive_scan(mine.left, shared + parity * 2 * kMaxWarps, left_total);
    const int right = block_exclusive_scan(mine.right, shared + parity * 2 * kMaxWarps + kMaxWarps, right_total);
    if (t < node_tiles) c[t] = StopCounts{left_before + left, right_before + right};
    left_before += left_total;
    right_before += right_total;
  }
  if (threadIdx.x == 0) {
    w.left_total = left_before;
    w.right_total = right_before;
  }
}

/// The stops listed at their places: lefts[k] the k-th left stop, rights[k] the k-th right stop, both from
/// the range's start (the node's lists start at its first row, as block_partition's).
__global__ void __launch_bounds__(kWideThreads) wide_write_kernel(const Context c, const WideNode* nodes, int tiles,
                                                                 const StopCounts* counts) {
  __shared__ int shared[kMaxWarps];
  WideNode w;
  int tile_start = 0;
  if (!nodes[blockIdx.y].active || !wide_tile(nodes, false, w, tile_start)) return;
  const Entry* e = c.work + w.begin + w.first;
  const int m = w.last - w.first, i0 = tile_start + static_cast<int>(threadIdx.x) * kWidePer;
  const float pivot = e[0].key;
  int bits[kWidePer], mine = 0;
  for (int r = 0; r < kWidePer; ++r) {
    bits[r] = stop_bits(e, i0 + r, m, pivot);
    mine += bits[r];
  }
  int total = 0;
  const int before = block_exclusive_scan(mine, shared, total);
  const StopCounts at = counts[static_cast<long long>(blockIdx.y) * tiles + blockIdx.x];
  int left = at.left + (before & 0xffff), right = at.right + (before >> 16);
  int* lefts = c.lefts + w.begin;
  int* rights = c.rights + w.begin;
  for (int r = 0; r < kWidePer; ++r) {
    if (bits[r] & 1) lefts[left++] = i0 + r;
    if (bits[r] >> 16) rights[right++] = i0 + r;
  }
}

/// Per node (a thread each): the swaps of the round (the most pairs k whose k-th left stop lies before the
/// k-th right stop from the end), the cut where the Hoare scan ends, and the range the next round keeps.
__global__ void __launch_bounds__(kWideNodeThreads) wide_search_kernel(const Context c, int units, WideNode* nodes) {
  const int u = static_cast<int>(blockIdx.x) * kWideNodeThreads + static_cast<int>(threadIdx.x);
  if (u >= units || !nodes[u].active) return;
  WideNode& w = nodes[u];
  const int* lefts = c.lefts + w.begin;
  const int* rights = c.rights + w.begin;
  const int pairs = hoare_pairs(lefts, w.left_total, rights, w.right_total);
  const int cut = w.first + hoare_cut(lefts, w.left_total, rights, w.right_total, w.last - w.first, pairs);
  w.pairs = pairs;
  w.base = w.first;
  if (cut <= w.nth) w.first = cut;
  else w.last = cut;
}

/// The round's swaps, the k-th left stop with the k-th right stop from the end for k < pairs (disjoint
/// pairs, so every k at once).
__global__ void __launch_bounds__(kWideThreads) wide_swap_kernel(const Context c, const WideNode* nodes, int tiles) {
  const WideNode w = nodes[blockIdx.y];
  if (!w.active) return;
  Entry* e = c.work + w.begin + w.base;
  const int* lefts = c.lefts + w.begin;
  const int* rights = c.rights + w.begin;
  for (long long k = static_cast<long long>(blockIdx.x) * kWideThreads + threadIdx.x; k < w.pairs;
       k += static_cast<long long>(tiles) * kWideThreads)
    replica::swap_at(e + lefts[k], e + rights[w.right_total - 1 - k]);
}

/// The rest of each wide node's selection by one block, from the state its rounds left.
__global__ void __launch_bounds__(kMaxThreads) select_rest_kernel(const Context c, const WideNode* nodes) {
  __shared__ int shared[2 * kMaxWarps + 1];
  const WideNode w = nodes[blockIdx.x];
  block_select(c.work + w.begin, w.nth, w.first, w.last, w.depth, c.lefts + w.begin, c.rights + w.begin, shared);
}

}  // namespace ball_tree_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
