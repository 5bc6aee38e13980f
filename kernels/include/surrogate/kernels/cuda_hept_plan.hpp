// CUDA kernels of HEPT's plan (CUDA builds only; share/docs/hept.md, "Regions and padding", "On a CUDA
// device"): the steps of hept::quantile_bins and hept::finish_geometry between the stable sorts of
// cuda_bucket_attention.hpp, on int64 device arrays, and the padded rows a forward reads. Integer
// arithmetic only: the results are the CPU plan's bits. Launchers enqueue on the stream and throw
// std::invalid_argument on arguments they do not take before anything is enqueued.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {

/// Columns 0 and 1 (eta, phi) of `points` rows of coordinates (stride ldc >= 2) as two rows of sort keys:
/// keys[axis * points + i].
void hept_axis_keys(const float* coords, index_t ldc, index_t points, float* keys, cudaStream_t stream);

/// The quantile regions of both axes, every (table, head) row r: region[r * ranked + j] = rank / bin + 1,
/// where rank is column j's position in its graph's stable order of that axis (the pads of a graph, columns
/// at or past its size, rank at their own column) and bin = bins[(axis * graphs + g) * rows + r].
struct HeptRegionArgs {
  int rows = 0, graphs = 0;
  index_t points = 0;                    // the real points (columns of `order`)
  index_t ranked = 0;                    // columns of the region rows: points plus the pads ranked (src)
  const std::int64_t* first = nullptr;   // graphs + 1: graph g's points are first[g] .. first[g + 1] - 1
  const std::int64_t* ranked_first = nullptr;  // graphs + 1: its columns of the region rows
  const std::int64_t* order = nullptr;   // 2 x points: segment_sort's permutation of the axis keys
  const std::int64_t* bins = nullptr;    // 2 x graphs x rows, each >= 1
  std::int64_t* rank = nullptr;          // 2 x ranked scratch
  std::int64_t* region_eta = nullptr;    // rows x ranked
  std::int64_t* region_phi = nullptr;
};
void hept_regions(const HeptRegionArgs& a, cudaStream_t stream);

/// max[r] = the largest of row r's `columns` values (0 for no columns; values >= 0).
void hept_row_max(const std::int64_t* values, int rows, index_t columns, std::int64_t* max, cudaStream_t stream);

/// code[r * points + i] = (phi << bits_eta[r]) | eta, then | (graph_ids[g] << bits_code1[r]) for point i of
/// graph g: the region codes of the example layout (the AND-construction and the graph's batch tag).
struct HeptCodeArgs {
  int rows = 0, graphs = 0;
  index_t points = 0;
  const std::int64_t* first = nullptr;       // graphs + 1
  const std::int64_t* graph_ids = nullptr;   // graphs
  const std::int64_t* region_eta = nullptr;  // rows x points
  const std::int64_t* region_phi = nullptr;
  const std::int64_t* bits_eta = nullptr;    // rows
  const std::int64_t* bits_code1 = nullptr;  // rows: hept_tag_codes only
  std::int64_t* codes = nullptr;             // rows x points
};
/// The codes without the tag (reads everything but bits_code1 and graph_ids).
void hept_region_codes(const HeptCodeArgs& a, cudaStream_t stream);
/// The tag of each point's graph OR-ed into `codes` (reads first, graph_ids, bits_code1, codes).
void hept_tag_codes(const HeptCodeArgs& a, cudaStream_t stream);

/// keys[i] = the value of codes[i], i < count, exactly (the caller checks that it is below 2^24 for float,
/// 2^53 for double).
void hept_code_keys(const std::int64_t* codes, index_t count, float* keys, cudaStream_t stream);
void hept_code_keys_f64(const std::int64_t* codes, index_t count, double* keys, cudaStream_t stream);

/// The padded sequence: graph g's padded rows padded_first[g] .. padded_first[g + 1] - 1 hold its points
/// in input order, then copies of the points at sorted positions n_g - block + t (the example layout;
/// order: segment_sort's permutation of row 0's codes) or zero pads, pad_seq -1 (zero_pads: the src
/// layout). pad_seq: the input row of each padded row; point_row: the padded row of each input point (its
/// original); unpad: 1 for originals, 0 for copies and pads.
struct HeptPaddingArgs {
  int graphs = 0, block = 0;
  bool zero_pads = false;
  index_t points = 0, padded = 0;
  const std::int64_t* first = nullptr;         // graphs + 1
  const std::int64_t* padded_first = nullptr;  // graphs + 1, each graph a multiple of block, >= its size
  const std::int64_t* order = nullptr;         // points (without zero_pads)
  std::int64_t* pad_seq = nullptr;             // padded
  std::int64_t* point_row = nullptr;           // points
  std::uint8_t* unpad = nullptr;               // padded
};
void hept_padding(const HeptPaddingArgs& a, cudaStream_t stream);

/// dst[r * padded + j] = src[r * points + pad_seq[j]]: the padded rows of int64 values (the region codes).
void hept_gather_columns(const std::int64_t* src, int rows, index_t points, const std::int64_t* pad_seq,
                         index_t padded, std::int64_t* dst, cudaStream_t stream);

/// The rows a forward reads, padded: row j of `out` (stride ldo) from input row pad_seq[j] of `in` (stride
/// ldi): its first `kept` values, then, with `embedding`, that table's row (width `embedded`) at the class
/// held in the input's column `kept` (truncated toward zero, clamped to 0 .. classes - 1: the caller has
/// checked it); zeros where pad_seq[j] < 0, and zero[j] = 1 there (when zero is given).
struct HeptPadRowsArgs {
  index_t padded = 0;
  const std::int64_t* pad_seq = nullptr;
  const float* in = nullptr;
  index_t ldi = 0;
  int kept = 0;
  const float* embedding = nullptr;  // classes x embedded, or nullptr
  int classes = 0, embedded = 0;
  float* out = nullptr;
  index_t ldo = 0;                   // >= kept + (embedding ? embedded : 0)
  std::uint8_t* zero = nullptr;
};
void hept_pad_rows(const HeptPadRowsArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
