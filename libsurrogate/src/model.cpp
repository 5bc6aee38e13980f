#include "surrogate/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <sstream>
#include <type_traits>

#include "device_support.hpp"
#include "thread_count.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/profile.hpp"
#if SURROGATE_HAVE_CUDA
#include "cuda_errors.hpp"
#include "device/caller_rows.hpp"
#endif

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kPlanPhase{"plan"};
const surrogate::PhaseName kForwardPhase{"forward"};
}  // namespace

namespace surrogate {

// ---------------------------------------------------------------------------------------------------
// SampleLayout

SampleLayout SampleLayout::build(const Comm& comm, index_t local_points, const std::int64_t* sample_ids) {
  SampleLayout layout;
  Status status;
  std::int64_t local_max_id = -1;
  if (local_points < 0) {
    status = {ErrorCode::invalid_argument, "negative number of local points (" + std::to_string(local_points) + ")"};
  } else if (sample_ids) {
    for (index_t i = 0; i < local_points; ++i) {
      if (sample_ids[i] < 0) {
        status = {ErrorCode::input, "sample index of local point " + std::to_string(i) + " is negative (" +
                                        std::to_string(sample_ids[i]) + ")"};
        break;
      }
      local_max_id = std::max(local_max_id, sample_ids[i]);
    }
  } else if (local_points > 0) {
    local_max_id = 0;
  }
  comm.agree_or_throw(status);

  layout.local_points_ = local_points;
  layout.global_points_ = comm.allreduce<std::int64_t>(local_points, ReduceOp::sum);
  if (layout.global_points_ == 0)
    throw Error(ErrorCode::input, "the point set is empty: no rank has any point");
  const std::int64_t max_id = comm.allreduce<std::int64_t>(local_max_id, ReduceOp::max);
  if (max_id >= layout.global_points_)
    throw Error(ErrorCode::input, "sample indices must run from 0 to B-1 without gaps, but index " +
                                      std::to_string(max_id) + " appears among only " +
                                      std::to_string(layout.global_points_) + " points");
  const index_t samples = max_id + 1;
  std::vector<std::int64_t> counts(static_cast<std::size_t>(samples), 0);
  if (sample_ids)
    for (index_t i = 0; i < local_points; ++i) ++counts[static_cast<std::size_t>(sample_ids[i])];
  else if (samples > 0)
    counts[0] = local_points;
  std::vector<std::int64_t> local_counts = counts;
  comm.allreduce(std::span<std::int64_t>(counts), ReduceOp::sum);
  for (index_t s = 0; s < samples; ++s)
    if (counts[static_cast<std::size_t>(s)] == 0)
      throw Error(ErrorCode::input, "sample " + std::to_string(s) + " has no points (sample indices must run from 0 to " +
                                        std::to_string(samples - 1) + " without gaps)");
  layout.sample_sizes_.assign(counts.begin(), counts.end());

  // Group the local rows by sample (stable), keeping the caller's order when it is already grouped.
  const bool grouped = !sample_ids || std::is_sorted(sample_ids, sample_ids + local_points);
  if (!grouped) {
    std::vector<index_t> start(static_cast<std::size_t>(samples) + 1, 0);
    for (index_t s = 0; s < samples; ++s) start[s + 1] = start[s] + local_counts[static_cast<std::size_t>(s)];
    layout.order_.resize(static_cast<std::size_t>(local_points));
    std::vector<index_t> next(start.begin(), start.end() - 1);
    for (index_t i = 0; i < local_points; ++i) layout.order_[static_cast<std::size_t>(next[sample_ids[i]]++)] = i;
  }
  index_t row = 0;
  for (index_t s = 0; s < samples; ++s) {
    const index_t n = local_counts[static_cast<std::size_t>(s)];
    if (n > 0) layout.segments_.push_back({s, row, row + n});
    row += n;
  }
  return layout;
}

// ---------------------------------------------------------------------------------------------------
// Model

Model::Model(const ModelFile& file, int in_channels, int out_channels)
    : architecture_(file.architecture),
      in_channels_(in_channels),
      out_channels_(out_channels),
      normalization_(file.normalization),
      fields_(file.fields) {
  auto check_length = [&](std::size_t size, int expected, const std::string& what) {
    if (size != 0 && size != static_cast<std::size_t>(expected))
      throw Error(ErrorCode::format, "'" + file.path + "': " + what + " has " + std::to_string(size) +
                                         " entries but the model has " + std::to_string(expected) + " channels");
  };
  check_length(normalization_.input_mean.size(), in_channels, "/normalization/input_mean");
  check_length(normalization_.output_mean.size(), out_channels, "/normalization/output_mean");
  check_length(fields_.input_names.size(), in_channels, "/fields/input_names");
  check_length(fields_.input_units.size(), in_channels, "/fields/input_units");
  check_length(fields_.output_names.size(), out_channels, "/fields/output_names");
  check_length(fields_.output_units.size(), out_channels, "/fields/output_units");
}

std::string Model::input_name(int c) const {
  return c < static_cast<int>(fields_.input_names.size()) ? fields_.input_names[c] : "in" + std::to_string(c);
}

std::string Model::output_name(int c) const {
  return c < static_cast<int>(fields_.output_names.size()) ? fields_.output_names[c] : "out" + std::to_string(c);
}

// ---------------------------------------------------------------------------------------------------
// Plan

Plan::Plan(Basis basis)
    : model_(basis.model),
      layout_(std::move(basis.layout)),
      geometry_(basis.geometry),
      positions_(std::move(basis.positions)),
      ids_(std::move(basis.ids)),
      edges_(std::move(basis.edges)),
      profile_(std::make_unique<Profile>()) {
  // The geometry points into this plan's own copies.
  geometry_.positions = positions_.empty() ? nullptr : positions_.data();
  geometry_.global_ids = ids_.empty() ? nullptr : ids_.data();
  geometry_.edge_index = edges_.empty() ? nullptr : edges_.data();
}

void Plan::rebind(const Comm&) {}

namespace {
/// Checks the geometry of a model that needs `dim` coordinates per point (local part; the caller agrees).
void check_geometry(const std::string& architecture, int dim, const PointGeometry& g, index_t n, index_t global_n) {
  if (n > 0 && !g.positions)
    throw Error(ErrorCode::input, "model architecture '" + architecture + "' needs the positions of the points (" +
                                      std::to_string(dim) + " coordinates per point) and none were given");
  if (g.positions && g.ld_positions < dim)
    throw Error(ErrorCode::invalid_argument, "positions: row stride " + std::to_string(g.ld_positions) +
                                                 " is smaller than the model's " + std::to_string(dim) + " coordinates");
  index_t bad = 0;
  for (index_t i = 0; g.positions && i < n; ++i)
    for (int c = 0; c < dim; ++c) bad += !std::isfinite(g.positions[i * g.ld_positions + c]);
  if (bad > 0)
    throw Error(ErrorCode::input, "positions: " + std::to_string(bad) + " NaN/Inf coordinate(s) among " +
                                      std::to_string(n) + " local points");
  for (index_t i = 0; g.global_ids && i < n; ++i)
    if (g.global_ids[i] < 0 || g.global_ids[i] >= global_n)
      throw Error(ErrorCode::input, "global id " + std::to_string(g.global_ids[i]) + " of local point " + std::to_string(i) +
                                        " is outside 0.." + std::to_string(global_n - 1));
  if (g.num_edges < 0 || (g.num_edges > 0 && !g.edge_index))
    throw Error(ErrorCode::invalid_argument, "edge_index: " + std::to_string(g.num_edges) +
                                                 " edges with a null array (or a negative count)");
  for (index_t e = 0; e < 2 * g.num_edges; ++e)
    if (g.edge_index[e] < 0 || g.edge_index[e] >= global_n)
      throw Error(ErrorCode::input, std::string("edge_index: ") + (e < g.num_edges ? "source" : "receiver") + " of edge " +
                                        std::to_string(e % g.num_edges) + " is " + std::to_string(g.edge_index[e]) +
                                        ", outside the global point ids 0.." + std::to_string(global_n - 1));
}
}  // namespace

std::unique_ptr<Plan> Model::plan(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry,
                                  const RunOptions& options) {
  const index_t n = layout.local_points();
  const int pdim = position_dim();
  Plan::Basis basis;
  basis.model = this;
  basis.layout = layout;
  if (pdim > 0) {
    collectively(comm, [&] { check_geometry(architecture_, pdim, geometry, n, layout.global_points()); });
    // Global ids: given on every rank with points, or nowhere (the rank-major default).
    std::int64_t flags[2] = {n > 0 && geometry.global_ids ? 1 : 0, n > 0 && !geometry.global_ids ? 1 : 0};
    comm.allreduce(std::span<std::int64_t>(flags, 2), ReduceOp::max);
    if (flags[0] && flags[1])
      throw Error(ErrorCode::invalid_argument, "global ids were given on some ranks but not on others");
    std::int64_t first_id = 0;
    if (!flags[0]) {
      std::vector<std::int64_t> counts(static_cast<std::size_t>(comm.size()));
      const std::int64_t mine = n;
      comm.allgather(&mine, sizeof mine, counts.data());
      for (int r = 0; r < comm.rank(); ++r) first_id += counts[static_cast<std::size_t>(r)];
    }
    const auto& order = layout.order();
    basis.positions.resize(static_cast<std::size_t>(std::max<index_t>(n, 1) * pdim));
    basis.ids.resize(static_cast<std::size_t>(std::max<index_t>(n, 1)));
    for (index_t row = 0; row < n; ++row) {
      const index_t i = order.empty() ? row : order[static_cast<std::size_t>(row)];
      for (int c = 0; c < pdim; ++c)
        basis.positions[static_cast<std::size_t>(row * pdim + c)] = geometry.positions[i * geometry.ld_positions + c];
      basis.ids[static_cast<std::size_t>(row)] = geometry.global_ids ? geometry.global_ids[i] : first_id + i;
    }
    basis.edges.assign(geometry.edge_index, geometry.edge_index ? geometry.edge_index + 2 * geometry.num_edges
                                                                : geometry.edge_index);
    basis.geometry.ld_positions = pdim;
    basis.geometry.num_edges = geometry.num_edges;
  }
  // The build's phases, kept by the plan with those of its forwards.
  auto profile = std::make_unique<Profile>();
  std::unique_ptr<Plan> built;
  {
    const ProfileScope scope(profile.get());
    const ScopedPhase phase(kPlanPhase);
    const detail::ThreadCount threads(options.threads);  // the plan's OpenMP regions (ball trees, hierarchies)
    built = build_plan(comm, std::move(basis), options);
  }
  built->profile_ = std::move(profile);
  return built;
}

std::unique_ptr<Plan> Model::build_plan(const Comm&, Plan::Basis basis, const RunOptions&) {
  return std::make_unique<Plan>(std::move(basis));
}

void Model::predict(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                    index_t ld_out, const RunOptions& options) {
  predict(comm, layout, PointGeometry{}, in, ld_in, out, ld_out, options);
}

void Model::predict(const Comm& comm, const SampleLayout& layout, const PointGeometry& geometry, const float* in,
                    index_t ld_in, float* out, index_t ld_out, const RunOptions& options) {
  const std::unique_ptr<Plan> p = plan(comm, layout, geometry, options);
  predict(comm, *p, in, ld_in, out, ld_out, options);
}

void Model::predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
                    const RunOptions& options) {
  predict(comm, plan, in, ld_in, out, ld_out, SampleArrays{}, options);
}

