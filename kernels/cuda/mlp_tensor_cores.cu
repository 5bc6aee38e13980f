// Fused residual MLP on the tensor cores (MlpPrecision bf16 / tf32), with mma.sync (mma.cuh): every warp
// takes tiles of 16 T rows (T = 2 up to width 64, else 1) through every layer, without block barriers:
// up to width 64 one tile after another (the grid is one wave of resident blocks; a warp's tiles are a
// grid stride apart), wider one tile a warp.
//
//   - The input rows are loaded and normalised (MlpArgs::norm; a lane a row up to width 64) once; a
//     layer's input rows sit in FP32 in the warp's part of shared memory (a tile of 16 T rows x lda floats,
//     outputs in place, up to width 64; two tiles, ping-pong, above); A fragments are read from them and rounded as they are read (bf16
//     pairs, nearest even; or tf32, cvt.rna), so the residual adds the unrounded FP32 input.
//   - Up to width 64 the warp's second tile receives its next rows by cp.async (row_tiles::load_async)
//     while it computes on the first: the rows' trip from memory overlaps the products and epilogues,
//     which a warp loading before computing leaves to other warps to hide. Wider layers load as they go
//     (row_tiles.cuh: batched, coalesced): their second tile is the ping-pong.
//   - B fragments come straight from global memory (cached: a layer is at most 128 KiB in bf16, 256 in tf32),
//     packed by pack_mlp_fragments in the order the lanes read them: one coalesced 8-byte load a lane per
//     16 x 8 (bf16) or 8 x 8 (tf32) tile; above width 64, one k step ahead of their products.
//   - A pass covers 64 output columns: 8 products per k step and row tile accumulate in registers (FP32);
//     the epilogue adds bias, activation and residual in registers and writes the next layer's input tile;
//     the last layer's tile leaves for global memory whole (row_tiles.cuh, + extra as it leaves).
//
// A row's result depends on that row alone (each output is one product chain over its row), so not on its
// warp, block or tile. Shared memory of a block: 4 warps x 2 tiles (T = 2) or 2 warps x 2 tiles (T = 1) of
// 16 T x lda floats, lda = round_up(w, 16) + 8 (bf16: 8-byte fragment reads free of bank conflicts) or + 4
// (tf32: 4-byte reads). A warp's rows are its own: x may alias y or extra (a residual), as no warp reads
// rows another writes.
#include "mma.cuh"
#include "activation.cuh"
#include "row_norm.cuh"
#include "row_tiles.cuh"
#include "async_copy.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kPassTiles = 8;  // n tiles of 8 columns in one pass: 64 output columns

// Widths up to 64 (T = 2) take every layer in one pass: a layer's outputs replace its inputs in one tile
// once all its products have read them; the second tile is the next rows' landing place. Wider layers
// take several passes over the same inputs: two tiles, ping-pong, in blocks of two warps (a 256-wide
// block of four would take 132 KiB: one block, four warps an SM; two-warp blocks fit three). Their warps,
// few on an SM, load each k step's B fragments one step ahead (the registers are there: shared memory
// bounds them).
__host__ __device__ constexpr int tiles_per_warp(int) { return 2; }
__host__ __device__ constexpr int warps_per_block(int T) { return T == 2 ? 4 : 2; }

struct Shape {
  int tiles = 1;  // row tiles of 16 per warp
  int lda = 0;    // row stride (floats) of the activation tiles
  std::size_t bytes = 0;
};

Shape shape(MlpPrecision precision, int max_width) {
  Shape s;
  const int k = static_cast<int>(round_up(max_width, 16));
  s.tiles = k <= 64 ? 2 : 1;
  s.lda = k + (precision == MlpPrecision::bf16 ? 8 : 4);
  s.bytes = static_cast<std::size_t>(warps_per_block(s.tiles)) * tiles_per_warp(s.tiles) * 16 *
            static_cast<std::size_t>(s.tiles) * static_cast<std::size_t>(s.lda) * sizeof(float);
  return s;
}

