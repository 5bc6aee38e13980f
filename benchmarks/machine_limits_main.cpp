// Prints this machine's measured limits for one core as one JSON line (machine_limits.hpp): the FP32 FMA
// peak, the library's vectorised exp rate (on the kernels SURROGATE_CPU_ISA selects) and that ISA. The
// side-by-side scripts print every run's share of these limits (benchmarks/README.md).
#include "machine_limits.hpp"

int main() {
  surrogate::bench::print_limits_json();
  return 0;
}