namespace {

/// 64-bit FNV-1a of the bytes of B x n floats (row stride ld): equal arrays, equal digests.
std::uint64_t digest_rows(const float* v, index_t rows, int n, index_t ld) {
  std::uint64_t h = 14695981039346656037ull;
  for (index_t r = 0; r < rows; ++r)
    for (int c = 0; c < n; ++c) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, v + r * ld + c, sizeof bits);
      for (int b = 0; b < 4; ++b) h = (h ^ ((bits >> (8 * b)) & 0xffu)) * 1099511628211ull;
    }
  return h;
}

/// A non-finite error names at most this many channels, then counts the rest (a classifier has hundreds).
constexpr int kNamedChannels = 8;

}  // namespace

void Model::predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
                    const SampleArrays& samples, const RunOptions& options) {
  predict_rows(comm, plan, in, ld_in, out, ld_out, samples, options);
}

void Model::predict(const Comm& comm, Plan& plan, const float* in, index_t ld_in, double* out, index_t ld_out,
                    const SampleArrays& samples, const RunOptions& options) {
  predict_rows(comm, plan, in, ld_in, out, ld_out, samples, options);
}

template <class Real>
void Model::predict_rows(const Comm& comm, Plan& plan, const float* in, index_t ld_in, Real* out, index_t ld_out,
                         const SampleArrays& samples, const RunOptions& options) {
  const SampleLayout& layout = plan.layout();
  const index_t B = layout.num_samples();
  const index_t n = layout.local_points();
  const index_t ld_work_in = kernels::round_up(in_channels_, kernels::kPad);
  const index_t ld_work_out = kernels::round_up(out_channels_, kernels::kPad);
  // fp64 into double outputs: the family writes double rows (Io::out64), which are kept to the end.
  const bool wide_forward = std::is_same_v<Real, double> && options.precision == Precision::fp64;
  Status status;
  try {
    if (&plan.model() != this)
      throw Error(ErrorCode::invalid_argument, "predict: the plan was built by another model (architecture '" +
                                                   plan.model().architecture() + "')");
    if (n > 0 && ((!in && in_channels_ > 0) || (!out && out_channels_ > 0)))
      throw Error(ErrorCode::invalid_argument, "null input or output array");
    check_sample_arrays(B, samples, "predict");
    check_precision(options);
    if (ld_in < in_channels_ || ld_out < out_channels_)
      throw Error(ErrorCode::invalid_argument, "row stride smaller than the channel count (input " +
                                                   std::to_string(ld_in) + " < " + std::to_string(in_channels_) +
                                                   " or output " + std::to_string(ld_out) + " < " +
                                                   std::to_string(out_channels_) + ")");
    input_buffer_.assign(static_cast<std::size_t>(std::max<index_t>(n, 1) * ld_work_in), 0.0f);
    output_buffer_.assign(static_cast<std::size_t>(std::max<index_t>(n, 1) * ld_work_out), 0.0f);
    if (wide_forward)
      output_buffer64_.assign(static_cast<std::size_t>(std::max<index_t>(n, 1) * out_channels_), 0.0);
  } catch (...) {
    status = Status::from_current_exception();
  }
  comm.agree_or_throw(status);
  agree_sample_inputs(comm, B, samples, "predict");
  {
    std::vector<std::uint64_t> bad(static_cast<std::size_t>(in_channels_), 0);
    for (index_t i = 0; i < n; ++i)
      for (int c = 0; c < in_channels_; ++c)
        if (!std::isfinite(in[i * ld_in + c])) ++bad[static_cast<std::size_t>(c)];
    throw_if_non_finite(comm, bad, false);
  }

  // Working order (grouped by sample) and normalisation.
  const auto& order = layout.order();
  for (index_t row = 0; row < n; ++row) {
    if (in_channels_ == 0) break;
    const float* src = in + (order.empty() ? row : order[static_cast<std::size_t>(row)]) * ld_in;
    float* dst = input_buffer_.data() + row * ld_work_in;
    for (int c = 0; c < in_channels_; ++c) {
      double v = src[c];
      if (normalization_.has_input())
        v = (v - normalization_.input_mean[static_cast<std::size_t>(c)]) / normalization_.input_std[static_cast<std::size_t>(c)];
      dst[c] = static_cast<float>(v);
    }
  }
  plan.rebind(comm);
  const ProfileScope scope(&plan.profile());
  Io io;
  io.in = input_buffer_.data();
  io.ld_in = ld_work_in;
  io.out = output_buffer_.data();
  io.ld_out = ld_work_out;
  if (wide_forward) {
    io.out64 = output_buffer64_.data();
    io.ld_out64 = out_channels_;
  }
  io.sample_in = samples.in;
  io.ld_sample_in = samples.ld_in;
  io.sample_out = samples.out;
  io.ld_sample_out = samples.ld_out;
  {
    const ScopedPhase phase(kForwardPhase);
    forward(comm, plan, io, options);
  }
  for (index_t row = 0; row < n; ++row) {
    const float* src = output_buffer_.data() + row * ld_work_out;
    const double* src64 = wide_forward ? output_buffer64_.data() + row * out_channels_ : nullptr;
    Real* dst = out + (order.empty() ? row : order[static_cast<std::size_t>(row)]) * ld_out;
    for (int c = 0; c < out_channels_; ++c) {
      double v = src64 ? src64[c] : static_cast<double>(src[c]);
      if (normalization_.has_output())
        v = v * normalization_.output_std[static_cast<std::size_t>(c)] + normalization_.output_mean[static_cast<std::size_t>(c)];
      dst[c] = static_cast<Real>(v);
    }
  }
  if (!options.allow_non_finite_output) {
    std::vector<std::uint64_t> bad(static_cast<std::size_t>(out_channels_), 0);
    for (index_t i = 0; i < n; ++i)
      for (int c = 0; c < out_channels_; ++c)
        if (!std::isfinite(out[i * ld_out + c])) ++bad[static_cast<std::size_t>(c)];
    throw_if_non_finite(comm, bad, true);
    check_sample_outputs(comm, B, samples);
  }
}

