// Asynchronous copies from global into shared memory (cp.async, compute capability 8.0 and newer): a warp
// issues the next rows it will work on and computes while they travel, without registers to hold them.
// On a GPU inline PTX; in the host backend the emulator's deferred copies (host/emulator.hpp), which land
// only at the wait that covers them, so a kernel reading them too early fails its tests there too.
#pragma once

#include <cstdint>

#include "launch.cuh"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace async_copy {

/// `kBytes` (4 or 16, aligned so) from src to dst in shared memory; zeros instead when !valid (src is not
/// read then, but must be a valid address).
template <int kBytes>
__device__ __forceinline__ void copy(float* dst, const float* src, bool valid) {
  static_assert(kBytes == 4 || kBytes == 16, "cp.async copies 4, 8 or 16 bytes; these kernels use 4 and 16");
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  emulator::async_copy(dst, src, kBytes, valid ? kBytes : 0);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (kBytes == 16)  // .cg: through L2 only (rows read once)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0) : "memory");
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 4 : 0) : "memory");
#else
  __trap();  // the launchers refuse devices below compute capability 8.0
#endif
}

/// Closes the group of this thread's copies issued since the last commit.
__device__ __forceinline__ void commit() {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  emulator::async_commit();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

/// Waits until at most `kPending` of this thread's committed groups, the newest, are still in flight.
/// Other lanes' copies are theirs to wait for: a __syncwarp after the wait makes the whole tile visible.
template <int kPending>
__device__ __forceinline__ void wait() {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  emulator::async_wait(kPending);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
#endif
}

}  // namespace async_copy
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
