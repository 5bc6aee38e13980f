// HEPT's plan on the device (surrogate/kernels/cuda_hept_plan.hpp): one thread per element, integer
// arithmetic, each graph found by a binary search of its offsets. The row maxima: one block per row.
#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_hept_plan.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) axis_keys_kernel(const float* coords, index_t ldc, index_t points,
                                                              float* keys) {
  const index_t i = flat_index();
  if (i >= 2 * points) return;
  const index_t axis = i / points, p = i - axis * points;
  keys[i] = coords[p * ldc + axis];
}

/// rank[axis][column of the point at sorted position s] = s - first[g].
__global__ void __launch_bounds__(kThreads) scatter_ranks_kernel(const HeptRegionArgs a) {
  const index_t i = flat_index();
  if (i >= 2 * a.points) return;
  const index_t axis = i / a.points, s = i - axis * a.points;
  const int g = range_of(a.first, a.graphs, s);
  const index_t point = a.order[i];  // a position within the row, in graph g
  a.rank[axis * a.ranked + a.ranked_first[g] + (point - a.first[g])] = s - a.first[g];
}

__global__ void __launch_bounds__(kThreads) regions_kernel(const HeptRegionArgs a) {
  const index_t i = flat_index();
  if (i >= 2 * static_cast<index_t>(a.rows) * a.ranked) return;
  const index_t axis_row = i / a.ranked, j = i - axis_row * a.ranked;
  const int axis = static_cast<int>(axis_row / a.rows), r = static_cast<int>(axis_row % a.rows);
  const int g = range_of(a.ranked_first, a.graphs, j);
  const index_t local = j - a.ranked_first[g], size = a.first[g + 1] - a.first[g];
  const std::int64_t rank = local < size ? a.rank[axis * a.ranked + j] : local;
  const std::int64_t bin = a.bins[(static_cast<index_t>(axis) * a.graphs + g) * a.rows + r];
  (axis == 0 ? a.region_eta : a.region_phi)[static_cast<index_t>(r) * a.ranked + j] = rank / bin + 1;
}

__global__ void __launch_bounds__(kThreads) row_max_kernel(const std::int64_t* values, index_t columns,
                                                            std::int64_t* max) {
  __shared__ std::int64_t best[kThreads];
  const std::int64_t* row = values + static_cast<index_t>(blockIdx.x) * columns;
  std::int64_t m = 0;
  for (index_t j = threadIdx.x; j < columns; j += kThreads) m = row[j] > m ? row[j] : m;
  best[threadIdx.x] = m;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half && best[threadIdx.x + half] > best[threadIdx.x])
      best[threadIdx.x] = best[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) max[blockIdx.x] = best[0];
}

__global__ void __launch_bounds__(kThreads) codes_kernel(const HeptCodeArgs a) {
  const index_t i = flat_index();
  if (i >= static_cast<index_t>(a.rows) * a.points) return;
  a.codes[i] = (a.region_phi[i] << a.bits_eta[i / a.points]) | a.region_eta[i];
}

__global__ void __launch_bounds__(kThreads) tag_kernel(const HeptCodeArgs a) {
  const index_t i = flat_index();
  if (i >= static_cast<index_t>(a.rows) * a.points) return;
  const index_t r = i / a.points;
  a.codes[i] |= a.graph_ids[range_of(a.first, a.graphs, i - r * a.points)] << a.bits_code1[r];
}

template <class T>
__global__ void __launch_bounds__(kThreads) code_keys_kernel(const std::int64_t* codes, index_t count, T* keys) {
  const index_t i = flat_index();
  if (i < count) keys[i] = static_cast<T>(codes[i]);
}

__global__ void __launch_bounds__(kThreads) padding_kernel(const HeptPaddingArgs a) {
  const index_t j = flat_index();
  if (j >= a.padded) return;
  const int g = range_of(a.padded_first, a.graphs, j);
  const index_t local = j - a.padded_first[g], first = a.first[g], size = a.first[g + 1] - first;
  if (local < size) {
    a.pad_seq[j] = first + local;
    a.point_row[first + local] = j;
    a.unpad[j] = 1;
  } else {
    a.pad_seq[j] = a.zero_pads ? -1 : a.order[first + size - a.block + (local - size)];
    a.unpad[j] = 0;
  }
}

__global__ void __launch_bounds__(kThreads) gather_columns_kernel(const std::int64_t* src, int rows, index_t points,
                                                                   const std::int64_t* pad_seq, index_t padded,
                                                                   std::int64_t* dst) {
  const index_t i = flat_index();
  if (i >= static_cast<index_t>(rows) * padded) return;
  const index_t r = i / padded;
  dst[i] = src[r * points + pad_seq[i - r * padded]];
}

__global__ void __launch_bounds__(kThreads) pad_rows_kernel(const HeptPadRowsArgs a) {
  const index_t j = flat_index();
  if (j >= a.padded) return;
  const std::int64_t p = a.pad_seq[j];
  const int width = a.kept + (a.embedding ? a.embedded : 0);
  float* out = a.out + j * a.ldo;
  if (a.zero) a.zero[j] = p < 0 ? 1 : 0;
  if (p < 0) {
    for (int c = 0; c < width; ++c) out[c] = 0.0f;
    return;
  }
  const float* in = a.in + p * a.ldi;
  for (int c = 0; c < a.kept; ++c) out[c] = in[c];
  if (!a.embedding) return;
  const int cls = min(max(static_cast<int>(in[a.kept]), 0), a.classes - 1);
  for (int c = 0; c < a.embedded; ++c) out[a.kept + c] = a.embedding[cls * a.embedded + c];
}

