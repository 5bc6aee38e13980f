// surrogate::VtkSeries and the surrogate_vtk_* C functions under mpirun (ctest runs 1 to 4 ranks): a
// 3-step series on a partitioned triangle mesh and one without cells (vertices), a scalar Float64 and a
// 3-component Float32 array, an empty piece (the last rank owns no points when there are several), the
// surrogate's predictions named and unit-tagged from the golden model's /fields, and errors on one rank
// that must be the same surrogate::Error (or C status and message) on every rank.
//
// Rank 0 checks the files by parsing their XML minimally (.pvd lists every step, .pvtu every piece and
// the array types, each piece's header its point/cell counts and arrays); every rank reads its own piece
// back with VTK's reader and compares the values.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "golden.hpp"
#include "surrogate.h"
#include "surrogate/vtk.hpp"
#include "vtk_test_mesh.hpp"

#ifdef SURROGATE_TEST_HAVE_VTK
#include <vtkCellTypes.h>
#include <vtkDataArray.h>
#include <vtkFieldData.h>
#include <vtkNew.h>
#include <vtkPointData.h>
#include <vtkStringArray.h>
#include <vtkUnstructuredGrid.h>
#include <vtkXMLUnstructuredGridReader.h>
#endif

namespace fs = std::filesystem;
using surrogate::ErrorCode;
using surrogate::Status;
using surrogate::Strided;
using surrogate::VtkSeries;