void Model::check_sample_arrays(index_t B, const SampleArrays& samples, const char* call) const {
  const int s_in = sample_in_channels(), s_out = sample_out_channels();
  const std::string name(call);
  if (s_in > 0 && !samples.in)
    throw Error(ErrorCode::input, name + ": the " + architecture_ + " model needs " + std::to_string(s_in) +
                                      " per-sample input value(s) for each of the " + std::to_string(B) +
                                      " samples; none were given");
  if (s_in > 0 && samples.ld_in < s_in)
    throw Error(ErrorCode::invalid_argument, name + ": per-sample input row stride " + std::to_string(samples.ld_in) +
                                                 " < " + std::to_string(s_in));
  if (s_out > 0 && (!samples.out || samples.ld_out < s_out))
    throw Error(ErrorCode::invalid_argument, name + ": the " + architecture_ + " model outputs " + std::to_string(s_out) +
                                                 " value(s) per sample: give a per-sample output array");
  for (index_t b = 0; b < B && s_in > 0; ++b)
    for (int c = 0; c < s_in; ++c)
      if (!std::isfinite(samples.in[b * samples.ld_in + c]))
        throw Error(ErrorCode::input, name + ": per-sample input of sample " + std::to_string(b) + ", value " +
                                          std::to_string(c) + " is NaN/Inf");
}

