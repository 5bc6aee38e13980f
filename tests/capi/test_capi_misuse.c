/* The C API misused (share/docs/reliability.md): null handles and arrays, negative counts, zero strides,
 * predict before set_points, double close, a second set_points with another dimension, invalid communicators,
 * options and model paths that differ between ranks, overflowing strides. Each misuse must
 * return the same non-zero status on every rank, with a message naming the argument, and leave the handle
 * usable. Run under mpirun at 1 and 3 ranks: test_capi_misuse MODEL.h5 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surrogate.h"

static int failures = 0, rank = 0;

#define CHECK(cond, ...)                                      \
  do {                                                        \
    if (!(cond)) {                                            \
      fprintf(stderr, "rank %d: line %d: ", rank, __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                           \
      fprintf(stderr, "\n");                                  \
      ++failures;                                             \
    }                                                         \
  } while (0)

/* The status must be `expected` on every rank and the message must contain `word`. */
static void expect_agreed(int rc, int expected, const char* word, const char* what) {
  int low = rc, high = rc;
  MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(low == high, "%s: ranks disagree (status %d .. %d)", what, low, high);
  CHECK(rc == expected, "%s: status %d, expected %d (%s)", what, rc, expected, surrogate_last_error());
  CHECK(strstr(surrogate_last_error(), word) != NULL, "%s: message does not name '%s': %s", what, word,
        surrogate_last_error());
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2) {
    fprintf(stderr, "usage: test_capi_misuse MODEL.h5\n");
    MPI_Finalize();
    return 2;
  }
  const int64_t n = 4 + rank; /* unequal shares */
  double coords[2 * 8], coords3[3 * 8], in[2 * 8], out[2 * 8];
  for (int i = 0; i < 16; ++i) coords[i] = in[i] = 0.1 * i + 0.01 * rank;
  for (int i = 0; i < 24; ++i) coords3[i] = 0.05 * i;

  /* Null handle pointer, null path, null handle. */
  CHECK(surrogate_open(MPI_COMM_WORLD, argv[1], NULL, NULL) == SURROGATE_ERR_INVALID_ARGUMENT, "open: null handle pointer");
  surrogate_t s = NULL;
  expect_agreed(surrogate_open(MPI_COMM_WORLD, rank == size - 1 ? NULL : argv[1], NULL, &s), SURROGATE_ERR_INVALID_ARGUMENT,
                "null model path", "open: null path on the last rank");
  CHECK(s == NULL, "open: a failed open leaves the handle NULL");
  CHECK(surrogate_predict_f64(NULL, in, 2, 1, out, 1, 1) == SURROGATE_ERR_INVALID_ARGUMENT, "predict: null handle");
  CHECK(surrogate_set_points_f64(NULL, n, 2, coords, 2, 1, NULL, NULL) == SURROGATE_ERR_INVALID_ARGUMENT,
        "set_points: null handle");
  CHECK(surrogate_close(NULL) == SURROGATE_OK, "close: a null handle pointer is a no-op");

  /* Communicators MPI cannot use: a status on the rank, never an abort (every rank passes them here). */
  CHECK(surrogate_open(MPI_COMM_NULL, argv[1], NULL, &s) == SURROGATE_ERR_INVALID_ARGUMENT &&
            strstr(surrogate_last_error(), "MPI_COMM_NULL") != NULL,
        "open: MPI_COMM_NULL: %s", surrogate_last_error());
  CHECK(surrogate_open_f((MPI_Fint)12345, argv[1], NULL, &s) == SURROGATE_ERR_INVALID_ARGUMENT &&
            strstr(surrogate_last_error(), "not a valid MPI communicator") != NULL,
        "open_f: an invalid Fortran communicator: %s", surrogate_last_error());
  {
    surrogate_vtk_t v = NULL;
    const int vrc = surrogate_vtk_open_f((MPI_Fint)12345, ".", "x", &v);
    CHECK(vrc == SURROGATE_ERR_INVALID_ARGUMENT || vrc == SURROGATE_ERR_UNSUPPORTED,
          "vtk_open_f: an invalid Fortran communicator: %d %s", vrc, surrogate_last_error());
  }
  /* Options and model paths that differ between ranks: one agreed error naming the option, not a hang. */
  {
    const char* options_differ[] = {"reproducible", "allow_non_finite_output", "precision", "device", "model path"};
    for (int k = 0; k < 5 && size > 1; ++k) {
      surrogate_options o;
      surrogate_options_default(&o);
      const char* path = argv[1];
      if (rank == size - 1) {
        if (k == 0) o.reproducible = 1;
        if (k == 1) o.allow_non_finite_output = 1;
        if (k == 2) o.precision = "fp64";
        if (k == 3) o.device = "cuda-emulated";
        if (k == 4) path = "no_such_model.h5";
      }
      char what[96];
      snprintf(what, sizeof what, "open: %s differs on the last rank", options_differ[k]);
      expect_agreed(surrogate_open(MPI_COMM_WORLD, path, &o, &s), SURROGATE_ERR_INVALID_ARGUMENT, options_differ[k], what);
      CHECK(strstr(surrogate_last_error(), "the ranks disagree on") != NULL, "%s: %s", what, surrogate_last_error());
      CHECK(s == NULL, "%s: the handle stays NULL", what);
    }
  }

  if (surrogate_open(MPI_COMM_WORLD, argv[1], NULL, &s) != SURROGATE_OK) {
    fprintf(stderr, "rank %d: cannot open %s: %s\n", rank, argv[1], surrogate_last_error());
    MPI_Finalize();
    return 1;
  }
  /* Predict before set_points. */
  expect_agreed(surrogate_predict_f64(s, in, 2, 1, out, 1, 1), SURROGATE_ERR_INVALID_ARGUMENT, "set_points",
                "predict before set_points");
  /* A negative count on the last rank only, null coordinates on rank 0 only. */
  expect_agreed(surrogate_set_points_f64(s, rank == size - 1 ? -1 : n, 2, coords, 2, 1, NULL, NULL),
                SURROGATE_ERR_INVALID_ARGUMENT, "negative", "set_points: negative count on one rank");
  expect_agreed(surrogate_set_points_f64(s, n, 2, rank == 0 ? NULL : coords, 2, 1, NULL, NULL),
                SURROGATE_ERR_INVALID_ARGUMENT, "null", "set_points: null coordinates on rank 0");
  /* A zero point stride for the output would write every point's prediction to one place. */
  CHECK(surrogate_set_points_f64(s, n, 2, coords, 2, 1, NULL, NULL) == SURROGATE_OK, "set_points: %s",
        surrogate_last_error());
  expect_agreed(surrogate_predict_f64(s, in, 2, 1, out, 0, 1), SURROGATE_ERR_INVALID_ARGUMENT, "stride",
                "predict: zero output point stride");
  expect_agreed(surrogate_predict_f64(s, rank == size - 1 ? NULL : in, 2, 1, out, 1, 1),
                SURROGATE_ERR_INVALID_ARGUMENT, "null", "predict: null input on the last rank");
  /* Strides whose offsets overflow (the library would read and write outside the caller's arrays). */
  expect_agreed(surrogate_predict_f64(s, in, rank == 0 ? INT64_MAX / 2 : 2, 1, out, 1, 1),
                SURROGATE_ERR_INVALID_ARGUMENT, "overflowing strides", "predict: overflowing input stride on rank 0");
  expect_agreed(surrogate_predict_f64(s, in, 2, 1, out, rank == size - 1 ? INT64_MIN : 1, 1),
                SURROGATE_ERR_INVALID_ARGUMENT, "overflowing strides", "predict: overflowing output stride on the last rank");
  expect_agreed(surrogate_set_points_f64(s, n, 2, coords, 2, rank == size - 1 ? INT64_MAX : 1, NULL, NULL),
                SURROGATE_ERR_INVALID_ARGUMENT, "overflowing strides", "set_points: overflowing dimension stride");
  CHECK(surrogate_set_points_f64(s, n, 2, coords, 2, 1, NULL, NULL) == SURROGATE_OK, "set_points: %s",
        surrogate_last_error());
  /* set_options that differ between ranks. */
  if (size > 1) {
    surrogate_options o;
    surrogate_options_default(&o);
    o.reproducible = rank == 0;
    expect_agreed(surrogate_set_options(s, &o), SURROGATE_ERR_INVALID_ARGUMENT, "reproducible",
                  "set_options: reproducible differs");
  }
  /* The handle still works after every refusal. */
  CHECK(surrogate_predict_f64(s, in, 2, 1, out, 1, 1) == SURROGATE_OK, "predict after refusals: %s",
        surrogate_last_error());
  /* A second set_points with another dimension: accepted (the coordinates are only kept) or refused on
   * every rank alike; either way the handle still predicts. */
  const int rc = surrogate_set_points_f64(s, n, 3, coords3, 3, 1, NULL, NULL);
  int low = rc, high = rc;
  MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(low == high, "set_points with dimension 3: ranks disagree (%d .. %d)", low, high);
  CHECK(surrogate_predict_f64(s, in, 2, 1, out, 1, 1) == SURROGATE_OK, "predict after a new dimension: %s",
        surrogate_last_error());
  /* Double close. */
  CHECK(surrogate_close(&s) == SURROGATE_OK && s == NULL, "close");
  CHECK(surrogate_close(&s) == SURROGATE_OK, "second close of the NULLed handle is a no-op");

  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_capi_misuse: %d failure(s) on %d rank(s)\n", failures, size);
  MPI_Finalize();
  return failures ? 1 : 0;
}
