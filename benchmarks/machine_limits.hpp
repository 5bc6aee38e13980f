#pragma once
namespace surrogate::bench {
/// Peak FP32 multiply-add throughput of one core with this build's widest vectors (GFLOP/s).
double fma_gflops_one_thread();
/// Throughput of the library's vectorised exp on one core (10^9 exp/s).
double exp_gexps_one_thread();
}  // namespace surrogate::bench
