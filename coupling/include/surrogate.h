/* surrogate C API: call learned attention surrogates from C (and, through the `surrogate` Fortran module,
 * from Fortran) inside an MPI solver's time loop. This header is the single source of truth for every
 * binding.
 *
 * Conventions
 *  - Every function returns a status: SURROGATE_OK (0) or a positive error code; nothing is thrown and
 *    nothing exits. surrogate_last_error() gives the message of the calling thread's last failure.
 *  - Functions marked COLLECTIVE must be called by every rank of the handle's communicator; they agree on
 *    their outcome, so a failure on one rank (a NaN in its inputs, a null pointer) returns the same code
 *    and message on every rank instead of a hang. Messages name the rank, file, tensor or argument.
 *  - Arrays are strided: element (point i, component j) is at a[i * point_stride + j * component_stride].
 *    C order (points x components, row-major): point_stride = components, component_stride = 1.
 *    Fortran order (a(n_local, components)): point_stride = 1, component_stride = n_local.
 *  - Handles are not thread-safe: use one handle from one thread at a time.
 */
#ifndef SURROGATE_H
#define SURROGATE_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes (the values of surrogate::ErrorCode). */
enum {
  SURROGATE_OK = 0,
  SURROGATE_ERR_INVALID_ARGUMENT = 1, /* a wrong count, dimension, pointer or option */
  SURROGATE_ERR_IO = 2,               /* file missing, unreadable, not HDF5, truncated */
  SURROGATE_ERR_FORMAT = 3,           /* not a valid model file (version, attributes, configuration) */
  SURROGATE_ERR_WEIGHTS = 4,          /* missing, unexpected, mis-shaped or non-finite tensors */
  SURROGATE_ERR_INPUT = 5,            /* NaN/Inf inputs, wrong channel count, empty point set */
  SURROGATE_ERR_UNSUPPORTED = 6,      /* a valid request this build cannot serve (e.g. device "cuda") */
  SURROGATE_ERR_COMMUNICATION = 7,    /* MPI failure */
  SURROGATE_ERR_OUT_OF_MEMORY = 8,
  SURROGATE_ERR_INTERNAL = 9          /* a bug: please report it */
};

typedef struct surrogate_handle_s* surrogate_t;

typedef struct {
  const char* device; /* "cpu" (default), "cuda" (node-local rank's GPU), "cuda:N", or "cuda-emulated"
                         (the host backend: the CUDA kernels on the CPU, for tests) (CUDA builds) */
  int threads;        /* OpenMP threads per rank; 0 = OMP_NUM_THREADS (default) */
  int reproducible;   /* 1: bitwise-identical results for any rank count, partition and thread count */
  const char* precision; /* arithmetic of the MLPs: "fp32" (default; also for NULL), "tf32" (CUDA devices
                            only, tensor cores with FP32 accumulation; with "cpu": SURROGATE_ERR_UNSUPPORTED),
                            "bf16" (tensor cores, or on CPUs with AMX-BF16 / AVX512-BF16 for the families
                            that offer it: flare; accuracy in share/docs/cuda.md, share/docs/cpu-bf16.md), or
                            "fp64" (double precision on the CPU, for the families that offer it: hept;
                            surrogate_predict_f64 returns the double results); a
                            model or CPU without the precision returns SURROGATE_ERR_UNSUPPORTED from the
                            first predict */
  int allow_non_finite_output; /* 1: hand NaN/Inf predictions to the caller; 0 (default): predict fails with
                                  SURROGATE_ERR_INPUT on every rank, naming channels, ranks and counts */
} surrogate_options;

/* Fills *options with the defaults. */
void surrogate_options_default(surrogate_options* options);

/* COLLECTIVE. Opens a model file on a communicator (duplicated internally); options may be NULL.
 * On failure *handle is NULL. */
int surrogate_open(MPI_Comm comm, const char* model_path, const surrogate_options* options, surrogate_t* handle);
/* The same for a Fortran communicator handle (MPI_Fint: integer communicator or comm%MPI_VAL). */
int surrogate_open_f(MPI_Fint comm, const char* model_path, const surrogate_options* options, surrogate_t* handle);

