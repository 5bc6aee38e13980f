// Point files of `surrogate predict` (share/docs/cli.md): each rank reads and writes its own contiguous
// slab of rows with collective parallel HDF5.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "surrogate/mpi_comm.hpp"

namespace surrogate {

struct PointSlab {
  std::int64_t global_points = 0;
  std::int64_t offset = 0;  // first global row of this rank
  std::int64_t count = 0;   // rows on this rank
  bool has_coords = false;  // /coords is optional when /features is present
  int dim = 0;              // columns of /coords (0 without /coords)
  int channels = 0;         // columns of /features
  std::vector<float> coords;            // count x dim
  std::vector<float> features;          // count x channels
  std::vector<std::int64_t> sample_ids; // count, or empty without /batch_idx
  bool has_features = false;
  /// Optional /target (count x target_channels): a reference solution the summary compares against.
  int target_channels = 0;
  std::vector<float> target;
  /// Optional /sample_features (B x sample_channels): per-sample inputs, read whole by every rank.
  bool has_sample_features = false;
  std::int64_t sample_rows = 0;
  int sample_channels = 0;
  std::vector<float> sample_features;
  /// Optional /edge_index (int64, 2 x E: row 0 sources j, row 1 receivers i, as global rows of the
  /// file): this rank's share, the columns split evenly like the rows; edges[0, edge_count) are the
  /// sources and edges[edge_count, 2 edge_count) the receivers.
  bool has_edges = false;
  std::int64_t global_edges = 0;
  std::int64_t edge_count = 0;
  std::vector<std::int64_t> edges;
};

/// Collective. Rows are split evenly: rank r gets [N r / P, N (r+1) / P). Checks the layout (datasets,
/// ranks, lengths, types; /edge_index (2, E) of integers; /batch_idx sample-major and contiguous across the whole file) and throws the
/// same Error on every rank.
PointSlab read_point_file(const MpiComm& comm, const std::string& path);

/// What `surrogate predict` writes: /prediction (global_points x channels, in input order; this rank's
/// `count` rows at `values`; left out when channels is 0 and the model has per-sample outputs),
/// /sample_prediction (samples x sample_channels, the same values on every rank; only when sample_channels
/// > 0), plus string attributes. Float32 datasets from `values` / `sample_values`, or float64 from
/// `values_f64` / `sample_values_f64` (one kind per file, the same on every rank).
struct PredictionOutput {
  std::int64_t global_points = 0;
  std::int64_t count = 0;
  int channels = 0;
  /// float64 datasets from values_f64 / sample_values_f64 (every rank alike), else float32 from values /
  /// sample_values.
  bool float64 = false;
  const float* values = nullptr;
  const double* values_f64 = nullptr;
  std::int64_t samples = 0;
  int sample_channels = 0;
  const float* sample_values = nullptr;
  const double* sample_values_f64 = nullptr;
  std::vector<std::pair<std::string, std::string>> attributes;
  /// Files the output must not be (the model, the points): writing over one of them is refused.
  std::vector<std::string> inputs;
};

/// Collective. Rank 0 gathers the rows and writes the file atomically (a unique temporary beside it, synced
/// and renamed over it; a character device or FIFO is written in place): share/docs/reliability.md,
/// "Outputs". Any failure is the same Error on every rank, and the previous file is left as it was.
void write_prediction_file(const MpiComm& comm, const std::string& path, const PredictionOutput& output);

}  // namespace surrogate
