#pragma once
namespace surrogate::bench {
/// Peak FP32 multiply-add throughput of one core with the vectors of the selected kernels (GFLOP/s).
double fma_gflops_one_thread();
/// Throughput of the softmax's exp (CpuKernels::softmax_exp, [-10, 10]) on one core (10^9 exp/s).
double exp_gexps_one_thread();
/// Prints both and the kernels' ISA as one JSON line (machine_limits, bench_flare --machine):
/// {"fma_gflops_1t": ..., "exp_gexps_1t": ..., "isa": ...}.
void print_limits_json();
}  // namespace surrogate::bench
