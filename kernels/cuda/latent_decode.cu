// Latent (FLARE) decode: for every point and head, the softmax over the M latents of its sample.
//
// Grid (tile, head): a block of kDecodeRows threads takes one tile (<= 256 points of one segment), one
// point per thread with its head's key in registers. The head's latent queries and the sample's latent
// values Z are staged through shared memory kTile / E latents at a time; every thread reads the same
// latent at the same time (broadcast). The softmax is the online Pow2Softmax<float> shared with the
// encode (a power-of-two reference, exact rescaling when it grows).
//
// tf32 / bf16 (LatentDecodeArgs::precision): the same softmax on the tensor cores (mma_softmax.cuh,
// FlashAttention's order for a narrow head). A block of 16 warps takes the tile, each warp 16 points whose
// keys it holds as mma A fragments; the latents' queries and values stream in 64 at a time by cp.async,
// E padded to the fragment width with zeros.
#include "async_copy.cuh"
#include "launch.cuh"
#include "latent_softmax.cuh"
#include "mma_softmax.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kTile = 2048;  // staged floats per operand

template <int kMaxE>
__global__ void __launch_bounds__(kDecodeRows) decode_kernel(LatentDecodeArgs a) {
  __shared__ float qs[kTile];
  __shared__ float zs[kTile];
  const LatentChunk tile = a.tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int E = a.E, M = a.M;
  const int t = static_cast<int>(threadIdx.x);
  const bool active = t < tile.rows;
  const index_t row = tile.begin + t;
  float k[kMaxE];
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) k[e] = (active && e < E) ? a.k[row * a.ldk + static_cast<index_t>(h) * E + e] : 0.0f;
  detail::Pow2Softmax<float, kMaxE> sm;
  sm.reset();
  const float* qh = a.q + static_cast<std::size_t>(h) * M * E;
  const float* zh = a.z + (static_cast<std::size_t>(tile.segment) * a.H + h) * M * E;
  const int per_tile = kTile / E;
  for (int m0 = 0; m0 < M; m0 += per_tile) {
    const int count = min(per_tile, M - m0);
    __syncthreads();
    for (int i = t; i < count * E; i += kDecodeRows) {
      qs[i] = qh[static_cast<std::size_t>(m0) * E + i];
      zs[i] = zh[static_cast<std::size_t>(m0) * E + i];
    }
    __syncthreads();
    if (active)
      for (int m = 0; m < count; ++m) sm.add(detail::logit<kMaxE>(qs + m * E, k, E), zs + m * E, E);
  }
  if (!active) return;
  const float inv = 1.0f / sm.sum;  // >= 0.7: the largest term is its mantissa
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) a.y[row * a.ldy + static_cast<index_t>(h) * E + e] = sm.acc[e] * inv;
}

constexpr int kTcWarps = kDecodeRows / 16;  // one warp per 16 rows of a tile
constexpr int kTcLatents = 64;              // latents staged per pass

/// The decode on the tensor cores (mma_softmax.cuh: rows the warp's 16 points, columns the latents); kE:
/// E padded to a multiple of 8. The latents' queries and values stream through shared memory by cp.async,
/// 64 latents a pass (detail::stream_passes).
template <MlpPrecision P, int kE>
__global__ void __launch_bounds__(kTcWarps * 32) decode_tc_kernel(LatentDecodeArgs a) {
  using Softmax = detail::MmaSoftmax<P, kE>;
  constexpr int kStages = detail::pipeline_stages(kTcLatents * (Softmax::kPad + kE) * 4);
  __shared__ float qs[kStages][kTcLatents * Softmax::kPad];
  __shared__ float zs[kStages][kTcLatents * kE];
  const LatentChunk tile = a.tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y), E = a.E, M = a.M;
  const int warp = static_cast<int>(threadIdx.x) / 32, first = 16 * warp;  // the warp's first row
  Softmax sm;
  sm.start([&](int r, int e) {
    return first + r < tile.rows && e < E ? a.k[(tile.begin + first + r) * a.ldk + static_cast<index_t>(h) * E + e]
                                          : 0.0f;
  });
  const float* qh = a.q + static_cast<std::size_t>(h) * M * E;
  const float* zh = a.z + (static_cast<std::size_t>(tile.segment) * a.H + h) * M * E;
  const auto count_of = [&](int pass) { return min(kTcLatents, M - pass * kTcLatents); };
  detail::stream_passes<kStages>(
      (M + kTcLatents - 1) / kTcLatents,
      [&](int pass, int slot) {
        const std::size_t m0 = static_cast<std::size_t>(pass) * kTcLatents;
        detail::stage_columns_async<kTcLatents, Softmax::kPad>(qs[slot], count_of(pass), E, qh,
                                                               [&](int m, int e) { return qh + (m0 + m) * E + e; });
        detail::stage_columns_async<kTcLatents, kE>(zs[slot], count_of(pass), E, zh,
                                                    [&](int m, int e) { return zh + (m0 + m) * E + e; });
      },
      [&](int pass, int slot) {
        if (first >= tile.rows) return;  // no rows for this warp (it still joins the barriers)
        for (int l0 = 0; l0 < count_of(pass); l0 += 16) sm.add(qs[slot], zs[slot], l0, count_of(pass));
      });
  if (first >= tile.rows) return;
  sm.finish();
  const float inv[2] = {1.0f / sm.row_sum[0], 1.0f / sm.row_sum[1]};  // >= 1: the largest weight is exp(0)
  sm.for_each_value(E, [&](int r, int c, float value) {
    const int row = first + sm.g + 8 * r;
    if (row < tile.rows) a.y[(tile.begin + row) * a.ldy + static_cast<index_t>(h) * E + c] = value * inv[r];
  });
}

template <MlpPrecision P>
void launch_tensor_cores(const LatentDecodeArgs& a, dim3 grid, cudaStream_t stream) {
  detail::dispatch_mma_width(a.E, [&](auto width) {
    launch(decode_tc_kernel<P, decltype(width)::value>, grid, kTcWarps * 32, 0, stream, a);
  });
}

}  // namespace

void latent_decode(const LatentDecodeArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_decode(a, stream));
  if (a.num_tiles == 0) return;
  if (a.E < 1 || a.E > kMaxHeadDim)
    throw std::invalid_argument("cuda::latent_decode: head width " + std::to_string(a.E) + " outside 1.." +
                                std::to_string(kMaxHeadDim));
  if (a.H < 1 || a.H > 65535 || a.M < 1) throw std::invalid_argument("cuda::latent_decode: need 1 <= H <= 65535, M >= 1");
  const dim3 grid(static_cast<unsigned>(a.num_tiles), static_cast<unsigned>(a.H));
  if (a.precision != MlpPrecision::fp32) {
    require_tensor_cores("latent_decode");
    if (a.precision == MlpPrecision::bf16) launch_tensor_cores<MlpPrecision::bf16>(a, grid, stream);
    else launch_tensor_cores<MlpPrecision::tf32>(a, grid, stream);
    check_launch("decode_tc_kernel");
    return;
  }
  detail::dispatch_head_width(a.E, [&](auto width) {
    launch(decode_kernel<decltype(width)::value>, grid, kDecodeRows, 0, stream, a);
  });
  check_launch("decode_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
