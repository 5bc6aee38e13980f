// Measured limits of this machine (benchmarks print achieved rates next to them): FP32 FMA throughput
// and the softmax exp's throughput, per second of the thread's CPU time (so that other jobs on a shared
// machine do not lower them). Compiled with -march=native: it runs where it was built.
#include "machine_limits.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <vector>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::bench {
namespace {
double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

typedef float vf4 __attribute__((vector_size(16)));
typedef float vf8 __attribute__((vector_size(32)));
typedef float vf16 __attribute__((vector_size(64)));

/// FMA throughput with vectors vf (W floats); 12 independent accumulator chains hide the FMA latency.
template <class vf, int W = sizeof(vf) / sizeof(float)>
double fma_gflops_with_width() {
  constexpr int kChains = 12;
  vf acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = vf{} + 1.0f + 0.001f * static_cast<float>(c);
  const vf a = vf{} + 0.999999f, b = vf{} + 1e-7f;
  const long iterations = 20'000'000;
  const double t0 = thread_cpu_seconds();
  for (long i = 0; i < iterations; ++i) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = acc[c] * a + b;
  }
  const double t = thread_cpu_seconds() - t0;
  float sink = 0;
  for (int c = 0; c < kChains; ++c) sink += acc[c][0];
  asm volatile("" ::"r"(sink));
  return 2.0 * W * kChains * static_cast<double>(iterations) / t * 1e-9;
}
}  // namespace

double fma_gflops_one_thread() {
  // The vector width of the kernels SURROGATE_CPU_ISA selects (on a CPU with 512-bit FMA units the AVX2
  // kernels' limit is the 256-bit one), capped by what this build's -march=native offers.
#if defined(__AVX512F__)
  if (kernels::cpu().simd_width >= 16) return fma_gflops_with_width<vf16>();
#endif
#if defined(__AVX2__)
  if (kernels::cpu().simd_width >= 8) return fma_gflops_with_width<vf8>();
#endif
  return fma_gflops_with_width<vf4>();
}

double exp_gexps_one_thread() {
  // The softmax's exp, which every softmax term runs; best of 5 after 1 s of warm-up (without it the rate
  // varied by up to 2x between runs). Input and output in one buffer, the output 256 bytes below the input
  // modulo 4 KiB, so that no store shares its address's low 12 bits with a later load (4K aliasing).
  const auto& k = kernels::cpu();
  constexpr std::size_t n = 4096;
  std::vector<float> buffer(2 * n + 128);
  float* y = buffer.data() + (16 - reinterpret_cast<std::uintptr_t>(buffer.data()) / 4 % 16) % 16;
  float* x = y + n + 64;
  for (std::size_t i = 0; i < n; ++i) x[i] = -10.0f + 20.0f * static_cast<float>(i) / static_cast<float>(n);
  const auto rate = [&] {  // 10^9 exp/s over 5,000 calls
    const double t0 = thread_cpu_seconds();
    for (int r = 0; r < 5000; ++r) {
      k.softmax_exp(x, y, static_cast<kernels::index_t>(n));
      asm volatile("" ::"r"(y) : "memory");
    }
    return static_cast<double>(n) * 5000 / (thread_cpu_seconds() - t0) * 1e-9;
  };
  for (const double start = thread_cpu_seconds(); thread_cpu_seconds() - start < 1.0;) rate();  // warm-up
  double best = 0.0;
  for (int round = 0; round < 5; ++round) best = std::max(best, rate());
  return best;
}

void print_limits_json() {
  std::printf("{\"fma_gflops_1t\": %.1f, \"exp_gexps_1t\": %.2f, \"isa\": \"%s\"}\n", fma_gflops_one_thread(),
              exp_gexps_one_thread(), kernels::to_string(kernels::cpu().isa));
}

}  // namespace surrogate::bench