dim3 grid_for(const char* kernel, index_t elements) { return dim3(blocks_for(kernel, elements, kThreads)); }

}  // namespace

void hept_axis_keys(const float* coords, index_t ldc, index_t points, float* keys, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_axis_keys(coords, ldc, points, keys, stream));
  require(points >= 0 && ldc >= 2, "hept_axis_keys", "need points >= 0 and ldc >= 2");
  if (points == 0) return;
  launch(axis_keys_kernel, grid_for("hept_axis_keys", 2 * points), kThreads, 0, stream, coords, ldc, points, keys);
  check_launch("axis_keys_kernel");
}

void hept_regions(const HeptRegionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_regions(a, stream));
  require(a.rows > 0 && a.graphs > 0 && a.points >= 0 && a.ranked >= a.points, "hept_regions",
          "need rows, graphs > 0 and ranked >= points >= 0");
  require(a.first && a.ranked_first && a.order && a.bins && a.rank && a.region_eta && a.region_phi, "hept_regions",
          "a null array");
  if (a.ranked == 0) return;
  if (a.points > 0) {
    launch(scatter_ranks_kernel, grid_for("hept_regions", 2 * a.points), kThreads, 0, stream, a);
    check_launch("scatter_ranks_kernel");
  }
  launch(regions_kernel, grid_for("hept_regions", 2 * static_cast<index_t>(a.rows) * a.ranked), kThreads, 0, stream, a);
  check_launch("regions_kernel");
}

void hept_row_max(const std::int64_t* values, int rows, index_t columns, std::int64_t* max, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_row_max(values, rows, columns, max, stream));
  require(rows >= 0 && rows <= 65535 && columns >= 0, "hept_row_max", "need 0 .. 65535 rows and columns >= 0");
  if (rows == 0) return;
  launch(row_max_kernel, dim3(static_cast<unsigned>(rows)), kThreads, 0, stream, values, columns, max);
  check_launch("row_max_kernel");
}

void hept_region_codes(const HeptCodeArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_region_codes(a, stream));
  require(a.rows > 0 && a.points >= 0, "hept_region_codes", "need rows > 0 and points >= 0");
  if (a.points == 0) return;
  launch(codes_kernel, grid_for("hept_region_codes", a.rows * a.points), kThreads, 0, stream, a);
  check_launch("codes_kernel");
}

void hept_tag_codes(const HeptCodeArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_tag_codes(a, stream));
  require(a.rows > 0 && a.graphs > 0 && a.points >= 0, "hept_tag_codes", "need rows, graphs > 0 and points >= 0");
  if (a.points == 0) return;
  launch(tag_kernel, grid_for("hept_tag_codes", a.rows * a.points), kThreads, 0, stream, a);
  check_launch("tag_kernel");
}

void hept_code_keys(const std::int64_t* codes, index_t count, float* keys, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_code_keys(codes, count, keys, stream));
  if (count <= 0) return;
  launch(code_keys_kernel<float>, grid_for("hept_code_keys", count), kThreads, 0, stream, codes, count, keys);
  check_launch("code_keys_kernel");
}

void hept_code_keys_f64(const std::int64_t* codes, index_t count, double* keys, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_code_keys_f64(codes, count, keys, stream));
  if (count <= 0) return;
  launch(code_keys_kernel<double>, grid_for("hept_code_keys", count), kThreads, 0, stream, codes, count, keys);
  check_launch("code_keys_kernel");
}

void hept_padding(const HeptPaddingArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_padding(a, stream));
  require(a.graphs > 0 && a.block > 0 && a.padded >= a.points && a.points >= 0, "hept_padding",
          "need graphs, block > 0 and padded >= points >= 0");
  if (a.padded == 0) return;
  launch(padding_kernel, grid_for("hept_padding", a.padded), kThreads, 0, stream, a);
  check_launch("padding_kernel");
}

void hept_gather_columns(const std::int64_t* src, int rows, index_t points, const std::int64_t* pad_seq,
                         index_t padded, std::int64_t* dst, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_gather_columns(src, rows, points, pad_seq, padded, dst, stream));
  require(rows >= 0 && points >= 0 && padded >= 0, "hept_gather_columns", "need rows, points, padded >= 0");
  if (rows == 0 || padded == 0) return;
  launch(gather_columns_kernel, grid_for("hept_gather_columns", rows * padded), kThreads, 0, stream, src, rows, points,
         pad_seq, padded, dst);
  check_launch("gather_columns_kernel");
}

void hept_pad_rows(const HeptPadRowsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, hept_pad_rows(a, stream));
  const int width = a.kept + (a.embedding ? a.embedded : 0);
  require(a.padded >= 0 && a.kept >= 0 && a.ldo >= width && (!a.embedding || (a.classes > 0 && a.embedded > 0)) &&
              a.ldi >= a.kept + (a.embedding ? 1 : 0),
          "hept_pad_rows", "row widths or strides out of range");
  if (a.padded == 0) return;
  launch(pad_rows_kernel, grid_for("hept_pad_rows", a.padded), kThreads, 0, stream, a);
  check_launch("pad_rows_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
