// The one launch seam of the CUDA kernels (share/docs/cuda.md, "The host backend"): every .cu file is
// compiled twice, by nvcc for the GPU and by the host compiler (with host/emulation.hpp) into the host
// backend, namespace cuda::host. A public launcher compiled by nvcc hands streams of the emulated device
// to its host twin (SURROGATE_CUDA_ON_HOST_BACKEND); launch() is the only place that writes <<< >>>.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "host/emulator.hpp"
#include "host_backend.hpp"
#include "surrogate/kernels/cuda.hpp"

#if defined(SURROGATE_CUDA_HOST_BACKEND)
#define SURROGATE_CUDA_BACKEND_BEGIN namespace host {
#define SURROGATE_CUDA_BACKEND_END }
#define SURROGATE_CUDA_ON_HOST_BACKEND(stream, call) ((void)0)
#else
#define SURROGATE_CUDA_BACKEND_BEGIN
#define SURROGATE_CUDA_BACKEND_END
/// `extern __shared__ T name[]`: the block's dynamic shared memory (host/emulation.hpp has the host form).
#define SURROGATE_DYNAMIC_SHARED(T, name) extern __shared__ __align__(128) T name[]
/// In a public launcher compiled by nvcc: run the host backend's launcher for its streams.
#define SURROGATE_CUDA_ON_HOST_BACKEND(stream, call) \
  if (::surrogate::kernels::cuda::emulator::owns_stream(stream)) return host::call
#endif

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN

/// This backend's launchers (cuda, or cuda::host in the host backend): a launcher that calls another
/// qualifies the call with it, since argument-dependent lookup would also find the other backend's.
#if defined(SURROGATE_CUDA_HOST_BACKEND)
namespace backend = ::surrogate::kernels::cuda::host;
#else
namespace backend = ::surrogate::kernels::cuda;
#endif

/// Launches kernel(args...) on `grid` x `block` threads with `smem` bytes of dynamic shared memory on
/// `stream`; errors of the launch are read by check_launch().
template <class... Params, class... Args>
void launch(void (*kernel)(Params...), dim3 grid, dim3 block, std::size_t smem, cudaStream_t stream,
            Args&&... args) {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  emulator::launch(reinterpret_cast<const void*>(kernel), grid, block, smem, stream,
                   [kernel, ... a = Params(std::forward<Args>(args))] { kernel(a...); });
#else
  kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
#endif
}

/// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device (the opt-in above
/// 48 KiB). The limit belongs to the function and device and is shared by every host thread, so it is only
/// ever raised: lowering it to this launch's need could fail another thread's larger launch in between.
template <class... Params>
void allow_dynamic_shared(void (*kernel)(Params...), std::size_t bytes, const char* name) {
  if (bytes <= 48 * 1024) return;
  static std::mutex mutex;
  static std::map<std::pair<void (*)(Params...), int>, std::size_t> allowed;  // (kernel, device) -> bytes
  std::lock_guard lock(mutex);
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  std::size_t& limit = allowed[{kernel, device}];
  if (bytes <= limit) return;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
        (std::string("cudaFuncSetAttribute(") + name + ", MaxDynamicSharedMemorySize)").c_str());
  limit = bytes;
}
/// The blocks of `kernel` (`threads` threads, `smem` bytes of dynamic shared memory, allowed beforehand by
/// allow_dynamic_shared) the current device holds at once: its multiprocessors times the blocks one runs.
/// The grid of a kernel whose warps loop over tiles of rows, so that one wave covers any row count.
template <class... Params>
unsigned resident_blocks(void (*kernel)(Params...), int threads, std::size_t smem, const char* name) {
  static std::mutex mutex;
  static std::map<std::tuple<void (*)(Params...), int, int, std::size_t>, unsigned> known;
  int device = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  const auto key = std::make_tuple(kernel, device, threads, smem);
  std::lock_guard lock(mutex);
  if (const auto it = known.find(key); it != known.end()) return it->second;
  int per_sm = 0, sms = 0;
  check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem),
        (std::string("cudaOccupancyMaxActiveBlocksPerMultiprocessor(") + name + ")").c_str());
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device),
        "cudaDeviceGetAttribute(MultiProcessorCount)");
  const unsigned blocks = static_cast<unsigned>(std::max(per_sm, 1)) * static_cast<unsigned>(std::max(sms, 1));
  known.emplace(key, blocks);
  return blocks;
}

/// Blocks of `threads` threads for one thread per element; std::invalid_argument naming the kernel when
/// the grid cannot hold them.
inline unsigned blocks_for(const char* kernel, index_t elements, int threads) {
  const index_t blocks = (elements + threads - 1) / threads;
  if (blocks > 2147483647)
    throw std::invalid_argument(std::string("cuda::") + kernel + ": " + std::to_string(elements) +
                                " elements exceed the grid");
  return static_cast<unsigned>(blocks);
}

/// In a kernel launched with blocks_for: the element of this thread (numbered across the grid).
__device__ __forceinline__ index_t flat_index() { return static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x; }

/// In a kernel: the last b in 0 .. count - 1 with first[b] * scale <= i (count >= 1; ascending offsets
/// first[0 .. count]: the range holding element i, empty ranges skipped).
__device__ __forceinline__ int range_of(const std::int64_t* first, int count, index_t i, index_t scale = 1) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (first[mid] * scale <= i) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

/// `bytes` rounded up to 256: the offsets of the arrays a launcher carves out of one scratch allocation.
inline std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

/// The bits that hold x (at least 1): the end bit of a radix sort of keys up to x.
inline int bits_for(unsigned long long x) {
  int bits = 1;
  while (bits < 64 && (x >> bits) != 0) ++bits;
  return bits;
}

/// A launcher's argument check: std::invalid_argument "cuda::<kernel>: <what>" unless ok.
inline void require(bool ok, const char* kernel, const std::string& what) {
  if (!ok) throw std::invalid_argument(std::string("cuda::") + kernel + ": " + what);
}

/// tf32 / bf16 launchers: std::invalid_argument naming `kernel` unless the current device has the
/// mma.sync tensor cores (compute capability 8.0 or newer).
inline void require_tensor_cores(const char* kernel) {
  int device = 0, major = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
  require(major >= 8, kernel, "tf32/bf16 need compute capability 8.0 or newer (device " + std::to_string(device) +
                                  " has " + std::to_string(major) + ".x)");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
