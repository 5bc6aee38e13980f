// The dense layer (DenseArgs) on the tensor cores, precision bf16 or tf32, any width: each warp of a
// 4-warp block takes 16 rows and one pass of 64 output columns with mma.sync (mma.cuh). A fragments are
// read straight from x in global memory (rounded as they are read; zeros past `in` and `rows`), B fragments
// from the layer's packed fragments (pack_mlp_fragments: one 8-byte load a lane per tile), FP32
// accumulators from zero; then bias, activation and residual in FP32, as the tensor-core MLP
// (mlp_tensor_cores.cu) and the CPU emulation of its arithmetic (tests/support/precision_emulation).
// No shared memory, no barrier; a row's result depends on that row alone. A values are loaded one k step
// ahead, and the residual before the first store (it may alias y), so that loads overlap work.
#include "mma.cuh"
#include "activation.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kWarps = 4, kThreads = 32 * kWarps, kPassTiles = 8;  // 64 output columns a pass

template <MlpPrecision P>
__global__ void __launch_bounds__(kThreads) dense_mma_kernel(DenseArgs a) {
  constexpr bool kBf16 = P == MlpPrecision::bf16;
  constexpr int kK = kBf16 ? 16 : 8;
  const int lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, t = lane % 4;
  const index_t row0 = (static_cast<index_t>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / 32) * 16;
  if (row0 >= a.rows) return;  // the whole warp
  const int n0 = static_cast<int>(blockIdx.y) * kPassTiles;  // first n tile of the pass
  const int k_tiles = (a.in + kK - 1) / kK, n_tiles = (a.out + 7) / 8;
  const uint2* const frags = reinterpret_cast<const uint2*>(a.fragments);
  // x[row][k], zero outside the layer (the padding of the fragments is zero too, so 0 * 0).
  auto x = [&](index_t row, int k) { return row < a.rows && k < a.in ? __ldg(a.x + row * a.ldx + k) : 0.0f; };
  const index_t r_lo = row0 + g, r_hi = row0 + g + 8;
  // A values of k tile kt, in fragment order. Loaded one k tile ahead of the products that use them, so
  // that the loads' latency overlaps the products instead of stalling the warp at every k step.
  constexpr int kA = kBf16 ? 8 : 4;
  auto load_a = [&](int kt, float (&v)[kA]) {
    const int k = kt * kK;
    if constexpr (kBf16) {
      const int c0 = k + 2 * t, c1 = c0 + 8;
      v[0] = x(r_lo, c0), v[1] = x(r_lo, c0 + 1), v[2] = x(r_hi, c0), v[3] = x(r_hi, c0 + 1);
      v[4] = x(r_lo, c1), v[5] = x(r_lo, c1 + 1), v[6] = x(r_hi, c1), v[7] = x(r_hi, c1 + 1);
    } else {
      v[0] = x(r_lo, k + t), v[1] = x(r_hi, k + t), v[2] = x(r_lo, k + t + 4), v[3] = x(r_hi, k + t + 4);
    }
  };
  float acc[kPassTiles][4];
#pragma unroll
  for (int j = 0; j < kPassTiles; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
  float cur[kA] = {}, ahead[kA] = {};
  if (k_tiles > 0) load_a(0, cur);
  for (int kt = 0; kt < k_tiles; ++kt) {
    if (kt + 1 < k_tiles) load_a(kt + 1, ahead);
    std::uint32_t af[4];
    if constexpr (kBf16) {
      af[0] = mma::bf16x2(cur[0], cur[1]);
      af[1] = mma::bf16x2(cur[2], cur[3]);
      af[2] = mma::bf16x2(cur[4], cur[5]);
      af[3] = mma::bf16x2(cur[6], cur[7]);
    } else {
      af[0] = mma::tf32(cur[0]);
      af[1] = mma::tf32(cur[1]);
      af[2] = mma::tf32(cur[2]);
      af[3] = mma::tf32(cur[3]);
    }
#pragma unroll
    for (int j = 0; j < kPassTiles; ++j) {
      if (n0 + j >= n_tiles) break;
      const uint2 w = __ldg(frags + (static_cast<index_t>(n0 + j) * k_tiles + kt) * 32 + lane);
      const std::uint32_t b[2] = {w.x, w.y};
      if constexpr (kBf16)
        mma::bf16_m16n8k16(acc[j], af, b);
      else
        mma::tf32_m16n8k8(acc[j], af, b);
    }
#pragma unroll
    for (int i = 0; i < kA; ++i) cur[i] = ahead[i];
  }
  // The residual is read whole before the first store: `add` may alias y, and a load after a store to a
  // possibly equal address would wait for memory at every output.
  float add[kPassTiles][4];
#pragma unroll
  for (int j = 0; j < kPassTiles; ++j)
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const index_t row = e < 2 ? r_lo : r_hi;
      const int c = 8 * (n0 + j) + 2 * t + e % 2;
      add[j][e] = a.add && n0 + j < n_tiles && row < a.rows && c < a.out ? a.add[row * a.ld_add + c] : 0.0f;
    }
  // Bias and activation (chosen once: activation.cuh), then the residual and the stores.
  with_activation(a.act, [&](auto act) {
#pragma unroll
    for (int j = 0; j < kPassTiles; ++j) {
      const int c = 8 * (n0 + j) + 2 * t;
      const float b0 = n0 + j < n_tiles && c < a.out ? __ldg(a.bias + c) : 0.0f;
      const float b1 = n0 + j < n_tiles && c + 1 < a.out ? __ldg(a.bias + c + 1) : 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[j][e] = activate<decltype(act)::value>(acc[j][e] + (e % 2 == 0 ? b0 : b1));
    }
  });
#pragma unroll
  for (int j = 0; j < kPassTiles; ++j) {
    if (n0 + j >= n_tiles) break;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const index_t row = e < 2 ? r_lo : r_hi;
      const int c = 8 * (n0 + j) + 2 * t + e % 2;
      if (row >= a.rows || c >= a.out) continue;
      float v = acc[j][e];
      if (a.add) v += add[j][e];
      a.y[row * a.ldy + c] = v;
    }
  }
}

}  // namespace

void dense_tensor_cores(const DenseArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, dense_tensor_cores(a, stream));
  if (a.rows == 0 || a.out == 0) return;
  require(a.precision != MlpPrecision::fp32, "dense_tensor_cores", "precision fp32 (use cuda::dense)");
  require(a.fragments != nullptr, "dense_tensor_cores", "no fragments (pack_mlp_fragments) for the precision");
  require(a.rows > 0 && a.out > 0 && a.in >= 0, "dense_tensor_cores", "need rows, out >= 0 and in >= 0");
  const index_t row_blocks = (a.rows + 16 * kWarps - 1) / (16 * kWarps);
  const int passes = (a.out + 8 * kPassTiles - 1) / (8 * kPassTiles);
  require(row_blocks <= 2147483647 && passes <= 65535, "dense_tensor_cores",
          std::to_string(a.rows) + " rows x " + std::to_string(a.out) + " outputs exceed the grid");
  require_tensor_cores("dense_tensor_cores");
  const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(passes));
  if (a.precision == MlpPrecision::bf16)
    launch(dense_mma_kernel<MlpPrecision::bf16>, grid, kThreads, 0, stream, a);
  else
    launch(dense_mma_kernel<MlpPrecision::tf32>, grid, kThreads, 0, stream, a);
  check_launch("dense_mma_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
