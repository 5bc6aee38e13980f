/* An Erwin model file through the C API under mpirun: the coordinates of set_points are the positions,
 * global ids fix the point order, and the prediction on P ranks (points dealt round-robin, in reverse
 * order) equals bit for bit the one-process prediction, with the graph built by the model (its file's
 * kNN rule) and with explicit edges (surrogate_set_edges). argv[1]: a model file with a graph rule
 * (erwin_model_knn.h5 of make_erwin_cli_inputs: mpnn_rot, c_in 4, c_hidden[0] 16, d 3). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surrogate.h"

#define N0 150
#define N1 97
#define N (N0 + N1)
#define CIN 4
#define COUT 16

static int failures = 0;
static int rank = 0, size = 1;

#define CHECK(cond, ...)                                                                       \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      ++failures;                                                                              \
      fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                            \
      fprintf(stderr, "\n");                                                                   \
    }                                                                                          \
  } while (0)
#define OK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    CHECK(rc_ == SURROGATE_OK, "%s returned %d (%s): %s", #call, rc_, surrogate_status_string(rc_), \
          surrogate_last_error());                                                                 \
  } while (0)

/* Deterministic inputs of global point g. */
static double value(int64_t g, int c) { return sin(0.731 * (double)g + 1.37 * c) * (1.0 + 0.1 * c); }
static int64_t sample_of(int64_t g) { return g < N0 ? 0 : 1; }
/* The explicit graph: receiver g gets an edge from itself and from its next point of the same sample. */
static int64_t partner(int64_t g) {
  const int64_t end = g < N0 ? N0 : N;
  return g + 1 < end ? g + 1 : g - 1;
}

/* Predicts the points owned by this rank of `comm` (g % P == r, in decreasing g) into ref-ordered rows. */
static void run(MPI_Comm comm, const char* model, int with_edges, float* out_global) {
  int r = 0, p = 1;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &p);
  surrogate_t h = NULL;
  OK(surrogate_open(comm, model, NULL, &h));
  int pdim = 0;
  OK(surrogate_position_dim(h, &pdim));
  CHECK(pdim == 3, "position_dim %d", pdim);
  int64_t n = 0, ids[N], samples[N], src[2 * N], dst[2 * N];
  double coords[3 * N];
  float in[CIN * N], out[COUT * N];
  for (int64_t g = N - 1; g >= 0; --g) {
    if (g % p != r) continue;
    ids[n] = g;
    samples[n] = sample_of(g);
    for (int c = 0; c < 3; ++c) coords[3 * n + c] = (float)value(g, 10 + c);
    for (int c = 0; c < CIN; ++c) in[CIN * n + c] = (float)value(g, c);
    src[2 * n] = g;
    dst[2 * n] = g;
    src[2 * n + 1] = partner(g);
    dst[2 * n + 1] = g;
    ++n;
  }
  OK(surrogate_set_points_f64(h, n, 3, coords, 3, 1, ids, samples));
  if (with_edges) OK(surrogate_set_edges(h, 2 * n, src, dst));
  OK(surrogate_predict_f32(h, in, CIN, 1, out, COUT, 1));
  for (int64_t i = 0; i < N * COUT; ++i) out_global[i] = 0.0f;
  for (int64_t i = 0; i < n; ++i) memcpy(out_global + ids[i] * COUT, out + i * COUT, COUT * sizeof(float));
  MPI_Allreduce(MPI_IN_PLACE, out_global, N * COUT, MPI_FLOAT, MPI_SUM, comm);
  /* Wrong dimensionality: an input error on every rank, no hang. */
  OK(surrogate_set_points_f64(h, n, 2, coords, 3, 1, ids, samples));
  const int rc = surrogate_predict_f32(h, in, CIN, 1, out, COUT, 1);
  CHECK(rc == SURROGATE_ERR_INPUT, "2-D positions for a 3-D model: status %d (%s)", rc, surrogate_last_error());
  OK(surrogate_close(&h));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 2) {
    if (rank == 0) fprintf(stderr, "usage: test_erwin_capi MODEL.h5\n");
    MPI_Finalize();
    return 2;
  }
  static float one[N * COUT], many[N * COUT];
  for (int with_edges = 0; with_edges <= 1; ++with_edges) {
    run(MPI_COMM_SELF, argv[1], with_edges, one);
    run(MPI_COMM_WORLD, argv[1], with_edges, many);
    int64_t differ = 0;
    double scale = 0.0;
    for (int64_t i = 0; i < N * COUT; ++i) {
      differ += one[i] != many[i];
      scale = fmax(scale, fabs((double)one[i]));
    }
    CHECK(differ == 0 && scale > 0.1, "%s: %lld of %d outputs differ from one process (max|y| %g)",
          with_edges ? "explicit edges" : "kNN graph", (long long)differ, N * COUT, scale);
    if (rank == 0)
      printf("erwin C API, %d rank(s), %s: %s (max|y| %.3g)\n", size, with_edges ? "explicit edges" : "kNN graph",
             differ == 0 ? "bitwise identical to one process" : "DIFFERENT", scale);
  }
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