/* COLLECTIVE (frees the duplicated communicator). Sets *handle to NULL; a NULL handle is a no-op. */
int surrogate_close(surrogate_t* handle);

/* COLLECTIVE. Changes the options of an open handle. */
int surrogate_set_options(surrogate_t handle, const surrogate_options* options);

/* COLLECTIVE. The rank's points: n_local points of dim coordinates; global_ids (n_local int64, kept for
 * output) and sample_ids (n_local int64, independent samples 0..B-1; NULL = one sample) may be NULL.
 * Builds the plan reused by every predict until the points are set again.
 * Models that need positions (architectures "erwin", "bsa", "sequoia"; surrogate_position_dim > 0) take these coordinates
 * as the positions (dim must equal surrogate_position_dim), and global_ids, when given, must number the
 * points 0..N-1 over all ranks (they fix the point order the model sees; NULL = rank-major order). */
int surrogate_set_points_f64(surrogate_t handle, int64_t n_local, int dim, const double* coords,
                             int64_t point_stride, int64_t dim_stride, const int64_t* global_ids,
                             const int64_t* sample_ids);
/* COLLECTIVE. Graph edges for the message passing of models that need them (Erwin): this rank's share of
 * the edges, n_edges of them, sources[e] -> receivers[e] as global point ids (the global_ids of
 * set_points, or the rank-major numbering); the graph is the union over the ranks in rank order. Kept
 * until the next set_points or set_edges; n_edges = 0 on every rank with NULL arrays removes them (the
 * model then builds its graph by the rule of its file, if it has one). Ignored by other models. */
int surrogate_set_edges(surrogate_t handle, int64_t n_edges, const int64_t* sources, const int64_t* receivers);
/* Coordinates per point the model needs as positions (0: none, the coordinates are only kept). */
int surrogate_position_dim(surrogate_t handle, int* dim);
int surrogate_set_points_f32(surrogate_t handle, int64_t n_local, int dim, const float* coords,
                             int64_t point_stride, int64_t dim_stride, const int64_t* global_ids,
                             const int64_t* sample_ids);

/* COLLECTIVE. in: in_channels values per local point, out: out_channels values per local point, both
 * strided, in physical units, in the order given to set_points.
 * Which pointers may be CUDA device memory: only `in` and `out` of predict, and only when the handle's
 * device is "cuda" or "cuda:N" (memory of that rank's device; told apart with cudaPointerGetAttributes:
 * pinned and managed memory count as host memory). Everything else (set_points coordinates and ids,
 * options, the VTK and point-query functions) is host memory, and with device "cpu" both arrays must be
 * host memory.
 *  - When every rank with points passes device memory for BOTH arrays (a model without per-point
 *    outputs, a classification, may pass NULL for `out`), the predict is device-resident: reordering,
 *    normalisation, the forward and de-normalisation run on the device and the outputs are written into
 *    `out` directly (any strides; elements between the strides are not touched). Rows cross ranks
 *    between the devices (over NCCL when each rank owns its GPU, else through host memory and MPI). The
 *    in_channels counters of NaN/Inf inputs are copied back for the input check. Per-sample values stay
 *    host memory (set_sample_inputs, get_sample_outputs): uploaded, and a classification's B x sample_out
 *    results downloaded, once per predict.
 *    The predict orders itself after the work enqueued before the call on the default stream (and so on
 *    every blocking stream); synchronise your own non-blocking streams first. On return `out` is written.
 *  - Otherwise (one array on the device, or ranks differing) a device array is staged through host
 *    memory (non-negative strides required). Host arrays always take the host path.
 * On an error `out` may hold part of the results (the check of the outputs for NaN/Inf runs after they
 * are written), never values outside its strided elements. */
int surrogate_predict_f64(surrogate_t handle, const double* in, int64_t in_point_stride, int64_t in_channel_stride,
                          double* out, int64_t out_point_stride, int64_t out_channel_stride);
