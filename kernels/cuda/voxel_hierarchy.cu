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
#include "voxel_hierarchy_kernels.cuh"

#if defined(SURROGATE_CUDA_HOST_BACKEND)
#include "surrogate/kernels/stable_key_sort.hpp"
#else
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_scan.cuh>
#endif

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using namespace voxel_kernels;  // NOLINT: this file's kernels

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
  if (a.node_arrays) {
    download(out.coords, v.coords, T * 3, stream);
    download(out.mapping, v.mapping, M * 4, stream);
    download(out.mapping_local, v.mapping_local, M * 4, stream);
  }
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
