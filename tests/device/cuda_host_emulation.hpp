// A host emulation of the few CUDA constructs the sphere attention kernels use, so that their device code
// (kernels/cuda/sphere_attention_kernels.cuh) runs unchanged on the CPU in tests: the execution-space
// keywords become nothing, __shared__ arrays become function statics shared by the threads of a block,
// a block is run as blockDim std::threads with a std::barrier for __syncthreads(), blocks one after
// another (the same threads for every block of a launch), and the bit-cast / rounding intrinsics are their IEEE host equivalents (compile with
// -ffp-contract=off so that the host does not fuse what the device code keeps separate). Not a CUDA
// implementation: just enough for kernels that use blockIdx, threadIdx, blockDim, __syncthreads and
// __shared__ arrays. Include before any kernel source.
#pragma once

#include <cuda_runtime_api.h>  // dim3, cudaStream_t (and host_defines.h, whose keyword macros are replaced)

#include <math.h>  // fmaf, fma, fminf, fmaxf, sqrt in the global namespace, as nvcc provides them

#include <barrier>
#include <cstring>
#include <thread>
#include <vector>

#undef __global__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#define __global__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(threads)
#define __shared__ static

namespace cuda_host_emulation {
inline dim3 block_dim;
inline thread_local dim3 block_index, thread_index;
inline std::barrier<>* block_barrier = nullptr;

/// Runs kernel() for every thread of every block of `grid` (blocks in order, a block's threads at once):
/// `threads` std::threads for the whole launch, each running its thread of every block in turn, with a
/// barrier after each block (nobody starts the next block, whose __shared__ statics are the same arrays,
/// before the whole block has finished).
template <class Kernel>
void launch(dim3 grid, unsigned threads, Kernel kernel) {
  block_dim = dim3(threads);
  std::barrier<> barrier(static_cast<std::ptrdiff_t>(threads));
  block_barrier = &barrier;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&kernel, &barrier, grid, t] {
      thread_index = dim3(t);
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            block_index = dim3(x, y, z);
            kernel();
            barrier.arrive_and_wait();
          }
    });
  for (std::thread& t : pool) t.join();
  block_barrier = nullptr;
}
}  // namespace cuda_host_emulation

#define blockIdx ::cuda_host_emulation::block_index
#define threadIdx ::cuda_host_emulation::thread_index
#define blockDim ::cuda_host_emulation::block_dim

inline void __syncthreads() { cuda_host_emulation::block_barrier->arrive_and_wait(); }
inline float __int_as_float(int i) {
  float f;
  std::memcpy(&f, &i, sizeof f);
  return f;
}
inline int __float_as_int(float f) {
  int i;
  std::memcpy(&i, &f, sizeof i);
  return i;
}
inline double __longlong_as_double(long long i) {
  double d;
  std::memcpy(&d, &i, sizeof d);
  return d;
}
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
