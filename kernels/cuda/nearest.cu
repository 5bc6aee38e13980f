// Exact k-nearest-neighbour lists (surrogate/kernels/cuda_nearest.hpp) on the grids of
// surrogate/kernels/grid_nearest.hpp, the CPU's search: one block per sample sizes its grid and makes it
// finer where the nodes crowd few cells (grid_nearest::refine_grid, after a first count), the nodes are
// binned by cell (a count, one scan, a scatter: the order inside a cell is free, the lists do not depend
// on it), and one thread per binned node runs grid_nearest::search for the queries at that node (once
// for a node asked for twice), so that a warp's queries are neighbours and read the same cells.
#include <cmath>
#include <cstdint>
#include <string>

#include "block_box.cuh"
#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_nearest.hpp"
#include "surrogate/kernels/grid_nearest.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 256;       // grid, binning and query kernels
constexpr int kScanThreads = 1024;  // the one block of the scan

using grid_nearest::Grid;

/// One block per sample: the bounding box (a block reduction, its upper corner kept in box_hi), then
/// grid_nearest::make_grid.
__global__ void __launch_bounds__(kThreads) grid_kernel(const NearestListsArgs a, Grid* grids, float* box_hi) {
  const int s = static_cast<int>(blockIdx.x);
  const index_t b = a.first[s], e = a.first[s + 1];
  float lo[3], hi[3];
  block_box<kThreads>(a.positions, b, e, lo, hi);
  if (threadIdx.x != 0) return;
  for (int c = 0; c < 3; ++c) box_hi[s * 3 + c] = hi[c];
  grids[s] = grid_nearest::make_grid(lo, hi, static_cast<long long>(e - b));
}

/// One block per sample: its occupied cells (counted by count_kernel in start) summed, then
/// grid_nearest::refine_grid.
__global__ void __launch_bounds__(kThreads) refine_kernel(const NearestListsArgs a, Grid* grids, const float* box_hi,
                                                           const int* start) {
  __shared__ long long used[kThreads];
  const int s = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x);
  const Grid g = grids[s];
  long long mine = 0;
  for (long long c = g.base + t; c < g.base + g.cells(); c += kThreads) mine += start[c] > 0;
  used[t] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half) used[t] += used[t + half];
    __syncthreads();
  }
  if (t != 0) return;
  const float hi[3] = {box_hi[s * 3], box_hi[s * 3 + 1], box_hi[s * 3 + 2]};
  grids[s] = grid_nearest::refine_grid(g, hi, static_cast<long long>(a.first[s + 1] - a.first[s]), used[0]);
}

/// One thread: each sample's first cell, and the total after the last.
__global__ void base_kernel(int samples, Grid* grids, long long* total) {
  long long run = 0;
  for (int s = 0; s < samples; ++s) {
    grids[s].base = run;
    run += grids[s].cells();
  }
  *total = run;
}

__global__ void __launch_bounds__(kThreads) count_kernel(const NearestListsArgs a, const Grid* grids, int* node_cell,
                                                          int* count) {
  const index_t i = flat_index();
  if (i >= a.nodes) return;
  const int cell = static_cast<int>(grid_nearest::cell_of(grids[range_of(a.first, a.samples, i)], a.positions + i * 3));
  node_cell[i] = cell;
  atomicAdd(count + cell, 1);
}

/// One block: start[c] (holding cell c's count) becomes the exclusive prefix sum, start[cells] the total,
/// and cursor a copy of the starts.
__global__ void __launch_bounds__(kScanThreads) scan_kernel(const long long* total, int* start, int* cursor) {
  __shared__ int sums[kScanThreads];
  const long long cells = *total;
  const int t = static_cast<int>(threadIdx.x);
  const long long per = (cells + kScanThreads - 1) / kScanThreads, c0 = t * per,
                  c1 = c0 + per < cells ? c0 + per : cells;
  int sum = 0;
  for (long long c = c0; c < c1; ++c) sum += start[c];
  sums[t] = sum;
  __syncthreads();
  if (t == 0) {
    int run = 0;
    for (int u = 0; u < kScanThreads; ++u) {
      const int v = sums[u];
      sums[u] = run;
      run += v;
    }
  }
  __syncthreads();
  int run = sums[t];
  for (long long c = c0; c < c1; ++c) {
    const int v = start[c];
    start[c] = run;
    cursor[c] = run;
    run += v;
  }
  if (t == kScanThreads - 1) start[cells] = run;
}

