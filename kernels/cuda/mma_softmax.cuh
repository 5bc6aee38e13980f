// The online softmax of 16 rows over columns on the tensor cores, shared by FLARE's encode (rows: latents,
// columns: points) and decode (rows: points, columns: latents) in tf32 / bf16 (latent_encode.cu,
// latent_decode.cu): one warp holds the 16 rows' vectors as mma A fragments; per 16 staged columns two
// m16n8 products give the logits (bf16 m16n8k16 per 16 channels, tf32 m16n8k8 per 8), each row's running
// maximum and sum stay FP32 across its 4 lanes, and the weights exp(l - max) (shared between the fp32
// kernels' FMA polynomial and the special-function unit: MmaSoftmax::weight) times the columns' values
// accumulate on the tensor cores (the logits' accumulator layout is the A layout as it stands: bf16 by the
// fragments' design, tf32 with the columns of each 8 taken in another order), rescaled when a maximum
// grows. Lane 4g + t holds rows g and g + 8 (mma.cuh, host/mma.hpp). Also the staging of the columns that
// these kernels (and the ball, bucket and S2 attentions) share: stage_columns, stage_columns_async and
// stream_passes, a block's passes over tiles arriving by cp.async.
#pragma once

#include <cstdint>
#include <type_traits>

#include "async_copy.cuh"
#include "latent_softmax.cuh"
#include "mma.cuh"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace detail {

/// f(std::integral_constant<int, kE>{}) with kE the width (1 .. 64) padded to 8, 16, 32 or 64: the
/// MmaSoftmax widths the tensor-core kernels are instantiated for (host side, their launchers).
template <class F>
void dispatch_mma_width(int width, F&& f) {
  switch (width <= 8 ? 8 : width <= 16 ? 16 : width <= 32 ? 32 : 64) {
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    default: f(std::integral_constant<int, 64>{}); break;
  }
}

/// Stages kRows columns of kWidth values into shared memory, the block's threads striding over it:
/// tile[j kWidth + e] = at(j, e) for the `count` first columns and e < width, 0 elsewhere. A thread
/// issues up to kStageBatch loads before its first store, so their trips from memory overlap: a store
/// after each load would wait for memory once per value.
inline constexpr int kStageBatch = 8;
template <int kRows, int kWidth, class At>
__device__ __forceinline__ void stage_columns(float* tile, int count, int width, At&& at) {
  constexpr int kSize = kRows * kWidth;
  const int stride = static_cast<int>(blockDim.x);
  for (int i0 = static_cast<int>(threadIdx.x); i0 < kSize; i0 += kStageBatch * stride) {
    float v[kStageBatch];
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b) {
      const int i = i0 + b * stride, j = i / kWidth, e = i % kWidth;
      v[b] = i < kSize && j < count && e < width ? at(j, e) : 0.0f;
    }
#pragma unroll
    for (int b = 0; b < kStageBatch; ++b)
      if (i0 + b * stride < kSize) tile[i0 + b * stride] = v[b];
  }
}

/// stage_columns by cp.async (async_copy.cuh): tile[j kWidth + e] receives *at(j, e) (a pointer) for the
/// `count` first columns and e < width, zeros elsewhere (their copies name `any`, a valid address, and
/// read nothing). The caller commits, waits and synchronises the block before reading the tile.
template <int kRows, int kWidth, class At>
__device__ __forceinline__ void stage_columns_async(float* tile, int count, int width, const float* any, At&& at) {
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kWidth; i += static_cast<int>(blockDim.x)) {
    const int j = i / kWidth, e = i % kWidth;
    const bool valid = j < count && e < width;
    async_copy::copy<4>(tile + i, valid ? at(j, e) : any, valid);
  }
}

/// Passes a block keeps in flight in stream_passes, for tiles of `bytes` a pass: three while they take at
/// most 32 KiB of shared memory, two up to 40 KiB, else one (whose copies still travel together).
__host__ __device__ constexpr int pipeline_stages(int bytes) {
  return 3 * bytes <= 32 * 1024 ? 3 : 2 * bytes <= 40 * 1024 ? 2 : 1;
}