namespace {

constexpr int kNx = 9, kNy = 7;

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int world_size() {
  int p = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

/// A fresh output folder per test and rank count (ctest may run np 1..4 at the same time).
fs::path out_dir(const std::string& test) {
  const fs::path dir = fs::path(SURROGATE_VTK_TEST_OUT) / ("np" + std::to_string(world_size())) / test;
  if (world_rank() == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

std::string model_path() { return surrogate::testing::data_dir() + "/flare/qknorm_layernorm/model.h5"; }

template <class F>
Status status_of(F&& body) {
  try {
    body();
    return {};
  } catch (...) {
    return Status::from_current_exception();
  }
}

/// Every rank got exactly rank 0's message.
void expect_same_on_every_rank(const std::string& message) {
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string root(static_cast<std::size_t>(length), '\0');
  if (world_rank() == 0) root = message;
  MPI_Bcast(root.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(message, root) << "rank " << world_rank() << " got a different message than rank 0";
}

// --- minimal XML reading -------------------------------------------------------------------------------

/// The XML part of a file (a piece's raw appended data after <AppendedData ...> is cut off).
std::string xml_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  if (const std::size_t p = s.find("<AppendedData"); p != std::string::npos) s.resize(s.find('>', p) + 1);
  return s;
}

using Attributes = std::map<std::string, std::string>;

/// The attributes of every <tag ...> element in `xml`, in order.
std::vector<Attributes> elements(const std::string& xml, const std::string& tag) {
  std::vector<Attributes> result;
  static const std::regex attribute(R"re(([A-Za-z_]+)="([^"]*)")re");
  for (std::size_t p = xml.find("<" + tag); p != std::string::npos; p = xml.find("<" + tag, p + 1)) {
    const char next = xml[p + 1 + tag.size()];
    if (next != ' ' && next != '>' && next != '/') continue;  // <PointData> vs <PointDataX>
    const std::string element = xml.substr(p, xml.find('>', p) - p);
    Attributes a;
    for (std::sregex_iterator it(element.begin(), element.end(), attribute), end; it != end; ++it)
      a[(*it)[1]] = (*it)[2];
    result.push_back(a);
  }
  return result;
}

/// The text between <tag ...> and </tag>, or "" when absent.
std::string section(const std::string& xml, const std::string& tag) {
  const std::size_t begin = xml.find("<" + tag);
  const std::size_t end = xml.find("</" + tag + ">");
  return begin == std::string::npos || end == std::string::npos ? "" : xml.substr(begin, end - begin);
}

struct ArraySpec {
  std::string name, type;
  int components;
};

void expect_arrays(const std::vector<Attributes>& found, const std::vector<ArraySpec>& expected, const std::string& where) {
  ASSERT_EQ(found.size(), expected.size()) << where;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(found[i].at("Name"), expected[i].name) << where;
    EXPECT_EQ(found[i].at("type"), expected[i].type) << where << " array " << expected[i].name;
    const auto components = found[i].find("NumberOfComponents");  // absent: 1
    EXPECT_EQ(components == found[i].end() ? "1" : components->second, std::to_string(expected[i].components))
        << where << " array " << expected[i].name;
  }
}

/// Rank 0: the .pvd lists every step, every .pvtu every piece (and the arrays), every piece exists and
/// has the points, cells and arrays of its rank.
void check_series_files(const fs::path& dir, const std::string& name, const std::vector<double>& times,
                        const std::vector<ArraySpec>& arrays, bool with_cells) {
  const int size = world_size();
  const auto pvd = elements(xml_of(dir / (name + ".pvd")), "DataSet");
  ASSERT_EQ(pvd.size(), times.size()) << "the .pvd lists every step";
  for (std::size_t k = 0; k < times.size(); ++k) {
    char stem[64];
    std::snprintf(stem, sizeof stem, "%s_%06zu", name.c_str(), k);
    EXPECT_DOUBLE_EQ(std::stod(pvd[k].at("timestep")), times[k]);
    EXPECT_EQ(pvd[k].at("file"), std::string(stem) + ".pvtu");  // relative to the .pvd
    EXPECT_EQ(pvd[k].at("group"), "");
    EXPECT_EQ(pvd[k].at("part"), "0");

    const fs::path pvtu_path = dir / (std::string(stem) + ".pvtu");
    ASSERT_TRUE(fs::exists(pvtu_path)) << pvtu_path;
    const std::string pvtu = xml_of(pvtu_path);
    EXPECT_EQ(elements(pvtu, "VTKFile").at(0).at("type"), "PUnstructuredGrid");
    expect_arrays(elements(section(pvtu, "PPointData"), "PDataArray"), arrays, pvtu_path.string());
    expect_arrays(elements(section(pvtu, "PPoints"), "PDataArray"), {{"Points", "Float64", 3}}, pvtu_path.string());
    const auto pieces = elements(pvtu, "Piece");
    ASSERT_EQ(pieces.size(), static_cast<std::size_t>(size)) << "the .pvtu lists every rank's piece";
    for (int r = 0; r < size; ++r) {
      const std::string source = std::string(stem) + "/piece_" + std::to_string(r) + ".vtu";
      EXPECT_EQ(pieces[static_cast<std::size_t>(r)].at("Source"), source);
      const fs::path piece_path = dir / source;
      ASSERT_TRUE(fs::exists(piece_path)) << piece_path;
      const std::string piece = xml_of(piece_path);
      const auto mesh = vtk_test::local_mesh(kNx, kNy, r, size);
      const auto header = elements(piece, "Piece");
      ASSERT_EQ(header.size(), 1u) << piece_path;
      EXPECT_EQ(header[0].at("NumberOfPoints"), std::to_string(mesh.points)) << piece_path;
      EXPECT_EQ(header[0].at("NumberOfCells"), std::to_string(with_cells ? mesh.cells() : mesh.points)) << piece_path;
      expect_arrays(elements(section(piece, "PointData"), "DataArray"), arrays, piece_path.string());
      const auto field = elements(section(piece, "FieldData"), "DataArray");
      bool has_time = false;
      for (const auto& a : field) has_time |= a.at("Name") == "TimeValue";
      EXPECT_TRUE(has_time) << piece_path;
      const auto appended = elements(piece, "AppendedData");
      ASSERT_EQ(appended.size(), 1u) << "appended data: " << piece_path;
      EXPECT_EQ(appended[0].at("encoding"), "raw") << "binary, not base64: " << piece_path;
    }
  }
}

#ifdef SURROGATE_TEST_HAVE_VTK
/// This rank's piece of step `step`, read back with VTK.
vtkSmartPointer<vtkUnstructuredGrid> read_piece(const fs::path& dir, const std::string& name, int step) {
  char stem[64];
  std::snprintf(stem, sizeof stem, "%s_%06d", name.c_str(), step);
  const fs::path path = dir / stem / ("piece_" + std::to_string(world_rank()) + ".vtu");
  vtkNew<vtkXMLUnstructuredGridReader> reader;
  reader->SetFileName(path.c_str());
  reader->Update();
  return reader->GetOutput();
}

std::vector<std::string> units_of(vtkUnstructuredGrid* grid) {
  std::vector<std::string> units;
  if (auto* a = vtkStringArray::SafeDownCast(grid->GetFieldData()->GetAbstractArray("units")))
    for (vtkIdType i = 0; i < a->GetNumberOfValues(); ++i) units.push_back(a->GetValue(i));
  return units;
}
#endif

class VtkSeriesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!VtkSeries::available()) GTEST_SKIP() << "built without VTK (see UnsupportedWithoutVtk)";
  }
};

}  // namespace

TEST(VtkSeriesBuild, UnsupportedWithoutVtk) {
  if (VtkSeries::available()) GTEST_SKIP() << "built with VTK";
  const Status st = status_of([] { VtkSeries vtk(MPI_COMM_WORLD, out_dir("unsupported").string(), "x"); });
  EXPECT_EQ(st.code, ErrorCode::unsupported);
  EXPECT_NE(st.message.find("no VTK"), std::string::npos) << st.message;
  surrogate_vtk_t v = nullptr;
  EXPECT_EQ(surrogate_vtk_open(MPI_COMM_WORLD, out_dir("unsupported_c").c_str(), "x", &v), SURROGATE_ERR_UNSUPPORTED);
  EXPECT_EQ(v, nullptr);
}

// A 3-step series with triangles and the same without cells (one vertex per point).
TEST_F(VtkSeriesTest, WritesPartitionedSeriesWithAndWithoutCells) {
  const int rank = world_rank(), size = world_size();
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, size);
  const std::vector<double> times = {0.0, 0.5, 1.0};
  const std::vector<ArraySpec> arrays = {{"f", "Float64", 1}, {"velocity", "Float32", 3}};
  for (const bool with_cells : {true, false}) {
    SCOPED_TRACE(with_cells ? "triangles" : "vertices");
    const fs::path dir = out_dir(with_cells ? "cells" : "vertices");
    VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "heat");
    EXPECT_EQ(vtk.pvd_path(), (dir / "heat.pvd").string());
    if (with_cells) vtk.set_cells(mesh.connectivity, mesh.offsets, mesh.types);
    const auto n = static_cast<std::size_t>(mesh.points);
    for (std::size_t k = 0; k < times.size(); ++k) {
      std::vector<double> f(n);
      std::vector<float> velocity(3 * n);  // Fortran order: velocity(n, 3)
      for (std::size_t i = 0; i < n; ++i) {
        const double x = mesh.coords[2 * i], y = mesh.coords[2 * i + 1];
        f[i] = vtk_test::field(x, y, times[k]);
        velocity[i] = static_cast<float>(y);
        velocity[n + i] = static_cast<float>(-x);
        velocity[2 * n + i] = 0.5f;
      }
      vtk.add_array("f", "K", 1, Strided<const double>{f.data(), 1, 1});
      vtk.add_array("velocity", "m/s", 3, Strided<const float>{velocity.data(), 1, static_cast<std::int64_t>(n)});
      EXPECT_TRUE(vtk.staging_error().ok()) << vtk.staging_error().message;
      EXPECT_EQ(vtk.write(times[k], mesh.points, 2, {mesh.coords.data(), 2, 1}), static_cast<int>(k));
    }
    EXPECT_EQ(vtk.steps(), 3);
    if (rank == 0) check_series_files(dir, "heat", times, arrays, with_cells);

#ifdef SURROGATE_TEST_HAVE_VTK
    const auto grid = read_piece(dir, "heat", 2);
    ASSERT_EQ(grid->GetNumberOfPoints(), mesh.points);
    ASSERT_EQ(grid->GetNumberOfCells(), with_cells ? mesh.cells() : mesh.points);
    auto* f = grid->GetPointData()->GetArray("f");
    auto* velocity = grid->GetPointData()->GetArray("velocity");
    ASSERT_NE(f, nullptr);
    ASSERT_NE(velocity, nullptr);
    EXPECT_EQ(velocity->GetNumberOfComponents(), 3);
    for (vtkIdType i = 0; i < grid->GetNumberOfPoints(); ++i) {
      double p[3];
      grid->GetPoint(i, p);
      const double x = mesh.coords[static_cast<std::size_t>(2 * i)], y = mesh.coords[static_cast<std::size_t>(2 * i + 1)];
      EXPECT_EQ(p[0], x);
      EXPECT_EQ(p[1], y);
      EXPECT_EQ(p[2], 0.0);
      EXPECT_EQ(f->GetComponent(i, 0), vtk_test::field(x, y, 1.0));
      EXPECT_EQ(velocity->GetComponent(i, 0), static_cast<double>(static_cast<float>(y)));
      EXPECT_EQ(velocity->GetComponent(i, 1), static_cast<double>(static_cast<float>(-x)));
      EXPECT_EQ(velocity->GetComponent(i, 2), 0.5);
    }
    for (vtkIdType c = 0; c < grid->GetNumberOfCells(); ++c)
      EXPECT_EQ(grid->GetCellType(c), with_cells ? 5 : 1);
    EXPECT_EQ(units_of(grid), (std::vector<std::string>{"f: K", "velocity: m/s"}));
    auto* time_value = grid->GetFieldData()->GetArray("TimeValue");
    ASSERT_NE(time_value, nullptr);
    EXPECT_EQ(time_value->GetComponent(0, 0), 1.0);
#endif
  }
}

