// Latent (FLARE) decode: for every point and head, the softmax over the M latents of its sample.
//
// Grid (tile, head): a block of kDecodeRows threads takes one tile (<= 256 points of one segment), one
// point per thread with its head's key in registers. The head's latent queries and the sample's latent
// values Z are staged through shared memory kTile / E latents at a time; every thread reads the same
// latent at the same time (broadcast). The softmax is the online Pow2Softmax<float> shared with the
// encode (a power-of-two reference, exact rescaling when it grows).
//
// tf32 / bf16 (LatentDecodeArgs::precision): the same softmax on the tensor cores, FlashAttention's order
// for a narrow head. A block of 16 warps takes the tile, each warp 16 points: their keys are mma A
// fragments kept in registers; the latents are staged 64 at a time (queries and values, E padded to the
// fragment width with zeros); per 16 latents the logits are two m16n8 products (bf16: m16n8k16 per 16
// channels; tf32: m16n8k8 per 8), the running row maximum and sum are kept in FP32 across the four lanes
// of a row, the weights exp(l - max) (the fp32 kernel's exp) are the A operand of the product with the
// values (bf16: the accumulator layout of the two logit tiles is the A layout as it stands; tf32: moved
// to it by shuffles), and the accumulators are rescaled when the maximum grows.
#include "launch.cuh"
#include "latent_softmax.cuh"
#include "mma.cuh"
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

/// The decode on the tensor cores; kE: E padded to a multiple of 8 (bf16: of 16 for the logits' k).
template <MlpPrecision P, int kE>
__global__ void __launch_bounds__(kTcWarps * 32) decode_tc_kernel(LatentDecodeArgs a) {
  constexpr int kK = P == MlpPrecision::bf16 ? 16 : 8;  // the logits' k per product
  constexpr int kChunks = (kE + kK - 1) / kK, kPad = kChunks * kK, kTiles = kE / 8;
  __shared__ float qs[kTcLatents * kPad];
  __shared__ float zs[kTcLatents * kE];
  const LatentChunk tile = a.tiles[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y), E = a.E, M = a.M;
  const float kInf = __int_as_float(0x7f800000);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int g = lane / 4, t = lane % 4;
  const int ra = 16 * warp + g, rb = ra + 8;  // this lane's two rows of the tile
  const auto key = [&](int r, int e) {
    return r < tile.rows && e < E ? a.k[(tile.begin + r) * a.ldk + static_cast<index_t>(h) * E + e] : 0.0f;
  };
  std::uint32_t ka[kChunks][4];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if constexpr (P == MlpPrecision::bf16) {
      const int e = kK * c + 2 * t;
      ka[c][0] = mma::bf16x2(key(ra, e), key(ra, e + 1));
      ka[c][1] = mma::bf16x2(key(rb, e), key(rb, e + 1));
      ka[c][2] = mma::bf16x2(key(ra, e + 8), key(ra, e + 9));
      ka[c][3] = mma::bf16x2(key(rb, e + 8), key(rb, e + 9));
    } else {
      const int e = kK * c + t;
      ka[c][0] = mma::tf32(key(ra, e));
      ka[c][1] = mma::tf32(key(rb, e));
      ka[c][2] = mma::tf32(key(ra, e + 4));
      ka[c][3] = mma::tf32(key(rb, e + 4));
    }
  }
  float o[kTiles][4] = {};
  float row_max[2] = {-kInf, -kInf}, row_sum[2] = {0.0f, 0.0f};
  const float* qh = a.q + static_cast<std::size_t>(h) * M * E;
  const float* zh = a.z + (static_cast<std::size_t>(tile.segment) * a.H + h) * M * E;
  for (int m0 = 0; m0 < M; m0 += kTcLatents) {
    const int count = min(kTcLatents, M - m0);
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < kTcLatents * kPad; i += kTcWarps * 32) {
      const int m = i / kPad, e = i % kPad;
      qs[i] = m < count && e < E ? qh[static_cast<std::size_t>(m0 + m) * E + e] : 0.0f;
    }
    for (int i = static_cast<int>(threadIdx.x); i < kTcLatents * kE; i += kTcWarps * 32) {
      const int m = i / kE, e = i % kE;
      zs[i] = m < count && e < E ? zh[static_cast<std::size_t>(m0 + m) * E + e] : 0.0f;
    }
    __syncthreads();
    if (16 * warp >= tile.rows) continue;  // no rows for this warp (it still joins the barriers)
    for (int l0 = 0; l0 < count; l0 += 16) {
      float s[2][4] = {};  // logits of latents l0 + 8j + (2t, 2t + 1), rows g and g + 8
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const float* q = qs + (l0 + 8 * j + g) * kPad;  // column g of B: latent l0 + 8j + g
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          std::uint32_t b[2];
          if constexpr (P == MlpPrecision::bf16) {
            b[0] = mma::bf16x2(q[kK * c + 2 * t], q[kK * c + 2 * t + 1]);
            b[1] = mma::bf16x2(q[kK * c + 2 * t + 8], q[kK * c + 2 * t + 9]);
            mma::bf16_m16n8k16(s[j], ka[c], b);
          } else {
            b[0] = mma::tf32(q[kK * c + t]);
            b[1] = mma::tf32(q[kK * c + t + 4]);
            mma::tf32_m16n8k8(s[j], ka[c], b);
          }
        }
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (l0 + 8 * j + 2 * t + e % 2 >= count) s[j][e] = -kInf;  // latents past M
      }
      // Running maximum and sum of rows g (entries 0, 1) and g + 8 (entries 2, 3) over the row's 4 lanes.
      float p[2][4];
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float m = fmaxf(fmaxf(s[0][2 * r], s[0][2 * r + 1]), fmaxf(s[1][2 * r], s[1][2 * r + 1]));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 1));
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, 2));
        const float top = fmaxf(row_max[r], m);  // finite: every pass has a latent
        const float rescale = row_max[r] == -kInf ? 0.0f : detail::exp_nonpositive(row_max[r] - top);
        row_max[r] = top;
        float sum = 0.0f;
