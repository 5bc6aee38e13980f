// Parallel VTK output that ParaView opens: every rank writes its own piece (.vtu, its owned points, with
// cells when the caller gives connectivity, else one vertex per point), rank 0 writes the step's .pvtu
// and keeps the .pvd time series up to date. Array names and units come from the caller or, for
// predictions, from the model file's /fields.
//
//   surrogate::VtkSeries vtk(comm, "out", "heat");          // out/heat.pvd, out/heat_000042.pvtu, ...
//   vtk.set_cells(connectivity, offsets, types);            // optional, once per mesh
//   vtk.add_array("temperature", "K", 1, {T, 1, 1});        // the solver's fields ...
//   vtk.add_prediction(surrogate, {prediction, c_out, 1});  // ... the surrogate's, named from /fields
//   vtk.write(time, n_local, dim, {coords, dim, 1});        // collective; clears the staged arrays
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "surrogate/mpi_comm.hpp"
#include "surrogate/surrogate.hpp"

namespace surrogate {

/// VTK cell types used by solvers (values of VTK's VTKCellType).
enum class VtkCell : std::uint8_t {
  vertex = 1,
  line = 3,
  triangle = 5,
  polygon = 7,
  quad = 9,
  tetra = 10,
  hexahedron = 12,
  wedge = 13,
};

class VtkSeries {
 public:
  /// Collective. Creates `directory` if needed. Files: <directory>/<name>.pvd, per step
  /// <name>_<step>.pvtu and its pieces <name>_<step>/piece_<rank>.vtu (step numbered from 0).
  VtkSeries(const MpiComm& comm, std::string directory, std::string name);
  ~VtkSeries();
  VtkSeries(VtkSeries&&) noexcept;
  VtkSeries& operator=(VtkSeries&&) noexcept;

  /// Local cells over the local points (0-based local indices): connectivity lists the points of every
  /// cell, offsets[c] is the end of cell c in connectivity (VTK convention), types[c] its type. Cells
  /// persist until set again; without cells each point is written as a vertex.
  void set_cells(std::span<const std::int64_t> connectivity, std::span<const std::int64_t> offsets,
                 std::span<const VtkCell> types);
  void clear_cells();

  /// Stages a point array for the next write(): n_local x components values, strided.
  void add_array(const std::string& name, const std::string& unit, int components, Strided<const double> values);
  void add_array(const std::string& name, const std::string& unit, int components, Strided<const float> values);
  /// Stages the surrogate's output channels, one scalar array per channel named (and with the unit) from
  /// the model file's /fields, prefixed by `prefix` ("" by default).
  void add_prediction(const Surrogate& surrogate, Strided<const double> prediction, const std::string& prefix = "");

  /// Collective. Writes the step: points (n_local x dim, dim 1..3, padded to 3 with zeros), the cells, the
  /// staged arrays (the same names, components and order on every rank); rank 0 writes the .pvtu and
  /// rewrites the .pvd. Returns the step index. Clears the staged arrays.
  int write(double time, std::int64_t n_local, int dim, Strided<const double> coords);
  /// The same with the surrogate's own points (as given to set_points).
  int write(double time, const Surrogate& surrogate);

  const std::string& pvd_path() const;
  int steps() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace surrogate
