/* Sequoia models through the C API under mpirun: per-sample inputs (the segmentation model's class
 * vector, surrogate_set_sample_inputs_f64) and per-sample outputs (the classification model,
 * surrogate_get_sample_outputs_f64). The prediction on P ranks (points dealt round-robin, in reverse
 * order) equals bit for bit the one-process prediction; the per-sample outputs are the same on every rank;
 * missing or mis-sized per-sample inputs and a too small output array are errors on every rank.
 * argv[1], argv[2]: tests/data/sequoia/sequoia_seg.h5 and sequoia_cls.h5 (model files). */
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surrogate.h"

#define N0 30
#define N1 21
#define N (N0 + N1)
#define B 2

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

/* Deterministic coordinates (inside the unit ball) and inputs of global point g. */
static double coord(int64_t g, int a) { return 0.55 * sin(0.913 * (double)g + 2.1 * a + 0.3 * (double)(g * g % 7)); }
static double feature(int64_t g, int c) { return cos(0.377 * (double)g + 1.1 * c); }
static int64_t sample_of(int64_t g) { return g < N0 ? 0 : 1; }

/* Points g with g % P == r of `comm` in decreasing g; per-point outputs into out_global (by g), per-sample
 * outputs into sample_out (B x sample_out channels). Returns the status of the predict. */
static int run(MPI_Comm comm, const char* model, const double* classes, int64_t class_rows, int class_cols,
               double* out_global, double* sample_out) {
  int r = 0, p = 1;
  MPI_Comm_rank(comm, &r);
  MPI_Comm_size(comm, &p);
  surrogate_t h = NULL;
  OK(surrogate_open(comm, model, NULL, &h));
  int cin = 0, cout = 0, sin_ = 0, sout = 0;
  OK(surrogate_in_channels(h, &cin));
  OK(surrogate_out_channels(h, &cout));
  OK(surrogate_sample_channels(h, &sin_, &sout));
  int64_t n = 0, ids[N], samples[N];
  double coords[3 * N], in[3 * N], out[8 * N];
  for (int64_t g = N - 1; g >= 0; --g) {
    if (g % p != r) continue;
    ids[n] = g;
    samples[n] = sample_of(g);
    for (int a = 0; a < 3; ++a) coords[3 * n + a] = coord(g, a);
    for (int c = 0; c < cin; ++c) in[cin * n + c] = cin == 3 && sout == 0 ? coords[3 * n + c] : feature(g, c);
    ++n;
  }
  OK(surrogate_set_points_f64(h, n, 3, coords, 3, 1, ids, samples));
  int64_t b = 0;
  OK(surrogate_samples(h, &b));
  CHECK(b == B, "samples %lld", (long long)b);
  if (classes) OK(surrogate_set_sample_inputs_f64(h, class_rows, class_cols, classes));
  const int status = surrogate_predict_f64(h, in, cin, 1, cout > 0 ? out : NULL, cout, 1);
  if (status == SURROGATE_OK) {
    double all[8 * N];
    memset(all, 0, sizeof all);
    for (int64_t i = 0; i < n; ++i)
      for (int c = 0; c < cout; ++c) all[cout * ids[i] + c] = out[cout * i + c];
    MPI_Allreduce(all, out_global, cout * N, MPI_DOUBLE, MPI_SUM, comm);
    if (sout > 0) OK(surrogate_get_sample_outputs_f64(h, (int64_t)B * sout, sample_out));
    if (sout > 0) {
      int rc = surrogate_get_sample_outputs_f64(h, (int64_t)B * sout - 1, sample_out);
      CHECK(rc == SURROGATE_ERR_INVALID_ARGUMENT, "too small an array: %d", rc);
    }
  }
  OK(surrogate_close(&h));
  return status;
}

static int same_everywhere(int status) {
  int lo = 0, hi = 0;
  MPI_Allreduce(&status, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&status, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 3) {
    fprintf(stderr, "usage: %s sequoia_seg.h5 sequoia_cls.h5\n", argv[0]);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  static double ref[8 * N], got[8 * N], ref_s[B * 40], got_s[B * 40];
  const double classes[B * 4] = {0, 1, 0, 0, 0, 0, 0, 1};

  /* Segmentation: per-point outputs, the class vector per sample. */
  int st = run(MPI_COMM_SELF, argv[1], classes, B, 4, ref, NULL);
  CHECK(st == SURROGATE_OK, "seg, one process: %d %s", st, surrogate_last_error());
  st = run(MPI_COMM_WORLD, argv[1], classes, B, 4, got, NULL);
  CHECK(st == SURROGATE_OK, "seg: %d %s", st, surrogate_last_error());
  CHECK(memcmp(ref, got, sizeof(double) * 6 * N) == 0, "seg: differs from one process");
  int finite = 1;
  for (int i = 0; i < 6 * N; ++i) finite &= isfinite(got[i]) != 0;
  CHECK(finite, "seg: non-finite output");
  st = run(MPI_COMM_WORLD, argv[1], NULL, 0, 0, got, NULL);
  CHECK(st == SURROGATE_ERR_INPUT && same_everywhere(st), "seg without class vectors: %d", st);
  st = run(MPI_COMM_WORLD, argv[1], classes, B, 3, got, NULL);
  CHECK(st == SURROGATE_ERR_INPUT && same_everywhere(st), "seg with 3 values per sample: %d", st);
  st = run(MPI_COMM_WORLD, argv[1], classes, 1, 4, got, NULL);
  CHECK(st == SURROGATE_ERR_INPUT && same_everywhere(st), "seg with one sample's vector: %d", st);

  /* Classification: per-sample outputs on every rank. */
  st = run(MPI_COMM_SELF, argv[2], NULL, 0, 0, ref, ref_s);
  CHECK(st == SURROGATE_OK, "cls, one process: %d %s", st, surrogate_last_error());
  st = run(MPI_COMM_WORLD, argv[2], NULL, 0, 0, got, got_s);
  CHECK(st == SURROGATE_OK, "cls: %d %s", st, surrogate_last_error());
  CHECK(memcmp(ref_s, got_s, sizeof(double) * B * 40) == 0, "cls: per-sample outputs differ from one process");
  double first[B * 40];
  memcpy(first, got_s, sizeof first);
  MPI_Bcast(first, B * 40, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  CHECK(memcmp(first, got_s, sizeof first) == 0, "cls: per-sample outputs differ between ranks");
  CHECK(got_s[0] != got_s[40], "cls: both samples gave the same logits");

  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) printf("test_sequoia_capi: %d rank(s), %s\n", size, total ? "FAILED" : "passed");
  MPI_Finalize();
  return total ? 1 : 0;
}
