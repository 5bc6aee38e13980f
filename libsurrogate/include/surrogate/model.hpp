// Models: one class per family, created from a ModelFile by its `architecture` attribute.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/comm.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/transport.hpp"  // Traffic

namespace surrogate {

using index_t = std::int64_t;

/// Arithmetic of the Linear layers (the MLPs): FP32 everywhere (default), or on CUDA devices the tensor
/// cores with operands rounded to TF32 (10-bit mantissa) or BF16 (8-bit mantissa) and FP32 accumulation;
/// BF16 also on CPUs with AMX-BF16 or AVX512-BF16 (share/docs/cpu-bf16.md). Norms, softmax, the
/// encode/decode products and the residual stream stay FP32 (share/docs/cuda.md).
/// FP64: the whole forward in double precision on the CPU (inputs and outputs stay float), for models
/// that need it (HEPT's shipped checkpoint, share/docs/hept.md); families without it refuse it.
enum class Precision { fp32, tf32, bf16, fp64 };
/// "fp32", "tf32", "bf16", "fp64" (exactly); anything else throws Error(invalid_argument).
Precision parse_precision(const std::string& name);
const char* precision_name(Precision p) noexcept;

struct RunOptions {
  /// Bitwise-identical predictions for any number of ranks, any partition of the points and any thread
  /// count (global reductions in exact fixed-point arithmetic; see share/docs/reproducibility.md).
  bool reproducible = false;
  /// OpenMP threads per rank; 0 uses the OpenMP default (OMP_NUM_THREADS). The caller's OpenMP settings
  /// are not changed.
  int threads = 0;
  /// Where the forward pass runs: -1 the CPU, otherwise the index of a CUDA device (CUDA builds only;
  /// inputs and outputs stay host arrays, the model copies them).
  int cuda_device = -1;
  /// tf32 needs a CUDA device (cuda_device >= 0); bf16 runs on a CUDA device or, for the families that
  /// offer it (Model::supports_cpu_bf16), on a CPU with AMX-BF16 or AVX512-BF16; fp64 is refused by the
  /// families that do not offer it (Model::supports_fp64). Refusals are Error(unsupported).
  Precision precision = Precision::fp32;
  /// Hand NaN/Inf predictions to the caller instead of failing (default: predict() checks its outputs and
  /// throws Error(input) on every rank, naming the channels, ranks and counts).
  bool allow_non_finite_output = false;
};

/// How a rank's local points are grouped into independent samples (a sample's attention never mixes
/// with another's). Built collectively once per point set and reused by every prediction.
class SampleLayout {
 public:
  struct Segment {
    index_t sample;       // global sample index
    index_t begin, end;   // rows [begin, end) of the working order
  };

  /// Collective. `sample_ids` has one non-negative id per local point, or is null (every point belongs
  /// to sample 0). Samples are 0 .. B-1 globally and none may be empty; the points of a sample may be
  /// spread over any ranks in any order. Throws Error(input) on every rank when the layout is invalid.
  static SampleLayout build(const Comm& comm, index_t local_points, const std::int64_t* sample_ids);

  index_t local_points() const { return local_points_; }
  index_t global_points() const { return global_points_; }
  index_t num_samples() const { return static_cast<index_t>(sample_sizes_.size()); }
  /// Global number of points of each sample.
  const std::vector<index_t>& sample_sizes() const { return sample_sizes_; }
  /// Local rows grouped by sample, in increasing sample order.
  const std::vector<Segment>& segments() const { return segments_; }
  /// Working row -> caller's local row; empty when the caller's order is already grouped.
  const std::vector<index_t>& order() const { return order_; }

