// 64 x 64 output tiles of a float GEMM for the row-wise layers (dense, DISCO's grouped linear): 256 threads
// of 4 x 4 outputs, strided by 16, x and w staged in shared memory 16 inputs at a time, one fmaf per term
// in input order, so a tiled output has the bits of a one-thread fmaf chain (share/docs/cuda.md).
#pragma once

#include "launch.cuh"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace tile_gemm {

constexpr int kRows = 64, kCols = 64, kK = 16, kThreads = 256;

/// acc[i][j] += x(row0 + ty + 16 i, k) w(k, col0 + tx + 16 j) for k = 0 .. in - 1 in order, where
/// ty, tx = threadIdx.x / 16, % 16. x_at(r, k) and w_at(k, c) read the operands; they are called only for
/// r < rows, c < cols and k < in. Only real inputs enter the chain (a padded fmaf would turn -0 into +0).
/// Every thread of the block must call it (it synchronises). A thread's loads of the next 16 inputs are
/// issued before the products of the current ones (held in registers, stored after the next barrier), so
/// their trip from memory overlaps the products instead of stalling the block at every step.
template <class XAt, class WAt>
__device__ __forceinline__ void accumulate(index_t rows, int cols, int in, index_t row0, int col0, XAt x_at, WAt w_at,
                                           float (&acc)[4][4]) {
  constexpr int kPerThread = kRows * kK / kThreads;  // x (and w) values a thread stages per step
  static_assert(kRows * kK == kCols * kK && kRows * kK % kThreads == 0);
  __shared__ float xs[kK][kRows + 1];  // transposed x tile (+1: the stores go to different banks)
  __shared__ float ws[kK][kCols];
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
  float xr[kPerThread], wr[kPerThread];  // the step's values on their way to shared memory
  auto fetch = [&](int k0) {
    const int n = in - k0 < kK ? in - k0 : kK;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads;
      const int r = e / kK, k = e % kK;  // x row-major: consecutive threads, consecutive inputs
      xr[i] = row0 + r < rows && k < n ? x_at(row0 + r, k0 + k) : 0.0f;
      const int wk = e / kCols, c = e % kCols;  // w row-major: consecutive threads, consecutive columns
      wr[i] = col0 + c < cols && wk < n ? w_at(k0 + wk, col0 + c) : 0.0f;
    }
  };
  if (in > 0) fetch(0);
  for (int k0 = 0; k0 < in; k0 += kK) {
    const int n = in - k0 < kK ? in - k0 : kK;
    __syncthreads();  // nobody reads the previous tiles any more
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) {
      const int e = static_cast<int>(threadIdx.x) + i * kThreads;
      xs[e % kK][e / kK] = xr[i];
      ws[e / kCols][e % kCols] = wr[i];
    }
    __syncthreads();
    if (k0 + kK < in) fetch(k0 + kK);
    for (int k = 0; k < n; ++k) {
      float xv[4], wv[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) xv[i] = xs[k][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < 4; ++j) wv[j] = ws[k][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(xv[i], wv[j], acc[i][j]);
    }
  }
}

/// Thread (ty, tx) holds outputs (row0 + ty + 16 i, col0 + tx + 16 j) in acc[i][j]: each starts as
/// start(c) (0 for columns c >= cols).
template <class Start>
__device__ __forceinline__ void start(int cols, int col0, float (&acc)[4][4], Start start_of) {
  const int tx = static_cast<int>(threadIdx.x) % 16;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int c = col0 + tx + 16 * j;
    const float v = c < cols ? start_of(c) : 0.0f;
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[i][j] = v;
  }
}

/// store(r, c, acc[i][j]) for each of the thread's outputs inside rows x cols.
template <class Store>
__device__ __forceinline__ void for_each_output(index_t rows, int cols, index_t row0, int col0,
                                                const float (&acc)[4][4], Store store) {
  const int tx = static_cast<int>(threadIdx.x) % 16, ty = static_cast<int>(threadIdx.x) / 16;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const index_t r = row0 + ty + 16 * i;
    if (r >= rows) continue;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int c = col0 + tx + 16 * j;
      if (c < cols) store(r, c, acc[i][j]);
    }
  }
}

}  // namespace tile_gemm
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
