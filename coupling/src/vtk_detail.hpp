// Internal: what surrogate::VtkSeries hands to the writers of its two file formats, once write() has
// checked the step and the ranks agree on it.
//   vtu_files.cpp     VtkFormat::vtu: one .vtu piece per rank (VTK's XML writer), a .pvtu per step, the .pvd
//   vtkhdf_files.cpp  VtkFormat::vtkhdf: one VTKHDF file per step (parallel HDF5), the .hdf.series
// Not installed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/mpi_comm.hpp"
#include "surrogate/surrogate.hpp"

namespace surrogate::vtk_detail {

/// A point array staged for the next write(): a view of the caller's values, read by write().
struct StagedArray {
  std::string name, unit;
  int components = 1;
  bool single = false;  // Float32 (else Float64)
  Strided<const double> f64{};
  Strided<const float> f32{};
  std::int64_t expected_points = -1;  // add_prediction: the surrogate's local point count

  bool has_data() const { return single ? f32.data != nullptr : f64.data != nullptr; }
  const char* type() const { return single ? "Float32" : "Float64"; }
};

/// One checked step on this rank: its points (n x dim, strided), its cells (or none: one vertex per
/// point) and the staged arrays (the same names, units, components and types on every rank).
struct Step {
  double time = 0;
  std::int64_t n = 0;
  int dim = 1;
  Strided<const double> coords{};
  bool has_cells = false;
  std::span<const std::int64_t> connectivity, offsets;  // offsets[c]: the end of cell c in connectivity
  std::span<const std::uint8_t> types;
  std::span<const StagedArray> arrays;

  std::int64_t cells() const { return has_cells ? static_cast<std::int64_t>(offsets.size()) : n; }
  std::int64_t connectivity_ids() const { return has_cells ? static_cast<std::int64_t>(connectivity.size()) : n; }
};

/// The steps written so far: (time, file name relative to the series file).
using SeriesIndex = std::vector<std::pair<double, std::string>>;

/// Shortest text that reads back as the same double.
std::string number(double value);

/// Collective (vtk_agreement.cpp): every rank passed the same time and staged the same arrays (names,
/// units, components, types, in order); else the same Error(invalid_argument) on every rank, naming the
/// first rank that differs from rank 0 and the array.
void check_ranks_agree(const MpiComm& comm, const std::string& context, double time,
                       std::span<const StagedArray> arrays);

// --- VtkFormat::vtu (vtu_files.cpp) ---------------------------------------------------------------------
/// This rank's piece as the bytes of a .vtu file (VTK's XML writer; Error(unsupported) without VTK).
/// `file` and `context` are for messages.
std::string vtu_piece_bytes(const Step& step, const std::string& file, const std::string& context);
std::string pvtu_text(std::span<const StagedArray> arrays, const std::string& stem, int pieces);
std::string pvd_text(const SeriesIndex& series);

// --- VtkFormat::vtkhdf (vtkhdf_files.cpp) ---------------------------------------------------------------
/// Collective: writes the step as one VTKHDF UnstructuredGrid file at `path` (one piece per rank), through
/// a temporary that rank 0 creates, every rank writes with parallel HDF5, and rank 0 renames once every
/// rank's part is written (output_file.hpp). Throws the same Error on every rank.
void write_vtkhdf_step(const MpiComm& comm, const std::string& path, const std::string& context, const Step& step);
/// ParaView's JSON file-series index (<name>.hdf.series) over the steps' files.
std::string hdf_series_text(const SeriesIndex& series);

}  // namespace surrogate::vtk_detail
