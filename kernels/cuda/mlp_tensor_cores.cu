// Fused residual MLP on the tensor cores (MlpPrecision tf32 / bf16): the structure of mlp.cu (one block
// takes kMlpRows = 64 rows through every layer, activations in shared memory between the layers, each
// layer's weights staged 64 output columns at a time), with the products done by WMMA fragments:
//
//   tf32: m16n16k8, operands read as float from shared memory and rounded with __float_to_tf32;
//   bf16: m16n16k16, the layer's input tile and the weight stage converted to bf16 (round to nearest
//         even) in shared memory;
//   FP32 accumulators in both; bias, activation and residual in FP32 afterwards.
//
// 8 warps; a 64 x 64 pass is 4 x 4 fragments, warp w takes row tile w / 2 and two column tiles. The
// accumulators are stored into the free ping-pong tile (the layer's output tile) and the epilogue adds
// bias, activation and residual element-wise. Every activation tile column up to round_up(width, 64) is
// written (zero beyond a layer's width), so the K padding of the next layer reads zeros. A row's result
// does not depend on its block: the fragments of one row tile see only that tile's rows.
#include <cuda_bf16.h>
#include <mma.h>

#include "launch.cuh"
#include "activation.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kThreads = 256;
constexpr int kCols = 64;            // output columns per pass
constexpr int kBStride = kCols + 8;  // row stride of the bf16 weight stage (a multiple of 8)

struct Geometry {
  int w16 = 0;   // round_up(max width, 16): K of the largest layer
  int lds = 0;   // float tile row stride: round_up(max width, 64) + 8
  int lda = 0;   // bf16 input tile row stride: w16 + 8
  std::size_t tile_bytes = 0, stage_bytes = 0, total = 0;
};

Geometry geometry(MlpPrecision p, int max_width) {
  Geometry g;
  g.w16 = static_cast<int>(round_up(max_width, 16));
  g.lds = static_cast<int>(round_up(max_width, 64)) + 8;
  g.lda = g.w16 + 8;
  g.tile_bytes = 2 * static_cast<std::size_t>(kMlpRows) * static_cast<std::size_t>(g.lds) * sizeof(float);
  if (p == MlpPrecision::tf32)
    g.stage_bytes = static_cast<std::size_t>(g.w16) * kCols * sizeof(float);
  else
    g.stage_bytes = (static_cast<std::size_t>(kMlpRows) * static_cast<std::size_t>(g.lda) +
                     static_cast<std::size_t>(g.w16) * kBStride) * sizeof(__nv_bfloat16);
  g.total = g.tile_bytes + g.stage_bytes;
  return g;
}

