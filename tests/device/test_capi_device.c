/* The C API and CUDA devices, under mpirun. This test RUNS everywhere (it never skips):
 *  - without a visible CUDA device (or in a build without the CUDA backend), surrogate_open with device
 *    "cuda" returns SURROGATE_ERR_UNSUPPORTED on every rank, with the same clear message, and no handle;
 *  - with one, "cuda" opens, and predictions on the GPU match the CPU (default mode within 1e-5 of the
 *    largest value, reproducible mode too), also from CUDA device arrays (bitwise as from host arrays; both
 *    arrays on the device: the device-resident path; device inputs with host outputs: staged);
 *  - everywhere: "cuda:99" is unsupported, malformed device strings are invalid arguments; tf32 on "cpu" is
 *    refused at open, bf16 on "cpu" runs (CPUs with AVX512-BF16) or is refused by the first predict. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surrogate.h"

#if defined(SURROGATE_TEST_CUDA_BUILD)
#include <cuda_runtime_api.h>
#endif

static int failures = 0;
static int rank = 0, size = 1;

#define CHECK(cond, ...)                                                                     \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      ++failures;                                                                            \
      fprintf(stderr, "[rank %d] %s:%d: CHECK(%s) failed: ", rank, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                                          \
      fprintf(stderr, "\n");                                                                 \
    }                                                                                        \
  } while (0)

/* Every rank holds the same status and message. */
static void check_agreement(int rc, const char* what) {
  int lo = rc, hi = rc;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  CHECK(lo == hi, "%s: status differs across ranks (%d..%d)", what, lo, hi);
  char root[1024] = {0};
  if (rank == 0) strncpy(root, surrogate_last_error(), sizeof root - 1);
  MPI_Bcast(root, sizeof root, MPI_CHAR, 0, MPI_COMM_WORLD);
  CHECK(strcmp(root, surrogate_last_error()) == 0, "%s: messages differ: '%s' vs '%s'", what, root, surrogate_last_error());
}

static int gpu_visible(void) {
#if defined(SURROGATE_TEST_CUDA_BUILD)
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  (void)cudaGetLastError();
  return e == cudaSuccess && count > 0;
#else
  return 0;
#endif
}

