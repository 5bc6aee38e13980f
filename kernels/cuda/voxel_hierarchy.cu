// Sequoia's voxel hierarchy on the device (surrogate/kernels/cuda_voxel_hierarchy.hpp), bit for bit
// sequoia::build_sample_hierarchy of every sample, then sequoia::collate. The host finds distinct hashes
// with a table or a sort and walks lists; here every step is a thread per element, a stable radix sort
// or an exclusive scan over the whole batch:
//   * rows (sample, level, point): float32 voxel coordinates, FNV-64 hashes; the rows sorted by hash, then
//     (stably) by sample, so that a run's first row is the hash's first occurrence and the runs come in
//     ascending hash within a sample: the voxels, numbered by a scan of the run heads;
//   * per middle level, the (parent, child) pair hashes of the points, distinct pairs alike;
//   * after the counts are on the host: the mapping rows at the offsets the host lays out, the level
//     lists as a stable partition of the nodes by level, the edge lists as a stable sort of the rows by
//     (level, query), Init's pooling rows as the first row of each child partitioned by level.
// Sorts and scans: CUB on the GPU; on the host backend kernels::stable_key_sort and a serial sum.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_voxel_hierarchy.hpp"

#if defined(SURROGATE_CUDA_HOST_BACKEND)
#include "surrogate/kernels/stable_key_sort.hpp"
#else
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#endif

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using u64 = unsigned long long;
using i64 = std::int64_t;
constexpr int kThreads = 256;

__device__ __forceinline__ index_t flat_index() { return static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x; }

