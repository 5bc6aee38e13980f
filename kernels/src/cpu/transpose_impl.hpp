// Block transposition (TransposeArgs): d[c*ldd + r] = s[r*lds + c], into floats or (exactly converted)
// doubles. With AVX-512, 16 x 16 tiles in registers (unpack, in-lane shuffle, two 128-bit-lane shuffles:
// 64 shuffles for 256 values) with masked loads and stores at the edges, so each destination row gets
// whole 16-value stores; otherwise 4 x 4 tiles in SSE-sized vectors and the edges value by value.
#pragma once

#include <utility>

#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

#if defined(__AVX512F__)
/// One tile of up to 16 x 16: source rows [0, rows), columns [0, cols). (GCC vector shuffles rather than
/// the _mm512 shuffle intrinsics, which GCC 12 reports as reading undefined values.)
template <class T>
inline void transpose_tile(const float* s, index_t lds, T* d, index_t ldd, int rows, int cols) {
  using simd::vf;
  typedef double vd8 __attribute__((vector_size(64)));
  const __mmask16 col_mask = static_cast<__mmask16>((1u << cols) - 1u);
  vf r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = i < rows ? _mm512_maskz_loadu_ps(col_mask, s + i * lds) : vf{};
  for (int i = 0; i < 16; i += 2) {  // t[i]: per 128-bit lane k, r_i[4k], r_i+1[4k], r_i[4k+1], r_i+1[4k+1]
    t[i] = __builtin_shufflevector(r[i], r[i + 1], 0, 16, 1, 17, 4, 20, 5, 21, 8, 24, 9, 25, 12, 28, 13, 29);
    t[i + 1] = __builtin_shufflevector(r[i], r[i + 1], 2, 18, 3, 19, 6, 22, 7, 23, 10, 26, 11, 27, 14, 30, 15, 31);
  }
  for (int g = 0; g < 16; g += 4) {  // r[g + m]: per lane k, column 4k + m of rows g .. g + 3
    r[g] = __builtin_shufflevector(t[g], t[g + 2], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    r[g + 1] = __builtin_shufflevector(t[g], t[g + 2], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
    r[g + 2] = __builtin_shufflevector(t[g + 1], t[g + 3], 0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29);
    r[g + 3] = __builtin_shufflevector(t[g + 1], t[g + 3], 2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31);
  }
  const __mmask16 row_mask = static_cast<__mmask16>((1u << rows) - 1u);
  const auto put = [&](int c, vf v) {
    if (c >= cols) return;
    if constexpr (sizeof(T) == sizeof(float)) {
      _mm512_mask_storeu_ps(d + c * ldd, row_mask, v);
    } else {
      const vd8 lo = __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), vd8),
                hi = __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), vd8);
      _mm512_mask_storeu_pd(d + c * ldd, static_cast<__mmask8>(row_mask & 0xFF), lo);
      _mm512_mask_storeu_pd(d + c * ldd + 8, static_cast<__mmask8>(row_mask >> 8), hi);
    }
  };
  // Columns m, 4 + m, 8 + m, 12 + m: the 128-bit lanes of r[m], r[4 + m], r[8 + m], r[12 + m].
  for (int m = 0; m < 4; ++m) {
    const vf even01 = __builtin_shufflevector(r[m], r[4 + m], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
             even23 = __builtin_shufflevector(r[8 + m], r[12 + m], 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27),
             odd01 = __builtin_shufflevector(r[m], r[4 + m], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31),
             odd23 = __builtin_shufflevector(r[8 + m], r[12 + m], 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31);
    put(m, __builtin_shufflevector(even01, even23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27));
    put(8 + m, __builtin_shufflevector(even01, even23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
    put(4 + m, __builtin_shufflevector(odd01, odd23, 0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27));
    put(12 + m, __builtin_shufflevector(odd01, odd23, 4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23, 28, 29, 30, 31));
  }
}

template <class T>
inline void transpose_block(const float* s, index_t lds, T* d, index_t ldd, index_t rows, int cols) {
  for (index_t r = 0; r < rows; r += 16)
    for (int c = 0; c < cols; c += 16)
      transpose_tile(s + r * lds + c, lds, d + c * ldd + r, ldd, static_cast<int>(simd::imin(16, rows - r)),
                     static_cast<int>(simd::imin(16, cols - c)));
}
#else
template <class T>
inline void transpose_block(const float* s, index_t lds, T* d, index_t ldd, index_t rows, int cols) {
  typedef float f4 __attribute__((vector_size(16)));
  const index_t rows4 = rows / 4 * 4;
  const int cols4 = cols / 4 * 4;
  for (index_t r = 0; r < rows4; r += 4)
    for (int c = 0; c < cols4; c += 4) {
      f4 x[4];
      for (int j = 0; j < 4; ++j) std::memcpy(&x[j], s + (r + j) * lds + c, sizeof(f4));
      const f4 lo01 = __builtin_shufflevector(x[0], x[1], 0, 4, 1, 5), hi01 = __builtin_shufflevector(x[0], x[1], 2, 6, 3, 7),
               lo23 = __builtin_shufflevector(x[2], x[3], 0, 4, 1, 5), hi23 = __builtin_shufflevector(x[2], x[3], 2, 6, 3, 7);
      const f4 t[4] = {__builtin_shufflevector(lo01, lo23, 0, 1, 4, 5), __builtin_shufflevector(lo01, lo23, 2, 3, 6, 7),
                       __builtin_shufflevector(hi01, hi23, 0, 1, 4, 5), __builtin_shufflevector(hi01, hi23, 2, 3, 6, 7)};
      for (int j = 0; j < 4; ++j) {
        if constexpr (sizeof(T) == sizeof(float)) {
          std::memcpy(d + (c + j) * ldd + r, &t[j], sizeof(f4));
        } else {
          typedef double d4 __attribute__((vector_size(32)));
          const d4 wide = __builtin_convertvector(t[j], d4);
          std::memcpy(d + (c + j) * ldd + r, &wide, sizeof(d4));
        }
      }
    }
  for (index_t r = 0; r < rows; ++r)
    for (int c = r < rows4 ? cols4 : 0; c < cols; ++c) d[c * ldd + r] = static_cast<T>(s[r * lds + c]);
}
#endif

/// Stage H of transpose_square: rows a = r[i] and b = r[i + H] (bit H of i clear) exchange their
/// off-diagonal H-lane blocks, which swaps bit H of the row index with bit H of the lane index.
template <int N, int H, class V, int... J>
[[gnu::always_inline]] inline void swap_off_diagonal(V& a, V& b, std::integer_sequence<int, J...>) {
  const V lo = __builtin_shufflevector(a, b, ((J & H) ? N + J - H : J)...);
  const V hi = __builtin_shufflevector(a, b, ((J & H) ? N + J : J + H)...);
  a = lo;
  b = hi;
}

/// r[i][j] <- r[j][i] for N vectors of N lanes (N a power of two): log2 N stages of N shuffles, any
/// element type (the register tile of rows gathered by index, bucket_impl.hpp).
template <int N, int H = N / 2, class V>
[[gnu::always_inline]] inline void transpose_square(V* r) {
  if constexpr (H >= 1) {
    for (int i = 0; i < N; ++i)
      if (!(i & H)) swap_off_diagonal<N, H>(r[i], r[i + H], std::make_integer_sequence<int, N>{});
    transpose_square<N, H / 2>(r);
  }
}

inline void transpose(const TransposeArgs& a) {
  if (a.d_double)
    transpose_block(a.s, a.lds, a.d_double, a.ldd, a.rows, a.cols);
  else
    transpose_block(a.s, a.lds, a.d, a.ldd, a.rows, a.cols);
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
