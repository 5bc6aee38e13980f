// HEPT's plan rows on a CUDA device (device.hpp's DeviceGeometry; CUDA builds only): built there from the
// coordinates (geometry.cpp: quantile_bins<float> and finish_geometry's steps on the device, the same bits),
// or copied from a host Geometry (the split graphs' rows). share/docs/hept.md, "On a CUDA device".
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "../../serial.hpp"
#include "device.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"

namespace surrogate::hept::gpu {

/// What a device forward reads, and what the plan computed on the way (kept for download()).
struct PlanRows final : DeviceGeometry {
  template <class T>
  using Buffer = kernels::cuda::DeviceBuffer<T>;

  surrogate::detail::Serial serial;  // the forward's graph key

  int device_id = -1;
  int rows = 0;  // tables x heads
  /// The host fields: sizes, padded_sizes, bin_eta, bin_phi, bits_eta, bits_code1 (the arrays stay empty).
  Geometry small;
  std::int64_t n = 0, np = 0;                       // input rows (of x and out), padded rows
  Buffer<std::int64_t> region_eta, region_phi;      // rows x n (src: rows x np)
  Buffer<std::int64_t> codes, pad_sort_order;       // rows x n, n (example, built here)
  Buffer<std::int64_t> pad_seq;                     // np: the input row of each padded row (-1: a zero pad)
  Buffer<std::int64_t> point_row;                   // n: the padded row whose result an input row receives
  Buffer<std::uint8_t> unpad, zero;                 // np, np (1 where pad_seq < 0)
  Buffer<std::int64_t> padded_codes;                // rows x np (example)
  Buffer<std::int64_t> padded_first;                // graphs + 1
  Buffer<float> coords;                             // np x coords_dim (zero rows where pad_seq < 0)
  int coords_dim = 0;
  /// Values held (download()): region_eta and region_phi each, codes, padded_codes.
  std::int64_t region_values = 0, code_values = 0, padded_code_values = 0;

  int device() const override { return device_id; }
  std::int64_t points() const override { return n; }
  std::int64_t padded_points() const override { return np; }
  Geometry download() const override;
};

/// The work arrays of building plan rows, kept by the device forward from one plan to the next (grown, never
/// shrunk): a new event allocates and frees only its own rows. Used on one stream.
struct PlanScratch {
  template <class T>
  using Buffer = kernels::cuda::DeviceBuffer<T>;
  Buffer<float> coords, keys;
  Buffer<double> keys64;
  Buffer<std::int64_t> first, ranked_first, order, rank, bins, maxima, bits_eta, bits_code1, ids;
  kernels::cuda::SegmentSortWork sort;
};

/// quantile_bins<float> and finish_geometry on `device` (DeviceForward::build_geometry), on `stream`.
std::unique_ptr<PlanRows> build_plan_rows(const Config& cfg, const std::vector<float>& regions, int device,
                                          cudaStream_t stream, PlanScratch& scratch, const float* coords,
                                          const std::vector<std::int64_t>& sizes,
                                          const std::vector<std::int64_t>& graph_ids, const ReduceMax& reduce_max);

/// A host geometry and the coordinates of its `inputs` input rows (inputs x coords_dim, host) on `device`;
/// an input row that is no original's receives its own row's result (the split graphs' duplicates).
std::unique_ptr<PlanRows> upload_plan_rows(const Config& cfg, int device, cudaStream_t stream, PlanScratch& scratch,
                                           const Geometry& g, const float* coords, std::int64_t inputs);

}  // namespace surrogate::hept::gpu
