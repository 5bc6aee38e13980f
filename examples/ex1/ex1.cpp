// ex1: the smallest complete use of the library. A tracer q on the sphere, split over the ranks in latitude
// bands, is advanced by a learned spherical surrogate (share/models/sphere): every step q <- q + dq(q), and
// the field goes to a ParaView time series. The same program in Fortran: ex1.f90. See README.md.
//   mpirun -np 3 ex1 [model.h5 [steps [output directory]]]        (defaults: sphere.h5, 10, ex1_output)
#include <mpi.h>

#include <cmath>
#include <cstdio>
#include <numbers>
#include <optional>
#include <string>
#include <vector>

#include "surrogate/surrogate.hpp"
#include "surrogate/vtk.hpp"

int main(int argc, char** argv) {
  // 1. Initialise MPI and read the command line.
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1, status = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  const std::string model_path = argc > 1 ? argv[1] : "sphere.h5";
  const int steps = argc > 2 ? std::stoi(argv[2]) : 10;
  const std::string output = argc > 3 ? argv[3] : "ex1_output";
  const double pi = std::numbers::pi, dt = 0.05;  // the model's time step
  try {
    // 2. Open the model: collective, rank 0 reads the file and sends it to the others.
    surrogate::Surrogate model(MPI_COMM_WORLD, model_path);

    // 3. The rank's points: whole rows of the model's 33 x 64 latitude-longitude grid, the bands in rank
    //    order (the point order the spherical models want), as unit vectors.
    const int nlat = 33, nlon = 64, first = nlat * rank / ranks, last = nlat * (rank + 1) / ranks;
    const std::size_t n = static_cast<std::size_t>((last - first) * nlon);
    std::vector<double> xyz(3 * n), q(n), dq(n);
    for (int i = first; i < last; ++i)
      for (int j = 0; j < nlon; ++j) {
        const double theta = i * (pi / (nlat - 1)), lambda = j * (2 * pi / nlon);
        double* p = &xyz[3 * static_cast<std::size_t>((i - first) * nlon + j)];
        p[0] = std::sin(theta) * std::cos(lambda);
        p[1] = std::sin(theta) * std::sin(lambda);
        p[2] = std::cos(theta);
      }
    model.set_points<double>(static_cast<std::int64_t>(n), 3, {xyz.data(), 3, 1});

    // 4. The initial field: Williamson's cosine bell, 1/2 (1 + cos(pi r / R)) within the great-circle
    //    distance r < R = 1/3 of the point c at longitude 3 pi / 2 on the equator.
    const double radius = 1.0 / 3, c[3] = {std::cos(1.5 * pi), std::sin(1.5 * pi), 0.0};
    for (std::size_t k = 0; k < n; ++k) {
      const double* p = &xyz[3 * k];
      const double r = std::acos(std::fmax(-1.0, std::fmin(1.0, p[0] * c[0] + p[1] * c[1] + p[2] * c[2])));
      q[k] = r < radius ? 0.5 * (1 + std::cos(pi * r / radius)) : 0.0;
    }

    // 5. The time loop: predict the increment (collective), update the field, write it for ParaView.
    std::optional<surrogate::VtkSeries> vtk;  // none in a build without VTK
    if (surrogate::VtkSeries::available()) vtk.emplace(MPI_COMM_WORLD, output, "ex1");
    if (rank == 0) std::printf("ex1: %s on %d rank(s)\n%5s %7s %22s %22s %12s\n", model_path.c_str(), ranks, "step", "time",
                               "sum of q", "sum of q^2", "max q");
    for (int step = 1; step <= steps; ++step) {
      model.predict<double>({q.data(), 1, 1}, {dq.data(), 1, 1});
      double sums[2] = {0, 0}, max_q = -HUGE_VAL;
      for (std::size_t k = 0; k < n; ++k) {
        q[k] += dq[k];
        sums[0] += q[k];
        sums[1] += q[k] * q[k];
        max_q = std::fmax(max_q, q[k]);
      }
      MPI_Allreduce(MPI_IN_PLACE, sums, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &max_q, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      if (rank == 0) std::printf("%5d %7.3f %22.15e %22.15e %12.6f\n", step, step * dt, sums[0], sums[1], max_q);
      if (vtk) {
        vtk->add_array("q", "1", 1, {q.data(), 1, 1});
        vtk->write(step * dt, model);  // collective; the points given to set_points
      }
    }
    if (rank == 0 && vtk) std::printf("ParaView: %s\n", vtk->pvd_path().c_str());

    // 6. Close: model and vtk close when they go out of scope (collective, like opening).
  } catch (const surrogate::Error& e) {  // the same error, with the same message, on every rank
    if (rank == 0) std::fprintf(stderr, "ex1: %s\n", e.what());
    status = 1;
  }
  MPI_Finalize();
  return status;
}