template <MlpPrecision P>
__global__ void __launch_bounds__(kThreads) mlp_tc_kernel(MlpArgs a, int lds, int lda) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // the host refuses devices below compute capability 8.0
#else
  constexpr bool kBf16 = P == MlpPrecision::bf16;
  constexpr int kK = kBf16 ? 16 : 8;  // K of one fragment
  SURROGATE_DYNAMIC_SHARED(unsigned char, smem_raw);
  float* const tiles = reinterpret_cast<float*>(smem_raw);
  unsigned char* const stage = smem_raw + 2 * kMlpRows * lds * sizeof(float);
  float* const ws = reinterpret_cast<float*>(stage);                                    // tf32: [k][kCols]
  __nv_bfloat16* const ab = reinterpret_cast<__nv_bfloat16*>(stage);                    // bf16: [64][lda]
  __nv_bfloat16* const wb = ab + kMlpRows * lda;                                        // bf16: [k][kBStride]
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int wr = 16 * (warp / 2);   // first row of the warp's row tile
  const int wc = 32 * (warp % 2);   // first column (within the pass) of its two column tiles
  const index_t row0 = static_cast<index_t>(blockIdx.x) * kMlpRows;
  const int rows = static_cast<int>(a.rows - row0 < kMlpRows ? a.rows - row0 : kMlpRows);

  for (int i = tid; i < 2 * kMlpRows * lds; i += kThreads) tiles[i] = 0.0f;
  __syncthreads();
  {
    const int in = a.layers[0].in;
    for (int i = tid; i < kMlpRows * in; i += kThreads) {
      const int r = i / in, c = i - r * in;
      if (r < rows) tiles[r * lds + c] = a.x[(row0 + r) * a.ldx + c];
    }
  }

  int cur = 0;
  for (int l = 0; l < a.num_layers; ++l) {
    const MlpLayer L = a.layers[l];
    const bool last = l + 1 == a.num_layers;
    const int kk = (L.in + kK - 1) / kK * kK;
    const int k4 = (L.in + 3) & ~3;  // rows of the packed weight
    const float* const src = tiles + cur * kMlpRows * lds;
    float* const dst = tiles + (cur ^ 1) * kMlpRows * lds;
    for (int c0 = 0; c0 < L.out; c0 += kCols) {
      __syncthreads();  // src complete; the stage and this pass's dst columns are free
      for (int i = tid; i < kk * kCols; i += kThreads) {
        const int k = i / kCols, c = i - k * kCols;
        const float w = k < k4 ? __ldg(L.weight_t + static_cast<index_t>(k) * L.ld + c0 + c) : 0.0f;
        if constexpr (kBf16)
          wb[k * kBStride + c] = __float2bfloat16_rn(w);
        else
          ws[k * kCols + c] = w;
      }
      if constexpr (kBf16) {
        if (c0 == 0)
          for (int i = tid; i < kMlpRows * kk; i += kThreads) {
            const int r = i / kk, c = i - r * kk;
            ab[r * lda + c] = __float2bfloat16_rn(src[r * lds + c]);
          }
      }
      __syncthreads();

      wmma::fragment<wmma::accumulator, 16, 16, kK, float> acc[2];
      wmma::fill_fragment(acc[0], 0.0f);
      wmma::fill_fragment(acc[1], 0.0f);
      if constexpr (kBf16) {
        wmma::fragment<wmma::matrix_a, 16, 16, 16, __nv_bfloat16, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 16, __nv_bfloat16, wmma::row_major> fb;
        for (int k = 0; k < kk; k += kK) {
          wmma::load_matrix_sync(fa, ab + wr * lda + k, static_cast<unsigned>(lda));
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            wmma::load_matrix_sync(fb, wb + k * kBStride + wc + 16 * j, static_cast<unsigned>(kBStride));
            wmma::mma_sync(acc[j], fa, fb, acc[j]);
          }
        }
      } else {
        wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fa;
        wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> fb;
        for (int k = 0; k < kk; k += kK) {
          wmma::load_matrix_sync(fa, src + wr * lds + k, static_cast<unsigned>(lds));
#pragma unroll
          for (int t = 0; t < fa.num_elements; ++t) fa.x[t] = wmma::__float_to_tf32(fa.x[t]);
#pragma unroll
          for (int j = 0; j < 2; ++j) {
            wmma::load_matrix_sync(fb, ws + k * kCols + wc + 16 * j, static_cast<unsigned>(kCols));
#pragma unroll
            for (int t = 0; t < fb.num_elements; ++t) fb.x[t] = wmma::__float_to_tf32(fb.x[t]);
            wmma::mma_sync(acc[j], fa, fb, acc[j]);
          }
        }
      }
#pragma unroll
      for (int j = 0; j < 2; ++j)
        wmma::store_matrix_sync(dst + wr * lds + c0 + wc + 16 * j, acc[j], static_cast<unsigned>(lds), wmma::mem_row_major);
      __syncthreads();

      for (int i = tid; i < kMlpRows * kCols; i += kThreads) {
        const int r = i / kCols, c = c0 + (i - (i / kCols) * kCols);
        float* const d = dst + r * lds + c;
        float v = activate(L.act, *d + __ldg(L.bias + c));  // the packed bias has ld >= c0 + 64 entries
        if (L.add_input && c < L.in) v += src[r * lds + c];
        if (!last) {
          *d = c < L.out ? v : 0.0f;
        } else if (r < rows && c < L.out) {
          const index_t g = row0 + r;
          if (a.extra) v += a.extra[g * a.ld_extra + c];
          a.y[g * a.ldy + c] = v;
        }
      }
    }
    cur ^= 1;
  }
#endif
}

template <MlpPrecision P>
void launch_precision(const MlpArgs& a, cudaStream_t stream) {
  const Geometry g = geometry(P, a.max_width);
  allow_dynamic_shared(mlp_tc_kernel<P>, g.total, "mlp_tc_kernel");
  const index_t blocks = (a.rows + kMlpRows - 1) / kMlpRows;
  launch(mlp_tc_kernel<P>, static_cast<unsigned>(blocks), kThreads, g.total, stream, a, g.lds, g.lda);
  check_launch("mlp_tc_kernel");
}

}  // namespace

std::size_t mlp_tensor_core_smem(MlpPrecision precision, int max_width) { return geometry(precision, max_width).total; }

void mlp_tensor_cores(const MlpArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, mlp_tensor_cores(a, stream));
  if (a.rows <= 0) return;
  if (!a.layers || a.num_layers < 1) throw std::invalid_argument("cuda::mlp_tensor_cores: no layers");
  if (a.max_width < 1 || a.max_width > kMaxMlpWidth)
    throw std::invalid_argument("cuda::mlp_tensor_cores: layer width " + std::to_string(a.max_width) +
                                " is outside the fused kernel's range 1.." + std::to_string(kMaxMlpWidth));
  int device = 0, major = 0;
  check(cudaGetDevice(&device), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
        "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
  if (major < 8)
    throw std::invalid_argument("cuda::mlp_tensor_cores: tf32/bf16 need compute capability 8.0 or newer (device " +
                                std::to_string(device) + " has " + std::to_string(major) + ".x)");
  switch (a.precision) {
    case MlpPrecision::tf32: launch_precision<MlpPrecision::tf32>(a, stream); break;
    case MlpPrecision::bf16: launch_precision<MlpPrecision::bf16>(a, stream); break;
    case MlpPrecision::fp32: throw std::invalid_argument("cuda::mlp_tensor_cores: precision fp32 (use cuda::mlp)");
  }
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