/// A warp's tile of rows through every layer, from its input rows in tiles[cur] (loaded and normalised)
/// to y: the products, epilogues and the last layer's store.
template <MlpPrecision P, int T>
__device__ __forceinline__ void tile_layers(const MlpArgs& a, int lda, float* tiles, int cur, index_t row0, int rows,
                                            int lane) {
  constexpr bool kBf16 = P == MlpPrecision::bf16;
  constexpr int kK = kBf16 ? 16 : 8;  // K of one product
  constexpr int kRows = 16 * T;
  constexpr bool kInPlace = T == 2, kAhead = !kInPlace;
  const int g = lane / 4, t = lane % 4;
  const int tile_floats = kRows * lda;
  for (int l = 0; l < a.num_layers; ++l) {
    const MlpLayer L = a.layers[l];
    const bool last = l + 1 == a.num_layers;
    const float* const x = tiles + cur * tile_floats;
    float* const next = tiles + (kInPlace ? cur : cur ^ 1) * tile_floats;
    const int k_tiles = (L.in + kK - 1) / kK, n_tiles = (L.out + 7) / 8;
    const uint2* const frags = reinterpret_cast<const uint2*>(kBf16 ? L.bf16 : L.tf32);
    if (frags == nullptr) __trap();  // the layer was not packed for this precision
    for (int n0 = 0; n0 < n_tiles; n0 += kPassTiles) {
      float acc[T][kPassTiles][4];
#pragma unroll
      for (int m = 0; m < T; ++m)
#pragma unroll
        for (int j = 0; j < kPassTiles; ++j) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;

      // B fragments of k step kt for this pass's n tiles (zero past the layer's).
      auto load_b = [&](int kt, uint2 (&w)[kPassTiles]) {
#pragma unroll
        for (int j = 0; j < kPassTiles; ++j)
          w[j] = n0 + j < n_tiles ? __ldg(frags + (static_cast<index_t>(n0 + j) * k_tiles + kt) * 32 + lane)
                                  : make_uint2(0u, 0u);
      };
      uint2 wb[kPassTiles] = {}, ahead[kPassTiles] = {};
      if constexpr (kAhead) load_b(0, wb);
      for (int kt = 0; kt < k_tiles; ++kt) {
        if constexpr (kAhead) {
          if (kt + 1 < k_tiles) load_b(kt + 1, ahead);
        } else {
          load_b(kt, wb);
        }
        std::uint32_t af[T][4];
#pragma unroll
        for (int m = 0; m < T; ++m) {
          const float* const r0 = x + (16 * m + g) * lda + kt * kK;  // row g of row tile m
          const float* const r8 = r0 + 8 * lda;                      // row g + 8
          if constexpr (kBf16) {
            const float2 v0 = *reinterpret_cast<const float2*>(r0 + 2 * t);
            const float2 v1 = *reinterpret_cast<const float2*>(r8 + 2 * t);
            const float2 v2 = *reinterpret_cast<const float2*>(r0 + 2 * t + 8);
            const float2 v3 = *reinterpret_cast<const float2*>(r8 + 2 * t + 8);
            af[m][0] = mma::bf16x2(v0.x, v0.y);
            af[m][1] = mma::bf16x2(v1.x, v1.y);
            af[m][2] = mma::bf16x2(v2.x, v2.y);
            af[m][3] = mma::bf16x2(v3.x, v3.y);
          } else {
            af[m][0] = mma::tf32(r0[t]);
            af[m][1] = mma::tf32(r8[t]);
            af[m][2] = mma::tf32(r0[t + 4]);
            af[m][3] = mma::tf32(r8[t + 4]);
          }
        }
#pragma unroll
        for (int j = 0; j < kPassTiles; ++j) {
          if (n0 + j >= n_tiles) break;
          const std::uint32_t b[2] = {wb[j].x, wb[j].y};
#pragma unroll
          for (int m = 0; m < T; ++m) {
            if constexpr (kBf16)
              mma::bf16_m16n8k16(acc[m][j], af[m], b);
            else
              mma::tf32_m16n8k8(acc[m][j], af[m], b);
          }
        }
        if constexpr (kAhead) {
#pragma unroll
          for (int j = 0; j < kPassTiles; ++j) wb[j] = ahead[j];
        }
      }

      if (kInPlace) __syncwarp();  // every lane has read its A fragments before any output replaces them
      // Epilogue: lane (g, t) holds columns c, c + 1 of rows g and g + 8 of every row tile. Bias and the
      // layer's activation first, the activation chosen once for the pass (activation.cuh).
      with_activation(L.act, [&](auto act) {
#pragma unroll
        for (int j = 0; j < kPassTiles; ++j) {
          if (n0 + j >= n_tiles) break;
          const float2 bias = __ldg(reinterpret_cast<const float2*>(L.bias + 8 * (n0 + j) + 2 * t));  // padded
#pragma unroll
          for (int m = 0; m < T; ++m)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              acc[m][j][e] = activate<decltype(act)::value>(acc[m][j][e] + (e % 2 == 0 ? bias.x : bias.y));
        }
      });
#pragma unroll
      for (int j = 0; j < kPassTiles; ++j) {
        if (n0 + j >= n_tiles) break;
        const int c = 8 * (n0 + j) + 2 * t;
#pragma unroll
        for (int m = 0; m < T; ++m)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int r = 16 * m + g + 8 * h;
            float v0 = acc[m][j][2 * h], v1 = acc[m][j][2 * h + 1];
            if (L.add_input) {  // in == out; the input's columns past `in` are zero
              v0 += x[r * lda + c];
              v1 += x[r * lda + c + 1];
            }
            *reinterpret_cast<float2*>(next + r * lda + c) = make_float2(v0, v1);
          }
      }
    }
    if (!last) {  // bf16: the next layer's K reaches round_up(out, 16), the epilogue wrote round_up(out, 8)
      const int from = 8 * n_tiles, to = (L.out + kK - 1) / kK * kK;  // at most 8 columns
      for (int r = lane; r < kRows; r += 32)
        for (int c = from; c < to; ++c) next[r * lda + c] = 0.0f;
    }
    __syncwarp();  // the next tile is complete before anyone reads it; nobody reads this one any more
    if (!kInPlace) cur ^= 1;
  }
  // The last layer's rows (in the tile `cur` now) go out whole: coalesced, extra added as they leave.
  row_tiles::store(tiles + cur * tile_floats, lda, rows, a.layers[a.num_layers - 1].out, a.y + row0 * a.ldy, a.ldy,
                   a.extra ? a.extra + row0 * a.ld_extra : nullptr, a.ld_extra, lane);
}

