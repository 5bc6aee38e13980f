// The device code of Sequoia's voxel hierarchy (voxel_hierarchy.cu has the launcher and the order of the
// steps; surrogate/kernels/cuda_voxel_hierarchy.hpp says what they compute): a thread per row, point, voxel,
// node or mapping row, integer arithmetic and the float operations of the host builder, each rounded on its
// own.
#pragma once

#include <cstdint>

#include "block_box.cuh"
#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace voxel_kernels {

using u64 = unsigned long long;
using i64 = std::int64_t;
constexpr int kThreads = 256;

/// sequoia::fnv64: per column multiply, then xor the sign-extended value.
__device__ __forceinline__ u64 fnv64(const long long* columns, int count) {
  u64 h = 14695981039346656037ull;
  for (int j = 0; j < count; ++j) {
    h *= 1099511628211ull;
    h ^= static_cast<u64>(columns[j]);
  }
  return h;
}

/// What every kernel reads: the batch's shape and the point offsets (device).
struct Batch {
  int samples, depth, divide;
  index_t points;
  const i64* first;
  const float* xyz;
  __device__ __forceinline__ index_t size(int b) const { return first[b + 1] - first[b]; }
};

/// One block per sample: the box (lo = min - 1e-6, hi = max + 1e-6), the steps (hi - lo) / divide^l, and
/// status 1 for a non-finite coordinate or an axis without extent.
__global__ void __launch_bounds__(kThreads) box_kernel(const Batch a, float* lo, float* steps, unsigned* status) {
  const int s = static_cast<int>(blockIdx.x);
  float low[3], high[3];
  bool bad = block_box<kThreads>(a.xyz, a.first[s], a.first[s + 1], low, high);
  if (threadIdx.x != 0) return;
  float extent[3];
  for (int c = 0; c < 3; ++c) {
    lo[s * 3 + c] = __fsub_rn(low[c], 1e-6f);
    const float hi = __fadd_rn(high[c], 1e-6f);
    bad = bad || !(hi > lo[s * 3 + c]);
    extent[c] = __fsub_rn(hi, lo[s * 3 + c]);
  }
  float cells = 1.0f;
  for (int l = 0; l < a.depth; ++l, cells = __fmul_rn(cells, static_cast<float>(a.divide)))
    for (int c = 0; c < 3; ++c) steps[(static_cast<index_t>(s) * a.depth + l) * 3 + c] = __fdiv_rn(extent[c], cells);
  status[s] = static_cast<unsigned>(bad);
}

/// Row r = first[b] * depth + l * n + j (level-major within a sample, as the host's rows): the voxel
/// coordinates trunc((p - lo) / step) and the hash of (vx, vy, vz, l); status 1 outside int32.
__global__ void __launch_bounds__(kThreads) rows_kernel(const Batch a, const float* lo, const float* steps,
                                                        unsigned* status, int* coords, u64* hash, i64* row) {
  const index_t r = flat_index();
  if (r >= a.depth * a.points) return;
  const int b = range_of(a.first, a.samples, r, a.depth);
  const index_t n = a.size(b), e = r - a.first[b] * a.depth, l = e / n, j = e - l * n;
  long long columns[4];
  for (int c = 0; c < 3; ++c) {
    const float shifted = __fsub_rn(a.xyz[(a.first[b] + j) * 3 + c], lo[b * 3 + c]);
    float v = truncf(__fdiv_rn(shifted, steps[(static_cast<index_t>(b) * a.depth + l) * 3 + c]));
    if (!(v >= 0.0f && v < 2147483648.0f)) {
      atomicMax(status + b, 1u);
      v = 0.0f;
    }
    coords[r * 3 + c] = static_cast<int>(v);
    columns[c] = static_cast<int>(v);
  }
  columns[3] = l;
  hash[r] = fnv64(columns, 4);
  row[r] = r;
}

/// keys[k] = the sample holding element of[k] (elements numbered by first[] * scale): the second,
/// stable sort groups the hash order by sample.
__global__ void __launch_bounds__(kThreads) sample_keys_kernel(const Batch a, index_t count, index_t scale,
                                                               const i64* of, u64* keys) {
  const index_t k = flat_index();
  if (k < count) keys[k] = static_cast<u64>(range_of(a.first, a.samples, of[k], scale));
}

