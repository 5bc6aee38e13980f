// FLARE forward on the CPU: one configuration per process (so the peak memory is this configuration's).
//   bench_flare --points 262144 --latents 64 --threads 1 [--channels 64 --heads 8 --blocks 8]
//               [--repeats 3] [--reproducible] [--precision fp32|bf16] [--json]
//   bench_flare ... --bf16-vs-fp32     both precisions side by side, outputs compared first
// Prints the median and minimum time of the timed forwards (after one warm-up), the achieved GFLOP/s
// by the analytic count (flare_flops below), and the process's peak resident memory.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "machine_limits.hpp"
#include "random_models.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model.hpp"

namespace {

/// FLOPs of one forward per point: 2 in out per Linear, 8 M E per head per block for the latent attention
/// (encode logits and weighted sum, decode logits and weighted sum). Norms, activations and softmax
/// arithmetic are not counted (the exponentials are reported separately).
double flare_flops_per_point(const surrogate::flare::Config& c) {
  auto mlp = [](int in, int hidden, int out, int layers) {
    if (layers == -1) return 2.0 * in * out;
    return 2.0 * in * hidden + layers * 2.0 * hidden * hidden + 2.0 * hidden * out;
  };
  const int C = c.channel_dim;
  double per_block = mlp(C, c.k_proj_hidden_dim, C, c.num_layers_k_proj) + mlp(C, c.v_proj_hidden_dim, C, c.num_layers_v_proj) +
                     mlp(C, c.ffn_hidden_dim, C, c.num_layers_ffn) + 2.0 * C * C + 8.0 * c.num_latents * C;
  return mlp(c.in_dim, c.in_proj_hidden_dim, C, c.num_layers_in_out_proj) +
         mlp(C, c.out_proj_hidden_dim, c.out_dim, c.num_layers_in_out_proj) + c.num_blocks * per_block;
}

struct Timing {
  double median = 0, best = 0, median_cpu = 0;
};

/// One warm-up (first touch of the workspace), then `repeats` timed forwards: wall and process CPU time.
Timing time_forward(surrogate::Model& model, const surrogate::Comm& comm, surrogate::Plan& plan,
                    const std::vector<float>& in, std::vector<float>& out, int in_dim, int out_dim,
                    const surrogate::RunOptions& options, int repeats) {
  std::vector<double> times, cpu_times;
  repeats = std::max(repeats, 1);
  times.reserve(static_cast<std::size_t>(repeats));
  cpu_times.reserve(static_cast<std::size_t>(repeats));
  for (int r = 0; r <= repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    model.predict(comm, plan, in.data(), in_dim, out.data(), out_dim, options);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r == 0) continue;
    times.push_back(t);
    cpu_times.push_back(static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu_times.begin(), cpu_times.end());
  if (times.empty()) return {};
  return {times[times.size() / 2], times.front(), cpu_times[cpu_times.size() / 2]};
}

/// max |a - b| / max |b|.
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

double peak_rss_mib() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0.0;
}

}  // namespace