 private:
  index_t local_points_ = 0;
  index_t global_points_ = 0;
  std::vector<index_t> sample_sizes_;
  std::vector<Segment> segments_;
  std::vector<index_t> order_;
};

/// The geometry of the points of one predict() call, for families that need positions (Erwin, BSA;
/// Model::position_dim() > 0) and, for message passing, graph edges. Arrays hold the layout's local
/// points in the caller's order (the order of `in` / `out`).
struct PointGeometry {
  /// Local points x position_dim() coordinates at row stride ld_positions (>= position_dim()), in the
  /// coordinates the model was trained with. Required when the model needs positions.
  const float* positions = nullptr;
  index_t ld_positions = 0;
  /// Global id of every local point: ids 0 .. N-1 over all ranks, each once. They fix the order in which
  /// a sample's points are given to the model (the ball tree depends on it) and name the points in
  /// edge_index. Null on every rank: rank-major order (rank r's local point i has id
  /// n_0 + ... + n_{r-1} + i).
  const std::int64_t* global_ids = nullptr;
  /// Optional graph for message passing: 2 x num_edges global point ids, edge_index[e] the source j and
  /// edge_index[num_edges + e] the receiver i of edge e (PyG source_to_target). Each rank passes any
  /// subset of the edges (possibly none); the graph is the union in rank-major order (the order of the
  /// edges of a receiver matters for the rounding of the message mean). Null on every rank: the model
  /// builds the graph by its configured rule (model-format.md), if it has one.
  const std::int64_t* edge_index = nullptr;
  index_t num_edges = 0;
};

class Model;
namespace device {
class CallerOrder;  // a layout's working order on a CUDA device (CUDA builds; internal)
}

/// What a model builds once per point set and reuses in every predict while the points stay: trees,
/// neighbour lists, latitude bands, exchange plans, device buffers. Built by Model::plan (collective);
/// the Surrogate (C++, C, Fortran, PETSc, the command line) keeps it until the points change. Each family
/// derives its own (share/docs/adding-a-family.md, "Plan").
class Plan {
 public:
  virtual ~Plan() = default;
  Plan(const Plan&) = delete;
  Plan& operator=(const Plan&) = delete;

  /// The model that built the plan (a plan serves only that model).
  const Model& model() const { return *model_; }
  const SampleLayout& layout() const { return layout_; }
  /// The geometry in the layout's working order (rows grouped by sample): positions (local points x
  /// position_dim() at stride position_dim()) and global ids (the caller's, or rank-major), both null
  /// for families that need no positions; edge_index / num_edges as the caller gave them (global ids).
  const PointGeometry& geometry() const { return geometry_; }
  /// Bytes the plan's exchanges moved on this rank since it was built (ExchangePlan::count_into).
  const Traffic& traffic() const { return traffic_; }
  Traffic& traffic() { return traffic_; }
  /// Where this rank's time went: the phases of building the plan and of every forward on it since
  /// (ScopedPhase in the families' code); the exchanges' time is traffic().seconds.
  Profile& profile() const { return *profile_; }
  /// Applies the plan through `comm` (the same ranks, in the same order, as the communicator it was
  /// built with) from now on: called by Model::predict before every forward. The default does nothing;
  /// families that keep exchange plans rebind them.
  virtual void rebind(const Comm& comm);

  /// The layout's working order on a CUDA device, kept for Model::predict_device (null until its first
  /// call with this plan; internal).
  std::shared_ptr<device::CallerOrder>& device_order() { return device_order_; }

  /// What Model::plan hands a family's plan: the model, the layout and the working-order geometry.
  struct Basis {
    const Model* model = nullptr;
    SampleLayout layout;
    PointGeometry geometry;
    std::vector<float> positions;
    std::vector<std::int64_t> ids, edges;
  };
  explicit Plan(Basis basis);

 private:
  friend class Model;  // hands the plan the profile of its build
  const Model* model_;
  SampleLayout layout_;
  PointGeometry geometry_;
  std::vector<float> positions_;
  std::vector<std::int64_t> ids_, edges_;
  Traffic traffic_;
  std::unique_ptr<Profile> profile_;
  std::shared_ptr<device::CallerOrder> device_order_;
};

class Model {
 public:
  virtual ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const std::string& architecture() const { return architecture_; }
  int in_channels() const { return in_channels_; }
  int out_channels() const { return out_channels_; }
  const Normalization& normalization() const { return normalization_; }
  const Fields& fields() const { return fields_; }
  /// Channel name from /fields, or in<c> / out<c>.
  std::string input_name(int c) const;
  std::string output_name(int c) const;