#pragma unroll
        for (int j = 0; j < 2; ++j)
#pragma unroll
          for (int e = 2 * r; e < 2 * r + 2; ++e) {
            p[j][e] = s[j][e] == -kInf ? 0.0f : detail::exp_nonpositive(s[j][e] - top);
            sum += p[j][e];
          }
        row_sum[r] = row_sum[r] * rescale + sum;
#pragma unroll
        for (int n = 0; n < kTiles; ++n) {
          o[n][2 * r] *= rescale;
          o[n][2 * r + 1] *= rescale;
        }
      }
      // o += P V over these 16 latents.
      if constexpr (P == MlpPrecision::bf16) {
        const std::uint32_t pa[4] = {mma::bf16x2(p[0][0], p[0][1]), mma::bf16x2(p[0][2], p[0][3]),
                                     mma::bf16x2(p[1][0], p[1][1]), mma::bf16x2(p[1][2], p[1][3])};
        const float* z = zs + (l0 + 2 * t) * kE + g;  // B[k][n] = value (latent l0 + k, channel 8n-tile + g)
#pragma unroll
        for (int n = 0; n < kTiles; ++n) {
          const std::uint32_t b[2] = {mma::bf16x2(z[8 * n], z[kE + 8 * n]),
                                      mma::bf16x2(z[8 * kE + 8 * n], z[9 * kE + 8 * n])};
          mma::bf16_m16n8k16(o[n], pa, b);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          // A[row][k] = p of latent l0 + 8j + k: lane 4g + k / 2 holds it, entry k % 2 (+ 2 for row g + 8).
          const int near = 4 * g + t / 2, far = near + 2;
          const float a0 = __shfl_sync(0xffffffffu, p[j][0], near), a1 = __shfl_sync(0xffffffffu, p[j][1], near);
          const float b0 = __shfl_sync(0xffffffffu, p[j][2], near), b1 = __shfl_sync(0xffffffffu, p[j][3], near);
          const float c0 = __shfl_sync(0xffffffffu, p[j][0], far), c1 = __shfl_sync(0xffffffffu, p[j][1], far);
          const float d0 = __shfl_sync(0xffffffffu, p[j][2], far), d1 = __shfl_sync(0xffffffffu, p[j][3], far);
          const bool odd = t % 2 != 0;
          const std::uint32_t pa[4] = {mma::tf32(odd ? a1 : a0), mma::tf32(odd ? b1 : b0), mma::tf32(odd ? c1 : c0),
                                       mma::tf32(odd ? d1 : d0)};
          const float* z = zs + (l0 + 8 * j + t) * kE + g;
#pragma unroll
          for (int n = 0; n < kTiles; ++n) {
            const std::uint32_t b[2] = {mma::tf32(z[8 * n]), mma::tf32(z[4 * kE + 8 * n])};
            mma::tf32_m16n8k8(o[n], pa, b);
          }
        }
      }
    }
  }
  if (16 * warp >= tile.rows) return;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
    const int row = r == 0 ? ra : rb;
    if (row >= tile.rows) continue;
    const float inv = 1.0f / row_sum[r];  // >= 1: the largest weight is exp(0)
    float* y = a.y + (tile.begin + row) * a.ldy + static_cast<index_t>(h) * E;
#pragma unroll
    for (int n = 0; n < kTiles; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * n + 2 * t + e < E) y[8 * n + 2 * t + e] = o[n][2 * r + e] * inv;
  }
}

template <MlpPrecision P>
void launch_tensor_cores(const LatentDecodeArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.E <= 8 ? 8 : a.E <= 16 ? 16 : a.E <= 32 ? 32 : 64) {
    case 8: launch(decode_tc_kernel<P, 8>, grid, kTcWarps * 32, 0, stream, a); break;
    case 16: launch(decode_tc_kernel<P, 16>, grid, kTcWarps * 32, 0, stream, a); break;
    case 32: launch(decode_tc_kernel<P, 32>, grid, kTcWarps * 32, 0, stream, a); break;
    default: launch(decode_tc_kernel<P, 64>, grid, kTcWarps * 32, 0, stream, a); break;
  }
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
    int device = 0, major = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
          "cudaDeviceGetAttribute(ComputeCapabilityMajor)");
    if (major < 8)
      throw std::invalid_argument("cuda::latent_decode: tf32/bf16 need compute capability 8.0 or newer (device " +
                                  std::to_string(device) + " has " + std::to_string(major) + ".x)");
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