int main(int argc, char** argv) {
  long points = 262144;
  int repeats = 3;
  bool json = false, machine = false, bf16_vs_fp32 = false;
  surrogate::RunOptions options;
  surrogate::flare::Config cfg = surrogate::testing::elasticity_config();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_flare: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (a == "--points") points = next();
    else if (a == "--latents") cfg.num_latents = static_cast<int>(next());
    else if (a == "--channels") cfg.channel_dim = cfg.in_proj_hidden_dim = cfg.out_proj_hidden_dim = cfg.k_proj_hidden_dim =
                                    cfg.v_proj_hidden_dim = cfg.ffn_hidden_dim = static_cast<int>(next());
    else if (a == "--heads") cfg.num_heads = static_cast<int>(next());
    else if (a == "--blocks") cfg.num_blocks = static_cast<int>(next());
    else if (a == "--threads") options.threads = static_cast<int>(next());
    else if (a == "--repeats") repeats = static_cast<int>(next());
    else if (a == "--reproducible") options.reproducible = true;
    else if (a == "--precision" && i + 1 < argc) options.precision = surrogate::parse_precision(argv[++i]);
    else if (a == "--bf16-vs-fp32") bf16_vs_fp32 = true;
    else if (a == "--json") json = true;
    else if (a == "--machine") machine = true;
    else {
      std::fprintf(stderr, "bench_flare: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  if (machine) {  // this machine's measured limits, one core
    surrogate::bench::print_limits_json();
    return 0;
  }
  repeats = std::max(repeats, 1);
  try {
    const auto model = surrogate::make_model(surrogate::testing::random_flare_file(cfg, 42));
    surrogate::SelfComm comm;
    const auto layout = surrogate::SampleLayout::build(comm, points, nullptr);
    const auto plan = model->plan(comm, layout);  // once: the repeated forwards time the prediction only
    std::vector<float> in(static_cast<std::size_t>(points) * cfg.in_dim), out(static_cast<std::size_t>(points) * cfg.out_dim);
    std::mt19937 gen(7);
    std::uniform_real_distribution<float> dist(0.0f, 1.0f);
    for (auto& v : in) v = dist(gen);
    const double gflop = flare_flops_per_point(cfg) * static_cast<double>(points) * 1e-9;
    if (bf16_vs_fp32) {
      // Same weights and inputs; the outputs compared before the times are printed.
      surrogate::RunOptions fp32 = options, bf16 = options;
      fp32.precision = surrogate::Precision::fp32;
      bf16.precision = surrogate::Precision::bf16;
      std::vector<float> out_bf16(out.size());
      const Timing t32 = time_forward(*model, comm, *plan, in, out, cfg.in_dim, cfg.out_dim, fp32, repeats);
      const Timing t16 = time_forward(*model, comm, *plan, in, out_bf16, cfg.in_dim, cfg.out_dim, bf16, repeats);
      const auto& k16 = surrogate::kernels::cpu_bf16();
      std::printf("FLARE N=%ld M=%d C=%d H=%d B=%d threads=%d, %s kernels; bf16 Linear layers on %s\n", points,
                  cfg.num_latents, cfg.channel_dim, cfg.num_heads, cfg.num_blocks,
                  options.threads > 0 ? options.threads : omp_get_max_threads(),
                  surrogate::kernels::to_string(surrogate::kernels::cpu().isa),
                  surrogate::kernels::to_string(k16.linear_engine));
      std::printf("  outputs: max |bf16 - fp32| / max |fp32| = %.2e\n", relative_difference(out_bf16, out));
      std::printf("  fp32: median %.3f s (min %.3f, CPU %.3f), %.1f GFLOP/s\n", t32.median, t32.best, t32.median_cpu,
                  gflop / t32.median);
      std::printf("  bf16: median %.3f s (min %.3f, CPU %.3f), %.1f GFLOP/s\n", t16.median, t16.best, t16.median_cpu,
                  gflop / t16.median);
      std::printf("  bf16 speed-up: %.2fx (median), %.2fx (min)\n", t32.median / t16.median, t32.best / t16.best);
      return 0;
    }
    const Timing t = time_forward(*model, comm, *plan, in, out, cfg.in_dim, cfg.out_dim, options, repeats);
    const double median = t.median, best = t.best, median_cpu = t.median_cpu;
    const double exps = 2.0 * cfg.num_heads * cfg.num_latents * cfg.num_blocks * static_cast<double>(points) * 1e-9;
    const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
    if (json) {
      std::printf("{\"impl\": \"surrogate\", \"points\": %ld, \"latents\": %d, \"threads\": %d, \"median_s\": %.4f, "
                  "\"min_s\": %.4f, \"median_cpu_s\": %.4f, \"gflop\": %.2f, \"gexp\": %.3f, \"peak_rss_mib\": %.0f, \"isa\": \"%s\", \"mode\": \"%s\", \"precision\": \"%s\"}\n",
                  points, cfg.num_latents, threads, median, best, median_cpu, gflop, exps, peak_rss_mib(),
                  surrogate::kernels::to_string(surrogate::kernels::cpu().isa), options.reproducible ? "reproducible" : "default",
                  surrogate::precision_name(options.precision));
    } else {
      std::printf("FLARE N=%ld M=%d C=%d H=%d B=%d threads=%d %s: median %.3f s (min %.3f), %.1f GFLOP/s, %.2f Gexp/s, "
                  "peak RSS %.0f MiB [%s kernels]\n",
                  points, cfg.num_latents, cfg.channel_dim, cfg.num_heads, cfg.num_blocks, threads,
                  options.reproducible ? "reproducible" : "default", median, best, gflop / median, exps / median, peak_rss_mib(),
                  surrogate::kernels::to_string(surrogate::kernels::cpu().isa));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_flare: %s\n", e.what());
    return 1;
  }
  return 0;
}
