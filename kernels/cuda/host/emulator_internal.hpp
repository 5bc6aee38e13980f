// What the two halves of the host backend's engine share (emulator.cpp: the runtime; emulator_threads.cpp:
// the kernels' threads). share/docs/cuda.md, "The host backend".
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <functional>
#include <stdexcept>

namespace surrogate::kernels::cuda::emulator::detail {

/// A failure inside a kernel; ends the launch (and the stream's queued work) with its message.
struct KernelFault : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Runs `body` for every thread of every block of `grid`, one block at a time on this host thread, under
/// the current schedule; throws KernelFault on a fault or a deadlock.
void run_kernel(dim3 grid, dim3 block, std::size_t dynamic_smem, const std::function<void()>& body);

}  // namespace surrogate::kernels::cuda::emulator::detail