/// head[k] = 1 where sorted element k starts a run of equal (sample, hash); head[count] = 0. Sorted
/// position k lies in the sample that element k does (the sort keeps each sample's count).
__global__ void __launch_bounds__(kThreads) heads_kernel(const Batch a, index_t count, index_t scale, const u64* hash,
                                                         const i64* of, i64* head) {
  const index_t k = flat_index();
  if (k > count) return;
  if (k == count) {
    head[k] = 0;
    return;
  }
  head[k] = k == 0 || range_of(a.first, a.samples, k, scale) != range_of(a.first, a.samples, k - 1, scale) ||
                    hash[of[k]] != hash[of[k - 1]];
}

/// Per sorted row k: inverse[row] = its voxel (the run's number); per head, the voxel's level, centre
/// (v * step + step / 2 in float64, then float32), its level-1 flag and the sample's root.
struct VoxelArgs {
  const i64 *row_at, *head, *voxel_of_head;
  const int* coords;
  const float* steps;
  i64 *inverse, *level1;
  float* centre;
  u64* roots;
  i64* root;
};
__global__ void __launch_bounds__(kThreads) voxels_kernel(const Batch a, const VoxelArgs v) {
  const index_t k = flat_index();
  if (k >= a.depth * a.points) return;
  const index_t r = v.row_at[k], g = v.voxel_of_head[k] + v.head[k] - 1;
  v.inverse[r] = g;
  if (!v.head[k]) return;
  const int b = range_of(a.first, a.samples, k, a.depth);
  const index_t n = a.size(b), l = (r - a.first[b] * a.depth) / n;
  for (int c = 0; c < 3; ++c) {
    const float step = v.steps[(static_cast<index_t>(b) * a.depth + l) * 3 + c];
    const double centre = __dadd_rn(__dmul_rn(static_cast<double>(v.coords[r * 3 + c]), static_cast<double>(step)),
                                    static_cast<double>(__fdiv_rn(step, 2.0f)));
    v.centre[g * 3 + c] = static_cast<float>(centre);
  }
  v.level1[g] = l == 1;
  if (l == 0) {
    atomicAdd(v.roots + b, 1ull);
    v.root[b] = g;
  }
}

/// base[b] = scan[first[b] * scale] for b = 0 .. samples (the sample's first number of an exclusive scan
/// over its elements; the last entry the total).
__global__ void __launch_bounds__(kThreads) bases_kernel(const Batch a, index_t scale, const i64* scan, i64* base) {
  const index_t b = flat_index();
  if (b <= a.samples) base[b] = scan[a.first[b] * scale];
}
/// base[b] = scan[by[b]] for b = 0 .. samples.
__global__ void __launch_bounds__(kThreads) bases_at_kernel(int samples, const i64* by, const i64* scan, i64* base) {
  const index_t b = flat_index();
  if (b <= samples) base[b] = scan[by[b]];
}

/// The sample-local node of point j at level l: n + its voxel's number within the sample.
__device__ __forceinline__ i64 local_node(const Batch& a, const i64* inverse, const i64* voxel_base, int b, index_t l,
                                          index_t j) {
  const index_t n = a.size(b);
  return n + inverse[a.first[b] * a.depth + l * n + j] - voxel_base[b];
}

/// Per point of the batch, the hash of (its node at level l, its node at level l + 1), local ids.
__global__ void __launch_bounds__(kThreads) pair_kernel(const Batch a, int l, const i64* inverse, const i64* voxel_base,
                                                        u64* hash, i64* point) {
  const index_t p = flat_index();
  if (p >= a.points) return;
  const int b = range_of(a.first, a.samples, p);
  const long long pair[2] = {local_node(a, inverse, voxel_base, b, l, p - a.first[b]),
                             local_node(a, inverse, voxel_base, b, l + 1, p - a.first[b])};
  hash[p] = fnv64(pair, 2);
  point[p] = p;
}

/// first_of[number] = the element at each head (the run's first occurrence).
__global__ void __launch_bounds__(kThreads) firsts_kernel(index_t count, const i64* head, const i64* number,
                                                          const i64* of, i64* first_of) {
  const index_t k = flat_index();
  if (k < count && head[k]) first_of[number[k]] = of[k];
}

