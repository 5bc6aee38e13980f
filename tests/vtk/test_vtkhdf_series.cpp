// VtkFormat::vtkhdf under mpirun (ctest runs 1 to 4 ranks): one VTKHDF file per step written by every
// rank with parallel HDF5, on the partitioned triangle mesh of vtk_test_mesh.hpp (unequal shares; with
// several ranks the last owns no points, an empty piece) and without cells (one vertex per point).
// Rank 0 reads every file back with HDF5 and checks every dataset and attribute piece by piece, the
// FieldData (TimeValue, units) and the .hdf.series; the outputs' promises (reliability.md): an existing
// step replaced by a rename, refused targets, an injected full disk and a failed step leave no temporary
// and every earlier file as it was, the same error on every rank. Also the C functions of the format.
// ParaView itself opens these series in vtk.paraview.vtkhdf.* (check_vtk.py).
#include <gtest/gtest.h>
#include <hdf5.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate.h"
#include "surrogate/vtk.hpp"
#include "vtk_test_mesh.hpp"

namespace fs = std::filesystem;
using surrogate::ErrorCode;
using surrogate::Status;
using surrogate::Strided;
using surrogate::VtkFormat;
using surrogate::VtkSeries;
using surrogate::testing::read_array;

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

fs::path out_dir(const std::string& test) {
  const fs::path dir = fs::path(SURROGATE_VTK_TEST_OUT) / ("vtkhdf_np" + std::to_string(world_size())) / test;
  if (world_rank() == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);
  return dir;
}

template <class F>
Status status_of(F&& body) {
  try {
    body();
    return {};
  } catch (...) {
    return Status::from_current_exception();
  }
}

void expect_same_on_every_rank(const std::string& message) {
  int length = static_cast<int>(message.size());
  MPI_Bcast(&length, 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::string root(static_cast<std::size_t>(length), '\0');
  if (world_rank() == 0) root = message;
  MPI_Bcast(root.data(), length, MPI_CHAR, 0, MPI_COMM_WORLD);
  EXPECT_EQ(message, root) << "rank " << world_rank() << " got a different message than rank 0";
}

std::string step_file(const std::string& name, int step) {
  char buffer[128];
  std::snprintf(buffer, sizeof buffer, "%s_%06d.hdf", name.c_str(), step);
  return buffer;
}

std::string text_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

/// Names in `dir` that are left-over temporaries.
std::vector<std::string> temporaries(const fs::path& dir) {
  std::vector<std::string> found;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().filename().string().rfind(".surrogate-", 0) == 0) found.push_back(entry.path().string());
  return found;
}

// --- reading a VTKHDF file ------------------------------------------------------------------------------

std::vector<std::int64_t> int_attribute(hid_t object, const char* name) {
  const hid_t attribute = H5Aopen(object, name, H5P_DEFAULT);
  const hid_t space = H5Aget_space(attribute);
  std::vector<std::int64_t> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
  EXPECT_GE(H5Aread(attribute, H5T_NATIVE_INT64, values.data()), 0) << name;
  H5Sclose(space);
  H5Aclose(attribute);
  return values;
}

/// The "Type" attribute: fixed-length ASCII, as ParaView's reader expects.
std::string type_attribute(hid_t object) {
  const hid_t attribute = H5Aopen(object, "Type", H5P_DEFAULT);
  const hid_t type = H5Aget_type(attribute);
  EXPECT_EQ(H5Tget_class(type), H5T_STRING);
  EXPECT_FALSE(H5Tis_variable_str(type));
  EXPECT_EQ(H5Tget_cset(type), H5T_CSET_ASCII);
  std::string text(H5Tget_size(type), '\0');
  EXPECT_GE(H5Aread(attribute, type, text.data()), 0);
  H5Tclose(type);
  H5Aclose(attribute);
  return text;
}