void Model::agree_sample_inputs(const Comm& comm, index_t B, const SampleArrays& samples, const char* call) const {
  const int s_in = sample_in_channels();
  if (s_in == 0) return;  // the model's: the same on every rank
  const auto h = static_cast<std::int64_t>(digest_rows(samples.in, B, s_in, samples.ld_in));
  collectively(comm, [&] {
    if (comm.allreduce<std::int64_t>(h, ReduceOp::min) != comm.allreduce<std::int64_t>(h, ReduceOp::max))
      throw Error(ErrorCode::input, std::string(call) + ": the per-sample inputs differ between ranks (they must be "
                                    "the same B x " + std::to_string(s_in) + " values on every rank)");
  });
}

void Model::check_sample_outputs(const Comm& comm, index_t B, const SampleArrays& samples) const {
  // Per-sample outputs (a classification's logits, a regression per sample) are checked as the per-point
  // ones; every rank holds all B rows, so the counts are agreed by maximum, not summed. s_out is the
  // model's: the same on every rank, and most models have none (no collective then).
  const int s_out = sample_out_channels();
  if (s_out == 0) return;
  std::vector<std::uint64_t> bad_samples(static_cast<std::size_t>(s_out), 0);
  for (index_t b = 0; b < B; ++b)
    for (int c = 0; c < s_out; ++c)
      if (!std::isfinite(samples.out[b * samples.ld_out + c])) ++bad_samples[static_cast<std::size_t>(c)];
  std::uint64_t total = 0;
  for (const std::uint64_t k : bad_samples) total += k;
  if (comm.allreduce<std::int64_t>(static_cast<std::int64_t>(total), ReduceOp::max) > 0) {
    std::ostringstream message;
    int named = 0, more = 0;
    for (int c = 0; c < s_out; ++c) {
      if (bad_samples[static_cast<std::size_t>(c)] == 0) continue;
      if (++named > kNamedChannels) {
        ++more;
        continue;
      }
      message << (message.tellp() > 0 ? "; " : "") << "per-sample output value " << c << " is NaN/Inf in "
              << bad_samples[static_cast<std::size_t>(c)] << " of the " << B << " sample(s)";
    }
    if (more > 0) message << "; and " << more << " more value(s)";
    if (message.tellp() == 0) message << "per-sample outputs are NaN/Inf on another rank";
    throw Error(ErrorCode::input, "the model produced non-finite predictions: " + message.str() +
                                      ". Likely causes: inputs far outside the training range or overflowing "
                                      "logits; the option allow_non_finite_output (--allow-non-finite on the "
                                      "command line) hands them to the caller instead");
  }
}