/// The passes of a block over staged tiles, kStages deep: issue(pass, slot) starts the cp.async copies of
/// a pass into its slot (pass % kStages) and compute(pass, slot) reads them, in pass order, every thread of
/// the block calling both. While the block computes on one pass the next kStages - 1 travel; one barrier a
/// pass, after which every warp has left the previous pass, whose slot then takes the pass kStages - 1
/// ahead (with one stage: issued there and waited for at once).
template <int kStages, class Issue, class Compute>
__device__ __forceinline__ void stream_passes(int passes, Issue&& issue, Compute&& compute) {
  static_assert(kStages >= 1 && kStages <= 3);
  const auto fill = [&](int pass) {
    if (pass < passes) issue(pass, pass % kStages);
    async_copy::commit();  // a group per pass, empty past the last: the waits count passes
  };
  for (int pass = 0; pass + 1 < kStages; ++pass) fill(pass);
  for (int pass = 0; pass < passes; ++pass) {
    if constexpr (kStages == 1) {
      __syncthreads();  // every warp has left the previous pass: its slot is free
      fill(pass);
    }
    async_copy::wait<kStages == 1 ? 0 : kStages - 2>();  // this thread's copies of `pass` have landed
    __syncthreads();                                      // and every thread's
    if constexpr (kStages > 1) fill(pass + kStages - 1);
    compute(pass, pass % kStages);
  }
}

/// The logits as the products give them (MmaSoftmax::add's default).
struct NoBias {
  __device__ __forceinline__ float operator()(int /*row*/, int /*column*/, float logit) const { return logit; }
};

/// kE: the vectors' width padded to a multiple of 8 (the values'); the logits read kPad channels.
/// kZeroReference: the weights are exp(l) for logits the bias makes <= 0 (HEPT's Gaussian kernel, whose
/// sums are not normalised per table): no running maximum (row_max stays 0), no rescaling.
template <MlpPrecision P, int kE, bool kZeroReference = false>
struct MmaSoftmax {
  static constexpr int kK = P == MlpPrecision::bf16 ? 16 : 8;  // the logits' k per product
  static constexpr int kChunks = (kE + kK - 1) / kK, kPad = kChunks * kK, kTiles = kE / 8;

  std::uint32_t a[kChunks][4];
  float o[kTiles][4];
  float row_max[2], row_sum[2];
  int g, t;

  /// The rows' vectors: row(r, e) for r < 16 and e < kPad (0 past the rows and the width).
  template <class Row>
  __device__ __forceinline__ void start(Row&& row) {
    const int lane = static_cast<int>(threadIdx.x) % 32;
    g = lane / 4;
    t = lane % 4;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      if constexpr (P == MlpPrecision::bf16) {
        const int e = kK * c + 2 * t;
        a[c][0] = mma::bf16x2(row(g, e), row(g, e + 1));
        a[c][1] = mma::bf16x2(row(g + 8, e), row(g + 8, e + 1));
        a[c][2] = mma::bf16x2(row(g, e + 8), row(g, e + 9));
        a[c][3] = mma::bf16x2(row(g + 8, e + 8), row(g + 8, e + 9));
      } else {
        const int e = kK * c + t;
        a[c][0] = mma::tf32(row(g, e));
        a[c][1] = mma::tf32(row(g + 8, e));
        a[c][2] = mma::tf32(row(g, e + 4));
        a[c][3] = mma::tf32(row(g + 8, e + 4));
      }
    }
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) o[n][e] = 0.0f;
    row_max[0] = row_max[1] = kZeroReference ? 0.0f : -__int_as_float(0x7f800000);
    row_sum[0] = row_sum[1] = 0.0f;
  }

  /// Columns c0 .. c0 + 15 of the staged ones (those at or past `count` left out): their vectors at
  /// keys + c kPad, their values at values + c kE (shared memory, zero past the width). `bias(r, c, l)`
  /// returns the logit l of row r (0: g, 1: g + 8) and staged column c with its additive term (Erwin's
  /// distance bias); the default leaves it.
  template <class Bias = NoBias>
  __device__ __forceinline__ void add(const float* keys, const float* values, int c0, int count, Bias bias = {}) {
    const float inf = __int_as_float(0x7f800000);
    float s[2][4] = {};  // logits of columns c0 + 8j + (2t, 2t + 1), rows g and g + 8
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const float* k = keys + (c0 + 8 * j + g) * kPad;  // column g of B
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        std::uint32_t b[2];
        if constexpr (P == MlpPrecision::bf16) {
          b[0] = mma::bf16x2(k[kK * c + 2 * t], k[kK * c + 2 * t + 1]);
          b[1] = mma::bf16x2(k[kK * c + 2 * t + 8], k[kK * c + 2 * t + 9]);
          mma::bf16_m16n8k16(s[j], a[c], b);
        } else {
          b[0] = mma::tf32(k[kK * c + t]);
          b[1] = mma::tf32(k[kK * c + t + 4]);
          mma::tf32_m16n8k8(s[j], a[c], b);
        }
      }
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int column = c0 + 8 * j + 2 * t + e % 2;
        s[j][e] = column < count ? bias(e / 2, column, s[j][e]) : -inf;
      }
    }
    float w[2][4];