/// FieldData/units: variable-length ASCII strings (what ParaView's reader turns into a vtkStringArray).
std::vector<std::string> units_of(const std::string& file) {
  std::vector<std::string> units;
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (H5Lexists(f, "/VTKHDF/FieldData/units", H5P_DEFAULT) > 0) {
    const hid_t dataset = H5Dopen2(f, "/VTKHDF/FieldData/units", H5P_DEFAULT);
    const hid_t stored = H5Dget_type(dataset);
    EXPECT_TRUE(H5Tis_variable_str(stored));
    EXPECT_EQ(H5Tget_cset(stored), H5T_CSET_ASCII);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, H5T_VARIABLE);
    const hid_t space = H5Dget_space(dataset);
    std::vector<char*> values(static_cast<std::size_t>(H5Sget_simple_extent_npoints(space)));
    EXPECT_GE(H5Dread(dataset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), 0);
    for (char* v : values) units.emplace_back(v);
    H5Dvlen_reclaim(type, space, H5P_DEFAULT, values.data());
    H5Sclose(space);
    H5Tclose(type);
    H5Tclose(stored);
    H5Dclose(dataset);
  }
  H5Fclose(f);
  return units;
}

/// What every step of the tests holds: f = x + 2y + t (Float64, K), velocity = (y, -x, 0.5) (Float32, m/s)
/// and "plain" = 7 (Float64, no unit).
void check_step_file(const std::string& file, double time, bool with_cells) {
  SCOPED_TRACE(file);
  const int size = world_size();
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  ASSERT_GE(f, 0) << "not an HDF5 file";
  const hid_t root = H5Gopen2(f, "/VTKHDF", H5P_DEFAULT);
  ASSERT_GE(root, 0);
  EXPECT_EQ(int_attribute(root, "Version"), (std::vector<std::int64_t>{1, 0}));
  EXPECT_EQ(type_attribute(root), "UnstructuredGrid");
  for (const char* group : {"PointData", "CellData", "FieldData"})
    EXPECT_GT(H5Lexists(root, group, H5P_DEFAULT), 0) << group;
  H5Gclose(root);
  H5Fclose(f);
  EXPECT_EQ(surrogate::testing::stored_element_size(file, "VTKHDF/Types"), 1u);
  EXPECT_EQ(surrogate::testing::stored_element_size(file, "VTKHDF/PointData/velocity"), 4u) << "Float32 as staged";
  EXPECT_EQ(surrogate::testing::stored_element_size(file, "VTKHDF/PointData/f"), 8u);

  const auto n_points = read_array(file, "VTKHDF/NumberOfPoints"), n_cells = read_array(file, "VTKHDF/NumberOfCells"),
             n_ids = read_array(file, "VTKHDF/NumberOfConnectivityIds");
  ASSERT_EQ(n_points.shape, (std::vector<std::int64_t>{size})) << "one entry per piece (rank)";
  ASSERT_EQ(n_cells.shape, (std::vector<std::int64_t>{size}));
  ASSERT_EQ(n_ids.shape, (std::vector<std::int64_t>{size}));
  const auto points = read_array(file, "VTKHDF/Points"), types = read_array(file, "VTKHDF/Types"),
             connectivity = read_array(file, "VTKHDF/Connectivity"), offsets = read_array(file, "VTKHDF/Offsets"),
             fv = read_array(file, "VTKHDF/PointData/f"), velocity = read_array(file, "VTKHDF/PointData/velocity"),
             plain = read_array(file, "VTKHDF/PointData/plain"), time_value = read_array(file, "VTKHDF/FieldData/TimeValue");
  std::int64_t p0 = 0, c0 = 0, k0 = 0;
  for (int r = 0; r < size; ++r) {
    const auto mesh = vtk_test::local_mesh(kNx, kNy, r, size);
    const std::int64_t cells = with_cells ? mesh.cells() : mesh.points;
    const std::int64_t ids = with_cells ? static_cast<std::int64_t>(mesh.connectivity.size()) : mesh.points;
    EXPECT_EQ(n_points.values[static_cast<std::size_t>(r)], static_cast<double>(mesh.points)) << "piece " << r;
    EXPECT_EQ(n_cells.values[static_cast<std::size_t>(r)], static_cast<double>(cells)) << "piece " << r;
    EXPECT_EQ(n_ids.values[static_cast<std::size_t>(r)], static_cast<double>(ids)) << "piece " << r;
    for (std::int64_t i = 0; i < mesh.points; ++i) {
      const auto row = static_cast<std::size_t>(p0 + i);
      const double x = mesh.coords[static_cast<std::size_t>(2 * i)], y = mesh.coords[static_cast<std::size_t>(2 * i + 1)];
      ASSERT_EQ(points.values[3 * row], x) << "piece " << r << " point " << i;
      ASSERT_EQ(points.values[3 * row + 1], y);
      ASSERT_EQ(points.values[3 * row + 2], 0.0) << "padded to 3-D";
      ASSERT_EQ(fv.values[row], vtk_test::field(x, y, time));
      ASSERT_EQ(velocity.values[3 * row], static_cast<double>(static_cast<float>(y)));
      ASSERT_EQ(velocity.values[3 * row + 1], static_cast<double>(static_cast<float>(-x)));
      ASSERT_EQ(velocity.values[3 * row + 2], 0.5);
      ASSERT_EQ(plain.values[row], 7.0);
    }
    // Offsets: n_cells + 1 per piece, starting at 0, local to the piece (as the connectivity).
    ASSERT_EQ(offsets.values[static_cast<std::size_t>(c0 + r)], 0.0) << "piece " << r;
    for (std::int64_t c = 0; c < cells; ++c) {
      const double end = with_cells ? static_cast<double>(mesh.offsets[static_cast<std::size_t>(c)]) : static_cast<double>(c + 1);
      ASSERT_EQ(offsets.values[static_cast<std::size_t>(c0 + r + c + 1)], end) << "piece " << r << " cell " << c;
      ASSERT_EQ(types.values[static_cast<std::size_t>(c0 + c)], with_cells ? 5.0 : 1.0);
    }
    for (std::int64_t k = 0; k < ids; ++k)
      ASSERT_EQ(connectivity.values[static_cast<std::size_t>(k0 + k)],
                with_cells ? static_cast<double>(mesh.connectivity[static_cast<std::size_t>(k)]) : static_cast<double>(k));
    p0 += mesh.points;
    c0 += cells;
    k0 += ids;
  }
  EXPECT_EQ(points.shape, (std::vector<std::int64_t>{p0, 3}));
  EXPECT_EQ(velocity.shape, (std::vector<std::int64_t>{p0, 3}));
  EXPECT_EQ(fv.shape, (std::vector<std::int64_t>{p0}));
  EXPECT_EQ(types.shape, (std::vector<std::int64_t>{c0}));
  EXPECT_EQ(offsets.shape, (std::vector<std::int64_t>{c0 + size}));
  EXPECT_EQ(connectivity.shape, (std::vector<std::int64_t>{k0}));
  ASSERT_EQ(time_value.values.size(), 1u);
  EXPECT_EQ(time_value.values[0], time);
  EXPECT_EQ(units_of(file), (std::vector<std::string>{"f: K", "velocity: m/s"}));
}

