// BF16 Linear layers (Precision::bf16 on the CPU): the inputs rounded to BF16 into a staging block, the
// products on AMX tiles or AVX512-BF16 dot products with FP32 accumulation, then the bias, activation and
// residuals in FP32 (linear_impl.hpp's activations). Compiled for AVX-512 with BF16 and AMX; called only
// where cpu_bf16() found the instructions. share/docs/cpu-bf16.md.
#define SURROGATE_ISA_NS avx512bf16
#define SURROGATE_LINEAR_ROWS 6
#define SURROGATE_LINEAR_VECS 4
#include "linear_impl.hpp"

#include <immintrin.h>

// (No std:: algorithm templates here: an out-of-line copy compiled for AVX-512 could be linked into the
// other instruction sets' code; simd.hpp's scalar helpers instead.)

#include <cstring>

namespace surrogate::kernels::avx512bf16 {
namespace {

using simd::vf;
constexpr int kTileK = 32;        // inputs per AMX tile row (64 bytes of BF16)
constexpr int kStageK = 1024;     // inputs staged at once (larger layers stage in chunks)
constexpr int kMaxStageRows = 32; // two AMX row tiles

/// Rows [r0, r0 + n) of x, inputs [k0, k0 + kc) (kc a multiple of 32), rounded to BF16 (nearest even) into
/// stage (row stride kc); rows n .. rows_total and inputs from in() on are zero.
void stage_rows(const LinearArgs& a, index_t r0, int n, int k0, int kc, int rows_total, std::uint16_t* stage) {
  const int K = a.layer->in();
  // chunks of 32 inputs that all exist, and the inputs of the chunk after them
  const int full = static_cast<int>(simd::imax(0, simd::imin((K - k0) / kTileK, kc / kTileK)));
  const int valid = static_cast<int>(simd::imax(0, simd::imin(K - k0 - full * kTileK, kTileK)));
  const __mmask16 lo_mask = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  const __mmask16 hi_mask = valid <= 16 ? 0 : static_cast<__mmask16>((1u << (valid - 16)) - 1);
  for (int r = 0; r < rows_total; ++r) {
    std::uint16_t* dst = stage + static_cast<index_t>(r) * kc;
    if (r >= n) {
      std::memset(dst, 0, static_cast<std::size_t>(kc) * sizeof *dst);
      continue;
    }
    const float* src = a.x + (r0 + r) * a.ldx + k0;
    int c = 0;
    for (; c < full * kTileK; c += kTileK)
      _mm512_store_si512(dst + c, __m512i(_mm512_cvtne2ps_pbh(_mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c))));
    if (c < kc) {
      const __m512 lo = _mm512_maskz_loadu_ps(lo_mask, src + c);
      const __m512 hi = _mm512_maskz_loadu_ps(hi_mask, src + c + 16);
      _mm512_store_si512(dst + c, __m512i(_mm512_cvtne2ps_pbh(hi, lo)));
      std::memset(dst + c + kTileK, 0, static_cast<std::size_t>(kc - c - kTileK) * sizeof *dst);
    }
  }
}

/// y rows [r0, r0 + n), columns [c0, c0 + 16 * vecs) from the FP32 sums in `sums` (row stride ld_sums):
/// + bias, activation, + add1, + add2, in the order of the CUDA tensor-core kernel's epilogue. Four rows at a
/// time with the activation over all their vectors at once (independent chains the core can overlap).
template <int V, class F>
void finish_rows_with(const LinearArgs& a, index_t r0, int n, int c0, const float* sums, int ld_sums, F act) {
  const float* bias = a.layer->bias() + c0;
  vf b[V];
  for (int j = 0; j < V; ++j) b[j] = simd::load(bias + j * simd::W);
  auto rows = [&]<int R>(int r) {
    vf v[R][V];
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i)
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) v[i][j] = act(simd::load(sums + (r + i) * ld_sums + j * simd::W) + b[j]);
#pragma GCC unroll 4
    for (int i = 0; i < R; ++i) {
      const index_t row = r0 + r + i;
#pragma GCC unroll 4
      for (int j = 0; j < V; ++j) {
        const int col = c0 + j * simd::W;
        if (a.add1) v[i][j] += simd::load(a.add1 + row * a.ld_add1 + col);
        if (a.add2) v[i][j] += simd::load(a.add2 + row * a.ld_add2 + col);
        simd::store(a.y + row * a.ldy + col, v[i][j]);
      }
    }
  };
  int r = 0;
  for (; r + 4 <= n; r += 4) rows.template operator()<4>(r);
  for (; r < n; ++r) rows.template operator()<1>(r);
}

