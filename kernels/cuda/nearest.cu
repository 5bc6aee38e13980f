// Exact k-nearest-neighbour lists (surrogate/kernels/cuda_nearest.hpp). Each sample gets a uniform grid of
// about two nodes per cell (at most one cell per node); the nodes are binned by cell (a count, one scan, a
// scatter: the order inside a cell is free, the lists do not depend on it). One thread per query visits
// rings of cells around its own until no node of an unvisited cell can come before its k-th best, by a
// bound taken from the query's coordinates with a margin far above the rounding of the cell indices; the
// k best are kept ordered by (squared distance, node), a total order, so the result is unique.
#include <cmath>
#include <cstdint>
#include <string>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_nearest.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 256;       // grid, binning and query kernels
constexpr int kScanThreads = 1024;  // the one block of the scan
constexpr int kMaxAxisCells = 1 << 20;

/// A sample's grid: cell (x, y, z) of a position p holds floor((p - lo) / h) per axis, clamped to the grid.
struct SampleGrid {
  double lo[3];
  double h;
  int dims[3];
  long long base;  // the sample's first cell among all samples' cells
};

__device__ __forceinline__ index_t flat_index() { return static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

/// The sample holding node i: the last of the ascending offsets first[0 .. samples] at or before i.
__device__ __forceinline__ int sample_of(const std::int64_t* first, int samples, index_t i) {
  int lo = 0, hi = samples - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ int cell_index(double p, double lo, double h, int dims) {
  const double v = floor((p - lo) / h);
  if (!(v >= 0.0)) return 0;  // NaN too
  if (!(v <= static_cast<double>(dims - 1))) return dims - 1;
  return static_cast<int>(v);
}

/// One block per sample: the bounding box, then a cell width h giving about two nodes per cell over the
/// axes the sample spans, widened until the grid has at most max(1, nodes) cells.
__global__ void __launch_bounds__(kThreads) grid_kernel(const NearestListsArgs a, SampleGrid* grids) {
  __shared__ float low[3][kThreads], high[3][kThreads];
  const int s = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x);
  const index_t b = a.first[s], e = a.first[s + 1];
  const float inf = __int_as_float(0x7f800000);
  float mn[3] = {inf, inf, inf}, mx[3] = {-inf, -inf, -inf};
  for (index_t i = b + t; i < e; i += kThreads)
    for (int c = 0; c < 3; ++c) {
      const float p = a.positions[i * 3 + c];
      mn[c] = fminf(mn[c], p);
      mx[c] = fmaxf(mx[c], p);
    }
  for (int c = 0; c < 3; ++c) {
    low[c][t] = mn[c];
    high[c][t] = mx[c];
  }
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half)
      for (int c = 0; c < 3; ++c) {
        low[c][t] = fminf(low[c][t], low[c][t + half]);
        high[c][t] = fmaxf(high[c][t], high[c][t + half]);
      }
    __syncthreads();
  }
  if (t != 0) return;
  const long long n = static_cast<long long>(e - b), cap = n > 1 ? n : 1;
  SampleGrid g{};
  double ext[3], volume = 1.0;
  int spanned = 0;
  for (int c = 0; c < 3; ++c) {
    g.lo[c] = n > 0 ? static_cast<double>(low[c][0]) : 0.0;
    ext[c] = n > 0 ? static_cast<double>(high[c][0]) - g.lo[c] : 0.0;
    if (ext[c] > 0.0) {
      ++spanned;
      volume *= ext[c];
    }
  }
  const double per_cell = 2.0, cells_wanted = n > 2 ? static_cast<double>(n) / per_cell : 1.0;
  double h = spanned > 0 ? pow(volume / cells_wanted, 1.0 / spanned) : 1.0;
  if (!(h > 0.0) || !(h < 1e300)) h = fmax(fmax(ext[0], ext[1]), fmax(ext[2], 1e-300));
  for (;;) {
    long long cells = 1;
    for (int c = 0; c < 3; ++c) {
      const double d = ext[c] > 0.0 ? floor(ext[c] / h) + 1.0 : 1.0;
      g.dims[c] = d < kMaxAxisCells ? static_cast<int>(d) : kMaxAxisCells;
      cells *= g.dims[c];
    }
    if (cells <= cap) break;
    h *= 1.25;
  }
  g.h = h;
  grids[s] = g;
}