/// The last b in 0 .. count - 1 with first[b] * scale <= i (ascending offsets: the range holding i).
__device__ __forceinline__ int range_of(const i64* first, int count, index_t i, index_t scale = 1) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] * scale <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

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
  __shared__ float low[3][kThreads], high[3][kThreads];
  __shared__ int bad;
  const int s = static_cast<int>(blockIdx.x), t = static_cast<int>(threadIdx.x);
  if (t == 0) bad = 0;
  __syncthreads();
  const float inf = __int_as_float(0x7f800000);
  float mn[3] = {inf, inf, inf}, mx[3] = {-inf, -inf, -inf};
  for (index_t i = a.first[s] + t; i < a.first[s + 1]; i += kThreads)
    for (int c = 0; c < 3; ++c) {
      const float p = a.xyz[i * 3 + c];
      if (!isfinite(p)) atomicMax(&bad, 1);
      mn[c] = p < mn[c] ? p : mn[c];
      mx[c] = p > mx[c] ? p : mx[c];
    }
  for (int c = 0; c < 3; ++c) {
    low[c][t] = mn[c];
    high[c][t] = mx[c];
  }
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (t < half)
      for (int c = 0; c < 3; ++c) {
        low[c][t] = low[c][t + half] < low[c][t] ? low[c][t + half] : low[c][t];
        high[c][t] = high[c][t + half] > high[c][t] ? high[c][t + half] : high[c][t];
      }
    __syncthreads();
  }
  if (t != 0) return;
  float extent[3];
  for (int c = 0; c < 3; ++c) {
    lo[s * 3 + c] = __fsub_rn(low[c][0], 1e-6f);
    const float hi = __fadd_rn(high[c][0], 1e-6f);
    if (!(hi > lo[s * 3 + c])) atomicMax(&bad, 1);
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

std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

/// Carves typed arrays out of one allocation: a first pass (no base) measures, the second hands out.
class Carver {
 public:
  explicit Carver(unsigned char* base) : base_(base) {}
  template <class T>
  T* take(index_t count) {
    T* p = base_ ? reinterpret_cast<T*>(base_ + used_) : nullptr;
    used_ += aligned(static_cast<std::size_t>(count) * sizeof(T));
    return p;
  }
  std::size_t used() const { return used_; }

 private:
  unsigned char* base_;
  std::size_t used_ = 0;
};

#if defined(SURROGATE_CUDA_HOST_BACKEND)
/// The stable sort on one emulated thread: kernels::stable_key_sort of the keys' signed images.
__global__ void host_sort_kernel(const u64* keys, const i64* values, index_t n, u64* keys_out, i64* values_out) {
  std::vector<i64> image(static_cast<std::size_t>(n)), order(static_cast<std::size_t>(n));
  for (index_t k = 0; k < n; ++k) image[static_cast<std::size_t>(k)] = static_cast<i64>(keys[k] ^ (1ull << 63));
  StableKeySortWork<i64> work;
  stable_key_sort(image.data(), n, 0, order.data(), work);
  for (index_t k = 0; k < n; ++k) {
    keys_out[k] = keys[order[static_cast<std::size_t>(k)]];
    values_out[k] = values[order[static_cast<std::size_t>(k)]];
  }
}
__global__ void host_scan_kernel(const i64* in, index_t n, i64* out) {
  i64 sum = 0;
  for (index_t k = 0; k < n; ++k) {
    const i64 v = in[k];
    out[k] = sum;
    sum += v;
  }
}
#endif

/// Stable sorts (values follow their keys; ties keep their order) and exclusive sums, CUB's scratch in
/// one buffer sized once for the largest call.
class Steps {
 public:
  Steps(VoxelHierarchyWork& work, index_t most, cudaStream_t stream) : stream_(stream) {
#if !defined(SURROGATE_CUDA_HOST_BACKEND)
    std::size_t sort = 0, scan = 0;
    check(cub::DeviceRadixSort::SortPairs(nullptr, sort, static_cast<const u64*>(nullptr), static_cast<u64*>(nullptr),
                                          static_cast<const i64*>(nullptr), static_cast<i64*>(nullptr),
                                          static_cast<int>(most), 0, 64, stream),
          "cub::DeviceRadixSort::SortPairs (size)");
    check(cub::DeviceScan::ExclusiveSum(nullptr, scan, static_cast<const i64*>(nullptr), static_cast<i64*>(nullptr),
                                        static_cast<int>(most + 1), stream),
          "cub::DeviceScan::ExclusiveSum (size)");
    bytes_ = std::max(sort, scan);
    int device = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    work.sort.resize(bytes_, device);
    scratch_ = work.sort.data();
#else
    (void)work;
    (void)most;
#endif
  }
  /// keys in [0, 2^end_bit).
  void sort(const u64* keys, const i64* values, index_t n, int end_bit, u64* keys_out, i64* values_out) {
    if (n == 0) return;
#if defined(SURROGATE_CUDA_HOST_BACKEND)
    (void)end_bit;
    launch(host_sort_kernel, dim3(1), dim3(1), 0, stream_, keys, values, n, keys_out, values_out);
    check_launch("host_sort_kernel");
#else
    std::size_t bytes = bytes_;
    check(cub::DeviceRadixSort::SortPairs(scratch_, bytes, keys, keys_out, values, values_out, static_cast<int>(n), 0,
                                          end_bit, stream_),
          "cub::DeviceRadixSort::SortPairs");
#endif
  }
  void exclusive_sum(const i64* in, index_t n, i64* out) {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
    launch(host_scan_kernel, dim3(1), dim3(1), 0, stream_, in, n, out);
    check_launch("host_scan_kernel");
#else
    std::size_t bytes = bytes_;
    check(cub::DeviceScan::ExclusiveSum(scratch_, bytes, in, out, static_cast<int>(n), stream_),
          "cub::DeviceScan::ExclusiveSum");
#endif
  }

 private:
  cudaStream_t stream_;
  void* scratch_ = nullptr;
  std::size_t bytes_ = 0;
};

int bits_for(u64 x) {
  int bits = 1;
  while (bits < 64 && (x >> bits) != 0) ++bits;
  return bits;
}

dim3 grid_for(index_t elements) { return dim3(blocks_for("voxel_hierarchy", elements, kThreads)); }

template <class T>
void download(std::vector<T>& out, const T* src, index_t count, cudaStream_t stream) {
  out.resize(static_cast<std::size_t>(count));
  if (count > 0) copy_to_host(out.data(), src, static_cast<std::size_t>(count) * sizeof(T), stream);
}

/// The first phase's arrays: rows (R = depth x points) and what the voxels and pairs keep.
struct Counting {
  i64* first;
  float *lo, *steps, *centre;
  unsigned* status;
  u64* roots;
  i64* root;
  int* coords;
  u64 *hash, *key, *sorted_key, *sample_key;
  i64 *row, *sorted_row, *row_at, *head, *scan, *inverse, *level1, *level1_scan;
  i64 *voxel_base, *level1_base, *pair_first, *pair_base;
  void carve(Carver& c, index_t samples, int depth, index_t points) {
    const index_t rows = depth * points, middle = depth - 2;
    first = c.take<i64>(samples + 1);
    lo = c.take<float>(samples * 3);
    steps = c.take<float>(samples * depth * 3);
    centre = c.take<float>(rows * 3);
    status = c.take<unsigned>(samples);
    roots = c.take<u64>(samples);
    root = c.take<i64>(samples);
    coords = c.take<int>(rows * 3);
    hash = c.take<u64>(rows);
    key = c.take<u64>(rows);
    sorted_key = c.take<u64>(rows);
    sample_key = c.take<u64>(rows);
    row = c.take<i64>(rows);
    sorted_row = c.take<i64>(rows);
    row_at = c.take<i64>(rows);
    head = c.take<i64>(rows + 1);
    scan = c.take<i64>(rows + 1);
    inverse = c.take<i64>(rows);
    level1 = c.take<i64>(rows + 1);
    level1_scan = c.take<i64>(rows + 1);
    voxel_base = c.take<i64>(samples + 1);
    level1_base = c.take<i64>(samples + 1);
    pair_first = c.take<i64>(middle * points);
    pair_base = c.take<i64>(middle * (samples + 1));
  }
};

/// The second phase's arrays: nodes (T) and mapping rows (M).
struct Lists {
  i64 *node_first, *row_first, *starts;
  float *coords, *positions;
  i64 *mapping, *mapping_local, *local, *id, *sorted_id, *batch, *row, *by_child, *by_parent, *by_pool;
  i64 *parent_edges, *child_edges, *pool;
  int* level;
  u64 *node_key, *sorted_node_key, *first_row, *parent_key, *child_key, *pool_key, *sorted_key;
  void carve(Carver& c, index_t samples, int depth, index_t nodes, index_t rows) {
    node_first = c.take<i64>(samples + 1);
    row_first = c.take<i64>(samples * depth);
    starts = c.take<i64>(4 * (depth + 3));
    coords = c.take<float>(nodes * 3);
    positions = c.take<float>(nodes * 3);
    mapping = c.take<i64>(rows * 4);
    mapping_local = c.take<i64>(rows * 4);
    local = c.take<i64>(nodes);
    id = c.take<i64>(nodes);
    sorted_id = c.take<i64>(nodes);
    batch = c.take<i64>(nodes);
    row = c.take<i64>(rows);
    by_child = c.take<i64>(rows);
    by_parent = c.take<i64>(rows);
    by_pool = c.take<i64>(rows);
    parent_edges = c.take<i64>(rows * 2);
    child_edges = c.take<i64>(rows * 2);
    pool = c.take<i64>(rows);
    level = c.take<int>(nodes);
    node_key = c.take<u64>(nodes);
    sorted_node_key = c.take<u64>(nodes);
    first_row = c.take<u64>(nodes);
    parent_key = c.take<u64>(rows);
    child_key = c.take<u64>(rows);
    pool_key = c.take<u64>(rows);
    sorted_key = c.take<u64>(rows);
  }
};

template <class Arrays, class... Sizes>
Arrays carve(DeviceBuffer<unsigned char>& buffer, Sizes... sizes) {
  Arrays arrays{};
  Carver measure(nullptr);
  arrays.carve(measure, sizes...);
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  buffer.resize(measure.used(), device);
  Carver hand_out(buffer.data());
  arrays.carve(hand_out, sizes...);
  return arrays;
}

/// Sorts (key, element) stably by key, then, for more than one sample, stably by the sample of each
/// element: the elements of every sample together, by key within it. Returns the element order.
const i64* sort_by_sample_then_key(Steps& steps, const Batch& batch, cudaStream_t stream, Counting& w, const u64* key,
                                   const i64* element, index_t count, index_t scale) {
  steps.sort(key, element, count, 64, w.sorted_key, w.sorted_row);
  if (batch.samples == 1) return w.sorted_row;
  launch(sample_keys_kernel, grid_for(count), kThreads, 0, stream, batch, count, scale, w.sorted_row, w.sample_key);
  check_launch("sample_keys_kernel");
  steps.sort(w.sample_key, w.sorted_row, count, bits_for(static_cast<u64>(batch.samples - 1)), w.key, w.row_at);
  return w.row_at;
}

}  // namespace