__global__ void __launch_bounds__(kThreads) scatter_kernel(const NearestListsArgs a, const int* node_cell, int* cursor,
                                                            int* sorted_id, float* sorted_pos) {
  const index_t i = flat_index();
  if (i >= a.nodes) return;
  const int slot = atomicAdd(cursor + node_cell[i], 1);
  sorted_id[slot] = static_cast<int>(i);
  for (int c = 0; c < 3; ++c) sorted_pos[static_cast<index_t>(slot) * 3 + c] = a.positions[i * 3 + c];
}

/// The queries at each node as a linked list: query_of[node] the first (-1: none, the array was filled
/// with -1), next_query[t] the one after query t (-1 at the end). A node asked for twice is searched once.
__global__ void __launch_bounds__(kThreads) mark_queries_kernel(const NearestListsArgs a, int* query_of,
                                                                 int* next_query) {
  const index_t t = flat_index();
  if (t >= a.queries) return;
  next_query[t] = atomicExch(query_of + (a.query_ids ? a.query_ids[t] : t), static_cast<int>(t));
}

__global__ void __launch_bounds__(kThreads) query_kernel(const NearestListsArgs a, const Grid* grids, const int* start,
                                                          const int* sorted_id, const float* sorted_pos,
                                                          const int* query_of, const int* next_query) {
  const index_t at = flat_index();  // the binned node's slot
  if (at >= a.nodes) return;
  const index_t node = sorted_id[at];
  if (query_of[node] < 0) return;
  const int s = range_of(a.first, a.samples, node);
  const index_t n = a.first[s + 1] - a.first[s];
  const int k = static_cast<int>(n < a.k ? n : a.k);
  const double q[3] = {static_cast<double>(sorted_pos[at * 3]), static_cast<double>(sorted_pos[at * 3 + 1]),
                       static_cast<double>(sorted_pos[at * 3 + 2])};
  grid_nearest::Best best;
  grid_nearest::search(grids[s], q, k, best, [&](long long cell) {
    for (int slot = start[cell], end = start[cell + 1]; slot < end; ++slot)
      best.consider(grid_nearest::squared_distance(q, sorted_pos + static_cast<index_t>(slot) * 3), sorted_id[slot], k);
  });
  for (int t = query_of[node]; t >= 0; t = next_query[t]) {
    std::int64_t* out = a.lists + static_cast<index_t>(t) * a.k;
    for (int j = 0; j < a.k; ++j) out[j] = best.id[j < k ? j : 0];
  }
}

}  // namespace