template <MlpPrecision P, int T>
__global__ void __launch_bounds__(32 * warps_per_block(T), T == 2 ? 3 : 1) mlp_mma_kernel(MlpArgs a, int lda) {
  constexpr int kK = P == MlpPrecision::bf16 ? 16 : 8;  // K of one product
  constexpr int kRows = 16 * T;
  constexpr bool kPrefetch = T == 2;  // up to width 64: the second tile receives the next rows
  SURROGATE_DYNAMIC_SHARED(float, smem);
  const int lane = static_cast<int>(threadIdx.x) % 32, warp = static_cast<int>(threadIdx.x) / 32;
  const index_t tile_count = (a.rows + kRows - 1) / kRows;
  index_t tile = static_cast<index_t>(blockIdx.x) * warps_per_block(T) + warp;
  if (tile >= tile_count) return;  // the whole warp: nothing below waits for other warps
  const int tile_floats = kRows * lda;
  float* const tiles = smem + static_cast<std::size_t>(warp) * tiles_per_warp(T) * tile_floats;
  // The input rows of a tile; padding rows and the columns up to the first layer's K are zero.
  const int in = a.layers[0].in, width = (in + kK - 1) / kK * kK;
  auto rows_of = [&](index_t tl) {
    const index_t left = a.rows - tl * kRows;
    return left < kRows ? static_cast<int>(left) : kRows;
  };
  auto fetch = [&](index_t tl, float* to) {  // by cp.async, as one group
    row_tiles::load_async(a.x + tl * kRows * a.ldx, a.ldx, rows_of(tl), in, kRows, width, to, lda, lane);
    async_copy::commit();
  };
  // The input norm, in place (row_norm.cuh: its bits): up to 64 channels a lane a row, all rows at once;
  // wider, the warp row by row.
  auto normalise = [&](float* rows_in) {
    if (a.norm.weight && in <= 64) {
      if (lane < kRows)
        row_norm::apply_own_row<64>(rows_in + lane * lda, rows_in + lane * lda, in, a.norm.weight, a.norm.bias,
                                    a.norm.eps, a.norm.rms);
    } else if (a.norm.weight) {
      for (int r = 0; r < kRows; ++r)
        row_norm::apply(rows_in + r * lda, rows_in + r * lda, in, a.norm.weight, a.norm.bias, a.norm.eps, a.norm.rms,
                        lane);
    }
    __syncwarp();
  };
  if constexpr (!kPrefetch) {  // one tile a warp (the grid covers them), loaded as it goes
    row_tiles::load(a.x + tile * kRows * a.ldx, a.ldx, rows_of(tile), in, kRows, width, tiles, lda, lane);
    __syncwarp();
    normalise(tiles);
    tile_layers<P, T>(a, lda, tiles, 0, tile * kRows, rows_of(tile), lane);
    return;
  }
  const index_t stride = static_cast<index_t>(gridDim.x) * warps_per_block(T);  // between a warp's tiles
  int landing = 0;  // the tile that receives the warp's next rows
  fetch(tile, tiles);
  for (; tile < tile_count; tile += stride) {
    async_copy::wait<0>();  // this tile's rows have landed: this lane's copies ...
    __syncwarp();           // ... and every lane's; every lane has stored the tile the next rows replace
    const int cur = landing;
    landing ^= 1;
    if (tile + stride < tile_count) fetch(tile + stride, tiles + landing * tile_floats);  // meanwhile
    normalise(tiles + cur * tile_floats);
    tile_layers<P, T>(a, lda, tiles, cur, tile * kRows, rows_of(tile), lane);
  }
}

