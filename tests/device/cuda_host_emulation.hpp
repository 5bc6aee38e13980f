// The kernels of kernels/cuda/*.cuh called directly (not through their launchers) on the host backend's
// engine, for the kernel tests in tests/kernels: include first, before the kernel sources. The kernels are
// those of the host backend (namespace cuda::host, found from cuda:: here).
#pragma once

#include "host/emulation.hpp"  // first: the CUDA language for the host compiler

#include <functional>
#include <stdexcept>
#include <string>

#include "launch.cuh"

namespace surrogate::kernels::cuda {
using namespace host;
}  // namespace surrogate::kernels::cuda

namespace cuda_host_emulation {

/// Runs kernel() for every thread of `grid` x `threads` under the current schedule, and waits for it.
template <class Kernel>
void launch(dim3 grid, unsigned threads, Kernel kernel) {
  namespace emu = surrogate::kernels::cuda::emulator;
  emu::launch(nullptr, grid, dim3(threads), 0, nullptr, std::function<void()>(kernel));  // (no shared memory)
  cudaError_t code = emu::get_last_error();
  if (code == cudaSuccess) code = emu::device_synchronize();
  if (code != cudaSuccess) {
    (void)emu::get_last_error();
    throw std::runtime_error("emulated kernel: " + emu::last_message());
  }
}

}  // namespace cuda_host_emulation
