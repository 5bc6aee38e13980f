// The CUDA language for the host compiler (share/docs/cuda.md, "The host backend"): force-included
// (-include) before a kernels/cuda/*.cu file compiled into the host backend. Keywords, built-in variables,
// barriers, warp operations, atomics and intrinsics map onto the engine of emulator.hpp; the runtime
// calls the launchers make go to the emulator. Compiled with -ffp-contract=off: the host fuses only what
// the source writes as fmaf/fma, as the device does; nvcc (--fmad=true) may fuse other a * b + c too, so
// those agree with the device to rounding (share/docs/cuda.md, "What it does not check").
#pragma once

#include <cuda_runtime_api.h>
#include <cuda_bf16.h>  // __nv_bfloat16 and its conversions have host implementations

#include <math.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "emulator.hpp"
#include "mma.hpp"

#define SURROGATE_CUDA_HOST_BACKEND 1

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static thread_local  // one block runs at a time on a host thread
#define __align__(n) alignas(n)

#define threadIdx (::surrogate::kernels::cuda::emulator::current_thread().thread_index)
#define blockIdx (::surrogate::kernels::cuda::emulator::current_thread().block_index)
#define blockDim (::surrogate::kernels::cuda::emulator::current_thread().block_dim)
#define gridDim (::surrogate::kernels::cuda::emulator::current_thread().grid_dim)

/// `extern __shared__ T name[]` of the CUDA source: the block's dynamic shared memory.
#define SURROGATE_DYNAMIC_SHARED(T, name) \
  T* const name = reinterpret_cast<T*>(::surrogate::kernels::cuda::emulator::current_thread().dynamic_smem)

// The runtime calls of the launchers.
#define cudaFuncSetAttribute(kernel, attribute, value) \
  ::surrogate::kernels::cuda::emulator::func_set_attribute(reinterpret_cast<const void*>(kernel), attribute, value)
#define cudaGetDevice(device) (*(device) = ::surrogate::kernels::cuda::kEmulatedDevice, cudaSuccess)
#define cudaDeviceGetAttribute(value, attribute, device) \
  ::surrogate::kernels::cuda::emulator::device_attribute(value, attribute)
#define cudaOccupancyMaxActiveBlocksPerMultiprocessor(blocks, kernel, threads, smem) \
  ((void)(kernel), ::surrogate::kernels::cuda::emulator::occupancy(blocks, threads, smem))

// CUDA's global min and max (the common type of the arguments; floating point as fmin and fmax).
template <class A, class B>
auto min(A a, B b) {
  using T = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<T>) return fmin(T(a), T(b));
  else return T(b) < T(a) ? T(b) : T(a);
}
template <class A, class B>
auto max(A a, B b) {
  using T = std::common_type_t<A, B>;
  if constexpr (std::is_floating_point_v<T>) return fmax(T(a), T(b));
  else return T(a) < T(b) ? T(b) : T(a);
}

inline void __syncthreads() { ::surrogate::kernels::cuda::emulator::sync_threads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::surrogate::kernels::cuda::emulator::sync_warp(mask); }
[[noreturn]] inline void __trap() { ::surrogate::kernels::cuda::emulator::kernel_fault("__trap() in a kernel"); }

namespace surrogate::kernels::cuda::emulator {
template <class T>
T shuffle(unsigned mask, T value, int source, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>);
  unsigned long long bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  (void)width;
  bits = warp_exchange(mask, bits, source);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}
inline int lane_id() {
  const ThreadContext& c = current_thread();
  return static_cast<int>((c.thread_index.x + c.block_dim.x * (c.thread_index.y + c.block_dim.y * c.thread_index.z)) % 32);
}
}  // namespace surrogate::kernels::cuda::emulator

// Shuffles within segments of `width` lanes, as CUDA defines them.
template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
  const int lane = surrogate::kernels::cuda::emulator::lane_id();
  const int source = (lane & ~(width - 1)) + (src & (width - 1));
  return surrogate::kernels::cuda::emulator::shuffle(mask, v, source, width);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
  const int lane = surrogate::kernels::cuda::emulator::lane_id();
  int source = lane ^ lane_mask;
  if ((source & ~(width - 1)) != (lane & ~(width - 1))) source = lane;
  return surrogate::kernels::cuda::emulator::shuffle(mask, v, source, width);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = surrogate::kernels::cuda::emulator::lane_id();
  int source = lane + static_cast<int>(delta);
  if ((source & ~(width - 1)) != (lane & ~(width - 1))) source = lane;
  return surrogate::kernels::cuda::emulator::shuffle(mask, v, source, width);
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
  const int lane = surrogate::kernels::cuda::emulator::lane_id();
  int source = lane - static_cast<int>(delta);
  if (source < 0 || (source & ~(width - 1)) != (lane & ~(width - 1))) source = lane;
  return surrogate::kernels::cuda::emulator::shuffle(mask, v, source, width);
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return surrogate::kernels::cuda::emulator::warp_ballot(mask, predicate != 0);
}
inline int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }

// Atomics (blocks run one after another, but a kernel's threads must still not assume an order).
template <class T>
T atomicAdd(T* address, T value) {
  return std::atomic_ref<T>(*address).fetch_add(value);
}
template <class T>
T atomicMax(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (old < value && !a.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <class T>
T atomicMin(T* address, T value) {
  std::atomic_ref<T> a(*address);
  T old = a.load();
  while (value < old && !a.compare_exchange_weak(old, value)) {
  }
  return old;
}
template <class T>
T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;
}
template <class T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}

template <class T>
T __ldg(const T* p) {
  return *p;
}

// Bit casts and rounding-mode intrinsics (the host's IEEE arithmetic rounds to nearest even).
template <class To, class From>
To surrogate_bit_cast(From from) {
  To to;
  std::memcpy(&to, &from, sizeof to);
  return to;
}
inline float __int_as_float(int i) { return surrogate_bit_cast<float>(i); }
inline int __float_as_int(float f) { return surrogate_bit_cast<int>(f); }
inline float __uint_as_float(unsigned i) { return surrogate_bit_cast<float>(i); }
inline unsigned __float_as_uint(float f) { return surrogate_bit_cast<unsigned>(f); }
inline double __longlong_as_double(long long i) { return surrogate_bit_cast<double>(i); }
inline long long __double_as_longlong(double d) { return surrogate_bit_cast<long long>(d); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
// ex2.approx.ftz.f32 (the special-function unit's 2^x): exp2f rounded to nearest, where the device's own
// approximation is within 2 ulp of it; subnormal inputs and results flushed to zero, 2^-inf = +0.
inline float surrogate_ex2_approx_ftz(float x) {
  if (fpclassify(x) == FP_SUBNORMAL) x = 0.0f;
  const float y = exp2f(x);
  return fpclassify(y) == FP_SUBNORMAL ? 0.0f : y;
}
// cvt.rzi.s64.f64: clamped to the range, NaN to 0 (a plain cast would be undefined there)
inline long long __double2ll_rz(double d) {
  if (!(d == d)) return 0;
  if (d >= 0x1p63) return 0x7fffffffffffffffLL;
  if (d <= -0x1p63) return -0x7fffffffffffffffLL - 1;
  return static_cast<long long>(d);
}