/// Stages the arrays check_step_file expects and writes the step; the buffers live in `keep`.
struct StepData {
  std::vector<double> f, plain;
  std::vector<float> velocity;
};

int write_step(VtkSeries& vtk, const vtk_test::LocalMesh& mesh, double time, StepData& keep) {
  const auto n = static_cast<std::size_t>(mesh.points);
  keep.f.resize(n);
  keep.plain.assign(n, 7.0);
  keep.velocity.resize(3 * n);  // Fortran order: velocity(n, 3)
  for (std::size_t i = 0; i < n; ++i) {
    const double x = mesh.coords[2 * i], y = mesh.coords[2 * i + 1];
    keep.f[i] = vtk_test::field(x, y, time);
    keep.velocity[i] = static_cast<float>(y);
    keep.velocity[n + i] = static_cast<float>(-x);
    keep.velocity[2 * n + i] = 0.5f;
  }
  vtk.add_array("f", "K", 1, Strided<const double>{keep.f.data(), 1, 1});
  vtk.add_array("velocity", "m/s", 3, Strided<const float>{keep.velocity.data(), 1, static_cast<std::int64_t>(n)});
  vtk.add_array("plain", "", 1, Strided<const double>{keep.plain.data(), 1, 1});
  return vtk.write(time, mesh.points, 2, {mesh.coords.data(), 2, 1});
}

}  // namespace

