// surrogate::VtkSeries: one .vtu piece per rank (VTK's XML writer, binary appended data), a hand-written
// .pvtu per step and the .pvd time series, both on rank 0. Everything but the pieces builds without VTK;
// without VTK the constructor fails with Error(unsupported) on every rank.
//
// Every write() first checks its arguments locally and agrees on the outcome, then compares the staged
// arrays and the time across the ranks (one allgather of a hash), and only then touches the file system,
// agreeing again after the pieces and after rank 0's index files. So a bad argument or an I/O error on
// one rank is the same surrogate::Error on every rank, and nobody is left waiting.
#include "surrogate/vtk.hpp"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <system_error>
#include <type_traits>
#include <utility>

#include "output_file.hpp"
#include "strided_check.hpp"

#ifdef SURROGATE_HAVE_VTK
#include <vtkCallbackCommand.h>
#include <vtkCellArray.h>
#include <vtkCommand.h>
#include <vtkDoubleArray.h>
#include <vtkErrorCode.h>
#include <vtkExecutive.h>
#include <vtkFieldData.h>
#include <vtkFloatArray.h>
#include <vtkIdTypeArray.h>
#include <vtkNew.h>
#include <vtkPointData.h>
#include <vtkPoints.h>
#include <vtkStringArray.h>
#include <vtkUnsignedCharArray.h>
#include <vtkUnstructuredGrid.h>
#include <vtkXMLUnstructuredGridWriter.h>
#endif

namespace surrogate {

namespace fs = std::filesystem;

namespace {

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

std::string series_context(const std::string& name) { return "vtk '" + name + "'"; }

std::string six_digits(int step) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%06d", step);
  return buffer;
}

/// Shortest text that reads back as the same double.
std::string number(double value) {
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof buffer, value);
  return std::string(buffer, result.ptr);
}

const char* byte_order() { return std::endian::native == std::endian::little ? "LittleEndian" : "BigEndian"; }

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

/// What every rank must stage identically: names, units, components, types, in order.
constexpr char kFieldSep = '\x1f', kEntrySep = '\x1e';

std::string signature_of(const std::vector<StagedArray>& arrays) {
  std::string s;
  for (const StagedArray& a : arrays) {
    s += a.name;
    s += kFieldSep;
    s += a.unit;
    s += kFieldSep;
    s += std::to_string(a.components);
    s += kFieldSep;
    s += a.type();
    s += kEntrySep;
  }
  return s;
}

std::uint64_t fnv1a(const std::string& text) {
  std::uint64_t h = 14695981039346656037ull;
  for (const char ch : text) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

struct SignatureEntry {
  std::string name, text;
};

std::vector<SignatureEntry> parse_signature(const std::string& signature) {
  std::vector<SignatureEntry> entries;
  std::size_t begin = 0;
  while (begin < signature.size()) {
    const std::size_t end = signature.find(kEntrySep, begin);
    const std::string entry = signature.substr(begin, end - begin);
    std::vector<std::string> f;
    std::size_t b = 0;
    for (;;) {
      const std::size_t e = entry.find(kFieldSep, b);
      f.push_back(entry.substr(b, e == std::string::npos ? std::string::npos : e - b));
      if (e == std::string::npos) break;
      b = e + 1;
    }
    f.resize(4);
    entries.push_back({f[0], f[0] + " (" + f[2] + " x " + f[3] + (f[1].empty() ? "" : ", " + f[1]) + ")"});
    if (end == std::string::npos) break;
    begin = end + 1;
  }
  return entries;
}

std::string describe(const std::vector<SignatureEntry>& entries) {
  std::string s = "[";
  for (std::size_t i = 0; i < entries.size(); ++i) s += (i ? ", " : "") + entries[i].text;
  return s + "]";
}

/// The message for two ranks that staged different arrays, naming the first array that differs.
std::string signature_mismatch(const std::string& context, int rank, const std::string& mine, const std::string& root) {
  const auto a = parse_signature(root), b = parse_signature(mine);
  std::string first;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()) && first.empty(); ++i) {
    if (i >= a.size()) first = b[i].name;
    else if (i >= b.size()) first = a[i].name;
    else if (a[i].text != b[i].text) first = a[i].name != b[i].name ? a[i].name + "' / '" + b[i].name : a[i].name;
  }
  return context + ": the staged point arrays differ between ranks (array '" + first + "'): rank 0 has " +
         describe(a) + ", rank " + std::to_string(rank) + " has " + describe(b);
}

