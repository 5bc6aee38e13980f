// Writes the series that share/tools/check_vtk.py opens with ParaView (ctest: under mpirun at 1 to 3
// ranks, then pvbatch): vtk_paraview_case <output folder> <model.h5> [vtu|vtkhdf] (default vtu).
//
// A 41 x 31 triangle mesh of the unit square (vtk_test_mesh.hpp; the last rank owns no points when there
// are several), 3 steps at t = 0, 0.5, 1 with
//   f          = x + 2y + t   Float64, unit K    (range [t, 3 + t], known analytically)
//   velocity   = (y, -x, 0.5) Float32, unit m/s  (ranges [0, 1], [-1, 0], [0.5, 0.5])
//   surrogate_pressure, surrogate_velocity_x: the golden model's prediction (units kPa, m/s from /fields)
// and <folder>/expect.json, what check_vtk.py must find: global point and cell counts, array names,
// components, ranges, units, the time steps, and where to save the screenshot.
#include <mpi.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "surrogate/vtk.hpp"
#include "vtk_test_mesh.hpp"

namespace fs = std::filesystem;

namespace {

constexpr int kNx = 41, kNy = 31;

std::string num(double v) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

std::string range(double lo, double hi) {
  std::string text = "[";
  text.append(num(lo)).append(", ").append(num(hi)).append("]");
  return text;
}

int run(int argc, char** argv) {
  const std::string format_name = argc == 4 ? argv[3] : "vtu";
  if ((argc != 3 && argc != 4) || (format_name != "vtu" && format_name != "vtkhdf")) {
    std::cerr << "usage: vtk_paraview_case <output folder> <model.h5> [vtu|vtkhdf]\n";
    return 2;
  }
  const auto format = format_name == "vtkhdf" ? surrogate::VtkFormat::vtkhdf : surrogate::VtkFormat::vtu;
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const fs::path dir = fs::absolute(argv[1]);
  if (rank == 0) fs::remove_all(dir);
  MPI_Barrier(MPI_COMM_WORLD);

  const auto mesh = vtk_test::local_mesh(kNx, kNy, rank, size);
  const auto n = static_cast<std::size_t>(mesh.points);
  surrogate::Surrogate model(MPI_COMM_WORLD, argv[2]);
  model.set_points<double>(mesh.points, 2, {mesh.coords.data(), 2, 1});

  surrogate::VtkSeries vtk(MPI_COMM_WORLD, dir.string(), "flow", format);
  vtk.set_cells(mesh.connectivity, mesh.offsets, mesh.types);
  const std::vector<double> times = {0.0, 0.5, 1.0};
  for (const double t : times) {
    std::vector<double> f(n), in(3 * n), out(2 * n);
    std::vector<float> velocity(3 * n);
    for (std::size_t i = 0; i < n; ++i) {
      const double x = mesh.coords[2 * i], y = mesh.coords[2 * i + 1];
      f[i] = vtk_test::field(x, y, t);
      velocity[3 * i] = static_cast<float>(y);
      velocity[3 * i + 1] = static_cast<float>(-x);
      velocity[3 * i + 2] = 0.5f;
      in[3 * i] = x;
      in[3 * i + 1] = y;
      in[3 * i + 2] = 300 + 20 * x * y + 10 * t;
    }
    model.predict<double>({in.data(), 3, 1}, {out.data(), 2, 1});
    vtk.add_array("f", "K", 1, surrogate::Strided<const double>{f.data(), 1, 1});
    vtk.add_array("velocity", "m/s", 3, surrogate::Strided<const float>{velocity.data(), 3, 1});
    vtk.add_prediction(model, {out.data(), 2, 1}, "surrogate_");
    vtk.write(t, model);
  }

  std::int64_t cells = mesh.cells();
  MPI_Allreduce(MPI_IN_PLACE, &cells, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) {
    std::ofstream json(dir / "expect.json");
    json << "{\n";
    if (format == surrogate::VtkFormat::vtu)
      json << "  \"pvtu\": \"" << (dir / "flow_000002.pvtu").string() << "\",\n"
           << "  \"pvtu_time\": 1.0,\n";
    else  // one step's VTKHDF file on its own, then the series
      json << "  \"step_file\": \"" << (dir / "flow_000002.hdf").string() << "\",\n"
           << "  \"step_time\": 1.0,\n";
    json << "  \"pvd\": \"" << vtk.series_path() << "\",\n"
         << "  \"points\": " << kNx * kNy << ",\n"
         << "  \"cells\": " << cells << ",\n"
         << "  \"pieces\": " << size << ",\n"
         << "  \"times\": [0.0, 0.5, 1.0],\n"
         << "  \"arrays\": {\n"
         << "    \"f\": {\"components\": 1, \"ranges\": {\"0\": [" << range(0, 3) << "], \"0.5\": [" << range(0.5, 3.5)
         << "], \"1\": [" << range(1, 4) << "]}},\n"
         << "    \"velocity\": {\"components\": 3, \"ranges\": {\"*\": [" << range(0, 1) << ", " << range(-1, 0) << ", "
         << range(0.5, 0.5) << "]}},\n"
         << "    \"surrogate_pressure\": {\"components\": 1, \"ranges\": null},\n"
         << "    \"surrogate_velocity_x\": {\"components\": 1, \"ranges\": null}\n"
         << "  },\n"
         << "  \"units\": {\"f\": \"K\", \"velocity\": \"m/s\", \"surrogate_pressure\": \"kPa\", "
            "\"surrogate_velocity_x\": \"m/s\"},\n"
         << "  \"color_by\": \"f\",\n"
         << "  \"png\": \"" << (dir / "flow.png").string() << "\"\n"
         << "}\n";
    std::cout << "vtk_paraview_case: " << vtk.steps() << " steps of " << kNx * kNy << " points, " << cells
              << " triangles on " << size << " rank(s) in " << dir.string() << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vtk_paraview_case: error: " << e.what() << "\n";
    rc = 1;
  }
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
