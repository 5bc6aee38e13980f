// Prints this machine's measured limits for one core as one JSON line (machine_limits.hpp): the FP32 FMA
// peak, the library's vectorised exp rate (on the kernels SURROGATE_CPU_ISA selects) and that ISA. The
// side-by-side scripts print every run's share of these limits (benchmarks/README.md).
#include <cstdio>

#include "machine_limits.hpp"
#include "surrogate/kernels/cpu.hpp"

int main() {
  std::printf("{\"fma_gflops_1t\": %.1f, \"exp_gexps_1t\": %.2f, \"isa\": \"%s\"}\n",
              surrogate::bench::fma_gflops_one_thread(), surrogate::bench::exp_gexps_one_thread(),
              surrogate::kernels::to_string(surrogate::kernels::cpu().isa));
  return 0;
}
