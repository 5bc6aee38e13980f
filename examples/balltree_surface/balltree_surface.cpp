// A surface field on a large point cloud with a ball-tree model under MPI: the pressure coefficient of
// potential flow past a car-sized ellipsoid (closed form in ellipsoid_flow.hpp), predicted by a small
// Erwin model (ShapeNet-Car wrapper: positions in, Cp out; share/models/balltree_surface) through the
// C++ API, compared with the closed form, written as a parallel VTK series.
//
//   mpirun -np P balltree_surface [--model balltree_surface.h5] [--points 300000] [--output DIR | --no-vtk]
//                                 [--threads T] [--repeat R]
//
// Each rank generates its own contiguous range of the spiral's points (a band of the body along its
// length) and passes them to set_points with the rank-major numbering, so the cloud and the model's
// input order are the same for any P. Prints the error against the closed form (rms, max, relative L2),
// the prediction time (the slowest rank; best of R repeats) and a digest of all predictions (FNV-1a of
// the float64 values in point order) that is the same for every P.
#include <mpi.h>

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <vector>

#include "ellipsoid_flow.hpp"
#include "surrogate/error.hpp"
#include "surrogate/surrogate.hpp"
#include "surrogate/vtk.hpp"

namespace {

struct Arguments {
  std::string model;
  std::int64_t points = 300000;
  std::string output = "balltree_surface_output";
  bool vtk = true;
  int threads = 0;
  int repeat = 1;
};

Arguments parse(int argc, char** argv) {
  Arguments a;
  a.model = (std::filesystem::path(argv[0]).parent_path() / "balltree_surface.h5").string();
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw surrogate::Error(surrogate::ErrorCode::invalid_argument, flag + " needs a value");
      return argv[++i];
    };
    if (flag == "--model") a.model = value();
    else if (flag == "--points") a.points = std::stoll(value());
    else if (flag == "--output") a.output = value();
    else if (flag == "--no-vtk") a.vtk = false;
    else if (flag == "--threads") a.threads = std::stoi(value());
    else if (flag == "--repeat") a.repeat = std::max(1, std::stoi(value()));
    else throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "unknown argument '" + flag + "'");
  }
  if (a.points < 2) throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "--points must be at least 2");
  return a;
}

/// FNV-1a over the bytes of the values.
std::uint64_t fnv1a(const std::vector<double>& values) {
  std::uint64_t h = 14695981039346656037ull;
  for (const double v : values) {
    unsigned char bytes[sizeof v];
    std::memcpy(bytes, &v, sizeof v);
    for (const unsigned char b : bytes) h = (h ^ b) * 1099511628211ull;
  }
  return h;
}

/// The closed form checks itself: the shape factors sum to 2 and equal a direct quadrature; a sphere has
/// α = 2/3 each and Cp = 1 - 9/4 sin²θ for a stream along x.
void check_closed_form(const balltree_surface::Ellipsoid& body) {
  const std::array<double, 3> alpha = body.shape_factors();
  bool ok = std::abs(alpha[0] + alpha[1] + alpha[2] - 2.0) < 1e-12;
  for (int k = 0; k < 3; ++k) ok = ok && std::abs(alpha[static_cast<std::size_t>(k)] - body.shape_factor_quadrature(k)) < 1e-6;
  balltree_surface::Ellipsoid sphere;
  sphere.axes = {1.0, 1.0, 1.0};
  sphere.attack_deg = sphere.slip_deg = 0.0;
  const std::array<double, 3> w = sphere.surface_velocity_vector();
  for (std::int64_t i = 0; i < 100; ++i) {
    double p[3], n[3];
    sphere.point(i, 100, p, n);
    const double sin2 = 1.0 - n[0] * n[0];
    ok = ok && std::abs(sphere.pressure_coefficient(w, n) - (1.0 - 2.25 * sin2)) < 1e-12;
  }
  if (!ok) throw surrogate::Error(surrogate::ErrorCode::internal, "the closed form fails its own checks");
}

