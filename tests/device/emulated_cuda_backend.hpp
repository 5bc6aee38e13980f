// The host-emulated CUDA backend shared by the whole-forward emulation tests
// (test_erwin_device_emulated.cpp, test_bsa_device_emulated.cpp,
// test_sphere_transformer_device_emulated.cpp). emulated_cuda_backend.cpp, compiled into each of those
// executables (not a library: an interposing definition must be in the executable itself), defines host
// versions of the CUDA backend's functions, which take the place of libsurrogate_kernels.so's (ELF symbol
// interposition: the executable's definitions win, so these tests exist only in shared-library builds),
// and the library's own device-forward code then runs on the CPU:
//  - the runtime wrappers of kernels/cuda/runtime.cpp (memory, device guard, streams, events, copies) and
//    the CUDA runtime's cudaMemcpy / cudaDeviceSynchronize, which some device operators call directly:
//    "device" memory is host memory, copies are memcpy, there is one device;
//  - the launchers the forwards have in common: the point layers (point_layers_kernels.cuh) and the ball
//    attention (ball_attention_kernels.cuh), whose unchanged device code runs block by block, the threads
//    of a block one after another (those kernels use neither shared memory nor __syncthreads);
//  - norm.cu, whose warp shuffles are not emulated, as its arithmetic written out (per lane the strided
//    sums, the butterfly over 32 lanes, then the lane's outputs).
// Each test defines the launchers only its model uses (BSA's gate and block kernels, the sphere
// operators) with the helpers below, and reads `launches` to check that the device path ran.
#pragma once

#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel sources after it

#include "latent_softmax.cuh"  // detail::head_dim_bucket
#include "surrogate/kernels/cuda.hpp"

#include <type_traits>

namespace emulated_backend {

/// Kernels "launched" in this process by the host launchers (a test checks that the device path ran).
extern int launches;
/// When > 0: counted down by every launch of the shared launchers below; the launch that brings it to 0
/// throws as a CUDA launch failure would (a test of the error paths sets it).
extern int fail_after;
/// Bytes copied host -> device and device -> host by copy_to_device / copy_to_host (staging measures).
extern long long bytes_to_device, bytes_to_host;

/// Runs kernel() for every thread of every block of grid (x, y), the threads of a block one after another.
template <class Kernel>
void run_sequentially(dim3 grid, unsigned block, Kernel kernel) {
  cuda_host_emulation::block_dim = dim3(block);
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned b = 0; b < grid.x; ++b) {
      cuda_host_emulation::block_index = dim3(b, y);
      for (unsigned t = 0; t < block; ++t) {
        cuda_host_emulation::thread_index = dim3(t);
        kernel();
      }
    }
}

/// The grid of a one-thread-per-item launch: ceil(threads / block) blocks in x, y in y.
inline dim3 grid_for(surrogate::kernels::index_t threads, unsigned block, int y = 1) {
  return dim3(static_cast<unsigned>((threads + block - 1) / block), static_cast<unsigned>(y));
}

/// Calls run(std::integral_constant<int, kMaxE>) for E's head-width bucket, as the .cu launchers do.
template <class Run>
void with_head_dim(int E, Run&& run) {
  surrogate::kernels::cuda::detail::dispatch_head_width(E, run);
}

}  // namespace emulated_backend