int surrogate_predict_f32(surrogate_t handle, const float* in, int64_t in_point_stride, int64_t in_channel_stride,
                          float* out, int64_t out_point_stride, int64_t out_channel_stride);

/* Per-sample inputs and outputs (coupling.md, "Per-sample inputs and outputs"). sample_in: values per
 * sample the model takes besides the per-point inputs (Sequoia's class vector), 0 for most models;
 * sample_out: values per sample it outputs when its output is one row per sample (its out_channels is 0
 * then; out may be NULL in surrogate_predict_*). samples: B of the current points (0 before set_points).
 * set_sample_inputs is local: `samples` x `channels` values, sample-major, the same on every rank, kept
 * for the following predicts, which check them (count, finite, equal on every rank) and fail on every
 * rank otherwise. get_sample_outputs copies the last predict's B x sample_out values (sample-major, the
 * same on every rank) into `values`, which holds `capacity` values. */
int surrogate_sample_channels(surrogate_t handle, int* sample_in, int* sample_out);
int surrogate_samples(surrogate_t handle, int64_t* samples);
int surrogate_set_sample_inputs_f64(surrogate_t handle, int64_t samples, int channels, const double* values);
int surrogate_set_sample_inputs_f32(surrogate_t handle, int64_t samples, int channels, const float* values);
int surrogate_get_sample_outputs_f64(surrogate_t handle, int64_t capacity, double* values);

/* Local queries. */
int surrogate_in_channels(surrogate_t handle, int* channels);
int surrogate_out_channels(surrogate_t handle, int* channels);
/* Name (output = 0: input channel, 1: output channel) into buffer (NUL-terminated, truncated to size). */
int surrogate_channel_name(surrogate_t handle, int output, int channel, char* buffer, size_t size);
int surrogate_channel_unit(surrogate_t handle, int output, int channel, char* buffer, size_t size);
int surrogate_architecture(surrogate_t handle, char* buffer, size_t size);
/* The points given to set_points: local and global counts (0 before set_points), coordinates per point. */
int surrogate_local_points(surrogate_t handle, int64_t* n_local);
int surrogate_global_points(surrogate_t handle, int64_t* n_global);
int surrogate_point_dim(surrogate_t handle, int* dim);
/* COLLECTIVE. Lets a binding agree on a check of its own: every rank passes its local status (and a
 * message when it is not SURROGATE_OK); every rank returns the status of the lowest failing rank, or
 * SURROGATE_OK, and surrogate_last_error() then holds that rank's message. */
int surrogate_agree(surrogate_t handle, int status, const char* message);
/* Seconds taken by the last predict on this rank. */
int surrogate_last_predict_seconds(surrogate_t handle, double* seconds);

/* ------------------------------------------------------------------------------------------------
 * Parallel VTK output that ParaView opens, in one of two formats (share/docs/vtk.md):
 *   SURROGATE_VTK_FORMAT_VTU     .vtu per rank, .pvtu per step, .pvd series (needs VTK at build time)
 *   SURROGATE_VTK_FORMAT_VTKHDF  one VTKHDF file per step (parallel HDF5), .hdf.series (always built)
 * ------------------------------------------------------------------------------------------------ */
typedef struct surrogate_vtk_s* surrogate_vtk_t;

/* VTK cell types (VTKCellType values). */
enum {
  SURROGATE_VTK_VERTEX = 1,
  SURROGATE_VTK_LINE = 3,
  SURROGATE_VTK_TRIANGLE = 5,
  SURROGATE_VTK_POLYGON = 7,
  SURROGATE_VTK_QUAD = 9,
  SURROGATE_VTK_TETRA = 10,
  SURROGATE_VTK_HEXAHEDRON = 12,
  SURROGATE_VTK_WEDGE = 13
};

/* VTK output formats (surrogate_vtk_open_format). */
enum { SURROGATE_VTK_FORMAT_VTU = 0, SURROGATE_VTK_FORMAT_VTKHDF = 1 };

