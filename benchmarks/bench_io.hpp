// Small helpers of the model benchmark drivers (bsa_bench, erwin_bench): raw little-endian arrays
// exchanged with the Python side-by-side scripts, and a best-of / median timer.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <fstream>
#include <string>
#include <vector>

#include "surrogate/error.hpp"

namespace bench_io {

/// The whole file as an array of T (its size must be a multiple of sizeof(T)).
template <typename T>
std::vector<T> read_array(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw surrogate::Error(surrogate::ErrorCode::io, "cannot open " + path);
  const auto bytes = static_cast<std::size_t>(in.tellg());
  if (bytes % sizeof(T) != 0)
    throw surrogate::Error(surrogate::ErrorCode::input, path + ": " + std::to_string(bytes) +
                                                            " bytes, not a whole number of values");
  std::vector<T> values(bytes / sizeof(T));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(values.data()), static_cast<std::streamsize>(bytes));
  return values;
}

template <typename T>
void write_array(const std::string& path, const std::vector<T>& values) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(values.size() * sizeof(T)));
  if (!out) throw surrogate::Error(surrogate::ErrorCode::io, "cannot write " + path);
}

/// Arithmetic of one forward (operation_counts.hpp): FLOPs and softmax exponentials.
struct Work {
  double flop = 0, exps = 0;
  Work& operator+=(const Work& o) {
    flop += o.flop;
    exps += o.exps;
    return *this;
  }
};

/// Best wall milliseconds of max(repeats, 1) calls of f (the GPU drivers: their forwards synchronise).
template <typename F>
double best_ms(int repeats, F&& f) {
  using clock = std::chrono::steady_clock;
  double best = 1e300;
  for (int r = 0; r < std::max(repeats, 1); ++r) {
    const auto t0 = clock::now();
    f();
    best = std::min(best, 1e3 * std::chrono::duration<double>(clock::now() - t0).count());
  }
  return best;
}

/// The largest |reference| and |got - reference| over two arrays of the same size (the GPU drivers' check).
struct Deviation {
  double max_ref = 0, max_diff = 0;
};
inline Deviation deviation(const std::vector<float>& got, const std::vector<float>& reference) {
  Deviation d;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    d.max_ref = std::max(d.max_ref, std::fabs(static_cast<double>(reference[i])));
    d.max_diff = std::max(d.max_diff, std::fabs(static_cast<double>(got[i]) - reference[i]));
  }
  return d;
}

/// Runs `forward` once as a warm-up (its result returned through `first`), then `repeats` timed times.
/// Prints one JSON line: points, threads, first_s (the warm-up's wall time), best_s and median_s (wall),
/// best_cpu_s (the smallest process CPU time of a timed run: on a machine shared with other jobs it is
/// the less disturbed measure at one thread), gflop / gexp (`work`; zero when not given) and repeats_equal
/// (every timed run gave the warm-up's output bits: reused work buffers change nothing). With repeats = 0
/// the warm-up is the timed run.
template <typename F>
void time_forward(long points, int threads, int repeats, F&& forward, std::vector<float>* first = nullptr,
                  Work work = {}) {
  using clock = std::chrono::steady_clock;
  const auto w0 = clock::now();
  const std::clock_t c0 = std::clock();
  std::vector<float> y = forward();
  const double first_cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
  const double first_s = std::chrono::duration<double>(clock::now() - w0).count();
  if (first) *first = y;
  const std::vector<float> y0 = y;
  bool repeats_equal = true;  // every timed forward gives the first one's bits (outputs compared bitwise)
  std::vector<double> times, cpu;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = clock::now();
    const std::clock_t c1 = std::clock();
    y = forward();
    cpu.push_back(static_cast<double>(std::clock() - c1) / CLOCKS_PER_SEC);
    times.push_back(std::chrono::duration<double>(clock::now() - t0).count());
    repeats_equal = repeats_equal && y.size() == y0.size() &&
                    std::memcmp(y.data(), y0.data(), y.size() * sizeof(float)) == 0;
  }
  if (times.empty()) {
    times.push_back(first_s);
    cpu.push_back(first_cpu);
  }
  std::sort(times.begin(), times.end());
  std::sort(cpu.begin(), cpu.end());
  std::printf("{\"points\": %ld, \"threads\": %d, \"first_s\": %.6f, \"best_s\": %.6f, \"median_s\": %.6f, "
              "\"best_cpu_s\": %.6f, \"gflop\": %.4f, \"gexp\": %.5f, \"repeats_equal\": %s}\n",
              points, threads, first_s, times.front(), times[times.size() / 2], cpu.front(), work.flop * 1e-9,
              work.exps * 1e-9, repeats_equal ? "true" : "false");
}

}  // namespace bench_io