// The surrogate's predictions: names and units from /fields (prefixed), values, and its own points.
TEST_F(VtkSeriesTest, PredictionNamesAndUnitsFromTheModel) {
  const int rank = world_rank(), size = world_size();
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, size);
  const auto n = static_cast<std::size_t>(mesh.points);
  surrogate::Surrogate model(MPI_COMM_WORLD, model_path());
  ASSERT_EQ(model.in_channels(), 3);
  ASSERT_EQ(model.out_channels(), 2);
  model.set_points<double>(mesh.points, 2, {mesh.coords.data(), 2, 1});
  std::vector<double> in(3 * n), out(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    in[3 * i] = mesh.coords[2 * i];
    in[3 * i + 1] = mesh.coords[2 * i + 1];
    in[3 * i + 2] = 300 + 10 * mesh.coords[2 * i];
  }
  model.predict<double>({in.data(), 3, 1}, {out.data(), 2, 1});

  const fs::path dir = out_dir("prediction");
  VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "pred");
  vtk.set_cells(mesh.connectivity, mesh.offsets, mesh.types);
  vtk.add_prediction(model, {out.data(), 2, 1}, "surrogate_");
  vtk.add_array("temperature", "K", 1, Strided<const double>{in.data() + 2, 3, 1});
  EXPECT_EQ(vtk.write(0.25, model), 0);

  const std::vector<ArraySpec> arrays = {
      {"surrogate_pressure", "Float64", 1}, {"surrogate_velocity_x", "Float64", 1}, {"temperature", "Float64", 1}};
  if (rank == 0) check_series_files(dir, "pred", {0.25}, arrays, true);
