// The `surrogate` command-line tool:
//   surrogate info MODEL.h5
//   mpirun -np P surrogate predict --model MODEL.h5 --input POINTS.h5 --output PREDICTION.h5
//   surrogate selftest [--np N]                       (selftest.cpp)
//   surrogate --version
// Every error is reported once (by rank 0) and makes every rank exit with status 1 (2 for a mistake on the
// command line: share/docs/cli.md, "Errors").
#include <mpi.h>
#include <omp.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "device_select.hpp"
#include "output_file.hpp"
#include "run_report.hpp"
#include "selftest.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/point_file.hpp"
#include "surrogate/sphere/model_grid.hpp"
#include "surrogate/version.hpp"
#include "sphere_coords.hpp"

namespace {

using surrogate::Error;
using surrogate::ErrorCode;

constexpr const char* kUsage = R"(usage:
  surrogate info MODEL.h5
      Check a model file and print its architecture, configuration, parameter count, fields,
      normalisation and provenance.
  surrogate predict --model MODEL.h5 --input POINTS.h5 --output PREDICTION.h5
                    [--reproducible] [--threads N] [--device cpu|cuda|cuda:N|cuda-emulated]
                    [--precision fp32|tf32|bf16|fp64] [--allow-non-finite] [--timing] [--quiet]
      Run the model on every point of POINTS.h5 (datasets /coords N x d and /features N x c_in,
      at least one of them; optional /batch_idx N int64 sample indices, sample-major) and write
      /prediction (N x c_out, float32, or float64 with --precision fp64, input order). Run under mpirun:
      each rank reads its own slab of rows. Every rank must be given the same options (--threads aside).
      Models that need positions (erwin, bsa, hept) take /coords as the positions (hept: eta and phi
      first, each /batch_idx sample one graph); Erwin's message passing uses the optional /edge_index (int64 2 x E: row 0 sources j, row 1 receivers i, rows of the
      file), else the graph rule of the model file.
      Models with per-sample inputs (sequoia's segmentation model: its class vector) read them from
      /sample_features (B x n, one row per sample); models whose output is one row per sample
      (sequoia's classification model) write /sample_prediction (B x c_out) instead of /prediction.
      Spherical models (sphere_transformer, s2_attention, s2_neighborhood_attention) read /features
      rows as the grid, row-major (latitude 0 = north, then longitude), nlat*nlon rows per sample;
      /coords is optional for them and, if present, must hold the grid points' unit vectors.
      --reproducible  bitwise-identical results for any number of ranks and threads
      --threads N     OpenMP threads per rank (default: OMP_NUM_THREADS)
      --device D      cpu (default), cuda (each rank the GPU of its node-local rank modulo the visible
                      GPUs), cuda:N (device N of the visible ones), or cuda-emulated (the CUDA
                      kernels on the CPU: the host backend, for testing without a GPU); CUDA builds only
      --precision P   arithmetic of the MLPs: fp32 (default), tf32 (tensor cores, CUDA devices only), bf16
                      (tensor cores, or on CPUs with AMX-BF16 / AVX512-BF16 for flare models), fp64 (the
                      whole forward in double precision on the CPU; models that offer it: hept)
      --allow-non-finite  write NaN/Inf predictions instead of failing (by default they are an error
                      naming the output channels, ranks and counts)
      --timing        per-rank times (min and max over the ranks) of building the plan and of the forward,
                      and the bytes the plan's exchanges moved between ranks
  surrogate selftest [--np N] [--data DIR] [--threads N]
      Run the shipped models on the shipped inputs (share/surrogate/selftest beside the installation, or
      DIR) and compare with the official codes' outputs: PASS or FAIL per case and a summary. Exit status
      0 when every case passes, 1 when one fails, 2 for a mistake on the command line, 3 when the test
      cannot run (no data, a malformed manifest, mpiexec did not start). --np N runs the cases on N MPI
      ranks: started by hand it launches `mpiexec -n N` itself (SURROGATE_MPIEXEC overrides the launcher);
      under mpirun it runs on the ranks it was given, which must be N.
  surrogate --version
      Print "surrogate MAJOR.MINOR.PATCH" (also: surrogate version).
)";

/// ", bf16 Linear layers on amx" / ", fp64" for the run line; "" for fp32.
std::string cpu_precision_note(surrogate::Precision precision) {
  if (precision == surrogate::Precision::fp32) return "";
  if (precision != surrogate::Precision::bf16) return std::string(", ") + surrogate::precision_name(precision);
  const surrogate::kernels::LinearEngine engine = surrogate::kernels::cpu_bf16().linear_engine;
  return std::string(", bf16 Linear layers on ") + surrogate::kernels::to_string(engine);
}

std::string with_commas(long long value) {
  const std::string digits = std::to_string(value < 0 ? -value : value);
  std::string text;
  if (value < 0) text.push_back('-');
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) text.push_back(',');
    text.push_back(digits[i]);
  }
  return text;
}