void nearest_lists(const NearestListsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, nearest_lists(a, stream));
  require(a.k >= 1 && a.k <= kMaxNearest, "nearest_lists", "k = " + std::to_string(a.k) + " outside 1.." +
                                                                std::to_string(kMaxNearest));
  require(a.samples >= 1 && a.nodes >= 0 && a.queries >= 0 && a.queries < 2147483647LL &&
              a.nodes * grid_nearest::kMaxCellsPerNode + a.samples < 2147483647LL,
          "nearest_lists", "need samples >= 1, 0 <= queries < 2^31 - 1 and 8 nodes + samples < 2^31 - 1");
  require(a.query_ids || a.queries == a.nodes, "nearest_lists", "without query ids the queries are the nodes");
  require(a.first && a.work && (a.nodes == 0 || a.positions) && (a.queries == 0 || a.lists), "nearest_lists",
          "a null array");
  if (a.queries == 0) return;
  require(a.samples <= 2147483647 && a.nodes > 0, "nearest_lists", "queries but no nodes");
  const auto nodes = static_cast<std::size_t>(a.nodes), samples = static_cast<std::size_t>(a.samples),
             cells = nodes * grid_nearest::kMaxCellsPerNode + samples;  // refine_grid's most per sample
  const std::size_t grids_bytes = aligned(samples * sizeof(Grid)), total_bytes = aligned(sizeof(long long)),
                    box_bytes = aligned(samples * 3 * sizeof(float)),
                    query_bytes = aligned(static_cast<std::size_t>(a.queries) * sizeof(int)),
                    node_bytes = aligned(nodes * sizeof(int)), start_bytes = aligned((cells + 1) * sizeof(int)),
                    cursor_bytes = aligned(cells * sizeof(int)), pos_bytes = aligned(nodes * 3 * sizeof(float));
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  a.work->bytes.resize(
      grids_bytes + total_bytes + box_bytes + query_bytes + 3 * node_bytes + start_bytes + cursor_bytes + pos_bytes,
      device);
  unsigned char* at = a.work->bytes.data();
  const auto take = [&](std::size_t bytes) {
    unsigned char* p = at;
    at += bytes;
    return p;
  };
  auto* grids = reinterpret_cast<Grid*>(take(grids_bytes));
  auto* total = reinterpret_cast<long long*>(take(total_bytes));
  auto* box_hi = reinterpret_cast<float*>(take(box_bytes));
  auto* query_of = reinterpret_cast<int*>(take(node_bytes));
  auto* next_query = reinterpret_cast<int*>(take(query_bytes));
  auto* node_cell = reinterpret_cast<int*>(take(node_bytes));
  auto* start = reinterpret_cast<int*>(take(start_bytes));
  auto* cursor = reinterpret_cast<int*>(take(cursor_bytes));
  auto* sorted_id = reinterpret_cast<int*>(take(node_bytes));
  auto* sorted_pos = reinterpret_cast<float*>(take(pos_bytes));
  launch(grid_kernel, dim3(static_cast<unsigned>(a.samples)), kThreads, 0, stream, a, grids, box_hi);
  check_launch("grid_kernel");
  for (int pass = 0; pass < 2; ++pass) {  // the nodes counted on each sample's grid, then on the refined one
    launch(base_kernel, dim3(1), dim3(1), 0, stream, a.samples, grids, total);
    check_launch("base_kernel");
    zero(start, (cells + 1) * sizeof(int), stream);
    launch(count_kernel, dim3(blocks_for("nearest_lists", a.nodes, kThreads)), kThreads, 0, stream, a, grids,
           node_cell, start);
    check_launch("count_kernel");
    if (pass == 0) {
      launch(refine_kernel, dim3(static_cast<unsigned>(a.samples)), kThreads, 0, stream, a, grids, box_hi, start);
      check_launch("refine_kernel");
    }
  }
  launch(scan_kernel, dim3(1), kScanThreads, 0, stream, total, start, cursor);
  check_launch("scan_kernel");
  launch(scatter_kernel, dim3(blocks_for("nearest_lists", a.nodes, kThreads)), kThreads, 0, stream, a, node_cell,
         cursor, sorted_id, sorted_pos);
  check_launch("scatter_kernel");
  fill(query_of, nodes, -1, stream);
  launch(mark_queries_kernel, dim3(blocks_for("nearest_lists", a.queries, kThreads)), kThreads, 0, stream, a, query_of,
         next_query);
  check_launch("mark_queries_kernel");
  launch(query_kernel, dim3(blocks_for("nearest_lists", a.nodes, kThreads)), kThreads, 0, stream, a, grids, start,
         sorted_id, sorted_pos, query_of, next_query);
  check_launch("query_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