void Model::check_precision(const RunOptions& options) const {
  if (options.precision == Precision::fp64) {
    if (!supports_fp64())
      throw Error(ErrorCode::unsupported, "precision 'fp64': the " + architecture_ +
                                              " model computes in fp32 only (fp64 is offered by the hept family)");
    return;
  }
  if (options.cuda_device >= 0 || options.precision == Precision::fp32) return;
  if (options.precision == Precision::tf32)
    throw Error(ErrorCode::unsupported, "precision 'tf32' needs a CUDA device; the CPU computes in fp32, bf16 (CPUs "
                                        "with AVX512-BF16) or fp64 where the model offers them");
  if (!supports_cpu_bf16())
    throw Error(ErrorCode::unsupported, "precision 'bf16' on the CPU: the " + architecture_ +
                                            " model computes in fp32 on the CPU (bf16 on the CPU is offered by the "
                                            "flare family; on a CUDA device see share/docs/cuda.md)");
  try {
    (void)kernels::cpu_bf16();
  } catch (const std::runtime_error& e) {
    throw Error(ErrorCode::unsupported, std::string("precision 'bf16': ") + e.what());
  }
}

Precision parse_precision(const std::string& name) {
  if (name == "fp32") return Precision::fp32;
  if (name == "fp64") return Precision::fp64;
  if (name == "tf32") return Precision::tf32;
  if (name == "bf16") return Precision::bf16;
  throw Error(ErrorCode::invalid_argument, "unknown precision '" + name + "' (expected fp32, tf32, bf16 or fp64)");
}

