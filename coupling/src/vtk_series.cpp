// surrogate::VtkSeries: the staging calls, the checks of write() and the steps' order of work. The files
// of each format are written by vtu_files.cpp (a .vtu piece per rank, a .pvtu per step, the .pvd; needs
// VTK) and vtkhdf_files.cpp (one VTKHDF file per step with parallel HDF5, the .hdf.series; no VTK).
//
// Every write() first checks its arguments locally and agrees on the outcome, then compares the staged
// arrays and the time across the ranks (one allgather of a hash), and only then touches the file system,
// agreeing again after the pieces and after rank 0's index files. So a bad argument or an I/O error on
// one rank is the same surrogate::Error on every rank, and nobody is left waiting.
#include "surrogate/vtk.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "output_file.hpp"
#include "strided_check.hpp"
#include "vtk_detail.hpp"

namespace surrogate {

namespace fs = std::filesystem;
using vtk_detail::number;
using vtk_detail::StagedArray;

namespace {


/// Nodes of a cell type: the exact count, 0 for a polygon (3 or more), -1 for a type we do not write.
int cell_nodes(std::uint8_t type) {
  switch (static_cast<VtkCell>(type)) {
    case VtkCell::vertex: return 1;
    case VtkCell::line: return 2;
    case VtkCell::triangle: return 3;
    case VtkCell::polygon: return 0;
    case VtkCell::quad: return 4;
    case VtkCell::tetra: return 4;
    case VtkCell::hexahedron: return 8;
    case VtkCell::wedge: return 6;
  }
  return -1;
}

const char* cell_name(std::uint8_t type) {
  switch (static_cast<VtkCell>(type)) {
    case VtkCell::vertex: return "vertex";
    case VtkCell::line: return "line";
    case VtkCell::triangle: return "triangle";
    case VtkCell::polygon: return "polygon";
    case VtkCell::quad: return "quad";
    case VtkCell::tetra: return "tetra";
    case VtkCell::hexahedron: return "hexahedron";
    case VtkCell::wedge: return "wedge";
  }
  return "unknown";
}

Error invalid(const std::string& message) { return Error(ErrorCode::invalid_argument, message); }

/// Names end up in XML attributes and in the staged-array signature: no control characters and none of
/// " < > & (so nothing needs escaping anywhere).
void check_text(const std::string& context, const std::string& what, const std::string& text, bool may_be_empty) {
  if (text.empty() && !may_be_empty) throw invalid(context + ": empty " + what);
  for (const char ch : text) {
    const auto u = static_cast<unsigned char>(ch);
    if (u < 0x20 || u == 0x7f || ch == '"' || ch == '<' || ch == '>' || ch == '&')
      throw invalid(context + ": " + what + " '" + text +
                    "' contains a character VTK files cannot hold here (control characters, \" < > &)");
  }
}

/// VTKHDF keeps each array as an HDF5 dataset named after it: no '/' (a path separator there), not ".".
void check_dataset_name(const std::string& context, const std::string& name) {
  if (name.find('/') != std::string::npos || name == ".")
    throw invalid(context + ": array name '" + name + "' cannot name a dataset of a VTKHDF file (no '/', not \".\")");
}

std::string series_context(const std::string& name) { return "vtk '" + name + "'"; }

const char* format_name(VtkFormat format) {
  switch (format) {
    case VtkFormat::vtu: return "vtu";
    case VtkFormat::vtkhdf: return "vtkhdf";
  }
  return "unknown";
}

/// The series file: <name>.pvd, or for VTKHDF <name>.hdf.series (ParaView 5.11's PVD reader does not open
/// VTKHDF files; its file-series reader takes this JSON index and picks the reader by the ".hdf").
std::string series_file_name(const std::string& name, VtkFormat format) {
  return name + (format == VtkFormat::vtkhdf ? ".hdf.series" : ".pvd");
}

std::string six_digits(int step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%06d", step);
  return buffer;
}

/// Creates `directory` (and its parents); another rank creating it at the same time is fine.
void make_directory(const fs::path& directory, const std::string& context) {
  std::error_code ec;
  fs::create_directories(directory, ec);
  std::error_code ec2;
  const bool is_dir = fs::is_directory(directory, ec2);
  if (ec && !is_dir)
    throw Error(ErrorCode::io, context + ": cannot create directory '" + directory.string() + "': " + ec.message());
  if (!is_dir) throw Error(ErrorCode::io, context + ": '" + directory.string() + "' exists and is not a directory");
}

/// Writes a whole file through a unique temporary and a rename, so readers never see half of it
/// (output_file.hpp).
void write_text_file(const fs::path& path, const std::string& text, const std::string& context) {
  detail::OutputFile file(path.string(), context + " file");
  file.write(text);
  file.commit();
}

}  // namespace

// The state of a series; VtkSeries::State is this, and the helpers below take it directly.
namespace vtk_detail {
struct Series {
  Series(MPI_Comm c, std::string d, std::string n, VtkFormat f)
      : comm(c), directory(std::move(d)), name(std::move(n)), format(f) {}
  MpiComm comm;
  std::string directory, name, pvd;  // pvd: the series file (.pvd or .hdf.series)
  VtkFormat format;
  std::string context;  // "vtk '<name>'", for messages
  int steps = 0;
  SeriesIndex series;  // (time, .pvtu or .hdf file) of the steps written
  bool has_cells = false;
  std::vector<std::int64_t> connectivity, offsets;
  std::vector<std::uint8_t> types;
  std::int64_t max_index = -1;
  std::vector<StagedArray> staged;
  Status pending;