TEST(VtkHdfSeries, AvailableWithoutVtk) {
  EXPECT_TRUE(VtkSeries::available(VtkFormat::vtkhdf)) << "plain HDF5: every build";
  EXPECT_EQ(VtkSeries::available(), VtkSeries::available(VtkFormat::vtu));
  int available = -1;
  EXPECT_EQ(surrogate_vtk_format_available(SURROGATE_VTK_FORMAT_VTKHDF, &available), SURROGATE_OK);
  EXPECT_EQ(available, 1);
  EXPECT_EQ(surrogate_vtk_format_available(7, &available), SURROGATE_ERR_INVALID_ARGUMENT);
}

// Three steps with triangles and the same without cells; every rank's piece, value by value.
TEST(VtkHdfSeries, WritesOneFilePerStepEveryRankItsPiece) {
  const int rank = world_rank();
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, world_size());
  const std::vector<double> times = {0.0, 0.5, 1.0};
  for (const bool with_cells : {true, false}) {
    SCOPED_TRACE(with_cells ? "triangles" : "vertices");
    const fs::path dir = out_dir(with_cells ? "cells" : "vertices");
    VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "heat", VtkFormat::vtkhdf);
    EXPECT_EQ(vtk.format(), VtkFormat::vtkhdf);
    EXPECT_EQ(vtk.series_path(), (dir / "heat.hdf.series").string());
    EXPECT_EQ(vtk.pvd_path(), vtk.series_path());
    if (with_cells) vtk.set_cells(mesh.connectivity, mesh.offsets, mesh.types);
    StepData keep;
    for (std::size_t k = 0; k < times.size(); ++k) EXPECT_EQ(write_step(vtk, mesh, times[k], keep), static_cast<int>(k));
    EXPECT_EQ(vtk.steps(), 3);
    if (rank != 0) continue;
    // One file per step and the series file: nothing else (no pieces, no folders, no temporaries).
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    EXPECT_EQ(names, (std::vector<std::string>{"heat.hdf.series", step_file("heat", 0), step_file("heat", 1),
                                               step_file("heat", 2)}));
    for (std::size_t k = 0; k < times.size(); ++k)
      check_step_file((dir / step_file("heat", static_cast<int>(k))).string(), times[k], with_cells);
    EXPECT_EQ(text_of(dir / "heat.hdf.series"),
              "{\n  \"file-series-version\": \"1.0\",\n  \"files\": [\n"
              "    {\"name\": \"heat_000000.hdf\", \"time\": 0},\n"
              "    {\"name\": \"heat_000001.hdf\", \"time\": 0.5},\n"
              "    {\"name\": \"heat_000002.hdf\", \"time\": 1}\n  ]\n}\n");
  }
}

// No point on any rank: a valid file with empty datasets.
TEST(VtkHdfSeries, EmptyStepOnEveryRank) {
  const fs::path dir = out_dir("empty");
  VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "none", VtkFormat::vtkhdf);
  EXPECT_EQ(vtk.write(2.5, 0, 3, {}), 0);
  if (world_rank() == 0) {
    const std::string file = (dir / step_file("none", 0)).string();
    EXPECT_EQ(read_array(file, "VTKHDF/Points").shape, (std::vector<std::int64_t>{0, 3}));
    EXPECT_EQ(read_array(file, "VTKHDF/Offsets").shape, (std::vector<std::int64_t>{world_size()}));
    EXPECT_EQ(read_array(file, "VTKHDF/FieldData/TimeValue").values, (std::vector<double>{2.5}));
    EXPECT_TRUE(units_of(file).empty());
  }
}