const char* precision_name(Precision p) noexcept {
  switch (p) {
    case Precision::tf32: return "tf32";
    case Precision::bf16: return "bf16";
    case Precision::fp64: return "fp64";
    case Precision::fp32: break;
  }
  return "fp32";
}

void Model::throw_if_non_finite(const Comm& comm, const std::vector<std::uint64_t>& bad, bool outputs) const {
  const int channels = static_cast<int>(bad.size());
  const int ranks = comm.size();
  std::vector<std::uint64_t> all(static_cast<std::size_t>(channels) * static_cast<std::size_t>(ranks), 0);
  if (channels == 0) return;
  comm.allgather(bad.data(), bad.size() * sizeof(std::uint64_t), all.data());
  std::ostringstream message;
  int named = 0, more = 0;
  for (int c = 0; c < channels; ++c) {
    std::uint64_t total = 0;
    std::ostringstream where;
    int listed = 0;
    for (int r = 0; r < ranks; ++r) {
      const std::uint64_t k = all[static_cast<std::size_t>(r) * static_cast<std::size_t>(channels) + static_cast<std::size_t>(c)];
      if (k == 0) continue;
      total += k;
      if (listed++ < 8) where << (listed > 1 ? ", " : "") << "rank " << r << ": " << k;
    }
    if (total == 0) continue;
    if (listed > 8) where << ", ... (" << listed << " ranks)";
    if (++named > kNamedChannels) {
      ++more;
      continue;
    }
    message << (message.tellp() > 0 ? "; " : "") << (outputs ? "output field '" + output_name(c) : "input field '" + input_name(c))
            << "' (channel " << c << ") has " << total << " NaN/Inf value(s) (" << where.str() << ")";
  }
  if (message.tellp() == 0) return;
  if (more > 0) message << "; and " << more << " more channel(s)";
  if (outputs)
    throw Error(ErrorCode::input, "the model produced non-finite predictions: " + message.str() +
                                      ". Likely causes: inputs far outside the training range, an extreme "
                                      "normalisation or attention scale, or overflowing logits; the option "
                                      "allow_non_finite_output (--allow-non-finite on the command line) hands "
                                      "them to the caller instead");
  throw Error(ErrorCode::input, message.str());
}