void voxel_hierarchy(const VoxelHierarchyArgs& a, VoxelHierarchyResult& out, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, voxel_hierarchy(a, out, stream));
  require(a.samples >= 1 && a.first && a.points && a.work, "voxel_hierarchy",
          "need samples >= 1 and the first, points and work arguments");
  require(a.divide >= 2 && a.depth >= 2 && std::pow(static_cast<double>(a.divide), a.depth - 1) < 2147483648.0,
          "voxel_hierarchy", "need divide, depth >= 2 and divide^(depth - 1) < 2^31");
  require(a.first[0] == 0, "voxel_hierarchy", "the point offsets must start at 0");
  for (int b = 0; b < a.samples; ++b)
    require(a.first[b + 1] > a.first[b], "voxel_hierarchy",
            "sample " + std::to_string(b) + " has no points (every sample needs one)");
  const int D = a.depth, S = a.samples;
  const index_t N = a.first[S], R = D * N;
  require(static_cast<double>(R) + static_cast<double>(N) < 2147483647.0, "voxel_hierarchy",
          std::to_string(N) + " points x (depth + 1) exceed the sorts' 2^31 - 1 elements");
  out = VoxelHierarchyResult{};

  // 1. The rows' voxels, their hashes sorted by sample, the voxels numbered.
  Counting w = carve<Counting>(a.work->voxels, static_cast<index_t>(S), D, N);
  Steps steps(*a.work, R + N, stream);
  copy_to_device(w.first, a.first, static_cast<std::size_t>(S + 1) * sizeof(i64), stream);
  zero(w.roots, static_cast<std::size_t>(S) * sizeof(u64), stream);
  zero(w.level1, static_cast<std::size_t>(R + 1) * sizeof(i64), stream);
  const Batch batch{S, D, a.divide, N, w.first, a.points};
  launch(box_kernel, dim3(static_cast<unsigned>(S)), kThreads, 0, stream, batch, w.lo, w.steps, w.status);
  check_launch("box_kernel");
  launch(rows_kernel, grid_for(R), kThreads, 0, stream, batch, w.lo, w.steps, w.status, w.coords, w.hash, w.row);
  check_launch("rows_kernel");
  const i64* row_at = sort_by_sample_then_key(steps, batch, stream, w, w.hash, w.row, R, D);
  launch(heads_kernel, grid_for(R + 1), kThreads, 0, stream, batch, R, static_cast<index_t>(D), w.hash, row_at, w.head);
  check_launch("heads_kernel");
  steps.exclusive_sum(w.head, R + 1, w.scan);
  const VoxelArgs voxels{row_at, w.head, w.scan, w.coords, w.steps, w.inverse, w.level1, w.centre, w.roots, w.root};
  launch(voxels_kernel, grid_for(R), kThreads, 0, stream, batch, voxels);
  check_launch("voxels_kernel");
  launch(bases_kernel, grid_for(S + 1), kThreads, 0, stream, batch, static_cast<index_t>(D), w.scan, w.voxel_base);
  check_launch("bases_kernel");
  steps.exclusive_sum(w.level1, R + 1, w.level1_scan);
  launch(bases_at_kernel, grid_for(S + 1), kThreads, 0, stream, S, w.voxel_base, w.level1_scan, w.level1_base);
  check_launch("bases_at_kernel");

  // 2. Per middle level, the distinct (parent, child) pairs of the points, numbered by sample and hash.
  for (int l = 1; l + 1 < D; ++l) {
    i64* pair_first = w.pair_first + static_cast<index_t>(l - 1) * N;
    i64* pair_base = w.pair_base + static_cast<index_t>(l - 1) * (S + 1);
    launch(pair_kernel, grid_for(N), kThreads, 0, stream, batch, l, w.inverse, w.voxel_base, w.hash, w.row);
    check_launch("pair_kernel");
    const i64* point_at = sort_by_sample_then_key(steps, batch, stream, w, w.hash, w.row, N, 1);
    launch(heads_kernel, grid_for(N + 1), kThreads, 0, stream, batch, N, index_t{1}, w.hash, point_at, w.head);
    check_launch("heads_kernel");
    steps.exclusive_sum(w.head, N + 1, w.scan);
    launch(firsts_kernel, grid_for(N), kThreads, 0, stream, N, w.head, w.scan, point_at, pair_first);
    check_launch("firsts_kernel");
    launch(bases_kernel, grid_for(S + 1), kThreads, 0, stream, batch, index_t{1}, w.scan, pair_base);
    check_launch("bases_kernel");
  }

  // 3. The counts on the host: the checks, then the layout of nodes and mapping rows.
  const auto middle = static_cast<std::size_t>(D - 2), samples = static_cast<std::size_t>(S);
  std::vector<unsigned> status(samples);
  std::vector<u64> roots(samples);
  std::vector<i64> voxel_base(samples + 1), level1_base(samples + 1), pair_base(middle * (samples + 1));
  copy_to_host(status.data(), w.status, samples * sizeof(unsigned), stream);
  copy_to_host(roots.data(), w.roots, samples * sizeof(u64), stream);
  copy_to_host(voxel_base.data(), w.voxel_base, (samples + 1) * sizeof(i64), stream);
  copy_to_host(level1_base.data(), w.level1_base, (samples + 1) * sizeof(i64), stream);
  if (middle > 0) copy_to_host(pair_base.data(), w.pair_base, pair_base.size() * sizeof(i64), stream);
  synchronize(stream);
  for (std::size_t b = 0; b < samples; ++b)
    if (status[b] != 0 || roots[b] != 1) return;  // out.valid stays false: the host builder names the error
  const index_t V = voxel_base[samples], T = N + V;
  std::vector<i64> node_first(samples + 1), row_first(samples * static_cast<std::size_t>(D));
  i64 rows = 0;
  for (std::size_t b = 0; b < samples; ++b) {
    node_first[b] = a.first[b] + voxel_base[b];
    i64* category = row_first.data() + b * static_cast<std::size_t>(D);
    category[0] = rows;
    rows += level1_base[b + 1] - level1_base[b];
    for (std::size_t l = 0; l < middle; ++l) {
      category[l + 1] = rows;
      rows += pair_base[l * (samples + 1) + b + 1] - pair_base[l * (samples + 1) + b];
    }
    category[D - 1] = rows;
    rows += a.first[b + 1] - a.first[b];
  }
  node_first[samples] = T;
  const index_t M = rows;

  // 4. The mapping rows and node coordinates, then the level lists, the edges and the pools.
  Lists v = carve<Lists>(a.work->lists, static_cast<index_t>(S), D, T, M);
  copy_to_device(v.node_first, node_first.data(), node_first.size() * sizeof(i64), stream);
  copy_to_device(v.row_first, row_first.data(), row_first.size() * sizeof(i64), stream);
  const Layout layout{v.node_first, v.row_first, w.voxel_base, w.inverse};
  launch(level1_rows_kernel, grid_for(V), kThreads, 0, stream, batch, layout, V, w.level1, w.level1_scan,
         w.level1_base, w.root, v.mapping);
  check_launch("level1_rows_kernel");
  for (int l = 1; l + 1 < D; ++l) {
    const index_t pairs = pair_base[static_cast<std::size_t>(l - 1) * (samples + 1) + samples];
    launch(pair_rows_kernel, grid_for(pairs), kThreads, 0, stream, batch, layout, l, pairs,
           w.pair_first + static_cast<index_t>(l - 1) * N, w.pair_base + static_cast<index_t>(l - 1) * (S + 1),
           v.mapping);
    check_launch("pair_rows_kernel");
  }
  launch(point_rows_kernel, grid_for(N), kThreads, 0, stream, batch, layout, v.mapping, v.coords);
  check_launch("point_rows_kernel");
  launch(voxel_coords_kernel, grid_for(V), kThreads, 0, stream, batch, layout, V, w.centre, v.coords);
  check_launch("voxel_coords_kernel");
  fill(v.level, static_cast<std::size_t>(T), -1, stream);
  launch(level_of_kernel, grid_for(M), kThreads, 0, stream, M, v.mapping, v.level);
  check_launch("level_of_kernel");
  launch(node_keys_kernel, grid_for(T), kThreads, 0, stream, T, D, v.level, v.node_key, v.id, v.first_row);
  check_launch("node_keys_kernel");
  steps.sort(v.node_key, v.id, T, bits_for(static_cast<u64>(D + 1)), v.sorted_node_key, v.sorted_id);
  i64 *level_first = v.starts, *parent_first = v.starts + (D + 3), *child_first = v.starts + 2 * (D + 3),
      *pool_first = v.starts + 3 * (D + 3);
  launch(bucket_starts_kernel, dim3(1), dim3(64), 0, stream, v.sorted_node_key, T, D + 1, 0, level_first);
  check_launch("bucket_starts_kernel");
  const ListArgs lists{v.sorted_node_key, v.sorted_id, level_first, v.coords, v.local, v.batch, v.positions};
  launch(node_lists_kernel, grid_for(T), kThreads, 0, stream, batch, layout, T, lists);
  check_launch("node_lists_kernel");
  const EdgeArgs edges{v.mapping, v.local, v.mapping_local, v.row, v.parent_key, v.child_key, v.first_row};
  launch(edge_keys_kernel, grid_for(M), kThreads, 0, stream, M, D, edges);
  check_launch("edge_keys_kernel");
  launch(pool_keys_kernel, grid_for(M), kThreads, 0, stream, M, D, v.mapping, v.first_row, v.pool_key);
  check_launch("pool_keys_kernel");
  const int edge_bits = 32 + bits_for(static_cast<u64>(D));
  steps.sort(v.parent_key, v.row, M, edge_bits, v.sorted_key, v.by_child);
  launch(bucket_starts_kernel, dim3(1), dim3(64), 0, stream, v.sorted_key, M, D + 1, 32, parent_first);
  check_launch("bucket_starts_kernel");
  steps.sort(v.child_key, v.row, M, edge_bits, v.sorted_key, v.by_parent);
  launch(bucket_starts_kernel, dim3(1), dim3(64), 0, stream, v.sorted_key, M, D + 1, 32, child_first);
  check_launch("bucket_starts_kernel");
  steps.sort(v.pool_key, v.row, M, bits_for(static_cast<u64>(D)), v.sorted_key, v.by_pool);
  launch(bucket_starts_kernel, dim3(1), dim3(64), 0, stream, v.sorted_key, M, D, 0, pool_first);
  check_launch("bucket_starts_kernel");
  launch(edges_kernel, grid_for(M), kThreads, 0, stream, M, v.mapping_local, v.by_child, v.by_parent, v.by_pool,
         v.parent_edges, v.child_edges, v.pool);
  check_launch("edges_kernel");

  // 5. Everything to the host (the lists at their full lengths, cut there by their starts).
  download(out.level_first, level_first, D + 2, stream);
  download(out.parent_first, parent_first, D + 2, stream);
  download(out.child_first, child_first, D + 2, stream);
  download(out.pool_first, pool_first, D + 1, stream);
  download(out.coords, v.coords, T * 3, stream);
  download(out.mapping, v.mapping, M * 4, stream);
  download(out.mapping_local, v.mapping_local, M * 4, stream);
  download(out.level_ids, v.sorted_id, T, stream);
  download(out.level_batch, v.batch, T, stream);
  download(out.level_positions, v.positions, T * 3, stream);
  download(out.parent_edges, v.parent_edges, M * 2, stream);
  download(out.child_edges, v.child_edges, M * 2, stream);
  download(out.pool_parent, v.pool, M, stream);
  synchronize(stream);
  out.offset.assign(node_first.begin() + 1, node_first.end());
  const auto listed = static_cast<std::size_t>(out.level_first.back());
  out.level_ids.resize(listed);
  out.level_batch.resize(listed);
  out.level_positions.resize(listed * 3);
  out.pool_parent.resize(static_cast<std::size_t>(out.pool_first.back()));
  out.valid = true;
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