int run(int argc, char** argv) {
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const Arguments args = parse(argc, argv);

  // This rank's points: indices [N r / P, N (r+1) / P) of the spiral.
  const balltree_surface::Ellipsoid body;
  check_closed_form(body);
  const std::int64_t n_total = args.points;
  const std::int64_t first = n_total * rank / ranks, n = n_total * (rank + 1) / ranks - first;
  std::vector<double> positions(static_cast<std::size_t>(3 * n)), normals(static_cast<std::size_t>(3 * n)),
      exact(static_cast<std::size_t>(n));
  const std::array<double, 3> w = body.surface_velocity_vector();
  for (std::int64_t i = 0; i < n; ++i) {
    body.point(first + i, n_total, &positions[static_cast<std::size_t>(3 * i)], &normals[static_cast<std::size_t>(3 * i)]);
    exact[static_cast<std::size_t>(i)] = body.pressure_coefficient(w, &normals[static_cast<std::size_t>(3 * i)]);
  }

  surrogate::Options options;
  options.threads = args.threads;
  surrogate::Surrogate model(MPI_COMM_WORLD, args.model, options);
  if (model.model().position_dim() != 3 || model.in_channels() != 0 || model.out_channels() != 1)
    throw surrogate::Error(surrogate::ErrorCode::invalid_argument,
                           "'" + args.model + "' is not a surface model (positions in 3-D, no input channels, one output)");
  double t0 = MPI_Wtime();
  model.set_points<double>(n, 3, {positions.data(), 3, 1});  // rank-major ids: the spiral's index
  const double set_points_seconds = MPI_Wtime() - t0;
  std::vector<double> predicted(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  double best = 1e300;
  for (int r = 0; r < args.repeat; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    model.predict<double>({nullptr, 0, 1}, {predicted.data(), 1, 1});
    double seconds = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &seconds, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    best = std::min(best, seconds);
  }

  // Errors against the closed form.
  std::vector<double> error(static_cast<std::size_t>(std::max<std::int64_t>(n, 1)));
  double sums[3] = {0.0, 0.0, 0.0};  // sum err², sum exact², count
  struct {
    double value;
    int rank;
  } worst{0.0, rank};
  double worst_x = 0.0;  // x of the largest error (on the rank that has it)
  for (std::int64_t i = 0; i < n; ++i) {
    const auto k = static_cast<std::size_t>(i);
    error[k] = predicted[k] - exact[k];
    sums[0] += error[k] * error[k];
    sums[1] += exact[k] * exact[k];
    if (std::abs(error[k]) > worst.value) {
      worst.value = std::abs(error[k]);
      worst_x = positions[3 * k];
    }
  }
  sums[2] = static_cast<double>(n);
  MPI_Allreduce(MPI_IN_PLACE, sums, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE_INT, MPI_MAXLOC, MPI_COMM_WORLD);
  MPI_Bcast(&worst_x, 1, MPI_DOUBLE, worst.rank, MPI_COMM_WORLD);

  // Digest of all predictions in point order (rank r holds points N r / P ..).
  std::vector<int> counts(static_cast<std::size_t>(ranks)), offsets(static_cast<std::size_t>(ranks));
  const int mine = static_cast<int>(n);
  MPI_Gather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  for (int r = 1; r < ranks; ++r)
    offsets[static_cast<std::size_t>(r)] = offsets[static_cast<std::size_t>(r - 1)] + counts[static_cast<std::size_t>(r - 1)];
  std::vector<double> all(rank == 0 ? static_cast<std::size_t>(n_total) : 0);
  MPI_Gatherv(predicted.data(), mine, MPI_DOUBLE, all.data(), counts.data(), offsets.data(), MPI_DOUBLE, 0, MPI_COMM_WORLD);

  // VTK: every rank's piece (positions, normals, exact Cp, prediction, error), one step.
  std::string vtk_note = "not written (--no-vtk)";
  if (args.vtk && !surrogate::VtkSeries::available()) vtk_note = "not written (this build has no VTK)";
  if (args.vtk && surrogate::VtkSeries::available()) {
    surrogate::VtkSeries vtk(MPI_COMM_WORLD, args.output, "surface");
    vtk.add_array("normal", "", 3, surrogate::Strided<const double>{normals.data(), 3, 1});
    vtk.add_array("Cp_exact", "1", 1, surrogate::Strided<const double>{exact.data(), 1, 1});
    vtk.add_prediction(model, {predicted.data(), 1, 1}, "surrogate_");
    vtk.add_array("Cp_error", "1", 1, surrogate::Strided<const double>{error.data(), 1, 1});
    vtk.write(0.0, n, 3, {positions.data(), 3, 1});
    vtk_note = args.output + "/surface.pvd (" + std::to_string(ranks) + " pieces)";
  }

  if (rank == 0) {
    const std::array<double, 3> alpha = body.shape_factors();
    std::printf("balltree_surface: %" PRId64 " surface points on %d rank(s), model '%s' (%s)\n", n_total, ranks,
                args.model.c_str(), model.model().architecture().c_str());
    std::printf("ellipsoid %.2f x %.2f x %.2f m, alpha = %.6f %.6f %.6f (checked), flow %.1f deg attack, %.1f deg slip\n",
                body.axes[0], body.axes[1], body.axes[2], alpha[0], alpha[1], alpha[2], body.attack_deg, body.slip_deg);
    std::printf("Cp error vs closed form: rms %.5f max %.5f relative L2 %.5f (largest error at x = %.3f m)\n",
                std::sqrt(sums[0] / sums[2]), worst.value, std::sqrt(sums[0] / sums[1]), worst_x);
    std::printf("set_points %.3f s, prediction %.3f s (slowest rank, best of %d)\n", set_points_seconds, best,
                args.repeat);
    std::printf("prediction digest: %016" PRIx64 "\n", fnv1a(all));
    std::printf("VTK: %s\n", vtk_note.c_str());
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int status = 0;
  try {
    status = run(argc, argv);
  } catch (const std::exception& e) {
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    std::fprintf(stderr, "balltree_surface (rank %d): %s\n", rank, e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