std::string pvtu_text(const std::vector<StagedArray>& arrays, const std::string& stem, int pieces) {
  std::string x = "<?xml version=\"1.0\"?>\n";
  x += "<VTKFile type=\"PUnstructuredGrid\" version=\"1.0\" byte_order=\"";
  x += byte_order();
  x += "\" header_type=\"UInt64\">\n  <PUnstructuredGrid GhostLevel=\"0\">\n";
  if (!arrays.empty()) {
    x += "    <PPointData>\n";
    for (const StagedArray& a : arrays)
      x += "      <PDataArray type=\"" + std::string(a.type()) + "\" Name=\"" + a.name + "\" NumberOfComponents=\"" +
           std::to_string(a.components) + "\"/>\n";
    x += "    </PPointData>\n";
  }
  x += "    <PPoints>\n      <PDataArray type=\"Float64\" Name=\"Points\" NumberOfComponents=\"3\"/>\n    </PPoints>\n";
  for (int r = 0; r < pieces; ++r) x += "    <Piece Source=\"" + stem + "/piece_" + std::to_string(r) + ".vtu\"/>\n";
  x += "  </PUnstructuredGrid>\n</VTKFile>\n";
  return x;
}

std::string pvd_text(const std::vector<std::pair<double, std::string>>& series) {
  std::string x = "<?xml version=\"1.0\"?>\n<VTKFile type=\"Collection\" version=\"0.1\" byte_order=\"";
  x += byte_order();
  x += "\">\n  <Collection>\n";
  for (const auto& [time, file] : series)
    x += "    <DataSet timestep=\"" + number(time) + "\" group=\"\" part=\"0\" file=\"" + file + "\"/>\n";
  x += "  </Collection>\n</VTKFile>\n";
  return x;
}

}  // namespace