// An existing step file is replaced by a rename (a hard link to the old file keeps the old bytes), and a
// link to a regular file is written through.
TEST(VtkHdfSeries, ReplacesAnExistingStepByRename) {
  const int rank = world_rank();
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, world_size());
  const fs::path dir = out_dir("replace");
  const fs::path target = dir / step_file("heat", 0), old_copy = dir / "old_hard_link";
  if (rank == 0) {
    fs::create_directories(dir);
    std::ofstream(target) << "the previous step";
    fs::create_hard_link(target, old_copy);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "heat", VtkFormat::vtkhdf);
  StepData keep;
  EXPECT_EQ(write_step(vtk, mesh, 0.0, keep), 0);
  if (rank == 0) {
    EXPECT_EQ(text_of(old_copy), "the previous step") << "the old file was replaced, not overwritten";
    check_step_file(target.string(), 0.0, false);
    EXPECT_TRUE(temporaries(dir).empty());
  }
}

// Refused targets, an injected full disk and bad names: the same error on every rank, naming the file
// or array; no temporary left; earlier steps and the series file as they were; the series goes on.
TEST(VtkHdfSeries, FailuresLeaveEveryEarlierFileAndNoTemporary) {
  const int rank = world_rank(), size = world_size(), last = size - 1;
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, size);
  const fs::path dir = out_dir("failures");
  VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "heat", VtkFormat::vtkhdf);
  StepData keep;
  ASSERT_EQ(write_step(vtk, mesh, 0.0, keep), 0);
  const std::string step0 = text_of(dir / step_file("heat", 0)), series = text_of(dir / "heat.hdf.series");

  const auto expect_failure = [&](const Status& st, ErrorCode code, const std::vector<std::string>& parts) {
    EXPECT_EQ(st.code, code) << st.message;
    for (const std::string& part : parts) EXPECT_NE(st.message.find(part), std::string::npos) << "'" << part << "' in: " << st.message;
    expect_same_on_every_rank(st.message);
    EXPECT_EQ(vtk.steps(), 1) << "a failed step is not counted";
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) {
      EXPECT_EQ(temporaries(dir), std::vector<std::string>{}) << "no temporary left";
      EXPECT_EQ(text_of(dir / step_file("heat", 0)), step0) << "the earlier step is untouched";
      EXPECT_EQ(text_of(dir / "heat.hdf.series"), series) << "the series file is untouched";
    }
    MPI_Barrier(MPI_COMM_WORLD);
  };

  // A full disk (the documented hook: the reservation fails with ENOSPC on rank 0).
  setenv("SURROGATE_TEST_FAIL_WRITE", "1", 1);
  Status st = status_of([&] { write_step(vtk, mesh, 1.0, keep); });
  unsetenv("SURROGATE_TEST_FAIL_WRITE");
  expect_failure(st, ErrorCode::io, {step_file("heat", 1), "No space left on device"});
  EXPECT_FALSE(fs::exists(dir / step_file("heat", 1)));
  MPI_Barrier(MPI_COMM_WORLD);

  // A directory, a FIFO and a dangling link where the step file goes.
  const fs::path next = dir / step_file("heat", 1);
  if (rank == 0) fs::create_directory(next);
  MPI_Barrier(MPI_COMM_WORLD);
  st = status_of([&] { write_step(vtk, mesh, 1.0, keep); });
  expect_failure(st, ErrorCode::io, {step_file("heat", 1), "is a directory"});
  if (rank == 0) {
    fs::remove(next);
    EXPECT_EQ(mkfifo(next.c_str(), 0600), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  st = status_of([&] { write_step(vtk, mesh, 1.0, keep); });
  expect_failure(st, ErrorCode::io, {step_file("heat", 1), "several processes with MPI-IO"});
  if (rank == 0) {
    fs::remove(next);
    fs::create_symlink(dir / "missing" / "file.hdf", next);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  st = status_of([&] { write_step(vtk, mesh, 1.0, keep); });
  expect_failure(st, ErrorCode::io, {step_file("heat", 1), "symbolic link to a missing"});
  if (rank == 0) fs::remove(next);
  MPI_Barrier(MPI_COMM_WORLD);

  // A name that cannot be an HDF5 dataset's, staged on the last rank only.
  if (rank == last) vtk.add_array("a/b", "", 1, Strided<const double>{keep.f.data(), 1, 1});
  st = status_of([&] { write_step(vtk, mesh, 1.0, keep); });
  expect_failure(st, ErrorCode::invalid_argument, {"'a/b'", "VTKHDF"});

  // The series goes on where it stopped.
  EXPECT_EQ(write_step(vtk, mesh, 1.0, keep), 1);
  if (rank == 0) check_step_file((dir / step_file("heat", 1)).string(), 1.0, false);
}

// The ranks must agree on the format.
TEST(VtkHdfSeries, FormatsThatDifferBetweenRanks) {
  if (world_size() == 1) GTEST_SKIP() << "needs two ranks";
  const fs::path dir = out_dir("disagree");
  const VtkFormat format = world_rank() == world_size() - 1 ? VtkFormat::vtu : VtkFormat::vtkhdf;
  const Status st = status_of([&] { VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "x", format); });
  EXPECT_EQ(st.code, ErrorCode::invalid_argument);
  EXPECT_NE(st.message.find("the ranks disagree on format"), std::string::npos) << st.message;
  expect_same_on_every_rank(st.message);
}

// The C functions: the format chosen at open, the series file's path, status codes.
TEST(VtkHdfSeries, CInterface) {
  const int rank = world_rank();
  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, world_size());
  const fs::path dir = out_dir("c_api");
  surrogate_vtk_t vtk = nullptr;
  EXPECT_EQ(surrogate_vtk_open_format(MPI_COMM_WORLD, dir.c_str(), "c", 7, &vtk), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(surrogate_last_error()).find("unknown VTK format 7"), std::string::npos) << surrogate_last_error();
  EXPECT_EQ(vtk, nullptr);
  ASSERT_EQ(surrogate_vtk_open_format(MPI_COMM_WORLD, dir.c_str(), "c", SURROGATE_VTK_FORMAT_VTKHDF, &vtk), SURROGATE_OK)
      << surrogate_last_error();
  const char* path = nullptr;
  EXPECT_EQ(surrogate_vtk_series_path(vtk, &path), SURROGATE_OK);
  EXPECT_EQ(std::string(path), (dir / "c.hdf.series").string());
  std::vector<double> f(static_cast<std::size_t>(mesh.points));
  for (std::size_t i = 0; i < f.size(); ++i) f[i] = vtk_test::field(mesh.coords[2 * i], mesh.coords[2 * i + 1], 0.0);
  EXPECT_EQ(surrogate_vtk_add_array_f64(vtk, "f", "K", 1, f.data(), 1, 1), SURROGATE_OK);
  int step = -1;
  EXPECT_EQ(surrogate_vtk_write(vtk, 0.0, mesh.points, 2, mesh.coords.data(), 2, 1, &step), SURROGATE_OK)
      << surrogate_last_error();
  EXPECT_EQ(step, 0);
  EXPECT_EQ(surrogate_vtk_add_array_f64(vtk, "a/b", "", 1, f.data(), 1, 1), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(surrogate_vtk_write(vtk, 1.0, mesh.points, 2, mesh.coords.data(), 2, 1, &step), SURROGATE_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(surrogate_vtk_close(&vtk), SURROGATE_OK);
  if (rank == 0) {
    const std::string file = (dir / step_file("c", 0)).string();
    EXPECT_EQ(read_array(file, "VTKHDF/PointData/f").rows(), read_array(file, "VTKHDF/Points").rows());
    EXPECT_EQ(units_of(file), (std::vector<std::string>{"f: K"}));
    EXPECT_FALSE(fs::exists(dir / step_file("c", 1)));
  }
}