#ifdef SURROGATE_TEST_HAVE_VTK
  const auto grid = read_piece(dir, "pred", 0);
  ASSERT_EQ(grid->GetNumberOfPoints(), mesh.points);
  auto* pressure = grid->GetPointData()->GetArray("surrogate_pressure");
  auto* velocity_x = grid->GetPointData()->GetArray("surrogate_velocity_x");
  ASSERT_NE(pressure, nullptr);
  ASSERT_NE(velocity_x, nullptr);
  for (vtkIdType i = 0; i < grid->GetNumberOfPoints(); ++i) {
    EXPECT_EQ(pressure->GetComponent(i, 0), out[static_cast<std::size_t>(2 * i)]);
    EXPECT_EQ(velocity_x->GetComponent(i, 0), out[static_cast<std::size_t>(2 * i + 1)]);
  }
  EXPECT_EQ(units_of(grid), (std::vector<std::string>{"surrogate_pressure: kPa", "surrogate_velocity_x: m/s", "temperature: K"}));
#endif
}

// A bad argument, a mismatch or an I/O error on one rank is the same Error on every rank, names the
// rank, array or file, leaves no step behind, and the series goes on afterwards.
TEST_F(VtkSeriesTest, ErrorsAreTheSameOnEveryRank) {
  const int rank = world_rank(), size = world_size(), last = size - 1;
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, size);
  const auto n = static_cast<std::size_t>(mesh.points);
  std::vector<double> f(n, 1.0);
  const Strided<const double> coords{mesh.coords.data(), 2, 1};
  const fs::path dir = out_dir("errors");
  VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "err");
  int steps = 0;

  auto expect_error = [&](const Status& st, ErrorCode code, const std::vector<std::string>& parts) {
    EXPECT_EQ(st.code, code) << st.message;
    for (const auto& part : parts) {
      if (size == 1 && part.rfind("rank ", 0) == 0) continue;  // one rank: no "rank N: " prefix
      EXPECT_NE(st.message.find(part), std::string::npos) << "'" << part << "' in: " << st.message;
    }
    expect_same_on_every_rank(st.message);
    EXPECT_EQ(vtk.steps(), steps) << "a failed write adds no step";
  };

  // An array staged on one rank only.
  vtk.add_array("f", "K", 1, Strided<const double>{f.data(), 1, 1});
  if (rank == last) vtk.add_array("only_on_the_last_rank", "", 1, Strided<const double>{f.data(), 1, 1});
  Status st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  if (size > 1) {
    expect_error(st, ErrorCode::invalid_argument,
                 {"rank " + std::to_string(last) + ":", "array 'only_on_the_last_rank'", "differ between ranks"});
  } else {
    EXPECT_TRUE(st.ok()) << st.message;
    ++steps;
  }

  // The same name with another number of components on one rank.
  vtk.add_array("f", "K", rank == last ? 2 : 1, Strided<const double>{f.data(), 1, 1});
  st = status_of([&] { vtk.write(0, rank == last ? mesh.points / 2 : mesh.points, 2, coords); });
  if (size > 1) {
    expect_error(st, ErrorCode::invalid_argument, {"rank " + std::to_string(last) + ":", "array 'f'", "f (2 x Float64, K)"});
  } else {
    EXPECT_TRUE(st.ok()) << st.message;
    ++steps;
  }

  // A bad argument on the last rank only.
  st = status_of([&] { vtk.write(0, mesh.points, rank == last ? 4 : 2, coords); });
  expect_error(st, ErrorCode::invalid_argument, {"rank " + std::to_string(last) + ":", "dim must be 1, 2 or 3, got 4"});

  // A bad staging argument is deferred to write(), on every rank.
  if (rank == last) vtk.add_array("bad", "", 0, Strided<const double>{f.data(), 1, 1});
  EXPECT_EQ(vtk.staging_error().ok(), rank != last);
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  expect_error(st, ErrorCode::invalid_argument, {"rank " + std::to_string(last) + ":", "array 'bad' has 0 components"});
  EXPECT_TRUE(vtk.staging_error().ok()) << "write() clears the pending error";

  // Names VTK files cannot hold.
  if (rank == 0) vtk.add_array("a<b", "", 1, Strided<const double>{f.data(), 1, 1});
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  expect_error(st, ErrorCode::invalid_argument, {"rank 0:", "'a<b'"});

  // Different times.
  if (size > 1) {
    st = status_of([&] { vtk.write(rank == last ? 1.0 : 0.0, mesh.points, 2, coords); });
    expect_error(st, ErrorCode::invalid_argument, {"rank " + std::to_string(last) + ":", "time 1 but rank 0 writes time 0"});
  }

  // Cells that refer to points the rank does not have.
  if (rank == 0) {
    const std::vector<std::int64_t> connectivity = {0, 1, mesh.points}, offsets = {3};
    const std::vector<surrogate::VtkCell> types = {surrogate::VtkCell::triangle};
    vtk.set_cells(connectivity, offsets, types);
  }
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  const std::int64_t rank0_points = vtk_test::local_mesh(kNx, kNy, 0, size).points;
  expect_error(st, ErrorCode::invalid_argument, {"rank 0:", "refer to local point " + std::to_string(rank0_points)});
  vtk.clear_cells();
  // Malformed cells: a quad with three points.
  if (rank == 0) {
    const std::vector<std::int64_t> connectivity = {0, 1, 2}, offsets = {3};
    const std::vector<surrogate::VtkCell> types = {surrogate::VtkCell::quad};
    vtk.set_cells(connectivity, offsets, types);
  }
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  expect_error(st, ErrorCode::invalid_argument, {"rank 0:", "cell 0 (quad) has 3 points"});

  // A surrogate without points.
  {
    surrogate::Surrogate model(MPI_COMM_WORLD, model_path());
    vtk.add_prediction(model, {f.data(), 2, 1});
    st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
    expect_error(st, ErrorCode::invalid_argument, {"rank 0:", "the surrogate has no points"});
    st = status_of([&] { vtk.write(0, model); });
    expect_error(st, ErrorCode::invalid_argument, {"rank 0:", "the surrogate has no points"});
  }

  // The step's folder cannot be created: a file is in the way.
  char stem[64];
  std::snprintf(stem, sizeof stem, "err_%06d", steps);
  if (rank == 0) std::ofstream(dir / stem) << "in the way";
  MPI_Barrier(MPI_COMM_WORLD);
  vtk.add_array("f", "K", 1, Strided<const double>{f.data(), 1, 1});
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  expect_error(st, ErrorCode::io, {"rank 0:", (dir / stem).string()});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove(dir / stem);
  MPI_Barrier(MPI_COMM_WORLD);

  // The last rank's piece cannot be written: a folder is in the way (VTK's writer fails).
  std::snprintf(stem, sizeof stem, "err_%06d", steps);
  const fs::path piece = dir / stem / ("piece_" + std::to_string(last) + ".vtu");
  if (rank == 0) fs::create_directories(piece);
  MPI_Barrier(MPI_COMM_WORLD);
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  expect_error(st, ErrorCode::io, {"rank " + std::to_string(last) + ":", "piece '" + piece.string() + "' is a directory"});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir / stem);
  MPI_Barrier(MPI_COMM_WORLD);

  // Pieces go through unique temporaries (output_file.hpp): a planted link and an unrelated file under the
  // old fixed temporary name are left alone, and a step that fails on the last rank (a directory is in
  // the way of its piece) puts no rank's piece in place and leaves no temporary behind.
  std::snprintf(stem, sizeof stem, "err_%06d", steps);
  const fs::path victim = dir / "victim.txt";
  if (rank == 0) {
    fs::create_directories(dir / stem);
    std::ofstream(victim) << "untouched";
    for (int r = 0; r < size; ++r) {
      const fs::path old_temporary = dir / stem / ("piece_" + std::to_string(r) + ".vtu.tmp");
      if (r % 2 == 0) fs::create_symlink(victim, old_temporary);
      else std::ofstream(old_temporary) << "unrelated";
    }
    fs::create_directories(dir / stem / ("piece_" + std::to_string(last) + ".vtu"));
  }
  MPI_Barrier(MPI_COMM_WORLD);
  st = status_of([&] { vtk.write(0, mesh.points, 2, coords); });
  expect_error(st, ErrorCode::io, {"rank " + std::to_string(last) + ":", "is a directory"});
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    for (int r = 0; r < size; ++r) {
      const fs::path mine = dir / stem / ("piece_" + std::to_string(r) + ".vtu");
      if (r != last) {
        EXPECT_FALSE(fs::exists(mine)) << mine << " was put in place by a failed step";
      }
    }
    for (const auto& entry : fs::directory_iterator(dir / stem))
      EXPECT_EQ(entry.path().filename().string().rfind(".surrogate-", 0), std::string::npos)
          << entry.path() << ": a temporary was left behind";
    std::ifstream in(victim);
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "untouched") << "a planted link redirected a piece";
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) fs::remove_all(dir / stem);
  MPI_Barrier(MPI_COMM_WORLD);

  // A successful step leaves the planted link and the unrelated file under the old temporary name alone.
  std::snprintf(stem, sizeof stem, "err_%06d", steps);
  if (rank == 0) {
    fs::create_directories(dir / stem);
    fs::create_symlink(victim, dir / stem / "piece_0.vtu.tmp");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  EXPECT_EQ(vtk.write(1.5, mesh.points, 2, coords), steps);
  ++steps;
  MPI_Barrier(MPI_COMM_WORLD);
  if (rank == 0) {
    EXPECT_TRUE(fs::is_symlink(dir / stem / "piece_0.vtu.tmp"));
    EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(dir / stem / "piece_0.vtu")));
    std::ifstream in(victim);
    std::string text;
    std::getline(in, text);
    EXPECT_EQ(text, "untouched") << "a planted link redirected a piece";
  }
  MPI_Barrier(MPI_COMM_WORLD);

  // After all that the series still works, with nothing left staged from the failed steps.
  EXPECT_EQ(vtk.write(2.0, mesh.points, 2, coords), steps);
  ++steps;
  if (rank == 0) {
    const auto pvd = elements(xml_of(dir / "err.pvd"), "DataSet");
    ASSERT_EQ(pvd.size(), static_cast<std::size_t>(steps));
    EXPECT_EQ(pvd.back().at("timestep"), "2");
    std::snprintf(stem, sizeof stem, "err_%06d.pvtu", steps - 1);
    EXPECT_EQ(elements(xml_of(dir / stem), "PDataArray").size(), 1u) << "only the points, no array";
  }

  // Constructor errors: a directory that cannot be created, names that differ between ranks.
  const fs::path blocker = dir / "a_file";
  if (rank == 0) std::ofstream(blocker) << "not a directory";
  MPI_Barrier(MPI_COMM_WORLD);
  st = status_of([&] { VtkSeries bad(MPI_COMM_WORLD, (blocker / "sub").string(), "x"); });
  EXPECT_EQ(st.code, ErrorCode::io) << st.message;
  EXPECT_NE(st.message.find("cannot create directory '" + (blocker / "sub").string() + "'"), std::string::npos) << st.message;
  expect_same_on_every_rank(st.message);
  if (size > 1) {
    st = status_of([&] { VtkSeries bad(MPI_COMM_WORLD, dir.string(), rank == last ? "other" : "err2"); });
    EXPECT_EQ(st.code, ErrorCode::invalid_argument) << st.message;
    EXPECT_NE(st.message.find("vtk series: the ranks disagree on series name: rank 0 has 'err2', rank " +
                              std::to_string(last) + " has another"),
              std::string::npos) << st.message;
    expect_same_on_every_rank(st.message);
  }
  st = status_of([&] { VtkSeries bad(MPI_COMM_WORLD, dir.string(), "a/b"); });
  EXPECT_EQ(st.code, ErrorCode::invalid_argument) << st.message;
}