/* COLLECTIVE. Files <directory>/<name>.pvd, <name>_<step>.pvtu, <name>_<step>/piece_<rank>.vtu. */
int surrogate_vtk_open(MPI_Comm comm, const char* directory, const char* name, surrogate_vtk_t* vtk);
int surrogate_vtk_open_f(MPI_Fint comm, const char* directory, const char* name, surrogate_vtk_t* vtk);
/* COLLECTIVE. The same in the given format (SURROGATE_VTK_FORMAT_*; the same on every rank). VTKHDF:
 * files <directory>/<name>.hdf.series and <name>_<step>.hdf. An unknown format is
 * SURROGATE_ERR_INVALID_ARGUMENT, a format this build lacks SURROGATE_ERR_UNSUPPORTED, on every rank. */
int surrogate_vtk_open_format(MPI_Comm comm, const char* directory, const char* name, int format,
                              surrogate_vtk_t* vtk);
int surrogate_vtk_open_format_f(MPI_Fint comm, const char* directory, const char* name, int format,
                                surrogate_vtk_t* vtk);
/* Local. *available = 1 when this build writes `format` (VTU needs VTK at build time; VTKHDF is always
 * available), else 0. */
int surrogate_vtk_format_available(int format, int* available);
/* Local. The series file that ParaView opens (<name>.pvd or <name>.hdf.series); owned by the handle. */
int surrogate_vtk_series_path(surrogate_vtk_t vtk, const char** path);
/* COLLECTIVE. Sets *vtk to NULL. */
int surrogate_vtk_close(surrogate_vtk_t* vtk);
/* The staging functions below (set_cells, add_array_*, add_prediction_f64) are local. A bad argument is
 * returned at once AND kept: the next surrogate_vtk_write then fails with it on every rank (so a rank
 * that goes on regardless cannot leave the others waiting); until then they keep returning it.
 * Local cells (0-based local point indices): offsets[c] = end of cell c in connectivity; types[c] one of
 * SURROGATE_VTK_*. n_cells = 0 removes the cells (points are then written as vertices). */
int surrogate_vtk_set_cells(surrogate_vtk_t vtk, int64_t n_cells, const int64_t* connectivity, const int64_t* offsets,
                            const uint8_t* types);
/* Stages a point array (n_local x components, strided) for the next write, which reads the values (keep
 * them valid until then); unit may be NULL. Units are stored in each piece's FieldData "units". */
int surrogate_vtk_add_array_f64(surrogate_vtk_t vtk, const char* name, const char* unit, int components,
                                const double* values, int64_t point_stride, int64_t component_stride);
int surrogate_vtk_add_array_f32(surrogate_vtk_t vtk, const char* name, const char* unit, int components,
                                const float* values, int64_t point_stride, int64_t component_stride);
/* Stages the surrogate's outputs (out_channels values per point), one scalar array per channel named from
 * the model file's /fields, each name prefixed by prefix (may be NULL). */
int surrogate_vtk_add_prediction_f64(surrogate_vtk_t vtk, surrogate_t handle, const double* prediction,
                                     int64_t point_stride, int64_t channel_stride, const char* prefix);
/* COLLECTIVE. Writes a step with the given points (dim 1..3) and the staged arrays; *step may be NULL. */
int surrogate_vtk_write(surrogate_vtk_t vtk, double time, int64_t n_local, int dim, const double* coords,
                        int64_t point_stride, int64_t dim_stride, int* step);
/* COLLECTIVE. The same with the points given to surrogate_set_points. */
int surrogate_vtk_write_points_of(surrogate_vtk_t vtk, double time, surrogate_t handle, int* step);

/* Message of the calling thread's last failed call ("" if none); valid until the next failing call. */
const char* surrogate_last_error(void);
/* Static description of a status code. */
const char* surrogate_status_string(int status);
/* Library version "MAJOR.MINOR.PATCH". */
const char* surrogate_version(void);

#ifdef __cplusplus
}
#endif

#endif /* SURROGATE_H */
