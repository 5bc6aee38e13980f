// nvcuda::wmma for the host backend (share/docs/cuda.md, "The host backend"): the fragment shapes the
// tensor-core MLP uses. Lane l of a warp holds elements l, l + 32, ... of a tile in row-major order;
// mma_sync is warp-collective (every lane reads the others' fragments between two warp barriers) and
// accumulates in FP32, k in order, from the accumulator's value.
#pragma once

#include <cuda_bf16.h>

#include <math.h>

#include <cstdint>
#include <cstring>

#include "emulator.hpp"

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
enum layout_t { mem_row_major, mem_col_major };
namespace precision {
struct tf32 {};
}  // namespace precision

namespace detail {
template <class Use, int M, int N, int K>
struct TileShape;
template <int M, int N, int K>
struct TileShape<matrix_a, M, N, K> { static constexpr int rows = M, cols = K; };
template <int M, int N, int K>
struct TileShape<matrix_b, M, N, K> { static constexpr int rows = K, cols = N; };
template <int M, int N, int K>
struct TileShape<accumulator, M, N, K> { static constexpr int rows = M, cols = N; };
template <class T>
struct Element { using type = T; };
template <>
struct Element<precision::tf32> { using type = float; };
inline int lane() {
  const auto& c = ::surrogate::kernels::cuda::emulator::current_thread();
  return static_cast<int>((c.thread_index.x + c.block_dim.x * (c.thread_index.y + c.block_dim.y * c.thread_index.z)) % 32);
}
inline float value(float v) { return v; }
inline float value(__nv_bfloat16 v) { return __bfloat162float(v); }
/// Element (r, c) of fragment type F, whose lanes' fragments are at the addresses `lanes`.
template <class F>
float element(const unsigned long long* lanes, int r, int c) {
  const int e = r * F::cols + c;
  return value(reinterpret_cast<const F*>(lanes[e % 32])->x[e / 32]);
}
}  // namespace detail

template <class Use, int M, int N, int K, class T = float, class Layout = void>
struct fragment {
  static constexpr int rows = detail::TileShape<Use, M, N, K>::rows;
  static constexpr int cols = detail::TileShape<Use, M, N, K>::cols;
  static constexpr int num_elements = rows * cols / 32;
  using element_type = typename detail::Element<T>::type;
  element_type x[num_elements];
};

template <class F, class V>
void fill_fragment(F& f, V v) {
  for (auto& e : f.x) e = static_cast<typename F::element_type>(v);
}

template <class F, class P>
void load_matrix_sync(F& f, const P* p, unsigned ld) {
  const int l = detail::lane();
  for (int t = 0; t < F::num_elements; ++t) {
    const int e = l + 32 * t;
    f.x[t] = p[static_cast<std::size_t>(e / F::cols) * ld + static_cast<std::size_t>(e % F::cols)];
  }
}

template <class F>
void store_matrix_sync(float* p, const F& f, unsigned ld, layout_t layout) {
  if (layout != mem_row_major) ::surrogate::kernels::cuda::emulator::kernel_fault("wmma: only mem_row_major is emulated");
  const int l = detail::lane();
  for (int t = 0; t < F::num_elements; ++t) {
    const int e = l + 32 * t;
    p[static_cast<std::size_t>(e / F::cols) * ld + static_cast<std::size_t>(e % F::cols)] = f.x[t];
  }
}

template <class D, class A, class B, class C>
void mma_sync(D& d, const A& a, const B& b, const C& c) {
  namespace emu = ::surrogate::kernels::cuda::emulator;
  unsigned long long at[32], bt[32];
  emu::warp_all(0xffffffffu, reinterpret_cast<std::uintptr_t>(&a), at);
  emu::warp_all(0xffffffffu, reinterpret_cast<std::uintptr_t>(&b), bt);
  const int l = detail::lane();
  float out[D::num_elements];
  for (int t = 0; t < D::num_elements; ++t) {
    const int e = l + 32 * t, r = e / D::cols, col = e % D::cols;
    float s = c.x[t];
    for (int k = 0; k < A::cols; ++k) s = fmaf(detail::element<A>(at, r, k), detail::element<B>(bt, k, col), s);
    out[t] = s;
  }
  emu::sync_warp(0xffffffffu);  // every lane has read the others' a and b before anyone changes them
  for (int t = 0; t < D::num_elements; ++t) d.x[t] = out[t];
}

/// cvt.rna.tf32.f32: 10 mantissa bits, to nearest, ties away from zero.
inline float __float_to_tf32(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  if ((bits & 0x7f800000u) != 0x7f800000u) bits = (bits + 0x1000u) & ~0x1fffu;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

}  // namespace nvcuda::wmma