// The C functions: a series from a surrogate handle, status codes and surrogate_last_error().
TEST_F(VtkSeriesTest, CInterface) {
  const int rank = world_rank(), size = world_size(), last = size - 1;
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, size);
  const auto n = static_cast<std::size_t>(mesh.points);
  surrogate_t model = nullptr;
  ASSERT_EQ(surrogate_open(MPI_COMM_WORLD, model_path().c_str(), nullptr, &model), SURROGATE_OK) << surrogate_last_error();
  ASSERT_EQ(surrogate_set_points_f64(model, mesh.points, 2, mesh.coords.data(), 2, 1, nullptr, nullptr), SURROGATE_OK);
  std::vector<double> in(3 * n, 1.0), out(2 * n);
  ASSERT_EQ(surrogate_predict_f64(model, in.data(), 3, 1, out.data(), 2, 1), SURROGATE_OK);

  const fs::path dir = out_dir("capi");
  surrogate_vtk_t vtk = nullptr;
  ASSERT_EQ(surrogate_vtk_open(MPI_COMM_WORLD, dir.c_str(), "capi", &vtk), SURROGATE_OK) << surrogate_last_error();
  std::vector<std::uint8_t> types(mesh.types.size());
  for (std::size_t c = 0; c < types.size(); ++c) types[c] = static_cast<std::uint8_t>(mesh.types[c]);
  EXPECT_EQ(surrogate_vtk_set_cells(vtk, mesh.cells(), mesh.connectivity.data(), mesh.offsets.data(), types.data()),
            SURROGATE_OK) << surrogate_last_error();
  std::vector<float> g(n, 2.0f);
  EXPECT_EQ(surrogate_vtk_add_array_f32(vtk, "g", "Pa", 1, g.data(), 1, 1), SURROGATE_OK);
  EXPECT_EQ(surrogate_vtk_add_prediction_f64(vtk, model, out.data(), 2, 1, "p_"), SURROGATE_OK);
  int step = -1;
  EXPECT_EQ(surrogate_vtk_write_points_of(vtk, 1.5, model, &step), SURROGATE_OK) << surrogate_last_error();
  EXPECT_EQ(step, 0);
  if (rank == 0)
    check_series_files(dir, "capi", {1.5}, {{"g", "Float32", 1}, {"p_pressure", "Float64", 1}, {"p_velocity_x", "Float64", 1}},
                       true);

  // A null name on one rank: that rank's call fails at once, the next write fails on every rank.
  const int rc = surrogate_vtk_add_array_f64(vtk, rank == last ? nullptr : "h", nullptr, 1, out.data(), 2, 1);
  EXPECT_EQ(rc, rank == last ? SURROGATE_ERR_INVALID_ARGUMENT : SURROGATE_OK);
  if (rank == last) {
    EXPECT_NE(std::string(surrogate_last_error()).find("null array name"), std::string::npos);
  }
  EXPECT_EQ(surrogate_vtk_write(vtk, 2.0, mesh.points, 2, mesh.coords.data(), 2, 1, &step), SURROGATE_ERR_INVALID_ARGUMENT);
  const std::string message = surrogate_last_error();
  EXPECT_NE(message.find((size > 1 ? "rank " + std::to_string(last) + ": " : std::string()) +
                         "surrogate_vtk_add_array_f64: null array name"),
            std::string::npos)
      << message;
  expect_same_on_every_rank(message);

  // Unknown cell type (local status) and a write with a null surrogate handle (collective status).
  const std::int64_t conn[3] = {0, 0, 0}, offsets[1] = {3};
  const std::uint8_t bad_type[1] = {42};
  EXPECT_EQ(surrogate_vtk_set_cells(vtk, 1, conn, offsets, bad_type), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(surrogate_last_error()).find("unknown type 42"), std::string::npos) << surrogate_last_error();
  EXPECT_EQ(surrogate_vtk_set_cells(vtk, 0, nullptr, nullptr, nullptr), SURROGATE_ERR_INVALID_ARGUMENT)
      << "the pending error stays until the next write";
  EXPECT_EQ(surrogate_vtk_write_points_of(vtk, 2.0, model, &step), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(surrogate_vtk_write_points_of(vtk, 2.0, nullptr, &step), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(surrogate_last_error()).find("null surrogate handle"), std::string::npos) << surrogate_last_error();
  EXPECT_EQ(surrogate_vtk_write(nullptr, 0, 0, 1, nullptr, 1, 1, nullptr), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(surrogate_vtk_write_points_of(vtk, 3.0, model, &step), SURROGATE_OK) << surrogate_last_error();
  EXPECT_EQ(step, 1);

  EXPECT_EQ(surrogate_vtk_close(&vtk), SURROGATE_OK);
  EXPECT_EQ(vtk, nullptr);
  EXPECT_EQ(surrogate_vtk_close(&vtk), SURROGATE_OK);
  EXPECT_EQ(surrogate_close(&model), SURROGATE_OK);
  EXPECT_EQ(surrogate_vtk_open(MPI_COMM_WORLD, dir.c_str(), "x", nullptr), SURROGATE_ERR_INVALID_ARGUMENT);
}
