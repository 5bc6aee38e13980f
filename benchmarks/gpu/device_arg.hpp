// The GPU drivers' DEVICE argument: a CUDA device index, or "cuda-emulated" for the host backend (the
// kernels' device code on the CPU, share/docs/cuda.md "The host backend"); 0 when absent.
#pragma once

#include <cstdlib>
#include <string>

#include "surrogate/kernels/cuda.hpp"

namespace bench_gpu {

inline int device_arg(int argc, char** argv, int i) {
  if (argc <= i) return 0;
  return std::string(argv[i]) == "cuda-emulated" ? surrogate::kernels::cuda::kEmulatedDevice : std::atoi(argv[i]);
}

}  // namespace bench_gpu