static int open_with(const char* model, const char* device, int reproducible, surrogate_t* s) {
  surrogate_options options;
  surrogate_options_default(&options);
  options.device = device;
  options.threads = 1;
  options.reproducible = reproducible;
  return surrogate_open(MPI_COMM_WORLD, model, &options, s);
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const char* model = argc > 1 ? argv[1] : "model.h5";
  const int gpu = gpu_visible();
  int all_gpu = gpu;
  MPI_Allreduce(MPI_IN_PLACE, &all_gpu, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);

  surrogate_t s = NULL;
  int rc = open_with(model, "cuda", 0, &s);
  if (!all_gpu) {
    check_agreement(rc, "device cuda without a GPU");
    CHECK(rc == SURROGATE_ERR_UNSUPPORTED, "device cuda without a GPU: status %d (%s): %s", rc,
          surrogate_status_string(rc), surrogate_last_error());
    CHECK(s == NULL, "a handle was returned");
    const char* m = surrogate_last_error();
    CHECK(strstr(m, "cuda") != NULL, "the message does not name the device: %s", m);
#if defined(SURROGATE_TEST_CUDA_BUILD)
    CHECK(strstr(m, "no CUDA device is visible") != NULL, "unclear message: %s", m);
#else
    CHECK(strstr(m, "no CUDA backend") != NULL, "unclear message: %s", m);
#endif
    if (rank == 0) printf("device 'cuda' without a GPU: status %d, \"%s\"\n", rc, m);
  } else {
    /* A GPU on every rank: the same points on the CPU and on the GPU. */
    CHECK(rc == SURROGATE_OK, "device cuda: status %d: %s", rc, surrogate_last_error());
    const int64_t n_global = 500;
    const int64_t begin = n_global * rank / size, end = n_global * (rank + 1) / size, n = end - begin;
    double* coords = malloc(sizeof(double) * (size_t)(2 * n + 1));
    double* out_gpu = malloc(sizeof(double) * (size_t)(n + 1));
    double* out_cpu = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; ++i) {
      coords[2 * i] = fmod(0.6180339887 * (double)(begin + i), 1.0);
      coords[2 * i + 1] = fmod(0.7548776662 * (double)(begin + i) + 0.1, 1.0);
    }
    for (int reproducible = 0; reproducible <= 1 && rc == SURROGATE_OK; ++reproducible) {
      surrogate_t cpu = NULL, g = NULL;
      CHECK(open_with(model, "cpu", reproducible, &cpu) == SURROGATE_OK, "cpu: %s", surrogate_last_error());
      CHECK(open_with(model, "cuda", reproducible, &g) == SURROGATE_OK, "cuda: %s", surrogate_last_error());
      CHECK(surrogate_set_points_f64(cpu, n, 2, coords, 2, 1, NULL, NULL) == SURROGATE_OK, "%s", surrogate_last_error());
      CHECK(surrogate_set_points_f64(g, n, 2, coords, 2, 1, NULL, NULL) == SURROGATE_OK, "%s", surrogate_last_error());
      CHECK(surrogate_predict_f64(cpu, coords, 2, 1, out_cpu, 1, 1) == SURROGATE_OK, "%s", surrogate_last_error());
      CHECK(surrogate_predict_f64(g, coords, 2, 1, out_gpu, 1, 1) == SURROGATE_OK, "%s", surrogate_last_error());
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        worst = fmax(worst, fabs(out_gpu[i] - out_cpu[i]));
        scale = fmax(scale, fabs(out_cpu[i]));
      }
      MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &scale, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      CHECK(worst <= 1e-5 * scale, "GPU vs CPU (%s mode): %.3g of %.3g", reproducible ? "reproducible" : "default", worst,
            scale);
#if defined(SURROGATE_TEST_CUDA_BUILD)
      /* The same prediction from device arrays: inputs in Fortran order, outputs at a stride of 3 with the
       * elements in between left as they were. */
      {
        double* in_f = malloc(sizeof(double) * (size_t)(2 * n + 1));
        double* out_host = malloc(sizeof(double) * (size_t)(3 * n + 1));
        for (int64_t i = 0; i < n; ++i) in_f[i] = coords[2 * i], in_f[n + i] = coords[2 * i + 1];
        for (int64_t i = 0; i < 3 * n; ++i) out_host[i] = -7.0;
        void *d_in = NULL, *d_out = NULL;
        CHECK(cudaMalloc(&d_in, sizeof(double) * (size_t)(2 * n + 1)) == cudaSuccess, "cudaMalloc");
        CHECK(cudaMalloc(&d_out, sizeof(double) * (size_t)(3 * n + 1)) == cudaSuccess, "cudaMalloc");
        CHECK(cudaMemcpy(d_in, in_f, sizeof(double) * (size_t)(2 * n), cudaMemcpyHostToDevice) == cudaSuccess, "copy");
        CHECK(cudaMemcpy(d_out, out_host, sizeof(double) * (size_t)(3 * n), cudaMemcpyHostToDevice) == cudaSuccess, "copy");
        rc = surrogate_predict_f64(g, (const double*)d_in, 1, n, (double*)d_out, 3, 1);
        check_agreement(rc, "predict from device arrays");
        CHECK(rc == SURROGATE_OK, "device arrays: %s", surrogate_last_error());
        CHECK(cudaMemcpy(out_host, d_out, sizeof(double) * (size_t)(3 * n), cudaMemcpyDeviceToHost) == cudaSuccess, "copy");
        for (int64_t i = 0; i < n; ++i) {
          CHECK(out_host[3 * i] == out_gpu[i], "device arrays: point %lld: %g vs host arrays %g", (long long)i,
                out_host[3 * i], out_gpu[i]);
          CHECK(out_host[3 * i + 1] == -7.0 && out_host[3 * i + 2] == -7.0, "device arrays: point %lld: gap overwritten",
                (long long)i);
        }
        /* Mixed: device inputs, host outputs (staged through host memory). */
        double* out_mixed = malloc(sizeof(double) * (size_t)(n + 1));
        rc = surrogate_predict_f64(g, (const double*)d_in, 1, n, out_mixed, 1, 1);
        check_agreement(rc, "predict from device inputs to host outputs");
        CHECK(rc == SURROGATE_OK, "mixed arrays: %s", surrogate_last_error());
        for (int64_t i = 0; i < n; ++i)
          CHECK(out_mixed[i] == out_gpu[i], "mixed arrays: point %lld: %g vs host arrays %g", (long long)i, out_mixed[i],
                out_gpu[i]);
        free(out_mixed);
        cudaFree(d_in);
        cudaFree(d_out);
        free(in_f);
        free(out_host);
        rc = SURROGATE_OK;
      }
#endif
      surrogate_close(&cpu);
      surrogate_close(&g);
    }
    surrogate_close(&s);
    free(coords), free(out_gpu), free(out_cpu);
  }

  /* Everywhere: tf32 needs a CUDA device (refused at open on "cpu"); bf16 on "cpu" runs this FLARE model on
   * CPUs with AVX512-BF16 (AMX where present), within the bf16 bound of the fp32 prediction, and elsewhere
   * the first predict refuses it, naming the instructions (test_cpu_bf16 checks which applies against
   * /proc/cpuinfo); unknown precisions are invalid, NULL is fp32. */
  {
    surrogate_options tf32;
    surrogate_options_default(&tf32);
    tf32.precision = "tf32";
    s = NULL;
    rc = surrogate_open(MPI_COMM_WORLD, model, &tf32, &s);
    check_agreement(rc, "tf32 on cpu");
    CHECK(rc == SURROGATE_ERR_UNSUPPORTED && s == NULL, "tf32 on cpu: status %d: %s", rc, surrogate_last_error());
    CHECK(strstr(surrogate_last_error(), "needs a CUDA device") != NULL, "tf32 on cpu: %s", surrogate_last_error());

    const int64_t n_global = 300;
    const int64_t begin = n_global * rank / size, n = n_global * (rank + 1) / size - begin;
    double* xy = malloc(sizeof(double) * (size_t)(2 * n + 1));
    double* y32 = malloc(sizeof(double) * (size_t)(n + 1));
    double* y16 = malloc(sizeof(double) * (size_t)(n + 1));
    for (int64_t i = 0; i < n; ++i) {
      xy[2 * i] = fmod(0.6180339887 * (double)(begin + i), 1.0);
      xy[2 * i + 1] = fmod(0.7548776662 * (double)(begin + i) + 0.1, 1.0);
    }
    surrogate_options bf16;
    surrogate_options_default(&bf16);
    bf16.precision = "bf16";
    surrogate_t h32 = NULL, h16 = NULL;
    CHECK(open_with(model, "cpu", 0, &h32) == SURROGATE_OK, "fp32: %s", surrogate_last_error());
    rc = surrogate_open(MPI_COMM_WORLD, model, &bf16, &h16);
    check_agreement(rc, "bf16 on cpu: open");
    CHECK(rc == SURROGATE_OK, "bf16 on cpu: open: %s", surrogate_last_error());
    CHECK(surrogate_set_points_f64(h32, n, 2, xy, 2, 1, NULL, NULL) == SURROGATE_OK, "%s", surrogate_last_error());
    CHECK(surrogate_set_points_f64(h16, n, 2, xy, 2, 1, NULL, NULL) == SURROGATE_OK, "%s", surrogate_last_error());
    CHECK(surrogate_predict_f64(h32, xy, 2, 1, y32, 1, 1) == SURROGATE_OK, "%s", surrogate_last_error());
    rc = surrogate_predict_f64(h16, xy, 2, 1, y16, 1, 1);
    check_agreement(rc, "bf16 on cpu: predict");
    if (rc == SURROGATE_OK) {
      double worst = 0, scale = 0;
      for (int64_t i = 0; i < n; ++i) {
        worst = fmax(worst, fabs(y16[i] - y32[i]));
        scale = fmax(scale, fabs(y32[i]));
      }
      MPI_Allreduce(MPI_IN_PLACE, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(MPI_IN_PLACE, &scale, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      /* cpu-bf16.md: bf16 within a few 1e-2 of float64 on the golden models; 0 would mean fp32 ran */
      CHECK(worst > 0 && worst <= 6e-2 * scale, "bf16 vs fp32 on cpu: %.3g of %.3g", worst, scale);
      if (rank == 0) printf("bf16 on cpu: max |bf16 - fp32| = %.3g of max |fp32| %.3g\n", worst, scale);
    } else {
      CHECK(rc == SURROGATE_ERR_UNSUPPORTED && strstr(surrogate_last_error(), "needs AVX512-BF16") != NULL,
            "bf16 on cpu: status %d: %s", rc, surrogate_last_error());
      if (rank == 0) printf("bf16 on cpu refused: \"%s\"\n", surrogate_last_error());
    }
    surrogate_close(&h32);
    surrogate_close(&h16);
    free(xy), free(y32), free(y16);

    surrogate_options options;
    surrogate_options_default(&options);
    CHECK(options.precision != NULL && strcmp(options.precision, "fp32") == 0, "default precision");
    options.precision = "fp16";
    s = NULL;
    rc = surrogate_open(MPI_COMM_WORLD, model, &options, &s);
    check_agreement(rc, "precision fp16");
    CHECK(rc == SURROGATE_ERR_INVALID_ARGUMENT && s == NULL, "fp16: status %d: %s", rc, surrogate_last_error());
    options.precision = NULL;
    s = NULL;
    rc = surrogate_open(MPI_COMM_WORLD, model, &options, &s);
    CHECK(rc == SURROGATE_OK, "precision NULL: %s", surrogate_last_error());
    surrogate_close(&s);
  }

  /* Everywhere: a device index beyond the visible ones, and malformed strings. */
  s = NULL;
  rc = open_with(model, "cuda:99", 0, &s);
  check_agreement(rc, "cuda:99");
  CHECK(rc == SURROGATE_ERR_UNSUPPORTED && s == NULL, "cuda:99: status %d: %s", rc, surrogate_last_error());
  const char* malformed[] = {"cuda:", "cuda:x", "cuda:-1", "gpu", "CUDA"};
  for (size_t i = 0; i < sizeof malformed / sizeof malformed[0]; ++i) {
    rc = open_with(model, malformed[i], 0, &s);
    check_agreement(rc, malformed[i]);
#if defined(SURROGATE_TEST_CUDA_BUILD)
    CHECK(rc == SURROGATE_ERR_INVALID_ARGUMENT && s == NULL, "device '%s': status %d: %s", malformed[i], rc,
          surrogate_last_error());
#else
    /* builds without CUDA refuse anything starting with "cuda" as unsupported */
    CHECK((rc == SURROGATE_ERR_INVALID_ARGUMENT || rc == SURROGATE_ERR_UNSUPPORTED) && s == NULL,
          "device '%s': status %d: %s", malformed[i], rc, surrogate_last_error());
#endif
  }

  MPI_Allreduce(MPI_IN_PLACE, &failures, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0)
    printf("test_capi_device on %d rank(s), %s: %s (%d failure(s))\n", size, all_gpu ? "GPU visible" : "no GPU",
           failures ? "FAILED" : "passed", failures);
  MPI_Finalize();
  return failures ? 1 : 0;
}
