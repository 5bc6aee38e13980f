// Predicts three points with an installed surrogate (C++ API).
#include <mpi.h>

#include <cstdio>

#include "surrogate/surrogate.hpp"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    surrogate::Surrogate s(MPI_COMM_WORLD, argv[1]);
    const double x[] = {0.1, 0.2, 0.5, 0.5, 0.9, 0.3};
    double y[3];
    s.set_points<double>(3, 2, {x, 2, 1});
    s.predict<double>({x, 2, 1}, {y, 1, 1});
    std::printf("consumer_cpp: surrogate %s, %s model, predictions %.6f %.6f %.6f\n", surrogate::version(),
                s.model().architecture().c_str(), y[0], y[1], y[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_cpp: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
