// CUDA kernels of the point-cloud layers around the ball attention (CUDA builds only): the dense layer
// of a CPU PackedLinear, row copies through index arrays (tree order, rotated orders, concatenated
// inputs of pooling, unpooling and message passing), element-wise products and sums of rows, the eval
// BatchNorm (optionally after a residual add), and the per-receiver mean of messages. Used by the Erwin
// device forward (libsurrogate/src/erwin/erwin_cuda.cpp); norms are kernels::cuda::norm, the attention
// kernels::cuda::ball_attention.
//
// Layout: device buffers, row-major, any row stride >= the row's width; indices are int64 row numbers.
// One thread per output element: an element's arithmetic never depends on the launch (the same
// operations in the same order as the CPU code named at each launcher). Every launcher enqueues on the
// given stream and returns at once; invalid sizes throw std::invalid_argument before anything is enqueued.
//
// The device code (kernels/cuda/point_layers_kernels.cuh) also runs unchanged on the CPU in
// tests/kernels/test_point_layers_emulated.cpp (status: share/docs/cuda.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t, Activation
#include "surrogate/kernels/cuda.hpp"  // MlpPrecision

namespace surrogate::kernels::cuda {

/// y[r, o] = act(bias[o] + sum_k x[r, k] wt[k, o]) [+ add[r, o]] for o < out: the sum one fused
/// multiply-add chain in k order starting from the bias, as the CPU's Linear kernel (which keeps the
/// bias as the accumulator's start and adds x_k w_k in k order with FMA on AVX2/AVX-512). `wt` is the
/// CPU's packed transpose (PackedLinear::wt(): [in][ldw]), `bias` its padded bias. `add` may alias y
/// (in-place residual); x must not alias y. Columns >= out of y are not written.
struct DenseArgs {
  const float* wt = nullptr;
  const float* bias = nullptr;
  int in = 0, out = 0;
  index_t ldw = 0;
  const float* x = nullptr;
  index_t ldx = 0;
  float* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0;
  Activation act = Activation::none;
  const float* add = nullptr;
  index_t ld_add = 0;
  /// tf32 / bf16: the products on the tensor cores (dense_tensor_cores: operands rounded, FP32 sums from
  /// zero, then the bias), with `fragments` the layer's pack_mlp_fragments words of that precision.
  MlpPrecision precision = MlpPrecision::fp32;
  const std::uint32_t* fragments = nullptr;
};
/// FP32 (the fmaf chain above), or the tensor cores for precision tf32 / bf16.
void dense(const DenseArgs& a, cudaStream_t stream);
/// The tensor-core dense layer, any width: 16 rows x 64 columns a warp, no shared memory.
void dense_tensor_cores(const DenseArgs& a, cudaStream_t stream);

/// dst[dst_row(r), 0:width] = src[src_row(r), 0:width] for r < rows, with src_row(r) = src_index[r]
/// (nullptr: r) and dst_row(r) = dst_index[r] (nullptr: r): a gather, a scatter (dst_index a
/// permutation) or a strided copy. src and dst must not overlap.
struct RowCopyArgs {
  const float* src = nullptr;
  index_t ld_src = 0;
  const std::int64_t* src_index = nullptr;
  float* dst = nullptr;
  index_t ld_dst = 0;
  const std::int64_t* dst_index = nullptr;
  index_t rows = 0;
  int width = 0;
};
void copy_rows(const RowCopyArgs& a, cudaStream_t stream);

/// y[r, c] = a[r, c] * b[r, c] (op multiply: the SwiGLU gate) or a[r, c] + b[r, c] (op add: a residual),
/// c < width; y may equal a or b.
enum class RowOp : std::uint8_t { multiply, add };
struct RowBinaryArgs {
  RowOp op = RowOp::add;
  const float* a = nullptr;
  index_t lda = 0;
  const float* b = nullptr;
  index_t ldb = 0;
  float* y = nullptr;
  index_t ldy = 0;
  index_t rows = 0;
  int width = 0;
};
void row_binary(const RowBinaryArgs& a, cudaStream_t stream);

/// Eval BatchNorm folded as the CPU does it (alpha = weight / sqrt(var + eps), beta = bias - mean alpha):
/// x[r, c] = v * alpha[c] + beta[c] with v = x[r, c] (+ add[r, c] when add is set), the product rounded
/// before the sum (no contraction), c < dim.
struct BatchNormArgs {
  float* x = nullptr;
  index_t ld = 0;
  index_t rows = 0;
  int dim = 0;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const float* add = nullptr;
  index_t ld_add = 0;
};
void batch_norm(const BatchNormArgs& a, cudaStream_t stream);

/// Mean of the messages of each receiver: for receivers i = 0 .. receivers-1,
/// agg[i, c] = (sum_{q = start[i] .. start[i+1]-1} msg[q - start[0], c]) / max(1, start[i+1] - start[i]),
/// the sum from 0.0f in q order (the messages are in the receiver's edge order), c < width.
struct SegmentMeanArgs {
  const float* msg = nullptr;
  index_t ld_msg = 0;
  const std::int64_t* start = nullptr;  // receivers + 1 entries
  index_t receivers = 0;
  int width = 0;
  float* agg = nullptr;
  index_t ld_agg = 0;
};
void segment_mean(const SegmentMeanArgs& a, cudaStream_t stream);

/// The Fourier features of the ShapeNet-Car wrapper (Erwin, BSA): for rows r < rows and j < half,
/// p = sum_e positions[r, e] freq[j, e] (from 0.0f in e order, each product rounded before the sum: the
/// CPU's loop, which is not contracted), features[r, j] = cos(p), features[r, half + j] = sin(p).
/// `freq` is half x dim, row-major.
struct FourierArgs {
  const float* positions = nullptr;
  index_t ld_pos = 0;
  index_t rows = 0;
  int dim = 0;
  const float* freq = nullptr;
  int half = 0;
  float* features = nullptr;
  index_t ld_features = 0;
};
void fourier_features(const FourierArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
