// Times one forward of NeighborhoodAttentionS2 or AttentionS2 (self-attention, one sample, equiangular
// grid, bias) on weights and an input written by benchmarks/sphere_attention_cpu_vs_pytorch.py:
//   sphere_attention_bench {neighborhood|global} NLAT NLON CHANNELS HEADS CUTOFF THREADS REPEATS DIR
// DIR holds raw float32 files q_weights.f32, k_weights.f32, v_weights.f32, proj_weights.f32 (out x in),
// q_bias.f32, k_bias.f32, v_bias.f32, proj_bias.f32 and x.f32 (NLAT*NLON x CHANNELS, channels last);
// the output of the last forward is written to DIR/y.f32 (same layout). CUTOFF: the neighbourhood's
// theta_cutoff in radians (0: torch-harmonics' default), ignored for global attention. The operator is
// built once (the neighbour lists) and not timed. Prints one JSON line:
//   {"op": ..., "nlat": ..., "nlon": ..., "threads": T, "best_s": ..., "median_s": ..., "best_cpu_s": ...,
//    "median_cpu_s": ..., "build_s": ..., "gflop": ..., "gexp": ...}
// (wall seconds; *_cpu_s: CPU seconds of the process, all threads, per forward; the forward's arithmetic
// as operation_counts.hpp counts it).
// Op "lists" (the other arguments as for neighborhood; REPEATS ignored) writes the operator's neighbour
// lists and quadrature weights instead, for the script's plain-PyTorch formulation: DIR/row_offsets.i64,
// DIR/columns.i64 (NeighborhoodCsr) and DIR/quad_w.f32 (w_lat per input latitude).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "operation_counts.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace {

std::vector<float> read_floats(const std::string& path, std::size_t count) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v(count);
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(count * sizeof(float))))
    throw surrogate::Error(surrogate::ErrorCode::io, "cannot read " + std::to_string(count) +
                                                         " floats from " + path);
  return v;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// CPU seconds of the whole process (all threads): robust against other jobs on a shared machine.
double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 10) {
    std::fprintf(stderr, "usage: %s {neighborhood|global} NLAT NLON CHANNELS HEADS CUTOFF THREADS REPEATS DIR\n",
                 argv[0]);
    return 2;
  }
  try {
    const std::string op = argv[1], dir = argv[9];
    const int nlat = std::atoi(argv[2]), nlon = std::atoi(argv[3]), channels = std::atoi(argv[4]),
              heads = std::atoi(argv[5]), threads = std::atoi(argv[7]), repeats = std::atoi(argv[8]);
    const double cutoff = std::atof(argv[6]);
    if (op != "neighborhood" && op != "global" && op != "lists") throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "op " + op);
    omp_set_num_threads(threads);
    const std::size_t cc = static_cast<std::size_t>(channels) * channels, points = static_cast<std::size_t>(nlat) * nlon;
    surrogate::sphere::AttentionS2Weights w;
    w.q_weights = read_floats(dir + "/q_weights.f32", cc);
    w.k_weights = read_floats(dir + "/k_weights.f32", cc);
    w.v_weights = read_floats(dir + "/v_weights.f32", cc);
    w.proj_weights = read_floats(dir + "/proj_weights.f32", cc);
    w.q_bias = read_floats(dir + "/q_bias.f32", static_cast<std::size_t>(channels));
    w.k_bias = read_floats(dir + "/k_bias.f32", static_cast<std::size_t>(channels));
    w.v_bias = read_floats(dir + "/v_bias.f32", static_cast<std::size_t>(channels));
    w.proj_bias = read_floats(dir + "/proj_bias.f32", static_cast<std::size_t>(channels));
    const std::vector<float> x = read_floats(dir + "/x.f32", points * channels);
    std::vector<float> y(points * channels);

    const auto t_build = std::chrono::steady_clock::now();
    std::function<void()> forward;
    double pairs = static_cast<double>(points) * static_cast<double>(points);  // global: every input point
    surrogate::sphere::NeighborhoodAttentionS2Config nc;
    surrogate::sphere::AttentionS2Config gc;
    std::unique_ptr<surrogate::sphere::NeighborhoodAttentionS2> na;
    std::unique_ptr<surrogate::sphere::AttentionS2> ga;
    if (op != "global") {
      nc.in_channels = channels;
      nc.num_heads = heads;
      nc.nlat_in = nc.nlat_out = nlat;
      nc.nlon_in = nc.nlon_out = nlon;
      nc.theta_cutoff = cutoff;
      na = std::make_unique<surrogate::sphere::NeighborhoodAttentionS2>(nc, w);
      if (op == "lists") {
        const auto& csr = na->neighbors();
        std::ofstream(dir + "/row_offsets.i64", std::ios::binary)
            .write(reinterpret_cast<const char*>(csr.row_offsets.data()),
                   static_cast<std::streamsize>(csr.row_offsets.size() * sizeof(std::int64_t)));
        std::ofstream(dir + "/columns.i64", std::ios::binary)
            .write(reinterpret_cast<const char*>(csr.columns.data()),
                   static_cast<std::streamsize>(csr.columns.size() * sizeof(std::int64_t)));
        std::ofstream(dir + "/quad_w.f32", std::ios::binary)
            .write(reinterpret_cast<const char*>(na->quad_weights().data()),
                   static_cast<std::streamsize>(na->quad_weights().size() * sizeof(float)));
        std::printf("{\"op\": \"lists\", \"entries\": %zu, \"theta_cutoff\": %.17g}\n", csr.columns.size(),
                    na->config().theta_cutoff);
        return 0;
      }
      pairs = static_cast<double>(na->neighbors().columns.size()) * nlon;  // the lists of longitude 0, shifted
      forward = [&] { na->forward(1, x.data(), nullptr, nullptr, y.data()); };
    } else {
      gc.in_channels = channels;
      gc.num_heads = heads;
      gc.nlat_in = gc.nlat_out = nlat;
      gc.nlon_in = gc.nlon_out = nlon;
      ga = std::make_unique<surrogate::sphere::AttentionS2>(gc, w);
      forward = [&] { ga->forward(1, x.data(), nullptr, nullptr, y.data()); };
    }
    const double build_s = seconds_since(t_build);
    forward();  // warm-up
    std::vector<double> times, cpu_times;
    for (int r = 0; r < repeats; ++r) {
      const double c0 = process_cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      forward();
      times.push_back(seconds_since(t0));
      cpu_times.push_back(process_cpu_seconds() - c0);
    }
    std::sort(times.begin(), times.end());
    std::sort(cpu_times.begin(), cpu_times.end());
    const auto work = bench_counts::sphere_attention(static_cast<double>(points), channels, heads, pairs);
    std::ofstream out(dir + "/y.f32", std::ios::binary);
    out.write(reinterpret_cast<const char*>(y.data()), static_cast<std::streamsize>(y.size() * sizeof(float)));
    std::printf(
        "{\"op\": \"%s\", \"nlat\": %d, \"nlon\": %d, \"threads\": %d, \"best_s\": %.6f, \"median_s\": %.6f, "
        "\"best_cpu_s\": %.6f, \"median_cpu_s\": %.6f, \"build_s\": %.6f, \"gflop\": %.4f, \"gexp\": %.5f}\n",
        op.c_str(), nlat, nlon, threads, times.front(), times[times.size() / 2], cpu_times.front(),
        cpu_times[cpu_times.size() / 2], build_s, work.flop * 1e-9, work.exps * 1e-9);
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "sphere_attention_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
