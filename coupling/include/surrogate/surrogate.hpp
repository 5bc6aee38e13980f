// The C++ interface a solver uses: a surrogate model opened on the solver's communicator, fed the rank's
// own points once per mesh and called every time step. RAII; every collective method agrees on its
// outcome across the ranks (an error on one rank is the same surrogate::Error on all of them).
// The C API (surrogate.h) and the Fortran module wrap this class.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/version.hpp"

namespace surrogate {

/// The version of the library linked, "MAJOR.MINOR.PATCH": the one the C API's surrogate_version(), the
/// Fortran module's surrogate_version(), `surrogate --version`, the CMake package and pkg-config report.
/// SURROGATE_VERSION_STRING (surrogate/version.hpp) is the version of the headers compiled against.
const char* version() noexcept;

struct Options {
  /// "cpu", "cuda" (the node-local rank's GPU: local rank modulo the visible devices), "cuda:N", or
  /// "cuda-emulated" (the host backend: the CUDA kernels run on the CPU, for tests without a GPU).
  /// Builds without the CUDA backend refuse CUDA devices with Error(unsupported).
  std::string device = "cpu";
  /// OpenMP threads per rank, 0 = OpenMP's default (OMP_NUM_THREADS).
  int threads = 0;
  /// Bitwise-identical results for any number of ranks, partition and thread count.
  bool reproducible = false;
  /// Arithmetic of the MLPs: "fp32" (default), "tf32" (tensor cores, FP32 accumulation; CUDA devices
  /// only: with device "cpu" it is refused with Error(unsupported)), "bf16" (tensor cores, or on CPUs
  /// with AMX-BF16 / AVX512-BF16 for the families that offer it: flare; accuracy: cuda.md, cpu-bf16.md),
  /// "fp64": the whole forward in double precision on the CPU, for the families that offer it (hept);
  /// predict<double> then returns the double results (predict<float> rounds them).
  /// A model or CPU without the precision refuses it with Error(unsupported) at the first predict.
  std::string precision = "fp32";
  /// Hand NaN/Inf predictions to the caller; by default predict() fails on every rank, naming the output
  /// channels, ranks and counts (RunOptions::allow_non_finite_output).
  bool allow_non_finite_output = false;
};

/// Strided view of a rank's local array: element (point i, component j) is at data[i * point_stride +
/// j * component_stride]. C order (row-major, points x components): point_stride = components,
/// component_stride = 1. Fortran order (x(n_local, components)): point_stride = 1, component_stride =
/// n_local (or the leading dimension).
template <class Real>
struct Strided {
  Real* data = nullptr;
  std::int64_t point_stride = 0;
  std::int64_t component_stride = 1;
};

class Surrogate {
 public:
  /// Collective over `comm` (which is duplicated): rank 0 reads the model file, every rank gets the
  /// model or the same error.
  Surrogate(MPI_Comm comm, const std::string& model_path, Options options = {});
  ~Surrogate();
  Surrogate(Surrogate&&) noexcept;
  Surrogate& operator=(Surrogate&&) noexcept;
  Surrogate(const Surrogate&) = delete;
  Surrogate& operator=(const Surrogate&) = delete;

  int in_channels() const;
  int out_channels() const;
  const Model& model() const;
  const MpiComm& comm() const;
  const Options& options() const;
  /// Collective (the ranks must agree on the options).
  void set_options(const Options& options);

  /// Collective. The rank's points: n_local of them, `dim` coordinates each; optional global ids (kept for
  /// output) and sample ids (independent samples, 0 .. B-1; null = one sample). Builds the plan that
  /// every predict() reuses until the points change.
  template <class Real>
  void set_points(std::int64_t n_local, int dim, Strided<const Real> coords, const std::int64_t* global_ids = nullptr,
                  const std::int64_t* sample_ids = nullptr);
  /// Collective. Edges for models that pass messages (Erwin): this rank's share, 2 x n_edges global point
  /// ids (edge_index[e] the source, edge_index[n_edges + e] the receiver), kept until the next set_points
  /// or set_edges; a null array on every rank removes them (the model's graph rule applies).
  void set_edges(std::int64_t n_edges, const std::int64_t* edge_index);
  bool has_points() const;
  std::int64_t local_points() const;
  std::int64_t global_points() const;
  int dim() const;
  /// The local coordinates as given to set_points (n_local x dim, C order, double).
  const std::vector<double>& coordinates() const;
  /// The global ids as given to set_points (empty if none were given).
  const std::vector<std::int64_t>& global_ids() const;

  /// Collective. Reads in_channels() input values per local point and writes out_channels() outputs, in
  /// physical units, in the order of set_points (`out` may be null when out_channels() is 0); per-sample
  /// inputs and outputs through set_sample_inputs() / sample_outputs(). Inputs with NaN/Inf are an error on every rank.
  /// With a CUDA device selected, `in` and `out` (and nothing else of this class) may be CUDA device
  /// memory of the rank's device. Both on the device on every rank with points (a null `out` when
  /// out_channels() is 0): device-resident (the normalisation, the forward and the de-normalisation run on
  /// the device, outputs written into `out` directly, any strides; per-sample values stay host memory).
  /// One of them on the device: staged through host memory (non-negative strides). The rules in detail:
  /// surrogate.h (surrogate_predict_f64), cuda.md.
  template <class Real>
  void predict(Strided<const Real> in, Strided<Real> out);

  /// Per-sample values (share/docs/coupling.md, "Per-sample inputs and outputs"). sample_in_channels():
  /// values per sample the model takes besides the per-point inputs (Sequoia's class vector), 0 for most;
  /// sample_out_channels(): values per sample it outputs when its output is one row per sample (then
  /// out_channels() is 0), 0 for per-point models. samples(): B of the current points (set_points).
  int sample_in_channels() const;
  int sample_out_channels() const;
  std::int64_t samples() const;
  /// The per-sample inputs of the following predicts: `samples` x `channels` values, C order (sample-major),
  /// the same on every rank; kept until called again. Not collective: predict() checks them (B x
  /// sample_in_channels(), finite, equal on every rank) and fails on every rank otherwise.
  template <class Real>
  void set_sample_inputs(std::int64_t samples, int channels, const Real* values);
  /// The per-sample outputs of the last predict(): B x sample_out_channels() values, C order, the same on
  /// every rank (empty for per-point models).
  const std::vector<double>& sample_outputs() const;

  /// Time of the last predict() on this rank (seconds) and the number of predictions so far.
  double last_predict_seconds() const;
  std::int64_t predictions() const;

  /// Where this rank's time went since the points were set: building the plan and the phases of every
  /// predict on it (layer kinds, nested under "plan" and "forward"), and the bytes and seconds of the plan's
  /// exchanges. Empty before the first predict on the current points. share/docs/coupling.md, "Timing".
  std::vector<Profile::Phase> profile() const;
  Traffic traffic() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace surrogate
