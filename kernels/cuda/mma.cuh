// Warp-level tensor-core products (mma.sync, compute capability 8.0 and newer) and the operand
// conversions they take, for the kernels of both backends: inline PTX on a GPU, host/mma.hpp's emulation
// in the host backend. Fragment layouts: host/mma.hpp.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "launch.cuh"

#if !defined(SURROGATE_CUDA_HOST_BACKEND)
#include <mma.h>  // __float_to_tf32
#endif

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace mma {

/// The bf16 pair (lo, hi), each rounded to nearest even, lo in the low half (an mma operand register).
__device__ __forceinline__ std::uint32_t bf16x2(float lo, float hi) {
  return static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(lo))) |
         (static_cast<std::uint32_t>(__bfloat16_as_ushort(__float2bfloat16_rn(hi))) << 16);
}

/// x rounded to tf32 (cvt.rna.tf32.f32: 10 stored mantissa bits, nearest, ties away from zero), as bits.
__device__ __forceinline__ std::uint32_t tf32(float x) {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  return emulator::tf32_bits(x);
#else
  return __float_as_uint(nvcuda::wmma::__float_to_tf32(x));
#endif
}

/// d += a b: m16n8k16, bf16 operands, f32 accumulators.
__device__ __forceinline__ void bf16_m16n8k16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  emulator::mma_m16n8k16_bf16(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();  // the launchers refuse devices below compute capability 8.0
#endif
}

/// d += a b: m16n8k8, tf32 operands (bits of tf32(x)), f32 accumulators.
__device__ __forceinline__ void tf32_m16n8k8(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  emulator::mma_m16n8k8_tf32(d, a, b);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
  __trap();
#endif
}

}  // namespace mma
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
