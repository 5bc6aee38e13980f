/* The C API under mpirun: strided inputs in C and Fortran order give identical results, float32 and
 * float64 agree, float32 rows passed straight through equal gathered ones, the distributed prediction equals a one-process prediction (bitwise in reproducible
 * mode), and failures on one rank return the same status and message on every rank. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surrogate.h"

static int failures = 0;
static int rank = 0, size = 1;

#define CHECK(cond, ...)                                               \
  do {                                                                 \
    if (!(cond)) {                                                     \
      ++failures;                                                      \
      fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                    \
      fprintf(stderr, "\n");                                           \
    }                                                                  \
  } while (0)

#define OK(call)                                                                                   \
  do {                                                                                             \
    int rc_ = (call);                                                                              \
    CHECK(rc_ == SURROGATE_OK, "%s returned %d (%s): %s", #call, rc_, surrogate_status_string(rc_), \
          surrogate_last_error());                                                                 \
  } while (0)

/* Every rank must hold the same status and message. */
static void check_agreement(int rc, const char* what) {
  int lo = rc, hi = rc;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi && rc != SURROGATE_OK, "%s: status differs across ranks or succeeded (%d..%d)", what, lo, hi);
  char root[1024] = {0};
  if (rank == 0) strncpy(root, surrogate_last_error(), sizeof root - 1);
  MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECK(strcmp(root, surrogate_last_error()) == 0, "%s: messages differ: '%s' vs '%s'", what, root, surrogate_last_error());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* model = argc > 1 ? argv[1] : "model.h5";

  /* A deterministic point set, partitioned unevenly (the last rank of 3+ owns none). */
  const int64_t n_global = 300;
  int64_t begin = n_global * rank / size, end = n_global * (rank + 1) / size;
  if (size >= 3 && rank == size - 1) begin = end = n_global; /* nobody past the end */
  if (size >= 3 && rank == size - 2) end = n_global;
  const int64_t n = end - begin;
  double* coords_c = malloc(sizeof(double) * (size_t)(2 * n + 1)); /* C order: n x 2 */
  double* coords_f = malloc(sizeof(double) * (size_t)(2 * n + 1)); /* Fortran order: x(n, 2) */
  float* coords32 = malloc(sizeof(float) * (size_t)(2 * n + 1));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t g = begin + i;
    const double x = fmod(0.6180339887 * (double)g, 1.0), y = fmod(0.7548776662 * (double)g + 0.1, 1.0);
    coords_c[2 * i] = x, coords_c[2 * i + 1] = y;
    coords_f[i] = x, coords_f[n + i] = y;
    coords32[2 * i] = (float)x, coords32[2 * i + 1] = (float)y;
  }

  surrogate_options options;
  surrogate_options_default(&options);
  options.threads = 1;
  surrogate_t s = NULL;
  OK(surrogate_open(MPI_COMM_WORLD, model, &options, &s));
  int cin = 0, cout = 0;
  OK(surrogate_in_channels(s, &cin));
  OK(surrogate_out_channels(s, &cout));
  CHECK(cin == 2 && cout == 1, "channels %d %d", cin, cout);
  char name[64];
  OK(surrogate_channel_name(s, 1, 0, name, sizeof name));
  CHECK(strcmp(name, "out0") == 0, "output name %s", name);

  /* C order and Fortran order: bitwise identical. */
  double* out_c = malloc(sizeof(double) * (size_t)(n + 1));
  double* out_f = malloc(sizeof(double) * (size_t)(n + 1));
  float* out32 = malloc(sizeof(float) * (size_t)(n + 1));
  OK(surrogate_set_points_f64(s, n, 2, coords_c, 2, 1, NULL, NULL));
  OK(surrogate_predict_f64(s, coords_c, 2, 1, out_c, 1, 1));
  OK(surrogate_set_points_f64(s, n, 2, coords_f, 1, n, NULL, NULL));
  OK(surrogate_predict_f64(s, coords_f, 1, n, out_f, 1, n));
  for (int64_t i = 0; i < n; ++i) CHECK(out_c[i] == out_f[i], "point %ld: C order %.9g, Fortran order %.9g", (long)i, out_c[i], out_f[i]);
  /* float32: the model computes in float32 from float32 inputs, so identical to rounding the inputs. */
  OK(surrogate_set_points_f32(s, n, 2, coords32, 2, 1, NULL, NULL));
  OK(surrogate_predict_f32(s, coords32, 2, 1, out32, 1, 1));
  for (int64_t i = 0; i < n; ++i) CHECK(fabs(out32[i] - out_c[i]) <= 1e-6 * (fabs(out_c[i]) + 1), "point %ld f32 %.9g f64 %.9g", (long)i, out32[i], out_c[i]);
  /* float32 rows go straight into the model (padded rows too), other layouts are gathered first: the same
   * bits either way; padding between the strides is not touched; in and out may share memory. */
  {
    float* padded_in = malloc(sizeof(float) * (size_t)(3 * n + 1));
    float* padded_out = malloc(sizeof(float) * (size_t)(2 * n + 1));
    float* fortran32 = malloc(sizeof(float) * (size_t)(2 * n + 1));
    float* shared = malloc(sizeof(float) * (size_t)(2 * n + 1));
    float* gathered32 = malloc(sizeof(float) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; ++i) {
      padded_in[3 * i] = coords32[2 * i], padded_in[3 * i + 1] = coords32[2 * i + 1], padded_in[3 * i + 2] = -7.0f;
      padded_out[2 * i] = 0.0f, padded_out[2 * i + 1] = -9.0f;
      fortran32[i] = coords32[2 * i], fortran32[n + i] = coords32[2 * i + 1];
      shared[2 * i] = coords32[2 * i], shared[2 * i + 1] = coords32[2 * i + 1];
    }
    OK(surrogate_predict_f32(s, padded_in, 3, 1, padded_out, 2, 1));
    OK(surrogate_predict_f32(s, fortran32, 1, n, gathered32, 1, 1));
    OK(surrogate_predict_f32(s, shared, 2, 1, shared, 2, 1));
    for (int64_t i = 0; i < n; ++i) {
      CHECK(padded_out[2 * i] == out32[i] && padded_out[2 * i + 1] == -9.0f, "point %ld: padded rows %.9g (pad %g), rows %.9g",
            (long)i, padded_out[2 * i], padded_out[2 * i + 1], out32[i]);
      CHECK(gathered32[i] == out32[i], "point %ld: Fortran order %.9g, rows %.9g", (long)i, gathered32[i], out32[i]);
      CHECK(shared[2 * i] == out32[i] && shared[2 * i + 1] == coords32[2 * i + 1], "point %ld: in place %.9g, rows %.9g", (long)i,
            shared[2 * i], out32[i]);
    }
    free(padded_in), free(padded_out), free(fortran32), free(shared), free(gathered32);
  }

  /* Against one process on rank 0, reproducible mode: bitwise identical. */
  options.reproducible = 1;
  OK(surrogate_set_options(s, &options));
  OK(surrogate_set_points_f64(s, n, 2, coords_c, 2, 1, NULL, NULL));
  OK(surrogate_predict_f64(s, coords_c, 2, 1, out_c, 1, 1));
  int* counts = malloc(sizeof(int) * (size_t)size);
  int* displs = malloc(sizeof(int) * (size_t)size);
  int n_int = (int)n;
  MPI_Gather(&n_int, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD);
  double* gathered = malloc(sizeof(double) * (size_t)n_global);
  if (rank == 0)
    for (int r = 0, off = 0; r < size; ++r) displs[r] = off, off += counts[r];
  MPI_Gatherv(out_c, n_int, MPI_DOUBLE, gathered, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    surrogate_t single = NULL;
    OK(surrogate_open(MPI_COMM_SELF, model, &options, &single));
    double* all = malloc(sizeof(double) * (size_t)(2 * n_global));
    double* ref = malloc(sizeof(double) * (size_t)n_global);
    for (int64_t g = 0; g < n_global; ++g)
      all[2 * g] = fmod(0.6180339887 * (double)g, 1.0), all[2 * g + 1] = fmod(0.7548776662 * (double)g + 0.1, 1.0);
    OK(surrogate_set_points_f64(single, n_global, 2, all, 2, 1, NULL, NULL));
    OK(surrogate_predict_f64(single, all, 2, 1, ref, 1, 1));
    for (int64_t g = 0; g < n_global; ++g)
      CHECK(ref[g] == gathered[g], "point %ld: %d ranks %.9g, one process %.9g", (long)g, size, gathered[g], ref[g]);
    OK(surrogate_close(&single));
    free(all), free(ref);
  }

  /* Failures on one rank: the same status and message everywhere, nobody hangs. */
  double* bad = malloc(sizeof(double) * (size_t)(2 * n + 1));
  memcpy(bad, coords_c, sizeof(double) * (size_t)(2 * n));
  const int bad_rank = n > 0 ? rank : -1;
  int last_with_points = bad_rank;
  MPI_Allreduce(MPI_IN_PLACE, &last_with_points, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == last_with_points) bad[1] = NAN;
  int rc = surrogate_predict_f64(s, bad, 2, 1, out_c, 1, 1);
  check_agreement(rc, "NaN input on one rank");
  CHECK(rc == SURROGATE_ERR_INPUT, "NaN: status %d", rc);
  CHECK(strstr(surrogate_last_error(), "NaN/Inf") != NULL, "NaN message: %s", surrogate_last_error());
  if (size > 1) {
    char expected[32];
    snprintf(expected, sizeof expected, "rank %d", last_with_points);
    CHECK(strstr(surrogate_last_error(), expected) != NULL, "message does not name %s: %s", expected, surrogate_last_error());
  }
  rc = surrogate_predict_f64(s, rank == 0 && n > 0 ? NULL : coords_c, 2, 1, out_c, 1, 1);
  if (n > 0 || rank != 0) {
    /* rank 0 owns points in every layout tested here, so the null pointer is a real error */
    check_agreement(rc, "null input on rank 0");
    CHECK(rc == SURROGATE_ERR_INVALID_ARGUMENT, "null: status %d", rc);
  }
  options.device = "cuda:7";
  rc = surrogate_set_options(s, &options);
  check_agreement(rc, "CUDA device");
  CHECK(rc == SURROGATE_ERR_UNSUPPORTED, "cuda: status %d (%s)", rc, surrogate_last_error());
  surrogate_t none = NULL;
  rc = surrogate_open(MPI_COMM_WORLD, "/nonexistent/model.h5", NULL, &none);
  check_agreement(rc, "missing model");
  CHECK(rc == SURROGATE_ERR_IO && none == NULL, "missing model: status %d", rc);
  /* a binding's own check on one rank, agreed */
  rc = surrogate_agree(s, rank == size - 1 ? SURROGATE_ERR_INVALID_ARGUMENT : SURROGATE_OK, "bad shape on this rank");
  check_agreement(rc, "surrogate_agree");
  CHECK(rc == SURROGATE_ERR_INVALID_ARGUMENT && strstr(surrogate_last_error(), "bad shape") != NULL, "agree: %d %s", rc,
        surrogate_last_error());
  CHECK(surrogate_agree(s, SURROGATE_OK, NULL) == SURROGATE_OK, "agree ok");
  int64_t local = -1, global = -1;
  int dim = -1;
  OK(surrogate_local_points(s, &local));
  OK(surrogate_global_points(s, &global));
  OK(surrogate_point_dim(s, &dim));
  CHECK(local == n && global == n_global && dim == 2, "queries %ld %ld %d", (long)local, (long)global, dim);
  /* the handle still works after errors */
  OK(surrogate_predict_f64(s, coords_c, 2, 1, out_c, 1, 1));
  CHECK(surrogate_predict_f64(NULL, coords_c, 2, 1, out_c, 1, 1) == SURROGATE_ERR_INVALID_ARGUMENT, "null handle");
  OK(surrogate_close(&s));
  CHECK(s == NULL, "close leaves the handle");
  OK(surrogate_close(&s)); /* closing NULL is a no-op */

  free(coords_c), free(coords_f), free(coords32), free(out_c), free(out_f), free(out32), free(bad);
  free(counts), free(displs), free(gathered);
  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi on %d rank(s): %s (%d failure(s))\n", size, failures ? "FAILED" : "passed", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
