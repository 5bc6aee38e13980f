#include "surrogate/surrogate.hpp"

#include "device_select.hpp"
#include "strided_check.hpp"

#include <cmath>
#include <cstdlib>
#include <span>
#include <type_traits>

namespace surrogate {

struct Surrogate::State {
  State(MPI_Comm c, Options o) : comm(c), options(std::move(o)) {}
  MpiComm comm;
  Options options;
  int cuda_device = -1;  // from options.device
  Precision precision = Precision::fp32;  // from options.precision
  std::unique_ptr<Model> model;
  bool has_points = false;
  SampleLayout layout;
  int dim = 0;
  std::vector<double> coordinates;
  std::vector<std::int64_t> global_ids;
  std::vector<float> positions;        // coordinates as float, for models that need positions
  bool has_edges = false;              // set_edges on some rank (agreed)
  std::vector<std::int64_t> edges;     // 2 x n: sources, then receivers
  std::unique_ptr<Plan> plan;          // of the current points (and edges); built by the first predict
  std::vector<float> in_buffer, out_buffer;
  std::vector<double> out_buffer64;    // predict<double>: fp64 keeps every digit (Model::predict)
  bool has_sample_inputs = false;      // set_sample_inputs on this rank
  std::int64_t sample_rows = 0;        // what set_sample_inputs gave
  int sample_cols = 0;
  std::vector<float> sample_in, sample_out_buffer;
  std::vector<double> sample_out;
  double last_seconds = 0;
  std::int64_t predictions = 0;
};

namespace {
/// The options every rank must pass alike (threads may differ: each rank sizes its own thread pool).
std::vector<Comm::Setting> settings_of(const Options& o) {
  return {{"device", o.device},
          {"precision", o.precision},
          {"reproducible", o.reproducible ? "yes" : "no"},
          {"allow_non_finite_output", o.allow_non_finite_output ? "yes" : "no"}};
}

/// Checks the options and returns the CUDA device they select (-1: CPU).
int check_options(const Options& o, const MpiComm& comm) {
  if (o.threads < 0) throw Error(ErrorCode::invalid_argument, "threads must be >= 0, got " + std::to_string(o.threads));
  const Precision precision = parse_precision(o.precision);
  const int device = detail::select_device(o.device, comm);
  if (device < 0 && precision == Precision::tf32)
    throw Error(ErrorCode::unsupported, "precision 'tf32' needs a CUDA device (device '" + o.device +
                                            "' computes in fp32, or bf16 / fp64 where the model and the CPU "
                                            "offer them)");
  return device;
}
}  // namespace

Surrogate::Surrogate(MPI_Comm comm, const std::string& model_path, Options options) {
  // Constructing the communicator duplicates `comm` (collective); argument errors are agreed afterwards.
  state_ = std::make_unique<State>(comm, std::move(options));
  // The same model and options on every rank, before anything that depends on them is collective (the
  // device selection, the model's broadcast from rank 0).
  std::vector<Comm::Setting> settings{{"model path", model_path}};
  for (Comm::Setting& setting : settings_of(state_->options)) settings.push_back(std::move(setting));
  state_->comm.agree_on_settings(settings, "opening model '" + model_path + "'");
  collectively(state_->comm, [&] {
    state_->cuda_device = check_options(state_->options, state_->comm);
    state_->precision = parse_precision(state_->options.precision);
  });
  const ModelFile file = ModelFile::read(state_->comm, model_path);
  collectively(state_->comm, [&] { state_->model = make_model(file); });
}

Surrogate::~Surrogate() = default;
Surrogate::Surrogate(Surrogate&&) noexcept = default;
Surrogate& Surrogate::operator=(Surrogate&&) noexcept = default;

int Surrogate::in_channels() const { return state_->model->in_channels(); }
int Surrogate::out_channels() const { return state_->model->out_channels(); }
const Model& Surrogate::model() const { return *state_->model; }
const MpiComm& Surrogate::comm() const { return state_->comm; }
const Options& Surrogate::options() const { return state_->options; }
bool Surrogate::has_points() const { return state_->has_points; }
std::int64_t Surrogate::local_points() const { return state_->layout.local_points(); }
std::int64_t Surrogate::global_points() const { return state_->layout.global_points(); }
int Surrogate::dim() const { return state_->dim; }
const std::vector<double>& Surrogate::coordinates() const { return state_->coordinates; }
const std::vector<std::int64_t>& Surrogate::global_ids() const { return state_->global_ids; }
int Surrogate::sample_in_channels() const { return state_->model->sample_in_channels(); }
int Surrogate::sample_out_channels() const { return state_->model->sample_out_channels(); }
std::int64_t Surrogate::samples() const { return state_->has_points ? state_->layout.num_samples() : 0; }
const std::vector<double>& Surrogate::sample_outputs() const { return state_->sample_out; }

template <class Real>
void Surrogate::set_sample_inputs(std::int64_t samples, int channels, const Real* values) {
  State& s = *state_;
  s.has_sample_inputs = samples >= 0 && channels >= 0 && (values || samples * channels == 0);
  s.sample_rows = samples;
  s.sample_cols = channels;
  s.sample_in.assign(static_cast<std::size_t>(s.has_sample_inputs ? samples * channels : 0), 0.0f);
  for (std::size_t i = 0; i < s.sample_in.size(); ++i) s.sample_in[i] = static_cast<float>(values[i]);
}

double Surrogate::last_predict_seconds() const { return state_->last_seconds; }
std::int64_t Surrogate::predictions() const { return state_->predictions; }
std::vector<Profile::Phase> Surrogate::profile() const {
  return state_->plan ? state_->plan->profile().phases() : std::vector<Profile::Phase>{};
}
Traffic Surrogate::traffic() const { return state_->plan ? state_->plan->traffic() : Traffic{}; }

void Surrogate::set_options(const Options& options) {
  state_->comm.agree_on_settings(settings_of(options), "set_options");
  int device = -1;
  collectively(state_->comm, [&] { device = check_options(options, state_->comm); });
  state_->options = options;
  state_->cuda_device = device;
  state_->precision = parse_precision(options.precision);
}

template <class Real>
void Surrogate::set_points(std::int64_t n_local, int dim, Strided<const Real> coords, const std::int64_t* global_ids,
                           const std::int64_t* sample_ids) {
  State& s = *state_;
  collectively(s.comm, [&] {
    if (n_local < 0) throw Error(ErrorCode::invalid_argument, "set_points: negative number of local points");
    if (dim < 1 || dim > 16) throw Error(ErrorCode::invalid_argument, "set_points: dimension must be 1..16, got " + std::to_string(dim));
    if (n_local > 0 && !coords.data) throw Error(ErrorCode::invalid_argument, "set_points: null coordinates");
    detail::check_strides(n_local, dim, coords.point_stride, coords.component_stride, sizeof(Real), false,
                          "set_points: coordinates");
    std::vector<double> copy(static_cast<std::size_t>(n_local) * static_cast<std::size_t>(dim));
    std::int64_t bad = 0;
    for (std::int64_t i = 0; i < n_local; ++i)
      for (int j = 0; j < dim; ++j) {
        const double v = static_cast<double>(coords.data[i * coords.point_stride + j * coords.component_stride]);
        bad += !std::isfinite(v);
        copy[static_cast<std::size_t>(i * dim + j)] = v;
      }
    if (bad) throw Error(ErrorCode::input, "set_points: " + std::to_string(bad) + " NaN/Inf coordinate(s)");
    s.coordinates = std::move(copy);
    s.global_ids.assign(global_ids, global_ids ? global_ids + n_local : global_ids);
    s.dim = dim;
    s.positions.assign(s.coordinates.begin(), s.coordinates.end());
    s.has_edges = false;
    s.edges.clear();
  });
  s.has_points = false;
  s.plan.reset();
  s.layout = SampleLayout::build(s.comm, n_local, sample_ids);
  s.has_points = true;
}

void Surrogate::set_edges(std::int64_t n_edges, const std::int64_t* edge_index) {
  State& s = *state_;
  collectively(s.comm, [&] {
    if (n_edges < 0) throw Error(ErrorCode::invalid_argument, "set_edges: negative number of edges");
    if (n_edges > 0 && !edge_index) throw Error(ErrorCode::invalid_argument, "set_edges: null edge array");
    s.edges.assign(edge_index, edge_index ? edge_index + 2 * n_edges : edge_index);
  });
  s.has_edges = s.comm.allreduce<std::int64_t>(edge_index ? 1 : 0, ReduceOp::max) > 0;
  s.plan.reset();
}

namespace {
/// Elements spanned by a strided array of n points x components (non-negative strides), or -1.
std::int64_t strided_extent(std::int64_t n, int components, std::int64_t point_stride, std::int64_t component_stride) {
  if (n <= 0 || components <= 0) return 0;
  if (point_stride < 0 || component_stride < 0) return -1;
  return (n - 1) * point_stride + static_cast<std::int64_t>(components - 1) * component_stride + 1;
}
}  // namespace

template <class Real>
void Surrogate::predict(Strided<const Real> in, Strided<Real> out) {
  State& s = *state_;
  // The plan of the current points (built by the first predict after set_points / set_edges; collective).
  const auto current_plan = [](State& st, const RunOptions& run) -> Plan& {
    if (!st.plan) {
      PointGeometry geometry;
      if (st.model->needs_positions()) {
        geometry.positions = st.positions.data();
        geometry.ld_positions = st.dim;
        geometry.global_ids = st.global_ids.empty() ? nullptr : st.global_ids.data();
        if (st.has_edges) {
          geometry.edge_index = st.edges.empty() ? nullptr : st.edges.data();
          geometry.num_edges = static_cast<std::int64_t>(st.edges.size() / 2);
        }
      }
      st.plan = st.model->plan(st.comm, st.layout, geometry, run);
    }
    return *st.plan;
  };
  // The per-sample arrays: the kept inputs (set_sample_inputs), the outputs' buffer for the current samples.
  const auto sample_arrays = [](State& st) {
    Model::SampleArrays samples;
    const int s_in = st.model->sample_in_channels(), s_out = st.model->sample_out_channels();
    st.sample_out_buffer.assign(static_cast<std::size_t>(st.layout.num_samples() * s_out), 0.0f);
    if (s_in > 0) {
      samples.in = st.sample_in.data();
      samples.ld_in = s_in;
    }
    if (s_out > 0) {
      samples.out = st.sample_out_buffer.data();
      samples.ld_out = s_out;
    }
    return samples;
  };
  const std::int64_t n = s.layout.local_points();
  const int cin = s.model->in_channels(), cout = s.model->out_channels();
  RunOptions run;
  run.threads = s.options.threads;
  run.reproducible = s.options.reproducible;
  run.allow_non_finite_output = s.options.allow_non_finite_output;
  run.cuda_device = s.cuda_device;
  run.precision = s.precision;
  // With a CUDA device selected, either array may be device memory. When every rank with points passes
  // device memory for both arrays (a collective decision), the whole predict runs on the device
  // (Model::predict_device). Otherwise a device array is staged through host memory (the strided span
  // of the array, one copy each way).
  bool in_on_device = false, out_on_device = false;
  collectively(s.comm, [&] {
    if (!s.has_points) throw Error(ErrorCode::invalid_argument, "predict: call set_points first");
    if (n > 0 && ((!in.data && cin > 0) || (!out.data && cout > 0)))
      throw Error(ErrorCode::invalid_argument, "predict: null input or output array");
    detail::check_strides(n, cin, in.point_stride, in.component_stride, sizeof(Real), false, "predict: input array");
    detail::check_strides(n, cout, out.point_stride, out.component_stride, sizeof(Real), true, "predict: output array");
    const int s_in = s.model->sample_in_channels();
    const std::int64_t B = s.layout.num_samples();
    if (s_in > 0 && !s.has_sample_inputs)
      throw Error(ErrorCode::input, "predict: the " + s.model->architecture() + " model needs " + std::to_string(s_in) +
                                        " per-sample input value(s) for each of the " + std::to_string(B) +
                                        " samples: call set_sample_inputs first");
    if (s_in > 0 && (s.sample_rows != B || s.sample_cols != s_in))
      throw Error(ErrorCode::input, "predict: per-sample inputs of " + std::to_string(s.sample_rows) + " x " +
                                        std::to_string(s.sample_cols) + " values, the model needs " + std::to_string(B) +
                                        " samples x " + std::to_string(s_in));
    if (s.model->needs_positions() && s.dim != s.model->position_dim())
      throw Error(ErrorCode::input, "predict: the " + s.model->architecture() + " model needs " +
                                        std::to_string(s.model->position_dim()) + " coordinates per point as positions, "
                                        "set_points gave " + std::to_string(s.dim));
    if (s.cuda_device < 0 || n == 0) return;
    in_on_device = detail::is_device_pointer(in.data);
    out_on_device = detail::is_device_pointer(out.data);
  });
  if (s.cuda_device >= 0) {
    // A model without per-point inputs (or outputs: a classification) reads (writes) nothing there.
    const bool resident = (cin == 0 || in_on_device) && (cout == 0 || out_on_device);
    const std::int32_t device_rank = (n > 0 && resident) ? 1 : 0;
    const std::int32_t host_rank = (n > 0 && !resident) ? 1 : 0;
    std::int32_t flags[2] = {device_rank, host_rank};
    s.comm.allreduce(std::span<std::int32_t>(flags, 2), ReduceOp::max);
    if (flags[0] == 1 && flags[1] == 0) {
      Model::DeviceArrays arrays;
      arrays.in = in.data;
      arrays.out = out.data;
      arrays.is_double = std::is_same_v<Real, double>;
      arrays.in_point_stride = in.point_stride;
      arrays.in_component_stride = in.component_stride;
      arrays.out_point_stride = out.point_stride;
      arrays.out_component_stride = out.component_stride;
      const double t0 = MPI_Wtime();
      s.model->predict_device(s.comm, current_plan(s, run), arrays, sample_arrays(s), run);
      s.sample_out.assign(s.sample_out_buffer.begin(), s.sample_out_buffer.end());
      s.last_seconds = MPI_Wtime() - t0;
      ++s.predictions;
      return;
    }
  }
  // Host arrays (device arrays staged through host memory, the strided span of each, one copy each way).
  std::vector<Real> in_stage, out_stage;
  const Real* in_data = in.data;
  Real* out_data = out.data;
  if (s.cuda_device >= 0) {  // every rank (the ranks' arrays may differ: some on the device, some not)
    collectively(s.comm, [&] {
      const std::int64_t in_extent = strided_extent(n, cin, in.point_stride, in.component_stride);
      const std::int64_t out_extent = strided_extent(n, cout, out.point_stride, out.component_stride);
      if ((in_on_device && in_extent < 0) || (out_on_device && out_extent < 0))
        throw Error(ErrorCode::invalid_argument, "predict: staged device arrays need non-negative strides");
      if (in_on_device) {
        in_stage.resize(static_cast<std::size_t>(in_extent));
        detail::copy_device_to_host(in_stage.data(), in.data, in_stage.size() * sizeof(Real));
        in_data = in_stage.data();
      }
      if (out_on_device) {  // elements between the strides are the caller's: copied back unchanged
        out_stage.resize(static_cast<std::size_t>(out_extent));
        detail::copy_device_to_host(out_stage.data(), out.data, out_stage.size() * sizeof(Real));
        out_data = out_stage.data();
      }
    });
  }
  // One conversion per direction: Model::predict reads float rows and writes Real rows (point-major, row
  // stride >= the channels) into and out of its working layout itself, so such arrays go straight
  // through; double inputs and other strides are gathered into float / Real rows first. (Model::predict
  // reads every input before it writes an output, so in and out may even be the same memory.)
  const auto are_rows = [](std::int64_t point_stride, std::int64_t component_stride, int channels) {
    return component_stride == 1 && point_stride >= channels;
  };
  const bool in_direct = std::is_same_v<Real, float> && are_rows(in.point_stride, in.component_stride, cin);
  const bool out_direct = are_rows(out.point_stride, out.component_stride, cout);
  auto& out_buffer = [&]() -> auto& {
    if constexpr (std::is_same_v<Real, double>) return s.out_buffer64;
    else return s.out_buffer;
  }();
  collectively(s.comm, [&] {  // (an allocation failure on one rank fails the call on every rank)
    if (!in_direct) s.in_buffer.resize(static_cast<std::size_t>(n * cin));
    if (!out_direct) out_buffer.resize(static_cast<std::size_t>(n * cout));
  });
  const float* in_rows = nullptr;
  if constexpr (std::is_same_v<Real, float>) in_rows = in_direct ? in_data : nullptr;
  if (!in_direct) {
    for (std::int64_t i = 0; i < n; ++i)
      for (int c = 0; c < cin; ++c)
        s.in_buffer[static_cast<std::size_t>(i * cin + c)] = static_cast<float>(in_data[i * in.point_stride + c * in.component_stride]);
    in_rows = s.in_buffer.data();
  }
  Real* const out_rows = out_direct ? out_data : out_buffer.data();
  const index_t ld_in = in_direct ? std::max<index_t>(in.point_stride, 1) : std::max(cin, 1);
  const index_t ld_out = out_direct ? std::max<index_t>(out.point_stride, 1) : std::max(cout, 1);
  const double t0 = MPI_Wtime();
  s.model->predict(s.comm, current_plan(s, run), in_rows, ld_in, out_rows, ld_out, sample_arrays(s), run);
  s.sample_out.assign(s.sample_out_buffer.begin(), s.sample_out_buffer.end());
  s.last_seconds = MPI_Wtime() - t0;
  ++s.predictions;
  if (!out_direct)
    for (std::int64_t i = 0; i < n; ++i)
      for (int c = 0; c < cout; ++c)
        out_data[i * out.point_stride + c * out.component_stride] = out_buffer[static_cast<std::size_t>(i * cout + c)];
  if (s.cuda_device >= 0)  // every rank, as above
    collectively(s.comm, [&] {
      if (out_on_device) detail::copy_host_to_device(out.data, out_stage.data(), out_stage.size() * sizeof(Real));
    });
}

const char* version() noexcept { return SURROGATE_VERSION_STRING; }

template void Surrogate::set_points<float>(std::int64_t, int, Strided<const float>, const std::int64_t*, const std::int64_t*);
template void Surrogate::set_points<double>(std::int64_t, int, Strided<const double>, const std::int64_t*, const std::int64_t*);
template void Surrogate::predict<float>(Strided<const float>, Strided<float>);
template void Surrogate::set_sample_inputs<float>(std::int64_t, int, const float*);
template void Surrogate::set_sample_inputs<double>(std::int64_t, int, const double*);
template void Surrogate::predict<double>(Strided<const double>, Strided<double>);

}  // namespace surrogate