void Model::predict_device(const Comm& comm, const SampleLayout& layout, const DeviceArrays& arrays,
                           const RunOptions& options) {
  const std::unique_ptr<Plan> p = plan(comm, layout, PointGeometry{}, options);
  predict_device(comm, *p, arrays, SampleArrays{}, options);
}

void Model::predict_device(const Comm& comm, Plan& plan, const DeviceArrays& arrays, const RunOptions& options) {
  predict_device(comm, plan, arrays, SampleArrays{}, options);
}

void Model::predict_device(const Comm& comm, Plan& plan, const DeviceArrays& arrays, const SampleArrays& samples,
                           const RunOptions& options) {
  const index_t n = plan.layout().local_points();
  collectively(comm, [&] {
    if (&plan.model() != this)
      throw Error(ErrorCode::invalid_argument, "predict_device: the plan was built by another model (architecture '" +
                                                   plan.model().architecture() + "')");
    if (options.cuda_device < 0)
      throw Error(ErrorCode::invalid_argument, "predict_device: no CUDA device selected (RunOptions::cuda_device)");
    if (n > 0 && ((!arrays.in && in_channels_ > 0) || (!arrays.out && out_channels_ > 0)))
      throw Error(ErrorCode::invalid_argument, "null input or output array");
    check_sample_arrays(plan.layout().num_samples(), samples, "predict_device");
    check_precision(options);
  });
  agree_sample_inputs(comm, plan.layout().num_samples(), samples, "predict_device");
  plan.rebind(comm);
  const ProfileScope scope(&plan.profile());
  if (device_input() != DeviceInput::caller_arrays) return predict_device_gathered(comm, plan, arrays, samples, options);
  Io io;
  io.device = &arrays;
  io.sample_in = samples.in;
  io.ld_sample_in = samples.ld_in;
  io.sample_out = samples.out;
  io.ld_sample_out = samples.ld_out;
  // The same agreed summary as predict(): every rank's counts, per channel.
  io.check_inputs = [&](const std::vector<std::uint64_t>& bad) { throw_if_non_finite(comm, bad, false); };
  if (!options.allow_non_finite_output)
    io.check_outputs = [&](const std::vector<std::uint64_t>& bad) { throw_if_non_finite(comm, bad, true); };
  {
    const ScopedPhase phase(kForwardPhase);
    forward(comm, plan, io, options);
  }
  if (!options.allow_non_finite_output) check_sample_outputs(comm, plan.layout().num_samples(), samples);
}

void* Model::device_stream(const Comm& comm, const RunOptions&) {
  collectively(comm, [&] {
    throw Error(ErrorCode::internal, architecture_ + ": device rows without the family's device stream");
  });
  return nullptr;
}

void Model::refuse_input(float value, index_t row) const {
  throw Error(ErrorCode::internal, architecture_ + ": input row " + std::to_string(row) + " holds " +
                                       std::to_string(value) + ", outside the model's range");
}

#if SURROGATE_HAVE_CUDA
/// predict_device's rows on one device: a stream, the normalisation there and the working rows gathered
/// from (scattered to) the caller's arrays.
struct Model::DeviceStaging {
  int device = -1;
  kernels::cuda::Stream stream;
  std::unique_ptr<device::CallerRows> rows;
  kernels::cuda::DeviceBuffer<float> in, out;
};