/// The collation's layout (from the host): node_first[b] = first node of sample b (samples + 1 values);
/// row_first[b * depth + c] = first mapping row of its category c (0: level-1 voxels, 1 .. depth - 2:
/// the pairs of that level, depth - 1: the points).
struct Layout {
  const i64 *node_first, *row_first, *voxel_base;
  const i64* inverse;
  __device__ __forceinline__ i64 node(const Batch& a, int b, index_t l, index_t j) const {
    return node_first[b] + local_node(a, inverse, voxel_base, b, l, j);
  }
  __device__ __forceinline__ i64 voxel_node(const Batch& a, int b, i64 g) const {
    return node_first[b] + a.size(b) + (g - voxel_base[b]);
  }
};

__device__ __forceinline__ void put_row(i64* mapping, index_t row, i64 parent, i64 child, i64 pl) {
  mapping[row * 4] = parent;
  mapping[row * 4 + 1] = child;
  mapping[row * 4 + 2] = pl;
  mapping[row * 4 + 3] = pl + 1;
}

/// (root, voxel, 0, 1) per level-1 voxel, in voxel order.
__global__ void __launch_bounds__(kThreads) level1_rows_kernel(const Batch a, const Layout o, index_t voxels,
                                                               const i64* level1, const i64* level1_scan,
                                                               const i64* level1_base, const i64* root, i64* mapping) {
  const index_t g = flat_index();
  if (g >= voxels || !level1[g]) return;
  const int b = range_of(o.voxel_base, a.samples, g);
  put_row(mapping, o.row_first[static_cast<index_t>(b) * a.depth] + level1_scan[g] - level1_base[b],
          o.voxel_node(a, b, root[b]), o.voxel_node(a, b, g), 0);
}

/// (node at l, node at l + 1, l, l + 1) per distinct pair of level l, in pair-hash order.
__global__ void __launch_bounds__(kThreads) pair_rows_kernel(const Batch a, const Layout o, int l, index_t pairs,
                                                             const i64* pair_first, const i64* pair_base, i64* mapping) {
  const index_t q = flat_index();
  if (q >= pairs) return;
  const int b = range_of(pair_base, a.samples, q);
  const index_t j = pair_first[q] - a.first[b];
  put_row(mapping, o.row_first[static_cast<index_t>(b) * a.depth + l] + q - pair_base[b], o.node(a, b, l, j),
          o.node(a, b, l + 1, j), l);
}

/// (node at depth - 1, point, depth - 1, depth) per point; and the points' coordinates among the nodes.
__global__ void __launch_bounds__(kThreads) point_rows_kernel(const Batch a, const Layout o, i64* mapping, float* coords) {
  const index_t p = flat_index();
  if (p >= a.points) return;
  const int b = range_of(a.first, a.samples, p);
  const index_t j = p - a.first[b];
  put_row(mapping, o.row_first[static_cast<index_t>(b) * a.depth + a.depth - 1] + j, o.node(a, b, a.depth - 1, j),
          o.node_first[b] + j, a.depth - 1);
  for (int c = 0; c < 3; ++c) coords[(o.node_first[b] + j) * 3 + c] = a.xyz[p * 3 + c];
}

/// The voxel centres among the nodes.
__global__ void __launch_bounds__(kThreads) voxel_coords_kernel(const Batch a, const Layout o, index_t voxels,
                                                                const float* centre, float* coords) {
  const index_t g = flat_index();
  if (g >= voxels) return;
  const i64 node = o.voxel_node(a, range_of(o.voxel_base, a.samples, g), g);
  for (int c = 0; c < 3; ++c) coords[node * 3 + c] = centre[g * 3 + c];
}

/// Every node's tree level as the mapping rows name it (collate's level_of; -1 where none does).
__global__ void __launch_bounds__(kThreads) level_of_kernel(index_t rows, const i64* mapping, int* level) {
  const index_t r = flat_index();
  if (r >= rows) return;
  level[mapping[r * 4]] = static_cast<int>(mapping[r * 4 + 2]);
  level[mapping[r * 4 + 1]] = static_cast<int>(mapping[r * 4 + 3]);
}

