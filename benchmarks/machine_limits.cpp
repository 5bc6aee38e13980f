// Measured limits of this machine (benchmarks print achieved rates next to them): FP32 FMA throughput
// and vectorised exp throughput. Compiled with -march=native: it runs where it was built.
#include "machine_limits.hpp"

#include <chrono>
#include <vector>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::bench {
namespace {
#if defined(__AVX512F__)
constexpr int kWidth = 16;
#elif defined(__AVX2__)
constexpr int kWidth = 8;
#else
constexpr int kWidth = 4;
#endif
typedef float vf __attribute__((vector_size(kWidth * 4)));

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

double fma_gflops_one_thread() {
  // 12 independent accumulator chains hide the FMA latency.
  constexpr int kChains = 12;
  vf acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = vf{} + 1.0f + 0.001f * static_cast<float>(c);
  const vf a = vf{} + 0.999999f, b = vf{} + 1e-7f;
  const long iterations = 20'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  }
  const double t = seconds_since(t0);
  float sink = 0;
  for (int c = 0; c < kChains; ++c) sink += acc[c][0];
  asm volatile("" ::"r"(sink));
  return 2.0 * kWidth * kChains * static_cast<double>(iterations) / t * 1e-9;
}

double exp_gexps_one_thread() {
  const auto& k = kernels::cpu();
  std::vector<float> x(4096), y(4096);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / 4096.0f;
  const int repeats = 20000;
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) {
    k.exp(x.data(), y.data(), static_cast<kernels::index_t>(x.size()));
    asm volatile("" ::"r"(y.data()) : "memory");
  }
  return static_cast<double>(x.size()) * repeats / seconds_since(t0) * 1e-9;
}

}  // namespace surrogate::bench
