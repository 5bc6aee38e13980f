// mma.sync for the host backend (share/docs/cuda.md, "The host backend"): the two warp-level tensor-core
// products of kernels/cuda/mma.cuh, with the operand fragments of the PTX ISA ("Matrix Fragments for
// mma.m16n8k16 / mma.m16n8k8"). Lane l = 4 g + t of the warp holds
//
//   bf16 m16n8k16  A (16 x 16, bf16 pairs, low half first): a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..],
//                  a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];  B (16 x 8): b[0] = B[2t..2t+1][g],
//                  b[1] = B[2t+8..2t+9][g]
//   tf32 m16n8k8   A (16 x 8): a[0] = A[g][t], a[1] = A[g+8][t], a[2] = A[g][t+4], a[3] = A[g+8][t+4];
//                  B (8 x 8): b[0] = B[t][g], b[1] = B[t+4][g]  (the low 13 bits of a tf32 operand are ignored)
//   C = D (16 x 8, f32): d[0], d[1] = D[g][2t], D[g][2t+1]; d[2], d[3] = D[g+8][2t], D[g+8][2t+1]
//
// Each output accumulates from its d in k order with one fmaf per product (products of bf16 or tf32
// operands are exact in f32): the tensor cores sum in an order of their own, so a GPU agrees to rounding.
// Warp-collective: every lane reads the others' fragments between two warp barriers.
#pragma once

#include <cstdint>
#include <cstring>

#include <math.h>

#include "emulator.hpp"

namespace surrogate::kernels::cuda::emulator {
namespace mma_detail {

inline float bits_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}
/// Half h (0: low, 1: high) of a bf16 pair as float.
inline float bf16_half(std::uint32_t pair, int h) { return bits_float(h ? pair & 0xffff0000u : pair << 16); }
inline float tf32_value(std::uint32_t bits) { return bits_float(bits & ~0x1fffu); }
inline int lane() {
  const ThreadContext& c = current_thread();
  return static_cast<int>((c.thread_index.x + c.block_dim.x * (c.thread_index.y + c.block_dim.y * c.thread_index.z)) % 32);
}

/// d += A B for the warp's fragments; a_at(lanes, r, k) and b_at(lanes, k, n) read an element of A or B
/// from the fragments of every lane (lanes[l]: lane l's fragment address).
template <int K, class AAt, class BAt>
void multiply(float (&d)[4], const void* a, const void* b, AAt a_at, BAt b_at) {
  unsigned long long a_lanes[32], b_lanes[32];
  warp_all(0xffffffffu, reinterpret_cast<std::uintptr_t>(a), a_lanes);
  warp_all(0xffffffffu, reinterpret_cast<std::uintptr_t>(b), b_lanes);
  const int l = lane(), g = l / 4, t = l % 4;
  float out[4];
  for (int e = 0; e < 4; ++e) {
    const int r = g + 8 * (e / 2), n = 2 * t + e % 2;
    float s = d[e];
    for (int k = 0; k < K; ++k) s = fmaf(a_at(a_lanes, r, k), b_at(b_lanes, k, n), s);
    out[e] = s;
  }
  sync_warp(0xffffffffu);  // every lane has read the others' fragments before anyone changes them
  for (int e = 0; e < 4; ++e) d[e] = out[e];
}

inline const std::uint32_t* words(const unsigned long long* lanes, int lane) {
  return reinterpret_cast<const std::uint32_t*>(lanes[lane]);
}

}  // namespace mma_detail

/// cvt.rna.tf32.f32 as bits: 10 stored mantissa bits, to nearest, ties away from zero (Inf and NaN kept).
inline std::uint32_t tf32_bits(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  return bits;
}

/// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 d, a, b, d.
inline void mma_m16n8k16_bf16(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  using namespace mma_detail;
  mma_detail::multiply<16>(
      d, a, b,
      [](const unsigned long long* lanes, int r, int k) {
        return bf16_half(words(lanes, 4 * (r % 8) + (k % 8) / 2)[r / 8 + 2 * (k / 8)], k % 2);
      },
      [](const unsigned long long* lanes, int k, int n) {
        return bf16_half(words(lanes, 4 * n + (k % 8) / 2)[k / 8], k % 2);
      });
}

/// mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 d, a, b, d.
inline void mma_m16n8k8_tf32(float (&d)[4], const std::uint32_t (&a)[4], const std::uint32_t (&b)[2]) {
  using namespace mma_detail;
  mma_detail::multiply<8>(
      d, a, b,
      [](const unsigned long long* lanes, int r, int k) {
        return tf32_value(words(lanes, 4 * (r % 8) + k % 4)[r / 8 + 2 * (k / 4)]);
      },
      [](const unsigned long long* lanes, int k, int n) { return tf32_value(words(lanes, 4 * n + k % 4)[k / 4]); });
}

}  // namespace surrogate::kernels::cuda::emulator