template <int V>
void finish_rows(const LinearArgs& a, index_t r0, int n, int c0, const float* sums, int ld_sums) {
  switch (a.act) {
    case Activation::gelu_tanh: return finish_rows_with<V>(a, r0, n, c0, sums, ld_sums, [](vf v) { return simd::gelu_tanh(v); });
    case Activation::gelu_erf: return finish_rows_with<V>(a, r0, n, c0, sums, ld_sums, [](vf v) { return simd::gelu_erf(v); });
    case Activation::silu: return finish_rows_with<V>(a, r0, n, c0, sums, ld_sums, [](vf v) { return simd::silu(v); });
    case Activation::relu: return finish_rows_with<V>(a, r0, n, c0, sums, ld_sums, [](vf v) { return simd::relu(v); });
    case Activation::none: break;
  }
  finish_rows_with<V>(a, r0, n, c0, sums, ld_sums, [](vf v) { return v; });
}

void finish_rows(const LinearArgs& a, index_t r0, int n, int c0, int vecs, const float* sums, int ld_sums) {
  switch (vecs) {
    case 4: return finish_rows<4>(a, r0, n, c0, sums, ld_sums);
    case 3: return finish_rows<3>(a, r0, n, c0, sums, ld_sums);
    case 2: return finish_rows<2>(a, r0, n, c0, sums, ld_sums);
    default: return finish_rows<1>(a, r0, n, c0, sums, ld_sums);
  }
}

// ---------------------------------------------------------------------------------------------------
// AMX: 2 x 2 tiles of 16 x 16 FP32 sums (32 rows, 32 columns) per pass; tiles 4, 5 the rows' inputs, 6, 7
// the weights' columns.