  /// Number of coordinates per point the family needs in PointGeometry::positions; 0 for families
  /// that see only the input channels (FLARE).
  virtual int position_dim() const { return 0; }
  bool needs_positions() const { return position_dim() > 0; }
  /// True when predict() must be given edges (PointGeometry::edge_index): the model passes messages
  /// along a graph and its file names no rule to build it.
  virtual bool needs_edges() const { return false; }
  /// True when the model passes messages along a graph at all (given edges or built by its rule).
  virtual bool uses_graph() const { return false; }
  /// True when the family runs Precision::fp64 (in double precision on the CPU); predict() refuses fp64
  /// with Error(unsupported) on every rank for the others.
  virtual bool supports_fp64() const { return false; }
  /// True when the family runs Precision::bf16 on the CPU (its Linear layers on kernels::cpu_bf16()).
  virtual bool supports_cpu_bf16() const { return false; }
  /// Throws Error(unsupported), naming the model and what is missing, when this model cannot run with
  /// the precision and device of `options` on this machine (not collective; predict() agrees it).
  void check_precision(const RunOptions& options) const;

  /// Values per sample the model takes besides the per-point inputs (Sequoia's class vector), 0 for most
  /// models; and values per sample it outputs when its output is one row per sample (a classification,
  /// an integrated quantity), 0 when its output is per point (out_channels()).
  virtual int sample_in_channels() const { return 0; }
  virtual int sample_out_channels() const { return 0; }
  /// The per-sample arrays of one predict (share/docs/coupling.md, "Per-sample inputs and outputs"):
  /// B = plan.layout().num_samples() rows in sample order, the same on every rank.
  struct SampleArrays {
    const float* in = nullptr;  // B x sample_in_channels() at row stride ld_in; required when that is > 0
    index_t ld_in = 0;
    float* out = nullptr;       // B x sample_out_channels() at row stride ld_out, written on every rank
    index_t ld_out = 0;
  };

  virtual index_t parameter_count() const = 0;
  /// Hyperparameters as (name, value) pairs, for `surrogate info`.
  virtual std::vector<std::pair<std::string, std::string>> describe() const = 0;

  /// Collective over comm. The plan of a point set (the layout's local points in the caller's order,
  /// their geometry when the family needs one): missing positions for a model that needs them, a stride
  /// below position_dim(), non-finite positions, bad global ids or edges are Error(input) /
  /// Error(invalid_argument) on every rank. `options.threads` is used for the build.
  std::unique_ptr<Plan> plan(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry = {},
                             const RunOptions& options = {});

  /// Collective over comm. `in` holds the plan's local points in the caller's order, in_channels()
  /// values per point at row stride ld_in, in physical units; `out` receives out_channels() values per
  /// point at row stride ld_out, in physical units (the file's normalisation is applied here).
  /// Non-finite inputs are reported (channel, rank, count) as Error(input) on every rank. A plan of
  /// another model is Error(invalid_argument). `in` may be null when in_channels() is 0.
  void predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
               const RunOptions& options = {});