  void defer(const Status& error) {
    if (pending.ok()) pending = error;
  }
};
}  // namespace vtk_detail

struct VtkSeries::State : vtk_detail::Series {
  using Series::Series;
};

namespace {

using vtk_detail::Series;


/// The local checks of write(), before anything collective happens.
void check_write(const Series& s, double time, std::int64_t n, int dim, Strided<const double> coords) {
  const std::string where = s.context + ": write()";
  if (!std::isfinite(time)) throw invalid(where + ": the time is " + number(time));
  if (n < 0) throw invalid(where + ": negative number of local points (" + std::to_string(n) + ")");
  if (dim < 1 || dim > 3) throw invalid(where + ": dim must be 1, 2 or 3, got " + std::to_string(dim));
  if (n > 0 && !coords.data) throw invalid(where + ": null coordinates for " + std::to_string(n) + " points");
  if (s.has_cells && s.max_index >= n)
    throw invalid(where + ": the cells refer to local point " + std::to_string(s.max_index) + " but there are " +
                  std::to_string(n) + " local points");
  detail::check_strides(n, dim, coords.point_stride, coords.component_stride, sizeof(double), false,
                        where + ": coordinates");
  for (const StagedArray& a : s.staged) {
    if (n > 0 && !a.has_data()) throw invalid(where + ": array '" + a.name + "' has null values");
    const std::int64_t ps = a.single ? a.f32.point_stride : a.f64.point_stride;
    const std::int64_t cs = a.single ? a.f32.component_stride : a.f64.component_stride;
    detail::check_strides(n, a.components, ps, cs, a.single ? sizeof(float) : sizeof(double), false,
                          where + ": array '" + a.name + "'");
    if (a.expected_points >= 0 && a.expected_points != n)
      throw invalid(where + ": array '" + a.name + "' holds the surrogate's " + std::to_string(a.expected_points) +
                    " local points but write() was given " + std::to_string(n));
  }
}

template <class Real>
void stage(Series& s, const std::string& name, const std::string& unit, int components,
           Strided<const Real> values, std::int64_t expected_points, const char* call) {
  try {
    const std::string where = s.context + ": " + call;
    check_text(where, "array name", name, false);
    if (s.format == VtkFormat::vtkhdf) check_dataset_name(where, name);
    check_text(where + " (array '" + name + "')", "unit", unit, true);
    if (components < 1)
      throw invalid(where + ": array '" + name + "' has " + std::to_string(components) + " components (need >= 1)");
    for (const StagedArray& a : s.staged)
      if (a.name == name) throw invalid(where + ": array '" + name + "' is staged twice for the same step");
    StagedArray a;
    a.name = name;
    a.unit = unit;
    a.components = components;
    a.expected_points = expected_points;
    if constexpr (std::is_same_v<Real, float>) {
      a.single = true;
      a.f32 = values;
    } else {
      a.f64 = values;
    }
    s.staged.push_back(std::move(a));
  } catch (...) {
    s.defer(Status::from_current_exception());
  }
}

}  // namespace

bool VtkSeries::available() noexcept { return available(VtkFormat::vtu); }

bool VtkSeries::available(VtkFormat format) noexcept {
  switch (format) {
    case VtkFormat::vtu:
#ifdef SURROGATE_HAVE_VTK
      return true;
#else
      return false;
#endif
    case VtkFormat::vtkhdf: return true;  // plain (parallel) HDF5, which every build links
  }
  return false;
}

VtkSeries::VtkSeries(MPI_Comm comm, std::string directory, std::string name)
    : VtkSeries(comm, std::move(directory), std::move(name), VtkFormat::vtu) {}

VtkSeries::VtkSeries(MPI_Comm comm, std::string directory, std::string name, VtkFormat format)
    : state_(std::make_unique<State>(comm, std::move(directory), std::move(name), format)) {
  State& s = *state_;
  if (s.directory.empty()) s.directory = ".";
  s.context = series_context(s.name);
  s.pvd = (fs::path(s.directory) / series_file_name(s.name, format)).string();
  // Every rank must name the same files (an out-of-range format, from C or Fortran, compares as its number).
  const std::string format_text = std::string(format_name(format)) + " (" + std::to_string(static_cast<int>(format)) + ")";
  s.comm.agree_on_settings({{"directory", s.directory}, {"series name", s.name}, {"format", format_text}}, "vtk series");
  collectively(s.comm, [&] {
    if (format != VtkFormat::vtu && format != VtkFormat::vtkhdf)
      throw invalid(s.context + ": unknown VTK format " + std::to_string(static_cast<int>(format)) +
                    " (vtu = 0 or vtkhdf = 1)");
    if (!available(format))
      throw Error(ErrorCode::unsupported, s.context + ": this build of surrogate has no VTK output (install "
                                                      "libvtk9-dev and configure with SURROGATE_ENABLE_VTK=AUTO or ON; "
                                                      "the vtkhdf format needs no VTK)");
    check_text("vtk", "series name", s.name, false);
    if (s.name.find('/') != std::string::npos || s.name == "." || s.name == "..")
      throw invalid(s.context + ": the series name must be a plain file name (no '/')");
    make_directory(s.directory, s.context);
    // Rank 0 writes the index files: a place where they cannot be written fails now, not after a step.
    if (s.comm.rank() == 0) (void)detail::check_output_place(s.pvd, s.context + " series file");
  });
}

VtkSeries::VtkSeries(const MpiComm& comm, std::string directory, std::string name)
    : VtkSeries(comm.get(), std::move(directory), std::move(name), VtkFormat::vtu) {}

VtkSeries::VtkSeries(const MpiComm& comm, std::string directory, std::string name, VtkFormat format)
    : VtkSeries(comm.get(), std::move(directory), std::move(name), format) {}

VtkSeries::~VtkSeries() = default;
VtkSeries::VtkSeries(VtkSeries&&) noexcept = default;
VtkSeries& VtkSeries::operator=(VtkSeries&&) noexcept = default;

VtkSeries::State& VtkSeries::state() const {
  if (!state_) throw invalid("vtk: use of a moved-from VtkSeries");
  return *state_;
}

void VtkSeries::set_cells(std::span<const std::int64_t> connectivity, std::span<const std::int64_t> offsets,
                          std::span<const VtkCell> types) {
  State& s = state();
  try {
    const std::string where = s.context + ": set_cells";
    if (types.size() != offsets.size())
      throw invalid(where + ": " + std::to_string(offsets.size()) + " offsets but " + std::to_string(types.size()) +
                    " cell types");
    std::int64_t begin = 0;
    for (std::size_t c = 0; c < offsets.size(); ++c) {
      const auto type = static_cast<std::uint8_t>(types[c]);
      const int nodes = cell_nodes(type);
      const std::int64_t size = offsets[c] - begin;
      const std::string cell = "cell " + std::to_string(c);
      if (nodes < 0) throw invalid(where + ": " + cell + " has unknown type " + std::to_string(type));
      if (size < 0) throw invalid(where + ": offsets must not decrease (" + cell + " ends at " + std::to_string(offsets[c]) + ")");
      if ((nodes > 0 && size != nodes) || (nodes == 0 && size < 3))
        throw invalid(where + ": " + cell + " (" + cell_name(type) + ") has " + std::to_string(size) + " points");
      begin = offsets[c];
    }
    if (begin != static_cast<std::int64_t>(connectivity.size()))
      throw invalid(where + ": the last offset is " + std::to_string(begin) + " but connectivity has " +
                    std::to_string(connectivity.size()) + " entries");
    std::int64_t max_index = -1;
    for (std::size_t k = 0; k < connectivity.size(); ++k) {
      if (connectivity[k] < 0)
        throw invalid(where + ": connectivity[" + std::to_string(k) + "] = " + std::to_string(connectivity[k]) +
                      " is negative");
      max_index = std::max(max_index, connectivity[k]);
    }
    s.connectivity.assign(connectivity.begin(), connectivity.end());
    s.offsets.assign(offsets.begin(), offsets.end());
    s.types.resize(types.size());
    std::transform(types.begin(), types.end(), s.types.begin(), [](VtkCell t) { return static_cast<std::uint8_t>(t); });
    s.max_index = max_index;
    s.has_cells = true;
  } catch (...) {
    clear_cells();  // never write stale cells after a failed set_cells
    s.defer(Status::from_current_exception());
  }
}

void VtkSeries::clear_cells() {
  State& s = state();
  s.has_cells = false;
  s.connectivity.clear();
  s.offsets.clear();
  s.types.clear();
  s.max_index = -1;
}

void VtkSeries::add_array(const std::string& name, const std::string& unit, int components,
                          Strided<const double> values) {
  stage(state(), name, unit, components, values, -1, "add_array");
}

void VtkSeries::add_array(const std::string& name, const std::string& unit, int components,
                          Strided<const float> values) {
  stage(state(), name, unit, components, values, -1, "add_array");
}

void VtkSeries::add_prediction(const Surrogate& surrogate, Strided<const double> prediction, const std::string& prefix) {
  State& s = state();
  if (!surrogate.has_points()) {
    s.defer({ErrorCode::invalid_argument, s.context + ": add_prediction: the surrogate has no points (call set_points first)"});
    return;
  }
  const Model& model = surrogate.model();
  const auto& units = model.fields().output_units;
  const std::int64_t n = surrogate.local_points();
  for (int c = 0; c < model.out_channels(); ++c) {
    const Strided<const double> channel{n > 0 && prediction.data ? prediction.data + c * prediction.component_stride
                                                                 : prediction.data,
                                        prediction.point_stride, 0};
    const std::string unit = c < static_cast<int>(units.size()) ? units[static_cast<std::size_t>(c)] : "";
    stage(s, prefix + model.output_name(c), unit, 1, channel, n, "add_prediction");
  }
}

int VtkSeries::write(double time, std::int64_t n_local, int dim, Strided<const double> coords) {
  return write_steps(time, n_local, dim, coords, {});
}

int VtkSeries::write(double time, const Surrogate& surrogate) {
  const State& s = state();
  Status local;
  std::int64_t n = 0;
  int dim = 1;
  Strided<const double> coords{};
  if (!surrogate.has_points()) {
    local = {ErrorCode::invalid_argument, s.context + ": write(): the surrogate has no points (call set_points first)"};
  } else if (surrogate.dim() > 3) {
    local = {ErrorCode::invalid_argument, s.context + ": write(): the surrogate's points have " +
                                              std::to_string(surrogate.dim()) + " coordinates; VTK points have 1 to 3"};
  } else {
    n = surrogate.local_points();
    dim = surrogate.dim();
    coords = {surrogate.coordinates().data(), dim, 1};
  }
  return write_steps(time, n, dim, coords, local);
}

int VtkSeries::write_steps(double time, std::int64_t n, int dim, Strided<const double> coords, Status local) {
  State& s = state();
  struct ClearStaged {
    State& state;
    ~ClearStaged() {
      state.staged.clear();
      state.pending = {};
    }
  } clear_staged{s};

  // 1. Local checks, agreed before anything collective touches the file system.
  if (local.ok()) local = s.pending;
  if (local.ok()) {
    try {
      check_write(s, time, n, dim, coords);
    } catch (...) {
      local = Status::from_current_exception();
    }
  }
  s.comm.agree_or_throw(local);
  // 2. The same time and arrays on every rank.
  vtk_detail::check_ranks_agree(s.comm, s.context, time, s.staged);

  const vtk_detail::Step data{time, n, dim, coords, s.has_cells, s.connectivity, s.offsets, s.types, s.staged};
  const std::string stem = s.name + "_" + six_digits(s.steps);
  auto index = s.series;
  if (s.format == VtkFormat::vtkhdf) {
    // 3. Every rank: its piece of the step's one file (parallel HDF5, through rank 0's temporary).
    const std::string file = stem + ".hdf";
    vtk_detail::write_vtkhdf_step(s.comm, (fs::path(s.directory) / file).string(), s.context, data);
    index.emplace_back(time, file);
    // 4. Rank 0: the whole .hdf.series (through a rename, so a reader never sees half of it).
    collectively(s.comm, [&] {
      if (s.comm.rank() == 0) write_text_file(s.pvd, vtk_detail::hdf_series_text(index), s.context);
    });
  } else {
    // 3. Every rank: the step's folder (idempotent) and its piece, written to a unique temporary and
    //    renamed only when every rank's piece was written and synced: a failed step (full disk, quota)
    //    leaves no piece of it and every earlier file intact.
    const fs::path step_directory = fs::path(s.directory) / stem;
    const fs::path piece = step_directory / ("piece_" + std::to_string(s.comm.rank()) + ".vtu");
    std::optional<detail::OutputFile> piece_file;
    collectively(s.comm, [&] {
      make_directory(step_directory, s.context);
      const std::string bytes = vtk_detail::vtu_piece_bytes(data, piece.string(), s.context);
      piece_file.emplace(piece.string(), s.context + " piece");
      piece_file->write(bytes);
    });
    collectively(s.comm, [&] { piece_file->commit(); });
    // 4. Rank 0: the .pvtu, then the whole .pvd (each through a rename).
    index.emplace_back(time, stem + ".pvtu");
    collectively(s.comm, [&] {
      if (s.comm.rank() != 0) return;
      write_text_file(fs::path(s.directory) / (stem + ".pvtu"), vtk_detail::pvtu_text(s.staged, stem, s.comm.size()),
                      s.context);
      write_text_file(s.pvd, vtk_detail::pvd_text(index), s.context);
    });
  }
  s.series = std::move(index);
  return s.steps++;
}

const std::string& VtkSeries::pvd_path() const { return state().pvd; }
const std::string& VtkSeries::series_path() const { return state().pvd; }
VtkFormat VtkSeries::format() const { return state().format; }
int VtkSeries::steps() const { return state().steps; }
const Status& VtkSeries::staging_error() const { return state().pending; }
void VtkSeries::defer_error(const Status& error) {
  if (!error.ok()) state().defer(error);
}

}  // namespace surrogate
