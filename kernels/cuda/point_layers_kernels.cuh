// The device code of the point-cloud layers (point_layers.cu has the launchers; see
// surrogate/kernels/cuda_point_layers.hpp for what they compute). In a header of its own so that the host
// emulation (tests/gpu/test_point_layers_emulated.cpp) runs exactly this code on the CPU: one thread per
// output element, except the dense layer's 64 x 64 tiles; intrinsics fmaf and __fmul_rn only (plus the
// activations of activation.cuh).
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "activation.cuh"
#include "tile_gemm.cuh"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace point_kernels {

constexpr int kThreads = 128;

/// The dense layer in 64 x 64 output tiles (tile_gemm.cuh; blockIdx.x: rows, blockIdx.y: columns). Every
/// output is one fmaf chain, bias first, then k in order (the CPU Linear kernels' sequence on AVX2 and
/// AVX-512).
constexpr int kDenseTile = tile_gemm::kRows, kDenseThreads = tile_gemm::kThreads;

__global__ void __launch_bounds__(kDenseThreads) dense_tiled_kernel(DenseArgs a) {
  const index_t r0 = static_cast<index_t>(blockIdx.x) * kDenseTile;
  const int c0 = static_cast<int>(blockIdx.y) * kDenseTile;
  float acc[4][4];
  tile_gemm::start(a.out, c0, acc, [&](int c) { return a.bias[c]; });
  tile_gemm::accumulate(
      a.rows, a.out, a.in, r0, c0, [&](index_t r, int k) { return a.x[r * a.ldx + k]; },
      [&](int k, int c) { return a.wt[static_cast<index_t>(k) * a.ldw + c]; }, acc);
  with_activation(a.act, [&](auto act) {  // chosen once for the tile (activation.cuh)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = activate<decltype(act)::value>(acc[i][j]);
  });
  tile_gemm::for_each_output(a.rows, a.out, r0, c0, acc, [&](index_t r, int c, float v) {
    if (a.add) v += a.add[r * a.ld_add + c];
    a.y[r * a.ldy + c] = v;
  });
}

__global__ void __launch_bounds__(kThreads) copy_rows_kernel(RowCopyArgs a) {
  const index_t t = flat_index();
  if (t >= a.rows * a.width) return;
  const index_t r = t / a.width;
  const index_t c = t - r * a.width;
  const index_t from = a.src_index ? a.src_index[r] : r;
  const index_t to = a.dst_index ? a.dst_index[r] : r;
  a.dst[to * a.ld_dst + c] = a.src[from * a.ld_src + c];
}

__global__ void __launch_bounds__(kThreads) row_binary_kernel(RowBinaryArgs a) {
  const index_t t = flat_index();
  if (t >= a.rows * a.width) return;
  const index_t r = t / a.width;
  const index_t c = t - r * a.width;
  const float x = a.a[r * a.lda + c], y = a.b[r * a.ldb + c];
  a.y[r * a.ldy + c] = a.op == RowOp::multiply ? __fmul_rn(x, y) : x + y;
}

__global__ void __launch_bounds__(kThreads) batch_norm_kernel(BatchNormArgs a) {
  const index_t t = flat_index();
  if (t >= a.rows * a.dim) return;
  const index_t r = t / a.dim;
  const int c = static_cast<int>(t - r * a.dim);
  float* x = a.x + r * a.ld + c;
  float v = *x;
  if (a.add) v += a.add[r * a.ld_add + c];
  *x = __fmul_rn(v, a.alpha[c]) + a.beta[c];
}

__global__ void __launch_bounds__(kThreads) segment_mean_kernel(SegmentMeanArgs a) {
  const index_t t = flat_index();
  if (t >= a.receivers * a.width) return;
  const index_t i = t / a.width;
  const index_t c = t - i * a.width;
  const index_t first = a.start[i], last = a.start[i + 1], base = a.start[0];
  float sum = 0.0f;
  for (index_t q = first; q < last; ++q) sum += a.msg[(q - base) * a.ld_msg + c];
  const index_t count = last - first > 1 ? last - first : 1;
  a.agg[i * a.ld_agg + c] = sum / static_cast<float>(count);
}

__global__ void __launch_bounds__(kThreads) fourier_features_kernel(FourierArgs a) {
  const index_t t = flat_index();
  if (t >= a.rows * a.half) return;
  const index_t r = t / a.half;
  const int j = static_cast<int>(t - r * a.half);
  const float* p = a.positions + r * a.ld_pos;
  float proj = 0.0f;
  for (int e = 0; e < a.dim; ++e) proj = __fadd_rn(proj, __fmul_rn(p[e], a.freq[j * a.dim + e]));
  float* f = a.features + r * a.ld_features;
  f[j] = cosf(proj);
  f[a.half + j] = sinf(proj);
}

}  // namespace point_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