// The state of a series; VtkSeries::State is this, and the helpers below take it directly.
namespace vtk_detail {
struct Series {
  Series(MPI_Comm c, std::string d, std::string n) : comm(c), directory(std::move(d)), name(std::move(n)) {}
  MpiComm comm;
  std::string directory, name, pvd;
  std::string context;  // "vtk '<name>'", for messages
  int steps = 0;
  std::vector<std::pair<double, std::string>> series;  // (time, .pvtu file) of the steps written
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

#ifdef SURROGATE_HAVE_VTK
/// Collects the messages of a VTK object's ErrorEvent instead of letting VTK print them.
void collect_vtk_error(vtkObject*, unsigned long, void* client, void* call) {
  auto& text = *static_cast<std::string*>(client);
  std::string message = call ? static_cast<const char*>(call) : "unknown VTK error";
  // "ERROR: In file, line N\nvtkClass (0x...): message" -> "message"
  if (const std::size_t p = message.find("): "); p != std::string::npos) message = message.substr(p + 3);
  while (!message.empty() && (message.back() == '\n' || message.back() == ' ')) message.pop_back();
  if (text.empty()) text = message;
}

template <class Array, class Real>
vtkSmartPointer<vtkDataArray> point_array(const StagedArray& a, Strided<const Real> v, std::int64_t n) {
  auto array = vtkSmartPointer<Array>::New();
  array->SetName(a.name.c_str());
  array->SetNumberOfComponents(a.components);
  array->SetNumberOfTuples(static_cast<vtkIdType>(n));
  Real* out = n > 0 ? array->GetPointer(0) : nullptr;
  for (std::int64_t i = 0; i < n; ++i)
    for (int j = 0; j < a.components; ++j)
      out[i * a.components + j] = v.data[i * v.point_stride + j * v.component_stride];
  return array;
}
#endif

/// This rank's piece: points padded to 3-D (Float64), its cells or one vertex per point, the staged
/// arrays, and the FieldData "units" (one "name: unit" per array with a unit) and "TimeValue".
/// The piece of this rank as bytes (VTK's XML writer into memory); the caller writes them through an
/// OutputFile.
std::string piece_bytes(const Series& s, const fs::path& file, double time, std::int64_t n, int dim,
                        Strided<const double> coords) {
#ifdef SURROGATE_HAVE_VTK
  static_assert(sizeof(vtkIdType) == sizeof(std::int64_t), "VTK must use 64-bit ids");
  vtkNew<vtkUnstructuredGrid> grid;
  vtkNew<vtkPoints> points;
  points->SetDataTypeToDouble();
  points->SetNumberOfPoints(static_cast<vtkIdType>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    double p[3] = {0, 0, 0};
    for (int j = 0; j < dim; ++j) p[j] = coords.data[i * coords.point_stride + j * coords.component_stride];
    points->SetPoint(static_cast<vtkIdType>(i), p);
  }
  grid->SetPoints(points);

  vtkNew<vtkIdTypeArray> offsets, connectivity;
  vtkNew<vtkUnsignedCharArray> types;
  if (s.has_cells) {
    const auto cells = static_cast<vtkIdType>(s.offsets.size());
    offsets->SetNumberOfValues(cells + 1);
    offsets->SetValue(0, 0);
    for (vtkIdType c = 0; c < cells; ++c) offsets->SetValue(c + 1, s.offsets[static_cast<std::size_t>(c)]);
    connectivity->SetNumberOfValues(static_cast<vtkIdType>(s.connectivity.size()));
    for (std::size_t k = 0; k < s.connectivity.size(); ++k)
      connectivity->SetValue(static_cast<vtkIdType>(k), s.connectivity[k]);
    types->SetNumberOfValues(cells);
    for (vtkIdType c = 0; c < cells; ++c) types->SetValue(c, s.types[static_cast<std::size_t>(c)]);
  } else {  // one vertex per point, so that ParaView draws the points
    offsets->SetNumberOfValues(static_cast<vtkIdType>(n + 1));
    for (std::int64_t i = 0; i <= n; ++i) offsets->SetValue(static_cast<vtkIdType>(i), i);
    connectivity->SetNumberOfValues(static_cast<vtkIdType>(n));
    types->SetNumberOfValues(static_cast<vtkIdType>(n));
    for (std::int64_t i = 0; i < n; ++i) {
      connectivity->SetValue(static_cast<vtkIdType>(i), i);
      types->SetValue(static_cast<vtkIdType>(i), static_cast<unsigned char>(VtkCell::vertex));
    }
  }
  vtkNew<vtkCellArray> cells;
  cells->SetData(offsets, connectivity);
  grid->SetCells(types, cells);

  vtkNew<vtkStringArray> units;
  units->SetName("units");
  for (const StagedArray& a : s.staged) {
    grid->GetPointData()->AddArray(a.single ? point_array<vtkFloatArray>(a, a.f32, n)
                                            : point_array<vtkDoubleArray>(a, a.f64, n));
    if (!a.unit.empty()) units->InsertNextValue(a.name + ": " + a.unit);
  }
  if (units->GetNumberOfValues() > 0) grid->GetFieldData()->AddArray(units);
  vtkNew<vtkDoubleArray> time_value;
  time_value->SetName("TimeValue");
  time_value->InsertNextValue(time);
  grid->GetFieldData()->AddArray(time_value);

  std::string vtk_error;
  vtkNew<vtkCallbackCommand> on_error;
  on_error->SetCallback(collect_vtk_error);
  on_error->SetClientData(&vtk_error);
  vtkNew<vtkXMLUnstructuredGridWriter> writer;
  writer->AddObserver(vtkCommand::ErrorEvent, on_error);
  writer->GetExecutive()->AddObserver(vtkCommand::ErrorEvent, on_error);  // "Algorithm ... returned failure"
  writer->WriteToOutputStringOn();
  writer->SetInputData(grid);
  writer->SetDataModeToAppended();
  writer->EncodeAppendedDataOff();  // raw binary, not base64
  writer->SetHeaderTypeToUInt64();
  writer->SetCompressorTypeToZLib();
  const int ok = writer->Write();
  if (!ok || !vtk_error.empty() || writer->GetErrorCode() != vtkErrorCode::NoError) {
    std::string why = vtk_error;
    if (why.empty()) why = vtkErrorCode::GetStringFromErrorCode(writer->GetErrorCode());
    throw Error(ErrorCode::io, s.context + ": cannot write piece '" + file.string() + "': " + why);
  }
  return writer->GetOutputString();
#else
  (void)s, (void)file, (void)time, (void)n, (void)dim, (void)coords;
  throw Error(ErrorCode::unsupported, "vtk: this build of surrogate has no VTK");
#endif
}

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

/// Collective: the ranks passed the same time and staged the same arrays; else the same Error (naming
/// the first rank that differs from rank 0, and the array) on every rank.
void check_ranks_agree(const Series& s, double time, const std::string& signature) {
  struct Summary {
    std::uint64_t hash;
    double time;
  };
  const int size = s.comm.size();
  const Summary mine{fnv1a(signature), time};
  std::vector<Summary> all(static_cast<std::size_t>(size));
  s.comm.allgather(&mine, sizeof mine, all.data());
  for (int r = 1; r < size; ++r)
    if (all[static_cast<std::size_t>(r)].time != all[0].time)
      throw invalid("rank " + std::to_string(r) + ": " + s.context + ": write() at time " +
                    number(all[static_cast<std::size_t>(r)].time) + " but rank 0 writes time " + number(all[0].time));
  if (std::all_of(all.begin(), all.end(), [&](const Summary& x) { return x.hash == all[0].hash; })) return;

  // Rare path: gather the signatures themselves for a message that names the array.
  const std::size_t my_bytes = signature.size();
  std::vector<std::size_t> bytes(static_cast<std::size_t>(size)), offsets(static_cast<std::size_t>(size));
  s.comm.allgather(&my_bytes, sizeof my_bytes, bytes.data());
  std::size_t total = 0;
  for (int r = 0; r < size; ++r) {
    offsets[static_cast<std::size_t>(r)] = total;
    total += bytes[static_cast<std::size_t>(r)];
  }
  std::string everything(total, '\0');
  s.comm.allgatherv(signature.data(), my_bytes, everything.data(), bytes, offsets);
  const std::string root = everything.substr(0, bytes[0]);
  for (int r = 1; r < size; ++r) {
    const std::string other = everything.substr(offsets[static_cast<std::size_t>(r)], bytes[static_cast<std::size_t>(r)]);
    if (other != root) throw invalid("rank " + std::to_string(r) + ": " + signature_mismatch(s.context + ": write()", r, other, root));
  }
  throw Error(ErrorCode::internal, s.context + ": write(): the staged arrays hash differently but are equal");
}

template <class Real>
void stage(Series& s, const std::string& name, const std::string& unit, int components,
           Strided<const Real> values, std::int64_t expected_points, const char* call) {
  try {
    const std::string where = s.context + ": " + call;
    check_text(where, "array name", name, false);
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

bool VtkSeries::available() noexcept {
#ifdef SURROGATE_HAVE_VTK
  return true;
#else
  return false;
#endif
}

VtkSeries::VtkSeries(MPI_Comm comm, std::string directory, std::string name)
    : state_(std::make_unique<State>(comm, std::move(directory), std::move(name))) {
  State& s = *state_;
  if (s.directory.empty()) s.directory = ".";
  s.context = series_context(s.name);
  s.pvd = (fs::path(s.directory) / (s.name + ".pvd")).string();
  // Every rank must name the same files.
  s.comm.agree_on_settings({{"directory", s.directory}, {"series name", s.name}}, "vtk series");
  collectively(s.comm, [&] {
    if (!available())
      throw Error(ErrorCode::unsupported, s.context + ": this build of surrogate has no VTK output (install "
                                                      "libvtk9-dev and configure with SURROGATE_ENABLE_VTK=AUTO or ON)");
    check_text("vtk", "series name", s.name, false);
    if (s.name.find('/') != std::string::npos || s.name == "." || s.name == "..")
      throw invalid(s.context + ": the series name must be a plain file name (no '/')");
    make_directory(s.directory, s.context);
    // Rank 0 writes the index files: a place where they cannot be written fails now, not after a step.
    if (s.comm.rank() == 0) (void)detail::check_output_place(s.pvd, s.context + " series file");
  });
}

VtkSeries::VtkSeries(const MpiComm& comm, std::string directory, std::string name)
    : VtkSeries(comm.get(), std::move(directory), std::move(name)) {}

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
  std::string signature;
  if (local.ok()) {
    try {
      check_write(s, time, n, dim, coords);
      signature = signature_of(s.staged);
    } catch (...) {
      local = Status::from_current_exception();
    }
  }
  s.comm.agree_or_throw(local);
  // 2. The same time and arrays on every rank.
  check_ranks_agree(s, time, signature);

  // 3. Every rank: the step's folder (idempotent) and its piece.
  const int step = s.steps;
  const std::string stem = s.name + "_" + six_digits(step);
  const fs::path step_directory = fs::path(s.directory) / stem;
  //    Written to a unique temporary and renamed only when every rank's piece was written and synced: a
  //    failed step (full disk, quota) leaves no piece of it and every earlier file intact.
  const fs::path piece = step_directory / ("piece_" + std::to_string(s.comm.rank()) + ".vtu");
  std::optional<detail::OutputFile> piece_file;
  collectively(s.comm, [&] {
    make_directory(step_directory, s.context);
    const std::string bytes = piece_bytes(s, piece, time, n, dim, coords);
    piece_file.emplace(piece.string(), s.context + " piece");
    piece_file->write(bytes);
  });
  collectively(s.comm, [&] { piece_file->commit(); });

  // 4. Rank 0: the .pvtu, then the whole .pvd (each through a rename, so a reader never sees half a file).
  auto index = s.series;
  index.emplace_back(time, stem + ".pvtu");
  collectively(s.comm, [&] {
    if (s.comm.rank() != 0) return;
    write_text_file(fs::path(s.directory) / (stem + ".pvtu"), pvtu_text(s.staged, stem, s.comm.size()), s.context);
    write_text_file(s.pvd, pvd_text(index), s.context);
  });
  s.series = std::move(index);
  return s.steps++;
}

const std::string& VtkSeries::pvd_path() const { return state().pvd; }
int VtkSeries::steps() const { return state().steps; }
const Status& VtkSeries::staging_error() const { return state().pending; }
void VtkSeries::defer_error(const Status& error) {
  if (!error.ok()) state().defer(error);
}

}  // namespace surrogate