template <MlpPrecision P, int T>
void launch_shape(const MlpArgs& a, const Shape& s, cudaStream_t stream) {
  allow_dynamic_shared(mlp_mma_kernel<P, T>, s.bytes, "mlp_mma_kernel");
  const int threads = 32 * warps_per_block(T), rows_per_block = warps_per_block(T) * 16 * T;
  // Up to width 64 one wave, its warps looping over the row tiles (fetching the next while they compute);
  // wider, a tile a warp.
  unsigned blocks = blocks_for("mlp_mma_kernel", a.rows, rows_per_block);
  if (T == 2) blocks = std::min(blocks, resident_blocks(mlp_mma_kernel<P, T>, threads, s.bytes, "mlp_mma_kernel"));
  launch(mlp_mma_kernel<P, T>, blocks, threads, s.bytes, stream, a, s.lda);
  check_launch("mlp_mma_kernel");
}

template <MlpPrecision P>
void launch_precision(const MlpArgs& a, cudaStream_t stream) {
  const Shape s = shape(P, a.max_width);
  if (s.tiles == 2)
    launch_shape<P, 2>(a, s, stream);
  else
    launch_shape<P, 1>(a, s, stream);
}

}  // namespace

std::size_t mlp_tensor_core_smem(MlpPrecision precision, int max_width) { return shape(precision, max_width).bytes; }

void mlp_tensor_cores(const MlpArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, mlp_tensor_cores(a, stream));
  if (a.rows <= 0) return;
  if (!a.layers || a.num_layers < 1) throw std::invalid_argument("cuda::mlp_tensor_cores: no layers");
  if (a.max_width < 1 || a.max_width > kMaxMlpWidth)
    throw std::invalid_argument("cuda::mlp_tensor_cores: layer width " + std::to_string(a.max_width) +
                                " is outside the fused kernel's range 1.." + std::to_string(kMaxMlpWidth));
  require_tensor_cores("mlp_tensor_cores");
  switch (a.precision) {
    case MlpPrecision::tf32: launch_precision<MlpPrecision::tf32>(a, stream); break;
    case MlpPrecision::bf16: launch_precision<MlpPrecision::bf16>(a, stream); break;
    case MlpPrecision::fp32: throw std::invalid_argument("cuda::mlp_tensor_cores: precision fp32 (use cuda::mlp)");
  }
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