struct TileConfig {
  std::uint8_t palette = 1, start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

/// Tiles 0-3 = the products of the staged rows (kc inputs) and the weight columns at w (tiles 0, 1: rows
/// 0-15; 2, 3: rows 16-31; 0, 2: the first 16 columns). Returns before the tiles are complete.
template <bool kTwoRows, bool kTwoCols>
void amx_multiply(const std::uint16_t* stage, int kc, const std::uint16_t* w, index_t ldw_bytes) {
  _tile_zero(0);
  if constexpr (kTwoCols) _tile_zero(1);
  if constexpr (kTwoRows) _tile_zero(2);
  if constexpr (kTwoRows && kTwoCols) _tile_zero(3);
  const index_t ld_stage = static_cast<index_t>(kc) * 2;
  for (int kt = 0; kt < kc / kTileK; ++kt) {
    const std::uint16_t* b = w + static_cast<index_t>(kt) * 16 * (ldw_bytes / 2);
    _tile_loadd(4, stage + kt * kTileK, ld_stage);
    _tile_loadd(6, b, ldw_bytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (kTwoCols) {
      _tile_loadd(7, b + 32, ldw_bytes);
      _tile_dpbf16ps(1, 4, 7);
    }
    if constexpr (kTwoRows) {
      _tile_loadd(5, stage + 16 * kc + kt * kTileK, ld_stage);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (kTwoCols) _tile_dpbf16ps(3, 5, 7);
    }
  }
}

/// The tiles' sums to `sums` (32 x 32 floats, row stride 32).
template <bool kTwoRows, bool kTwoCols>
void amx_store(float* sums) {
  constexpr index_t ld = 32 * sizeof(float);
  _tile_stored(0, sums, ld);
  if constexpr (kTwoCols) _tile_stored(1, sums + 16, ld);
  if constexpr (kTwoRows) _tile_stored(2, sums + 16 * 32, ld);
  if constexpr (kTwoRows && kTwoCols) _tile_stored(3, sums + 16 * 32 + 16, ld);
}

template <bool kTwoRows, bool kTwoCols>
void amx_block(const std::uint16_t* stage, int kc, const std::uint16_t* w, index_t ldw_bytes, float* sums) {
  amx_multiply<kTwoRows, kTwoCols>(stage, kc, w, ldw_bytes);
  amx_store<kTwoRows, kTwoCols>(sums);
}

/// sums = the products of one block (32 x 32) over the staged inputs: the four tile shapes.
void amx_sums(bool two_rows, bool two_cols, const std::uint16_t* stage, int kc, const std::uint16_t* w,
              index_t ldw_bytes, float* sums) {
  if (two_rows && two_cols) amx_block<true, true>(stage, kc, w, ldw_bytes, sums);
  else if (two_rows) amx_block<true, false>(stage, kc, w, ldw_bytes, sums);
  else if (two_cols) amx_block<false, true>(stage, kc, w, ldw_bytes, sums);
  else amx_block<false, false>(stage, kc, w, ldw_bytes, sums);
}

/// A block whose sums wait for their epilogue.
struct PendingBlock {
  index_t r0 = -1;
  int n = 0, c0 = 0, vecs = 0;
  const float* sums = nullptr;
};

void linear_amx(const LinearArgs& a) {
  const PackedLinear& layer = *a.layer;
  const int Kp = layer.in_bf16_pad(), N = layer.out_pad();
  const std::uint16_t* wt = layer.wt_bf16();
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.colsb[t] = 64;
    cfg.rows[t] = 16;
  }
  _tile_loadconfig(&cfg);
  alignas(64) std::uint16_t stage[kMaxStageRows * kStageK];
  alignas(64) float sums[2][32 * 32], part[32 * 32];
  const index_t ldw_bytes = static_cast<index_t>(N) * 4;  // one row of input pairs
  PendingBlock pending;
  int buffer = 0;
  for (index_t r0 = 0; r0 < a.rows; r0 += kMaxStageRows) {
    const int n = static_cast<int>(simd::imin(kMaxStageRows, a.rows - r0));
    const bool two_rows = n > 16;
    const int staged_rows = two_rows ? 32 : 16;
    if (Kp <= kStageK) stage_rows(a, r0, n, 0, Kp, staged_rows, stage);
    for (int c0 = 0; c0 < N; c0 += 32) {
      const bool two_cols = N - c0 > 16;
      float* out = sums[buffer];
      if (Kp == 0) {
        std::memset(out, 0, sizeof sums[0]);
      } else if (Kp <= kStageK) {
        // The tiles of this block multiply while the previous block's epilogue runs on the vector units.
        const std::uint16_t* w = wt + static_cast<index_t>(c0) * 2;
        if (two_rows && two_cols) amx_multiply<true, true>(stage, Kp, w, ldw_bytes);
        else if (two_rows) amx_multiply<true, false>(stage, Kp, w, ldw_bytes);
        else if (two_cols) amx_multiply<false, true>(stage, Kp, w, ldw_bytes);
        else amx_multiply<false, false>(stage, Kp, w, ldw_bytes);
        if (pending.sums) finish_rows(a, pending.r0, pending.n, pending.c0, pending.vecs, pending.sums, 32);
        pending.sums = nullptr;
        if (two_rows && two_cols) amx_store<true, true>(out);
        else if (two_rows) amx_store<true, false>(out);
        else if (two_cols) amx_store<false, true>(out);
        else amx_store<false, false>(out);
      } else {
        // Layers wider than one staging block: chunks of inputs, their sums added in chunk order.
        for (int k0 = 0; k0 < Kp; k0 += kStageK) {
          const int kc = static_cast<int>(simd::imin(Kp - k0, kStageK));
          stage_rows(a, r0, n, k0, kc, staged_rows, stage);
          amx_sums(two_rows, two_cols, stage, kc, wt + (static_cast<index_t>(k0 / 2) * N + c0) * 2, ldw_bytes,
                   k0 == 0 ? out : part);
          if (k0 > 0)
            for (int i = 0; i < 32 * 32; i += simd::W) simd::store(out + i, simd::load(out + i) + simd::load(part + i));
        }
      }
      if (pending.sums) finish_rows(a, pending.r0, pending.n, pending.c0, pending.vecs, pending.sums, 32);
      pending = {r0, n, c0, two_cols ? 2 : 1, out};
      buffer ^= 1;
    }
  }
  if (pending.sums) finish_rows(a, pending.r0, pending.n, pending.c0, pending.vecs, pending.sums, 32);
  _tile_release();
}

// ---------------------------------------------------------------------------------------------------
// AVX512-BF16: kRows rows x NV vectors of 16 columns in registers; each VDPBF16PS adds a pair of inputs.

constexpr int kRows = 6;

template <int NV>
void dot_sums(const std::uint16_t* stage, int kc, const std::uint16_t* w, index_t N, float* sums, bool first) {
  __m512 acc[kRows][NV];
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) acc[r][j] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(sums + r * 64 + j * 16);
  for (int kp = 0; kp < kc / 2; ++kp) {
    __m512bh wv[NV];
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) wv[j] = __m512bh(_mm512_loadu_si512(w + (kp * N + j * 16) * 2));
#pragma GCC unroll 8
    for (int r = 0; r < kRows; ++r) {
      std::int32_t pair;
      std::memcpy(&pair, stage + r * kc + 2 * kp, sizeof pair);
      const __m512bh xb = __m512bh(_mm512_set1_epi32(pair));
#pragma GCC unroll 4
      for (int j = 0; j < NV; ++j) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], xb, wv[j]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 4
    for (int j = 0; j < NV; ++j) _mm512_storeu_ps(sums + r * 64 + j * 16, acc[r][j]);
}

