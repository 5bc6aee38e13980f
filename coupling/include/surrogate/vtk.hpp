// Parallel VTK output that ParaView opens, in one of two formats (VtkFormat):
//   vtu     every rank writes its own piece (.vtu, its owned points, with cells when the caller gives
//           connectivity, else one vertex per point), rank 0 writes the step's .pvtu and keeps the .pvd
//           time series up to date: ranks + 1 files per step. Needs VTK at build time.
//   vtkhdf  one VTKHDF file per step (<name>_<step>.hdf), every rank writing its piece into it with
//           parallel HDF5, and the <name>.hdf.series time series: one file per step. Needs no VTK.
// Array names and units come from the caller or, for predictions, from the model file's /fields.
//
//   surrogate::VtkSeries vtk(comm, "out", "heat");          // out/heat.pvd, out/heat_000042.pvtu, ...
//   // or VtkSeries vtk(comm, "out", "heat", surrogate::VtkFormat::vtkhdf): out/heat.hdf.series, heat_000042.hdf
//   vtk.set_cells(connectivity, offsets, types);            // optional, once per mesh
//   vtk.add_array("temperature", "K", 1, {T, 1, 1});        // the solver's fields ...
//   vtk.add_prediction(surrogate, {prediction, c_out, 1});  // ... the surrogate's, named from /fields
//   vtk.write(time, n_local, dim, {coords, dim, 1});        // collective; clears the staged arrays
//
// Files (share/docs/vtk.md): points are Float64 (padded to 3-D), arrays Float64 or Float32 as staged
// (.vtu: binary appended data, zlib). Units: the FieldData (of each .vtu piece; of the VTKHDF file) holds
// a string array "units" with one entry "<array name>: <unit>" per staged array that has a unit, and a
// Float64 "TimeValue" with the step's time.
//
// Errors: the staging calls (set_cells, add_array, add_prediction) are local and never throw for a bad
// argument; the first bad argument is kept and the next write() raises it as the same surrogate::Error
// on every rank, so one rank's mistake cannot leave the others waiting inside write().
#pragma once

#include <mpi.h>

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

/// The files a VtkSeries writes (share/docs/vtk.md, "Formats").
enum class VtkFormat : int {
  vtu = 0,     // .vtu piece per rank, .pvtu per step, .pvd series (needs VTK)
  vtkhdf = 1,  // one VTKHDF file per step (parallel HDF5), .hdf.series (no VTK needed)
};

class VtkSeries {
 public:
  /// Whether this build writes the default format, vtu (it was built with VTK): available(VtkFormat::vtu).
  static bool available() noexcept;
  /// Whether this build writes `format`: vtu needs VTK at build time, vtkhdf is always available. A
  /// series in a format that is not available fails in its constructor with Error(unsupported) on every rank.
  static bool available(VtkFormat format) noexcept;

  /// Collective over `comm` (duplicated internally). Creates `directory` if needed; every rank must pass
  /// the same directory, name and format. Files (step numbered from 0, six digits):
  ///   vtu     <directory>/<name>.pvd, per step <name>_<step>.pvtu and its pieces <name>_<step>/piece_<rank>.vtu
  ///   vtkhdf  <directory>/<name>.hdf.series, per step <name>_<step>.hdf (one piece per rank inside)
  /// An existing series file of the same name is replaced at the first write().
  VtkSeries(MPI_Comm comm, std::string directory, std::string name);
  VtkSeries(const MpiComm& comm, std::string directory, std::string name);
  VtkSeries(MPI_Comm comm, std::string directory, std::string name, VtkFormat format);
  VtkSeries(const MpiComm& comm, std::string directory, std::string name, VtkFormat format);
  ~VtkSeries();
  VtkSeries(VtkSeries&&) noexcept;
  VtkSeries& operator=(VtkSeries&&) noexcept;
  VtkSeries(const VtkSeries&) = delete;
  VtkSeries& operator=(const VtkSeries&) = delete;

  /// Local cells over the local points (0-based local indices): connectivity lists the points of every
  /// cell, offsets[c] is the end of cell c in connectivity (VTK convention), types[c] its type. The
  /// arrays are copied; cells persist until set again; without cells each point is written as a vertex.
  void set_cells(std::span<const std::int64_t> connectivity, std::span<const std::int64_t> offsets,
                 std::span<const VtkCell> types);
  void clear_cells();

  /// Stages a point array for the next write(): n_local x components values, strided. The values are
  /// read by write(), so they must stay valid until then. `unit` may be empty.
  void add_array(const std::string& name, const std::string& unit, int components, Strided<const double> values);
  void add_array(const std::string& name, const std::string& unit, int components, Strided<const float> values);
  /// Stages the surrogate's output channels (out_channels values per local point, in the order of its
  /// set_points), one scalar Float64 array per channel named (and with the unit) from the model file's
  /// /fields, prefixed by `prefix` ("" by default). Read by write(), like add_array.
  void add_prediction(const Surrogate& surrogate, Strided<const double> prediction, const std::string& prefix = "");

  /// Collective. Writes the step: points (n_local x dim, dim 1..3, padded to 3 with zeros), the cells, the
  /// staged arrays (the same names, units, components, types and order on every rank; time the same on
  /// every rank); rank 0 writes the .pvtu (vtu) and rewrites the series file. Returns the step index.
  /// Clears the staged arrays and any pending staging error, whether it succeeds or not.
  int write(double time, std::int64_t n_local, int dim, Strided<const double> coords);
  /// The same with the surrogate's own points (as given to set_points; dim must be 1..3).
  int write(double time, const Surrogate& surrogate);

  /// The series file ParaView opens for the whole series: <name>.pvd (vtu) or <name>.hdf.series (vtkhdf).
  const std::string& series_path() const;
  /// The same as series_path() (named for the vtu format, kept for existing callers).
  const std::string& pvd_path() const;
  VtkFormat format() const;
  /// Steps written so far.
  int steps() const;

  /// The first bad argument of the staging calls since the last write() (ok when none).
  const Status& staging_error() const;
  /// Keeps `error` (if none is pending yet) for the next write() to raise on every rank; for bindings
  /// that find a bad argument before they can call a staging function (C null pointers).
  void defer_error(const Status& error);

 private:
  struct State;
  std::unique_ptr<State> state_;
  State& state() const;
  int write_steps(double time, std::int64_t n_local, int dim, Strided<const double> coords, Status local);
};

}  // namespace surrogate