std::string fixed(double v, int digits) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", digits, v);
  return text;
}

std::string general(double v) {
  char text[64];
  std::snprintf(text, sizeof text, "%.6g", v);
  return text;
}

std::string list(const std::vector<std::string>& values) {
  std::string text;
  for (const auto& v : values) text += (text.empty() ? "" : ", ") + (v.empty() ? std::string("-") : v);
  return text;
}

std::string numbers(const std::vector<double>& values) {
  std::string text;
  for (double v : values) text += (text.empty() ? "" : ", ") + general(v);
  return text;
}

// ---------------------------------------------------------------------------------------------------
int run_info(const std::vector<std::string>& args) {
  if (args.size() != 1) throw Error(ErrorCode::invalid_argument, "info expects exactly one model file");
  const surrogate::ModelFile file = surrogate::ModelFile::read(args[0]);
  const auto model = surrogate::make_model(file);
  std::cout << "model file    " << file.path << "\n"
            << "format        " << surrogate::kModelFormatName << " version " << file.format_version << "\n"
            << "architecture  " << file.architecture << "\n"
            << "source        " << file.source << "\n";
  const std::pair<const char*, const char*> provenance[] = {
      {"weights_variant", "weights       "}, {"checkpoint", "checkpoint    "}, {"exporter", "exporter      "}, {"created", "created       "}};
  for (const auto& [key, label] : provenance)
    if (file.root.has(key)) std::cout << label << surrogate::AttributeMap::to_text(file.root.values().at(key)) << "\n";
  std::cout << "parameters    " << with_commas(model->parameter_count()) << "\n"
            << "channels      " << model->in_channels() << " in, " << model->out_channels() << " out\n";
  if (model->sample_in_channels() > 0)
    std::cout << "sample inputs " << model->sample_in_channels() << " per sample (/sample_features of a point file)\n";
  std::cout << "output        "
            << (model->sample_out_channels() > 0
                    ? "one row per sample: " + std::to_string(model->sample_out_channels()) +
                          " values (/sample_prediction of the output file)"
                    : "one row per point: " + std::to_string(model->out_channels()) + " values (/prediction)")
            << "\n";
  if (model->needs_positions())
    std::cout << "positions     " << model->position_dim() << " coordinates per point (/coords of a point file)"
              << (model->needs_edges() ? "; edges must be given (/edge_index)" : "") << "\n";
  std::cout << "configuration\n";
  for (const auto& [name, value] : model->describe()) std::cout << "  " << name << ": " << value << "\n";
  const auto& f = file.fields;
  std::cout << "fields\n";
  std::vector<std::string> in_names, out_names;
  for (int c = 0; c < model->in_channels(); ++c) in_names.push_back(model->input_name(c));
  for (int c = 0; c < model->out_channels(); ++c) out_names.push_back(model->output_name(c));
  std::cout << "  inputs:  " << list(in_names) << (f.input_units.empty() ? "" : "  [" + list(f.input_units) + "]") << "\n"
            << "  outputs: " << list(out_names) << (f.output_units.empty() ? "" : "  [" + list(f.output_units) + "]")
            << (f.input_names.empty() && f.output_names.empty() ? "  (no /fields group: default names)" : "") << "\n";
  const auto& n = file.normalization;
  std::cout << "normalization\n";
  if (!n.has_input() && !n.has_output()) std::cout << "  none (the model sees the values as given)\n";
  if (n.has_input()) std::cout << "  input mean:  " << numbers(n.input_mean) << "\n  input std:   " << numbers(n.input_std) << "\n";
  if (n.has_output())
    std::cout << "  output mean: " << numbers(n.output_mean) << "\n  output std:  " << numbers(n.output_std) << "\n";
  return 0;
}