void linear_dot(const LinearArgs& a) {
  const PackedLinear& layer = *a.layer;
  const int Kp = layer.in_bf16_pad(), N = layer.out_pad();
  const std::uint16_t* wt = layer.wt_bf16();
  alignas(64) std::uint16_t stage[kRows * kStageK];
  alignas(64) float sums[kRows * 64];
  const bool one_chunk = Kp <= kStageK;
  for (index_t r0 = 0; r0 < a.rows; r0 += kRows) {
    const int n = static_cast<int>(simd::imin(kRows, a.rows - r0));
    if (one_chunk) stage_rows(a, r0, n, 0, Kp, kRows, stage);
    for (int c0 = 0; c0 < N; c0 += 64) {
      const int vecs = static_cast<int>(simd::imin(4, (N - c0) / 16));
      if (Kp == 0) std::memset(sums, 0, sizeof sums);
      for (int k0 = 0; k0 < Kp; k0 += kStageK) {
        const int kc = static_cast<int>(simd::imin(Kp - k0, kStageK));
        if (!one_chunk) stage_rows(a, r0, n, k0, kc, kRows, stage);
        const std::uint16_t* w = wt + (static_cast<index_t>(k0 / 2) * N + c0) * 2;
        switch (vecs) {
          case 4: dot_sums<4>(stage, kc, w, N, sums, k0 == 0); break;
          case 3: dot_sums<3>(stage, kc, w, N, sums, k0 == 0); break;
          case 2: dot_sums<2>(stage, kc, w, N, sums, k0 == 0); break;
          default: dot_sums<1>(stage, kc, w, N, sums, k0 == 0); break;
        }
      }
      finish_rows(a, r0, n, c0, vecs, sums, 64);
    }
  }
}

}  // namespace
}  // namespace surrogate::kernels::avx512bf16

namespace surrogate::kernels {
void (*bf16_linear(LinearEngine engine) noexcept)(const LinearArgs&) {
  switch (engine) {
    case LinearEngine::amx_bf16: return &avx512bf16::linear_amx;
    case LinearEngine::avx512_bf16: return &avx512bf16::linear_dot;
    case LinearEngine::fp32: break;
  }
  return nullptr;
}
}  // namespace surrogate::kernels