  /// predict() with per-sample inputs and outputs (SampleArrays). Per-sample inputs that differ between
  /// ranks, are non-finite or missing (the model takes some) are Error(input) on every rank; a model with
  /// per-sample outputs needs samples.out. The arrays are not normalised (/normalization is per point).
  void predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
               const SampleArrays& samples, const RunOptions& options = {});
  /// predict() into double outputs: with precision fp64 (a family that supports_fp64()) the forward's
  /// double results keep every digit, normalisation applied in double; otherwise the float results,
  /// widened. Same checks, same collectives.
  void predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, double* out, index_t ld_out,
               const SampleArrays& samples, const RunOptions& options = {});
  /// No per-point outputs (a model with per-sample outputs only): the float form.
  void predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, std::nullptr_t, index_t ld_out,
               const SampleArrays& samples, const RunOptions& options = {}) {
    predict(comm, plan, in, ld_in, static_cast<float*>(nullptr), ld_out, samples, options);
  }

  /// One-shot forms: plan() of the points, then predict() with that plan (a caller that predicts again
  /// on the same points keeps a plan instead). Without a geometry, a model that needs positions
  /// (needs_positions()) is Error(input) on every rank.
  void predict(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
               index_t ld_out, const RunOptions& options = {});
  void predict(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const float* in,
               index_t ld_in, float* out, index_t ld_out, const RunOptions& options = {});

  /// The caller's arrays in CUDA device memory: element (point i, component c) at
  /// in[i * in_point_stride + c * in_component_stride] (likewise out), float or double, any strides.
  struct DeviceArrays {
    const void* in = nullptr;
    void* out = nullptr;
    bool is_double = false;
    index_t in_point_stride = 0, in_component_stride = 1;
    index_t out_point_stride = 0, out_component_stride = 1;
  };
  /// Collective over comm. predict() for arrays in the memory of CUDA device options.cuda_device (>= 0):
  /// reordering, normalisation, the forward and the de-normalisation run on that device and the outputs
  /// are written into `arrays.out` directly (elements between the strides are not touched). Same
  /// arithmetic and the same errors as predict() with the inputs rounded to float and float outputs.
  /// Ordered after the work enqueued before the call on the device's default stream (share/docs/cuda.md,
  /// "Streams"); `arrays.out` is written on return. Every family's forward reads the arrays on the device
  /// (device_input()); the only host traffic is the agreed status and the per-sample values
  /// (share/docs/cuda.md, "Host and device arrays"). A model with per-sample inputs or outputs takes them
  /// with the SampleArrays form.
  void predict_device(const Comm& comm, Plan& plan, const DeviceArrays& arrays, const RunOptions& options);
  /// predict_device() with per-sample arrays in host memory (SampleArrays, as predict() takes them: B rows
  /// of a few values, checked the same way): the per-point arrays stay on the device, the per-sample inputs
  /// are uploaded and the per-sample outputs written on every rank on return (Sequoia's class vectors and
  /// classification logits).
  void predict_device(const Comm& comm, Plan& plan, const DeviceArrays& arrays, const SampleArrays& samples,
                      const RunOptions& options);
  /// One-shot form (plan(), then predict_device()).
  void predict_device(const Comm& comm, const SampleLayout& layout, const DeviceArrays& arrays,
                      const RunOptions& options);

 protected:
  Model(const ModelFile& file, int in_channels, int out_channels);

  /// The family's plan of a point set (collective; errors agreed). The default is the base Plan (the
  /// layout and the geometry), for families that build nothing per point set.
  virtual std::unique_ptr<Plan> build_plan(const Comm& comm, Plan::Basis basis, const RunOptions& options);

  /// The arrays of one forward: either the normalised inputs and the outputs in the plan's working order
  /// on the host (rows grouped by sample; row strides multiples of kernels::kPad; padding columns of `in`
  /// zero), or, for predict_device, the caller's arrays in device memory (`device`; then the family calls
  /// `check_inputs` on every rank, before any collective of its forward, with this rank's per-channel counts
  /// of non-finite inputs: collective, it throws the agreed Error(input) of predict() when any rank has some;
  /// and, unless it is empty (RunOptions::allow_non_finite_output), `check_outputs` on every rank after the
  /// forward with the counts of non-finite outputs, as predict() checks them).
  struct Io {
    const float* in = nullptr;
    index_t ld_in = 0;
    float* out = nullptr;
    index_t ld_out = 0;
    /// Set by a double-output predict at precision fp64 (only for a family that supports_fp64()): the
    /// family writes its outputs here in double, rows at stride ld_out64, instead of `out`.
    double* out64 = nullptr;
    index_t ld_out64 = 0;
    const DeviceArrays* device = nullptr;
    /// The per-sample arrays (host; checked, identical on every rank): B x sample_in_channels() at
    /// ld_sample_in, B x sample_out_channels() at ld_sample_out (every rank writes all rows).
    const float* sample_in = nullptr;
    index_t ld_sample_in = 0;
    float* sample_out = nullptr;
    index_t ld_sample_out = 0;
    std::function<void(const std::vector<std::uint64_t>&)> check_inputs, check_outputs;
    /// DeviceInput::device_rows: `in` and `out` are rows in the memory of RunOptions::cuda_device (same
    /// layout as the host rows), gathered on the family's device_stream(); the forward enqueues its work
    /// there (or waits for it before using another stream) and leaves its outputs enqueued there.
    bool on_device = false;
  };
  /// The family's forward pass (collective), on host or device arrays (`io`), with its plan. `io.device`
  /// is set only for a family whose device_input() is caller_arrays; `io.on_device` for device_rows.
  virtual void forward(const Comm& comm, Plan& plan, const Io& io, const RunOptions& options) = 0;
  /// How predict_device's arrays reach the family's forward: gathered and normalised on the device, then
  /// as host rows (host_rows, the default) or as device rows (device_rows: Io::on_device); or the
  /// caller's arrays themselves (caller_arrays: Io::device, for a forward that fuses the gather).
  enum class DeviceInput { host_rows, device_rows, caller_arrays };
  virtual DeviceInput device_input() const { return DeviceInput::host_rows; }
  /// device_rows: the family's device forward for `options` made ready (collective, errors agreed) and
  /// the cudaStream_t its forward enqueues on, where predict_device gathers and scatters the rows.
  virtual void* device_stream(const Comm& comm, const RunOptions& options);
  /// A channel whose normalised inputs must lie strictly inside (lo, hi), checked where predict_device
  /// gathers them (HEPT's particle classes): the first working row outside goes to refuse_input, which
  /// throws the error predict() gives for it (collective: called on every rank that has one).
  struct InputRange {
    int channel = -1;  // -1: none
    float lo = 0, hi = 0;
  };
  virtual InputRange checked_input_range() const { return {}; }
  virtual void refuse_input(float value, index_t row) const;

  /// Collective: throws the same Error(input) on every rank when any rank counted NaN/Inf values
  /// (`bad`, one count per channel), naming each channel with its total and the ranks that hold them.
  void throw_if_non_finite(const Comm& comm, const std::vector<std::uint64_t>& bad, bool outputs) const;

 private:
  std::string architecture_;
  int in_channels_;
  int out_channels_;
  Normalization normalization_;
  Fields fields_;
  template <class Real>
  void predict_rows(const Comm& comm, Plan& plan, const float* in, index_t ld_in, Real* out, index_t ld_out,
                    const SampleArrays& samples, const RunOptions& options);

  void predict_device_gathered(const Comm& comm, Plan& plan, const DeviceArrays& arrays, const SampleArrays& samples,
                               const RunOptions& options);
  /// The per-sample arrays' checks of predict() and predict_device(), `call` naming the call: this rank's
  /// arrays (local); the inputs equal on every rank (collective); the outputs finite (collective).
  void check_sample_arrays(index_t B, const SampleArrays& samples, const char* call) const;
  void agree_sample_inputs(const Comm& comm, index_t B, const SampleArrays& samples, const char* call) const;
  void check_sample_outputs(const Comm& comm, index_t B, const SampleArrays& samples) const;

  std::vector<float> input_buffer_, output_buffer_;
  std::vector<double> output_buffer64_;
  struct DeviceStaging;  // predict_device's rows on the device (model.cpp)
  std::unique_ptr<DeviceStaging> staging_;
};

/// Creates the model of the file's architecture; throws Error(format) for an unknown architecture and
/// Error(weights) when the tensors do not match the configuration.
std::unique_ptr<Model> make_model(const ModelFile& file);
/// Architectures this build can run.
std::vector<std::string> architectures();

}  // namespace surrogate
