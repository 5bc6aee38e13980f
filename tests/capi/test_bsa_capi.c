/* A BSA model file through the C API under mpirun: the coordinates of set_points are the positions,
 * global ids fix the point order, and the prediction on P ranks (points dealt round-robin, in reverse
 * order) equals bit for bit the one-process prediction; edges given with surrogate_set_edges are ignored
 * (BSA passes no messages). argv[1]: tests/data/bsa/bsa_sparse_rot.h5 (c_in 5, c_hidden 32, d 3, ball 128;
 * two samples of 1000 and 1024 points, which pad to the same size as BSA requires). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surrogate.h"

#define N0 1000
#define N1 1024
#define N (N0 + N1)
#define CIN 5
#define COUT 32

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

static int64_t ids[N], samples[N], src[N], dst[N];
static double coords[3 * N];
static float in[CIN * N], out[COUT * N];

/* Predicts the points owned by this rank of `comm` (g % P == r, in decreasing g) into rows by global id. */
static void run(MPI_Comm comm, const char* model, int with_edges, float* out_global) {
  int r = 0, p = 1;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &p);
  surrogate_t h = NULL;
  OK(surrogate_open(comm, model, NULL, &h));
  int pdim = 0, cin = 0, cout = 0;
  OK(surrogate_position_dim(h, &pdim));
  OK(surrogate_in_channels(h, &cin));
  OK(surrogate_out_channels(h, &cout));
  CHECK(pdim == 3 && cin == CIN && cout == COUT, "position_dim %d, channels %d in, %d out", pdim, cin, cout);
  int64_t n = 0;
  for (int64_t g = N - 1; g >= 0; --g) {
    if (g % p != r) continue;
    ids[n] = g;
    samples[n] = g < N0 ? 0 : 1;
    for (int c = 0; c < 3; ++c) coords[3 * n + c] = (float)value(g, 10 + c);
    for (int c = 0; c < CIN; ++c) in[CIN * n + c] = (float)value(g, c);
    src[n] = g;
    dst[n] = g;
    ++n;
  }
  OK(surrogate_set_points_f64(h, n, 3, coords, 3, 1, ids, samples));
  if (with_edges) OK(surrogate_set_edges(h, n, src, dst));
  OK(surrogate_predict_f32(h, in, CIN, 1, out, COUT, 1));
  for (int64_t i = 0; i < N * COUT; ++i) out_global[i] = 0.0f;
  for (int64_t i = 0; i < n; ++i) memcpy(out_global + ids[i] * COUT, out + i * COUT, COUT * sizeof(float));
  MPI_Allreduce(MPI_IN_PLACE, out_global, N * COUT, MPI_FLOAT, MPI_SUM, comm);
  /* One sample of 1000 and one of 1024 points pad to the same size; 400 / 1624 do not: an input error
   * on every rank, no hang. */
  for (int64_t i = 0; i < n; ++i) samples[i] = ids[i] < 400 ? 0 : 1;
  OK(surrogate_set_points_f64(h, n, 3, coords, 3, 1, ids, samples));
  const int rc = surrogate_predict_f32(h, in, CIN, 1, out, COUT, 1);
  CHECK(rc == SURROGATE_ERR_INPUT, "samples padding to different sizes: status %d (%s)", rc, surrogate_last_error());
  OK(surrogate_close(&h));
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc != 2) {
    if (rank == 0) fprintf(stderr, "usage: test_bsa_capi MODEL.h5\n");
    MPI_Finalize();
    return 2;
  }
  static float one[N * COUT], many[N * COUT], with_edges[N * COUT];
  run(MPI_COMM_SELF, argv[1], 0, one);
  run(MPI_COMM_WORLD, argv[1], 0, many);
  run(MPI_COMM_WORLD, argv[1], 1, with_edges);
  int64_t differ = 0, differ_edges = 0;
  double scale = 0.0;
  for (int64_t i = 0; i < N * COUT; ++i) {
    differ += one[i] != many[i];
    differ_edges += one[i] != with_edges[i];
    scale = fmax(scale, fabs((double)one[i]));
  }
  CHECK(differ == 0 && scale > 0.1, "%lld of %d outputs differ from one process (max|y| %g)", (long long)differ,
        N * COUT, scale);
  CHECK(differ_edges == 0, "edges changed %lld outputs (BSA ignores edges)", (long long)differ_edges);
  if (rank == 0)
    printf("bsa C API, %d rank(s): %s; with edges given: %s (max|y| %.3g)\n", size,
           differ == 0 ? "bitwise identical to one process" : "DIFFERENT", differ_edges == 0 ? "ignored" : "DIFFERENT",
           scale);
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Finalize();
  return failures == 0 ? 0 : 1;
}