/// Node keys: its model level depth - level, depth + 1 where it has none; first_row[node] = no row yet.
__global__ void __launch_bounds__(kThreads) node_keys_kernel(index_t nodes, int depth, const int* level, u64* key,
                                                             i64* id, u64* first_row) {
  const index_t t = flat_index();
  if (t >= nodes) return;
  key[t] = level[t] < 0 ? depth + 1 : depth - level[t];
  id[t] = t;
  first_row[t] = ~0ull;
}

/// starts[c] = the first sorted position whose key >> shift is c, c = 0 .. buckets (the last: count).
__global__ void bucket_starts_kernel(const u64* sorted, index_t count, int buckets, int shift, i64* starts) {
  const int c = static_cast<int>(threadIdx.x);
  if (c > buckets) return;
  index_t lo = 0, hi = count;
  while (lo < hi) {
    const index_t mid = (lo + hi) / 2;
    if ((sorted[mid] >> shift) < static_cast<u64>(c)) lo = mid + 1;
    else hi = mid;
  }
  starts[c] = lo;
}

/// Per listed node (sorted position k): its level-local id, sample and position.
struct ListArgs {
  const u64* key;
  const i64* id;
  const i64* level_first;
  const float* coords;
  i64 *local, *batch;
  float* positions;
};
__global__ void __launch_bounds__(kThreads) node_lists_kernel(const Batch a, const Layout o, index_t nodes,
                                                              const ListArgs v) {
  const index_t k = flat_index();
  if (k >= nodes || v.key[k] > static_cast<u64>(a.depth)) return;
  const i64 t = v.id[k];
  v.local[t] = k - v.level_first[v.key[k]];
  v.batch[k] = range_of(o.node_first, a.samples, t);
  for (int c = 0; c < 3; ++c) v.positions[k * 3 + c] = v.coords[t * 3 + c];
}

/// Per mapping row: its local ids, the keys of the edge sorts ((model level) << 32 | query) and the
/// first row naming each child.
struct EdgeArgs {
  const i64 *mapping, *local;
  i64 *mapping_local, *row;
  u64 *parent_key, *child_key, *first_row;
};
__global__ void __launch_bounds__(kThreads) edge_keys_kernel(index_t rows, int depth, const EdgeArgs v) {
  const index_t r = flat_index();
  if (r >= rows) return;
  const i64* m = v.mapping + r * 4;
  const i64 parent = v.local[m[0]], child = v.local[m[1]];
  i64* out = v.mapping_local + r * 4;
  out[0] = parent;
  out[1] = child;
  out[2] = m[2];
  out[3] = m[3];
  v.parent_key[r] = (static_cast<u64>(depth - m[3]) << 32) | static_cast<u64>(child);
  v.child_key[r] = (static_cast<u64>(depth - m[2]) << 32) | static_cast<u64>(parent);
  v.row[r] = r;
  atomicMin(v.first_row + m[1], static_cast<u64>(r));
}

/// Pool keys: a child's first row goes to model level depth - 1 - parent level, the others to depth.
__global__ void __launch_bounds__(kThreads) pool_keys_kernel(index_t rows, int depth, const i64* mapping,
                                                             const u64* first_row, u64* key) {
  const index_t r = flat_index();
  if (r < rows) key[r] = first_row[mapping[r * 4 + 1]] == static_cast<u64>(r) ? depth - 1 - mapping[r * 4 + 2] : depth;
}

/// The lists from the sorted rows: parent edges (child, parent), child edges (parent, child), pools.
__global__ void __launch_bounds__(kThreads) edges_kernel(index_t rows, const i64* mapping_local, const i64* by_child,
                                                         const i64* by_parent, const i64* by_pool, i64* parent_edges,
                                                         i64* child_edges, i64* pool) {
  const index_t k = flat_index();
  if (k >= rows) return;
  const i64 *p = mapping_local + by_child[k] * 4, *c = mapping_local + by_parent[k] * 4;
  parent_edges[k * 2] = p[1];
  parent_edges[k * 2 + 1] = p[0];
  child_edges[k * 2] = c[0];
  child_edges[k * 2 + 1] = c[1];
  pool[k] = mapping_local[by_pool[k] * 4];
}

}  // namespace voxel_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