// ---------------------------------------------------------------------------------------------------
using surrogate::cli::UsageError;

struct PredictOptions {
  std::string model, input, output;
  surrogate::RunOptions run;
  std::string device = "cpu";
  bool quiet = false;
  bool timing = false;

  /// What every rank must be given alike (--threads may differ: it is the rank's own business).
  std::vector<surrogate::Comm::Setting> settings() const {
    return {{"--model", model},
            {"--input", input},
            {"--output", output},
            {"--device", device},
            {"--precision", surrogate::precision_name(run.precision)},
            {"--reproducible", run.reproducible ? "yes" : "no"},
            {"--allow-non-finite", run.allow_non_finite_output ? "yes" : "no"},
            {"--timing", timing ? "yes" : "no"},
            {"--quiet", quiet ? "yes" : "no"}};
  }
};

PredictOptions parse_predict(const std::vector<std::string>& args) {
  PredictOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= args.size()) throw Error(ErrorCode::invalid_argument, "option " + a + " needs a value");
      return args[++i];
    };
    if (a == "--model") o.model = value();
    else if (a == "--input") o.input = value();
    else if (a == "--output") o.output = value();
    else if (a == "--reproducible") o.run.reproducible = true;
    else if (a == "--device") o.device = value();
    else if (a == "--precision") o.run.precision = surrogate::parse_precision(value());
    else if (a == "--quiet") o.quiet = true;
    else if (a == "--allow-non-finite") o.run.allow_non_finite_output = true;
    else if (a == "--timing") o.timing = true;
    else if (a == "--threads") {
      const std::string v = value();
      char* end = nullptr;
      const long t = std::strtol(v.c_str(), &end, 10);
      if (!end || *end || t < 1 || t > 4096) throw Error(ErrorCode::invalid_argument, "--threads expects a positive integer, got '" + v + "'");
      o.run.threads = static_cast<int>(t);
    } else throw Error(ErrorCode::invalid_argument, "unknown option '" + a + "'");
  }
  if (o.model.empty() || o.input.empty() || o.output.empty())
    throw Error(ErrorCode::invalid_argument, "predict needs --model, --input and --output");
  return o;
}

/// Runs `step` (collective); an invalid_argument it agrees on is a usage error (exit status 2).
template <class F>
void as_usage(F&& step) {
  try {
    step();
  } catch (const Error& e) {
    if (e.code() == ErrorCode::invalid_argument) throw UsageError(e.what());
    throw;
  }
}

}  // namespace