#pragma unroll
    for (int r = 0; r < 2; ++r) {  // row g: entries 0, 1; row g + 8: entries 2, 3
      float top = 0.0f, rescale = 1.0f;
      if constexpr (!kZeroReference) {
        float m = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        top = fmaxf(row_max[r], m);  // finite: c0 < count
        // Only a new maximum moves what was summed; past the first columns it rarely comes, and the
        // rescaling (an exp and kTiles x 2 products) is then skipped rather than done with exp(0).
        if (top != row_max[r]) {
          rescale = row_max[r] == -inf ? 0.0f : exp_nonpositive(row_max[r] - top);
          row_max[r] = top;
#pragma unroll
          for (int n = 0; n < kTiles; ++n) {
            o[n][2 * r] *= rescale;
            o[n][2 * r + 1] *= rescale;
          }
        }
      }
      float sum = 0.0f;
#pragma unroll
      for (int j = 0; j < 2; ++j)
#pragma unroll
        for (int e = 2 * r; e < 2 * r + 2; ++e) {
          w[j][e] = weight(j, e % 2, s[j][e], top);
          sum += w[j][e];
        }
      row_sum[r] = row_sum[r] * rescale + sum;
    }
    if constexpr (P == MlpPrecision::bf16) {
      const std::uint32_t wa[4] = {mma::bf16x2(w[0][0], w[0][1]), mma::bf16x2(w[0][2], w[0][3]),
                                   mma::bf16x2(w[1][0], w[1][1]), mma::bf16x2(w[1][2], w[1][3])};
      const float* v = values + (c0 + 2 * t) * kE + g;  // B[k][n] = value of column c0 + k, channel 8 tile + g
#pragma unroll
      for (int n = 0; n < kTiles; ++n) {
        const std::uint32_t b[2] = {mma::bf16x2(v[8 * n], v[kE + 8 * n]),
                                    mma::bf16x2(v[8 * kE + 8 * n], v[9 * kE + 8 * n])};
        mma::bf16_m16n8k16(o[n], wa, b);
      }
    } else {
#pragma unroll
      // The product over the 8 columns of j taken in the order 0, 2, 4, 6, 1, 3, 5, 7 (k = t: column 2t,
      // k = t + 4: column 2t + 1): then the logits' accumulator layout is the A layout as it stands, with
      // no shuffles, and B reads the values in the same order. The same sum (the emulation adds in k order).
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const std::uint32_t wa[4] = {mma::tf32(w[j][0]), mma::tf32(w[j][2]), mma::tf32(w[j][1]), mma::tf32(w[j][3])};
        const float* v = values + (c0 + 8 * j + 2 * t) * kE + g;
#pragma unroll
        for (int n = 0; n < kTiles; ++n) {
          const std::uint32_t b[2] = {mma::tf32(v[8 * n]), mma::tf32(v[kE + 8 * n])};
          mma::tf32_m16n8k8(o[n], wa, b);
        }
      }
    }
  }

  /// exp(l - top) (0 for l = -inf) for the weight of staged column 8j + 2t + odd: columns 2t of the first
  /// eight by exp_nonpositive's FMA polynomial, the other three of four on the special-function unit
  /// (exp2_sfu), so that the two units share the exponentials, which bound the softmax at these widths
  /// (a dozen FMA-pipe instructions a polynomial, one SFU instruction at an eighth of the FMA rate: 3 of 4
  /// balances them). Which unit computes a weight depends on its staged column alone.
  static __device__ __forceinline__ float weight(int j, int odd, float l, float top) {
    const float inf = __int_as_float(0x7f800000);
    if (j == 0 && odd == 0) return l == -inf ? 0.0f : exp_nonpositive(l - top);
    return exp2_sfu((l - top) * 1.44269504088896341f);  // -inf: 2^-inf = 0
  }

  /// The rows' sums over their 4 lanes (every lane of the warp calls it); then row r's (0: g, 1: g + 8)
  /// weighted values are o[n][2 r + e] at channel 8 n + 2 t + e, its sum row_sum[r], its maximum row_max[r].
  __device__ __forceinline__ void finish() {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
      row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    }
  }

  /// After finish(): f(r, c, value) for the lane's rows r (0: g, 1: g + 8) and its channels c < width, with
  /// the row's weighted sum of channel c (not divided by row_sum[r]).
  template <class F>
  __device__ __forceinline__ void for_each_value(int width, F&& f) const {
#pragma unroll
    for (int r = 0; r < 2; ++r)
#pragma unroll
      for (int n = 0; n < kTiles; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e)
          if (8 * n + 2 * t + e < width) f(r, 8 * n + 2 * t + e, o[n][2 * r + e]);
  }
};

}  // namespace detail
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
