/* Predicts three points with an installed surrogate (C API). */
#include <mpi.h>
#include <stdio.h>

#include "surrogate.h"

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  surrogate_t s = NULL;
  const double x[] = {0.1, 0.2, 0.5, 0.5, 0.9, 0.3};
  double y[3];
  int rc = surrogate_open(MPI_COMM_WORLD, argv[1], NULL, &s);
  if (!rc) rc = surrogate_set_points_f64(s, 3, 2, x, 2, 1, NULL, NULL);
  if (!rc) rc = surrogate_predict_f64(s, x, 2, 1, y, 1, 1);
  if (rc) fprintf(stderr, "consumer_c: %s\n", surrogate_last_error());
  else printf("consumer_c: surrogate %s, predictions %.6f %.6f %.6f\n", surrogate_version(), y[0], y[1], y[2]);
  surrogate_close(&s);
  MPI_Finalize();
  return rc;
}