void Model::predict_device_gathered(const Comm& comm, Plan& plan, const DeviceArrays& arrays,
                                    const SampleArrays& samples, const RunOptions& options) {
  namespace cu = kernels::cuda;
  const index_t n = plan.layout().local_points();
  const int device = options.cuda_device;
  const index_t ld_in = kernels::round_up(in_channels_, kernels::kPad);
  const index_t ld_out = kernels::round_up(out_channels_, kernels::kPad);
  const auto in_values = static_cast<std::size_t>(std::max<index_t>(n, 1) * ld_in);
  const auto out_values = static_cast<std::size_t>(std::max<index_t>(n, 1) * ld_out);
  // A step on the device; a CUDA failure becomes the library's Error, agreed by `collectively`.
  const auto on_device = [&](auto&& step) {
    try {
      const cu::DeviceGuard guard(device);
      step();
    } catch (...) {
      detail::raise_current_cuda_error(architecture_.c_str(), device);
    }
  };
  const bool device_rows = device_input() == DeviceInput::device_rows;
  // The rows are gathered and scattered on the stream their forward uses (device rows), else on our own.
  void* const family_stream = device_rows ? device_stream(comm, options) : nullptr;
  const auto stream = [&] {
    return family_stream ? static_cast<cudaStream_t>(family_stream) : staging_->stream.get();
  };
  const InputRange range = checked_input_range();
  const device::ValueRange value_range{range.channel, range.lo, range.hi};
  // The caller's arrays gathered and normalised in the working order on the device, the rows predict()
  // would have made (padding columns zero), then to the host unless the forward reads device rows.
  collectively(comm, [&] {
    on_device([&] {
      if (!staging_ || staging_->device != device) {
        staging_.reset();
        auto fresh = std::make_unique<DeviceStaging>();
        fresh->device = device;
        fresh->stream = cu::Stream(device);
        fresh->rows = std::make_unique<device::CallerRows>(normalization_, in_channels_, out_channels_, device,
                                                           fresh->stream.get());
        staging_ = std::move(fresh);
      }
      const cudaStream_t s = stream();
      auto& order = plan.device_order();
      if (!order || order->device() != device)
        order = std::make_shared<device::CallerOrder>(plan.layout().order(), device, s);
      staging_->in.resize(in_values, device);
      staging_->out.resize(out_values, device);
      cu::zero(staging_->in.data(), in_values * sizeof(float), s);
      staging_->rows->gather(arrays, order->data(), n, staging_->in.data(), ld_in, s,
                             range.channel >= 0 ? &value_range : nullptr);
      if (device_rows) {
        cu::zero(staging_->out.data(), out_values * sizeof(float), s);
      } else {
        input_buffer_.resize(in_values);
        output_buffer_.assign(out_values, 0.0f);
        cu::copy_to_host(input_buffer_.data(), staging_->in.data(), in_values * sizeof(float), s);
      }
      cu::synchronize(s);
    });
  });
  throw_if_non_finite(comm, staging_->rows->input_counts(), false);
  collectively(comm, [&] {
    const index_t row = range.channel >= 0 ? staging_->rows->first_outside() : -1;
    if (row < 0) return;
    float value = 0;
    on_device([&] {
      const cudaStream_t s = stream();
      cu::copy_to_host(&value, staging_->in.data() + row * ld_in + range.channel, sizeof(float), s);
      cu::synchronize(s);
    });
    refuse_input(value, row);
  });
  Io io;
  io.in = device_rows ? staging_->in.data() : input_buffer_.data();
  io.ld_in = ld_in;
  io.out = device_rows ? staging_->out.data() : output_buffer_.data();
  io.ld_out = ld_out;
  io.on_device = device_rows;
  io.sample_in = samples.in;
  io.ld_sample_in = samples.ld_in;
  io.sample_out = samples.out;
  io.ld_sample_out = samples.ld_out;
  {
    const ScopedPhase phase(kForwardPhase);
    forward(comm, plan, io, options);
  }
  // The working rows' results (back on the device), de-normalised into the caller's arrays.
  collectively(comm, [&] {
    on_device([&] {
      const cudaStream_t s = stream();
      if (!device_rows) cu::copy_to_device(staging_->out.data(), output_buffer_.data(), out_values * sizeof(float), s);
      staging_->rows->scatter(arrays, plan.device_order()->data(), n, staging_->out.data(), ld_out,
                              !options.allow_non_finite_output, s);
      cu::synchronize(s);  // the caller's arrays are written on return
    });
  });
  if (options.allow_non_finite_output) return;
  throw_if_non_finite(comm, staging_->rows->output_counts(), true);
  check_sample_outputs(comm, plan.layout().num_samples(), samples);
}
#else
struct Model::DeviceStaging {};

void Model::predict_device_gathered(const Comm& comm, Plan&, const DeviceArrays&, const SampleArrays&,
                                    const RunOptions& options) {
  collectively(comm, [&] { detail::refuse_without_cuda_backend(architecture_, options.cuda_device); });
}
#endif

Model::~Model() = default;

}  // namespace surrogate