int surrogate::cli::run_predict(const std::vector<std::string>& args) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  PredictOptions opt;
  // The command line, the same on every rank, and the output's place (rank 0 writes it), before anything
  // is read: an output that cannot be written, or that is the model or the points, fails at once.
  as_usage([&] {
    surrogate::collectively(comm, [&] { opt = parse_predict(args); });
    comm.agree_on_settings(opt.settings(), "surrogate predict");
    surrogate::collectively(comm, [&] {
      if (comm.rank() == 0) (void)surrogate::detail::check_output_place(opt.output, "--output", std::vector{opt.model, opt.input});
    });
  });
  // The device before anything is read: "cuda" asks the node (collective on every rank), a missing GPU
  // is the same error on every rank.
  as_usage([&] {
    surrogate::collectively(comm, [&] {
      opt.run.cuda_device = surrogate::detail::select_device(opt.device, comm);
      if (opt.run.cuda_device < 0 && opt.run.precision == surrogate::Precision::tf32)
        throw Error(ErrorCode::unsupported, "--precision tf32 needs a CUDA device (--device cuda); the CPU computes in "
                                            "fp32, bf16 or fp64 where the model and the CPU offer them");
    });
  });

  // The model file and the points, then the checks that need only the two files (a spherical model's grid
  // against the samples' sizes), before the model is built: building a large grid's tables takes minutes.
  const double t0 = MPI_Wtime();
  const surrogate::ModelFile file = surrogate::ModelFile::read(comm, opt.model);
  // A spherical model's grid from the attributes alone, before any input is read (it refuses a layer file
  // between two grids); checked against the points below.
  std::optional<surrogate::sphere::ModelGrid> grid;
  surrogate::collectively(comm, [&] { grid = surrogate::sphere::model_grid(file, /*with_colatitudes=*/false); });
  const double t_file = MPI_Wtime();
  surrogate::PointSlab slab = surrogate::read_point_file(comm, opt.input);
  const double t_points = MPI_Wtime();
  // The library's errors about the points name what it was given (sample ids, positions, edges, inputs):
  // here those come from the point file, which the message then names.
  const auto from_the_points = [&](const std::string& datasets, auto&& step) {
    try {
      return step();
    } catch (const Error& e) {
      if (e.code() != ErrorCode::input && e.code() != ErrorCode::invalid_argument) throw;
      throw Error(e.code(), "'" + opt.input + "' (" + datasets + "): " + e.what());
    }
  };
  const auto layout = from_the_points("/batch_idx", [&] {
    return surrogate::SampleLayout::build(comm, slab.count, slab.sample_ids.empty() ? nullptr : slab.sample_ids.data());
  });
  surrogate::cli::check_sphere_coordinates(comm, file, std::move(grid), slab, layout.sample_sizes(), opt.input);
  std::unique_ptr<surrogate::Model> model;
  surrogate::collectively(comm, [&] {
    model = surrogate::make_model(file);
    model->check_precision(opt.run);
  });
  // "load model" counts reading the file and building the model; "read points" the point file.
  const double t2 = MPI_Wtime();
  const double t1 = t2 - (t_points - t_file);

  // Features: /features, or the coordinates themselves when the file has none and the model takes d inputs.
  surrogate::collectively(comm, [&] {
    if (model->needs_positions() && !slab.has_coords)
      throw Error(ErrorCode::input, "'" + opt.input + "' has no /coords: the " + file.architecture + " model needs " +
                                        std::to_string(model->position_dim()) + " coordinates per point (its positions)");
    if (model->needs_positions() && slab.dim != model->position_dim())
      throw Error(ErrorCode::input, "'" + opt.input + "': /coords has " + std::to_string(slab.dim) + " columns but the " +
                                        file.architecture + " model needs " + std::to_string(model->position_dim()) +
                                        " coordinates per point (its positions)");
    if (model->needs_edges() && !slab.has_edges)
      throw Error(ErrorCode::input, "'" + opt.input + "' has no /edge_index and the model file names no graph rule: the " +
                                        file.architecture + " model passes messages along a graph, give its edges");
    if (slab.target_channels > 0 && slab.target_channels != model->out_channels())
      throw Error(ErrorCode::input, "'" + opt.input + "': /target has " + std::to_string(slab.target_channels) +
                                        " channels but the model predicts " + std::to_string(model->out_channels()));
    if (model->in_channels() == 0) {
      slab.channels = 0;  // the inputs are the positions only (ShapeNet-Car wrapper); /features is not read
    } else if (slab.has_features) {
      if (slab.channels != model->in_channels())
        throw Error(ErrorCode::input, "'" + opt.input + "': /features has " + std::to_string(slab.channels) +
                                          " channels but the model expects " + std::to_string(model->in_channels()));
    } else if (slab.has_coords && slab.dim == model->in_channels()) {
      slab.features = slab.coords;
      slab.channels = slab.dim;
    } else {
      throw Error(ErrorCode::input, "'" + opt.input + "' has no /features and its " + std::to_string(slab.dim) +
                                        " coordinates do not match the model's " + std::to_string(model->in_channels()) +
                                        " inputs");
    }
  });
  // Per-sample inputs (/sample_features, B x sample_in_channels) and outputs (/sample_prediction).
  const int sample_in = model->sample_in_channels(), sample_out = model->sample_out_channels();
  surrogate::collectively(comm, [&] {
    if (sample_in > 0 && !slab.has_sample_features)
      throw Error(ErrorCode::input, "'" + opt.input + "' has no /sample_features: the " + file.architecture + " model takes " +
                                        std::to_string(sample_in) + " values per sample (" +
                                        std::to_string(layout.num_samples()) + " samples)");
    if (sample_in > 0 && (slab.sample_rows != layout.num_samples() || slab.sample_channels != sample_in))
      throw Error(ErrorCode::input, "'" + opt.input + "': /sample_features has shape (" + std::to_string(slab.sample_rows) +
                                        ", " + std::to_string(slab.sample_channels) + "), the model needs (" +
                                        std::to_string(layout.num_samples()) + ", " + std::to_string(sample_in) + ")");
  });
  std::vector<float> sample_prediction(static_cast<std::size_t>(layout.num_samples() * sample_out));
  surrogate::Model::SampleArrays sample_arrays;
  if (sample_in > 0) {
    sample_arrays.in = slab.sample_features.data();
    sample_arrays.ld_in = sample_in;
  }
  if (sample_out > 0) {
    sample_arrays.out = sample_prediction.data();
    sample_arrays.ld_out = sample_out;
  }
  const int out_channels = model->out_channels();
  // fp64 keeps its digits: the predictions are computed into doubles and written as float64.
  const bool float64 = opt.run.precision == surrogate::Precision::fp64;
  std::vector<float> prediction(float64 ? 0 : static_cast<std::size_t>(slab.count) * out_channels);
  std::vector<double> prediction64(float64 ? static_cast<std::size_t>(slab.count) * out_channels : 0);
  const auto predicted = [&](std::size_t k) { return float64 ? prediction64[k] : static_cast<double>(prediction[k]); };
  comm.barrier();
  const double t3 = MPI_Wtime();
  surrogate::PointGeometry geometry;  // global ids: the rows of the file (rank-major slabs)
  if (model->needs_positions()) {
    geometry.positions = slab.coords.data();
    geometry.ld_positions = slab.dim;
    if (slab.has_edges) {
      geometry.edge_index = slab.edges.data();
      geometry.num_edges = slab.edge_count;
    }
  }
  surrogate::cli::Progress progress(comm, !opt.quiet);  // a line on a terminal while a long run works
  const std::unique_ptr<surrogate::Plan> plan = from_the_points(
      model->needs_positions() ? (slab.has_edges ? "/coords, /edge_index" : "/coords") : "/batch_idx",
      [&] { return model->plan(comm, layout, geometry, opt.run); });
  try {
    if (float64)
      model->predict(comm, *plan, slab.features.data(), slab.channels, prediction64.data(), out_channels, sample_arrays,
                     opt.run);
    else
      model->predict(comm, *plan, slab.features.data(), slab.channels, prediction.data(), out_channels, sample_arrays,
                     opt.run);
  } catch (const Error& e) {
    // The non-finite input check (Model::predict, the same message on every rank) is about the file's values.
    if (e.code() != ErrorCode::input || std::string(e.what()).rfind("input field '", 0) != 0) throw;
    throw Error(e.code(), "'" + opt.input + "' (" + (slab.has_features ? "/features" : "/coords") + "): " + e.what());
  }
  progress.stop();
  comm.barrier();
  const double t4 = MPI_Wtime();
  const int threads = opt.run.threads > 0 ? opt.run.threads : omp_get_max_threads();
  surrogate::PredictionOutput output;
  output.global_points = slab.global_points;
  output.count = slab.count;
  output.channels = out_channels;
  output.samples = layout.num_samples();
  output.sample_channels = sample_out;
  std::vector<double> sample_prediction64;  // computed in float: no family with per-sample outputs has fp64
  output.float64 = float64;
  if (float64) {
    sample_prediction64.assign(sample_prediction.begin(), sample_prediction.end());
    output.values_f64 = prediction64.data();
    output.sample_values_f64 = sample_prediction64.data();
  } else {
    output.values = prediction.data();
    output.sample_values = sample_prediction.data();
  }
  output.attributes = {{"model", opt.model},
                       {"architecture", file.architecture},
                       {"input", opt.input},
                       {"mode", opt.run.reproducible ? "reproducible" : "default"},
                       {"device", opt.device},
                       {"precision", surrogate::precision_name(opt.run.precision)},
                       {"ranks", std::to_string(comm.size())},
                       {"surrogate_version", SURROGATE_VERSION_STRING}};
  output.inputs = {opt.model, opt.input};
  surrogate::write_prediction_file(comm, opt.output, output);
  const double t5 = MPI_Wtime();
  std::string timing;
  if (opt.timing) {  // collective: every rank's phases, min .. max
    std::vector<surrogate::Profile::Phase> phases{{"load model", t1 - t0, 1, 0}, {"read points", t2 - t1, 1, 0}};
    for (const auto& phase : plan->profile().phases()) phases.push_back(phase);
    phases.push_back({"write", t5 - t4, 1, 0});
    timing = surrogate::cli::timing_report(comm, phases, plan->traffic());
  }

  // Summary statistics (global).
  std::vector<double> stats(static_cast<std::size_t>(out_channels) * 3, 0.0);  // sum, min, max
  std::vector<double> mins(static_cast<std::size_t>(out_channels), INFINITY), maxs(static_cast<std::size_t>(out_channels), -INFINITY);
  std::vector<double> err(static_cast<std::size_t>(out_channels) * 2, 0.0);  // |p - t|^2, |t|^2
  const bool has_target = slab.target_channels == out_channels;
  for (std::int64_t i = 0; i < slab.count; ++i)
    for (int c = 0; c < out_channels; ++c) {
      const double v = predicted(static_cast<std::size_t>(i * out_channels + c));
      stats[static_cast<std::size_t>(c)] += v;
      mins[static_cast<std::size_t>(c)] = std::min(mins[static_cast<std::size_t>(c)], v);
      maxs[static_cast<std::size_t>(c)] = std::max(maxs[static_cast<std::size_t>(c)], v);
      if (has_target) {
        const double t = slab.target[static_cast<std::size_t>(i * out_channels + c)];
        err[static_cast<std::size_t>(2 * c)] += (v - t) * (v - t);
        err[static_cast<std::size_t>(2 * c + 1)] += t * t;
      }
    }
  comm.allreduce(std::span<double>(stats.data(), static_cast<std::size_t>(out_channels)), surrogate::ReduceOp::sum);
  comm.allreduce(std::span<double>(mins), surrogate::ReduceOp::min);
  comm.allreduce(std::span<double>(maxs), surrogate::ReduceOp::max);
  comm.allreduce(std::span<double>(err), surrogate::ReduceOp::sum);
  const std::int64_t samples = layout.num_samples();
  if (comm.rank() == 0 && !opt.quiet) {
    std::ostringstream o;
    o << "surrogate predict\n"
      << "  model       " << opt.model << " (" << file.architecture << ", " << with_commas(model->parameter_count())
      << " parameters, " << file.source << ")\n"
      << "  input       " << opt.input << ": " << with_commas(slab.global_points) << " points in " << samples
      << (samples == 1 ? " sample" : " samples") << ", "
      << (slab.has_coords ? std::to_string(slab.dim) + " coordinates" : std::string("no /coords")) << ", " << slab.channels
      << " input channels" << (sample_in > 0 ? ", " + std::to_string(sample_in) + " values per sample" : std::string()) << "\n";
    if (model->needs_positions())
      o << "  geometry    /coords as positions"
        << (!model->uses_graph() ? std::string()
            : slab.has_edges     ? "; graph: " + with_commas(slab.global_edges) + " edges from /edge_index"
                                 : std::string("; graph: built by the model's rule"))
        << "\n";
    o
      << "  run         " << comm.size() << " MPI rank(s) x "
      << (opt.run.cuda_device >= 0 ? "CUDA device " + opt.device + " (" + surrogate::precision_name(opt.run.precision) + ")"
                                   : std::to_string(threads) + " OpenMP thread(s), CPU kernels " +
                                         surrogate::kernels::to_string(surrogate::kernels::cpu().isa) +
                                         cpu_precision_note(opt.run.precision))
      << ", " << (opt.run.reproducible ? "reproducible" : "default") << " mode\n"
      << "  time        load model " << fixed(t1 - t0, 3) << " s, read points " << fixed(t2 - t1, 3) << " s, predict "
      << fixed(t4 - t3, 3) << " s (" << with_commas(static_cast<long long>(slab.global_points / std::max(t4 - t3, 1e-9)))
      << " points/s), write " << fixed(t5 - t4, 3) << " s\n";
    o << timing;
    for (int c = 0; c < out_channels; ++c) {
      const std::string unit = c < static_cast<int>(file.fields.output_units.size()) ? file.fields.output_units[c] : "";
      o << "  prediction  '" << model->output_name(c) << "'" << (unit.empty() ? "" : " [" + unit + "]") << ": min "
        << general(mins[static_cast<std::size_t>(c)]) << ", max " << general(maxs[static_cast<std::size_t>(c)]) << ", mean "
        << general(stats[static_cast<std::size_t>(c)] / static_cast<double>(slab.global_points));
      if (has_target && err[static_cast<std::size_t>(2 * c + 1)] > 0)
        o << "; relative L2 error vs /target " << general(std::sqrt(err[static_cast<std::size_t>(2 * c)] / err[static_cast<std::size_t>(2 * c + 1)]));
      o << "\n";
    }
    if (sample_out > 0)
      o << "  output      " << opt.output << " (/sample_prediction " << samples << " x " << sample_out
        << ": " << sample_out << " values per sample)\n";
    else
      o << "  output      " << opt.output << " (/prediction " << with_commas(slab.global_points) << " x " << out_channels << ")\n";
    std::cout << o.str() << std::flush;
  }
  return 0;
}

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  // `selftest --np N` started by hand launches mpiexec itself, before this process initialises MPI.
  if (const std::optional<int> launched = surrogate::cli::launch_selftest(args)) return *launched;
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  // A run ended by SIGTERM or SIGINT (a job's time limit, Ctrl-C) leaves no temporary output behind.
  surrogate::detail::remove_temporaries_on_signals();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  int rc = 0;
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      if (rank == 0) std::cout << kUsage;
      rc = args.empty() ? 2 : 0;
    } else if (args[0] == "version" || args[0] == "--version") {
      if (rank == 0) std::cout << "surrogate " << SURROGATE_VERSION_STRING << "\n";
    } else if (args[0] == "info") {
      if (args.size() != 2) throw UsageError("info expects exactly one model file");
      if (rank == 0) rc = run_info({args.begin() + 1, args.end()});
    } else if (args[0] == "predict") {
      rc = surrogate::cli::run_predict({args.begin() + 1, args.end()});
    } else if (args[0] == "selftest") {
      rc = surrogate::cli::run_selftest({args.begin() + 1, args.end()});
    } else {
      throw UsageError("unknown command '" + args[0] + "'");
    }
  } catch (const UsageError& e) {
    // Every rank agreed on it (or every rank parsed the same arguments): rank 0 prints it.
    if (rank == 0) std::cerr << "surrogate: error: " << e.what() << "\n(surrogate --help lists the commands and options)\n";
    rc = 2;
  } catch (const std::exception& e) {
    // Collective operations agree on errors, so every rank holds the same message: rank 0 prints it.
    // `info` runs on rank 0 only.
    if (rank == 0) std::cerr << "surrogate: error: " << e.what() << "\n";
    rc = 1;
  }
  // Every rank exits with the same status.
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