/// One thread: each sample's first cell, and the total after the last (base[samples]).
__global__ void base_kernel(int samples, SampleGrid* grids, long long* total) {
  long long run = 0;
  for (int s = 0; s < samples; ++s) {
    grids[s].base = run;
    run += static_cast<long long>(grids[s].dims[0]) * grids[s].dims[1] * grids[s].dims[2];
  }
  *total = run;
}

__global__ void __launch_bounds__(kThreads) count_kernel(const NearestListsArgs a, const SampleGrid* grids,
                                                          int* node_cell, int* count) {
  const index_t i = flat_index();
  if (i >= a.nodes) return;
  const SampleGrid& g = grids[sample_of(a.first, a.samples, i)];
  int at[3];
  for (int c = 0; c < 3; ++c) at[c] = cell_index(static_cast<double>(a.positions[i * 3 + c]), g.lo[c], g.h, g.dims[c]);
  const int cell = static_cast<int>(g.base + (static_cast<long long>(at[2]) * g.dims[1] + at[1]) * g.dims[0] + at[0]);
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

/// The k best so far of one query, ascending by (squared distance, node).
struct Best {
  double d[kMaxNearest];
  int id[kMaxNearest];
  int count = 0;

  __device__ __forceinline__ void consider(double dist, int node, int k) {
    int j;
    if (count == k) {
      if (dist > d[k - 1] || (dist == d[k - 1] && node > id[k - 1])) return;
      j = k - 1;
    } else {
      j = count++;
    }
    while (j > 0 && (d[j - 1] > dist || (d[j - 1] == dist && id[j - 1] > node))) {
      d[j] = d[j - 1];
      id[j] = id[j - 1];
      --j;
    }
    d[j] = dist;
    id[j] = node;
  }
};

__global__ void __launch_bounds__(kThreads) query_kernel(const NearestListsArgs a, const SampleGrid* grids,
                                                          const int* start, const int* sorted_id,
                                                          const float* sorted_pos) {
  const index_t t = flat_index();
  if (t >= a.queries) return;
  const index_t node = a.query_ids ? a.query_ids[t] : t;
  const int s = sample_of(a.first, a.samples, node);
  const SampleGrid& g = grids[s];
  const index_t n = a.first[s + 1] - a.first[s];
  const int k = static_cast<int>(n < a.k ? n : a.k);
  double q[3];
  int at[3], reach = 0;  // reach: the ring that covers the whole grid
  for (int c = 0; c < 3; ++c) {
    q[c] = static_cast<double>(a.positions[node * 3 + c]);
    at[c] = cell_index(q[c], g.lo[c], g.h, g.dims[c]);
    const int far = at[c] > g.dims[c] - 1 - at[c] ? at[c] : g.dims[c] - 1 - at[c];
    reach = far > reach ? far : reach;
  }
  Best best;
  const auto visit = [&](int x, int y, int z) {
    const long long cell = g.base + (static_cast<long long>(z) * g.dims[1] + y) * g.dims[0] + x;
    for (int slot = start[cell], end = start[cell + 1]; slot < end; ++slot) {
      const float* p = sorted_pos + static_cast<index_t>(slot) * 3;
      const double dx = __dsub_rn(q[0], static_cast<double>(p[0])), dy = __dsub_rn(q[1], static_cast<double>(p[1])),
                   dz = __dsub_rn(q[2], static_cast<double>(p[2]));
      const double dist = __dadd_rn(__dadd_rn(__dmul_rn(dx, dx), __dmul_rn(dy, dy)), __dmul_rn(dz, dz));
      best.consider(dist, sorted_id[slot], k);
    }
  };
  for (int r = 0;; ++r) {
    const int z0 = max(at[2] - r, 0), z1 = min(at[2] + r, g.dims[2] - 1);
    const int y0 = max(at[1] - r, 0), y1 = min(at[1] + r, g.dims[1] - 1);
    for (int z = z0; z <= z1; ++z)
      for (int y = y0; y <= y1; ++y) {
        if (z == at[2] - r || z == at[2] + r || y == at[1] - r || y == at[1] + r) {
          for (int x = max(at[0] - r, 0), x1 = min(at[0] + r, g.dims[0] - 1); x <= x1; ++x) visit(x, y, z);
        } else {  // inside the ring's faces in y and z: only its two x faces
          if (at[0] - r >= 0) visit(at[0] - r, y, z);
          if (r > 0 && at[0] + r < g.dims[0]) visit(at[0] + r, y, z);
        }
      }
    if (r >= reach) break;
    if (best.count < k) continue;
    // The nearest any node of an unvisited cell can be: its cell index is past at +- r on some axis.
    double bound = 1e308;
    for (int c = 0; c < 3; ++c) {
      const double slack = 1e-9 * (fabs(g.lo[c]) + fabs(q[c]) + (g.dims[c] + 1.0) * g.h);
      if (at[c] + r + 1 <= g.dims[c] - 1) bound = fmin(bound, g.lo[c] + (at[c] + r + 1) * g.h - q[c] - slack);
      if (at[c] - r - 1 >= 0) bound = fmin(bound, q[c] - (g.lo[c] + (at[c] - r) * g.h) - slack);
    }
    if (bound > 0.0 && best.d[k - 1] < bound * bound * (1.0 - 1e-12)) break;
  }
  std::int64_t* out = a.lists + t * a.k;
  for (int j = 0; j < a.k; ++j) out[j] = best.id[j < k ? j : 0];
}

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

void nearest_lists(const NearestListsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, nearest_lists(a, stream));
  require(a.k >= 1 && a.k <= kMaxNearest, "nearest_lists", "k = " + std::to_string(a.k) + " outside 1.." +
                                                                std::to_string(kMaxNearest));
  require(a.samples >= 1 && a.nodes >= 0 && a.queries >= 0 && a.nodes + a.samples < 2147483647LL, "nearest_lists",
          "need samples >= 1, nodes, queries >= 0 and nodes + samples < 2^31 - 1");
  require(a.query_ids || a.queries == a.nodes, "nearest_lists", "without query ids the queries are the nodes");
  require(a.first && a.work && (a.nodes == 0 || a.positions) && (a.queries == 0 || a.lists), "nearest_lists",
          "a null array");
  if (a.queries == 0) return;
  require(a.samples <= 2147483647 && a.nodes > 0, "nearest_lists", "queries but no nodes");
  const auto nodes = static_cast<std::size_t>(a.nodes), samples = static_cast<std::size_t>(a.samples),
             cells = nodes + samples;  // each sample has at most max(1, its nodes) cells
  const std::size_t grids_bytes = aligned(samples * sizeof(SampleGrid)), total_bytes = aligned(sizeof(long long)),
                    node_bytes = aligned(nodes * sizeof(int)), start_bytes = aligned((cells + 1) * sizeof(int)),
                    cursor_bytes = aligned(cells * sizeof(int)), pos_bytes = aligned(nodes * 3 * sizeof(float));
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  a.work->bytes.resize(grids_bytes + total_bytes + 2 * node_bytes + start_bytes + cursor_bytes + node_bytes + pos_bytes,
                       device);
  unsigned char* at = a.work->bytes.data();
  const auto take = [&](std::size_t bytes) {
    unsigned char* p = at;
    at += bytes;
    return p;
  };
  auto* grids = reinterpret_cast<SampleGrid*>(take(grids_bytes));
  auto* total = reinterpret_cast<long long*>(take(total_bytes));
  auto* node_cell = reinterpret_cast<int*>(take(node_bytes));
  auto* start = reinterpret_cast<int*>(take(start_bytes));
  auto* cursor = reinterpret_cast<int*>(take(cursor_bytes));
  auto* sorted_id = reinterpret_cast<int*>(take(node_bytes));
  auto* sorted_pos = reinterpret_cast<float*>(take(pos_bytes));
  launch(grid_kernel, dim3(static_cast<unsigned>(a.samples)), kThreads, 0, stream, a, grids);
  check_launch("grid_kernel");
  launch(base_kernel, dim3(1), dim3(1), 0, stream, a.samples, grids, total);
  check_launch("base_kernel");
  zero(start, (cells + 1) * sizeof(int), stream);
  launch(count_kernel, dim3(blocks_for("nearest_lists", a.nodes, kThreads)), kThreads, 0, stream, a, grids, node_cell,
         start);
  check_launch("count_kernel");
  launch(scan_kernel, dim3(1), kScanThreads, 0, stream, total, start, cursor);
  check_launch("scan_kernel");
  launch(scatter_kernel, dim3(blocks_for("nearest_lists", a.nodes, kThreads)), kThreads, 0, stream, a, node_cell,
         cursor, sorted_id, sorted_pos);
  check_launch("scatter_kernel");
  launch(query_kernel, dim3(blocks_for("nearest_lists", a.queries, kThreads)), kThreads, 0, stream, a, grids, start,
         sorted_id, sorted_pos);
  check_launch("query_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
