// Fused residual MLP: one thread block takes a tile of kMlpRows = 64 rows through every layer of the MLP,
// in one of two forms with the same arithmetic (layer_pass):
//
//   staged (widths above 64): a block a tile. Shared memory: two activation tiles of 64 rows x lds floats
//   (ping-pong: a layer reads one and writes the other, so only the last layer touches global memory) and
//   one weight stage of round_up(in, 4) x 64 floats (W^T, 64 output columns of one layer at a time). With
//   width w (<= 256): (2 * 64 * (w + 4) + w * 64) * 4 bytes, 193 KiB for w = 256.
//   streamed (widths up to 64): one wave of blocks taking tile after tile; a third tile receives the next
//   rows and a second weight stage the next layer's W^T by cp.async while the block computes: 83 KiB at
//   w = 64 (mlp_streamed_smem).
//
// 256 threads as 16 x 16: thread (ty, tx) computes rows ty + 16 i (i < 4) and columns 4 tx + j (j < 4) of
// the current 64-column pass, a 4 x 4 register tile; per 4 steps of k it loads four float4 of activations
// (one per row, broadcast over the 16 threads of a row) and four float4 of weights, for 64 FMAs. Row
// strides of the tiles are w + 4 floats so that the two rows a warp reads lie in different banks.
//
// Every output element is bias + sum_k x_k w_k accumulated by one thread in k order, then the activation
// and the residual: the same arithmetic whatever block or position the row has. An input norm
// (MlpArgs::norm) normalises the tile's rows in place after the load, one warp per row (row_norm.cuh).
#include "launch.cuh"
#include "activation.cuh"
#include "row_norm.cuh"
#include "row_tiles.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 256;
constexpr int kCols = 64;  // output columns per pass

__device__ __forceinline__ float component(const float4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

/// One 64-column pass c0 of layer L over the block's tile: src (the layer's input rows) to dst (the next
/// layer's) or, for the last layer, to y (+ extra); ws holds W^T's columns c0 .. c0 + 63 as [k][16] float4.
__device__ __forceinline__ void layer_pass(const MlpArgs& a, const MlpLayer& L, bool last, const float* src,
                                           float* dst, const float4* ws, int c0, int lds, index_t row0, int rows) {
  const int tid = static_cast<int>(threadIdx.x);
  const int tx = tid % 16, ty = tid / 16;
  const int k4 = (L.in + 3) & ~3;
  const int out4 = (L.out + 3) & ~3;
  float acc[4][4];
  const float4 b = __ldg(reinterpret_cast<const float4*>(L.bias + c0) + tx);
#pragma unroll
  for (int i = 0; i < 4; ++i) acc[i][0] = b.x, acc[i][1] = b.y, acc[i][2] = b.z, acc[i][3] = b.w;
  for (int k = 0; k < k4; k += 4) {
    float4 xv[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[i] = *reinterpret_cast<const float4*>(src + (ty + 16 * i) * lds + k);
#pragma unroll
    for (int kk = 0; kk < 4; ++kk) {
      const float4 w = ws[(k + kk) * (kCols / 4) + tx];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float xi = component(xv[i], kk);
        acc[i][0] = fmaf(xi, w.x, acc[i][0]);
        acc[i][1] = fmaf(xi, w.y, acc[i][1]);
        acc[i][2] = fmaf(xi, w.z, acc[i][2]);
        acc[i][3] = fmaf(xi, w.w, acc[i][3]);
      }
    }
  }

  const int c = c0 + 4 * tx;
  with_activation(L.act, [&](auto act) {  // chosen once for the tile (activation.cuh)
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 4; ++j) acc[i][j] = activate<decltype(act)::value>(acc[i][j]);
  });
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = ty + 16 * i;
    float(&v)[4] = acc[i];
    if (L.add_input && c < k4) {  // in == out: the layer's input has the same columns
      const float4 s = *reinterpret_cast<const float4*>(src + r * lds + c);
      v[0] += s.x, v[1] += s.y, v[2] += s.z, v[3] += s.w;
    }
    if (!last) {
      // Columns [out, out4) come out as zero (zero weights and bias, act(0) = 0, zero input padding).
      if (c < out4) *reinterpret_cast<float4*>(dst + r * lds + c) = make_float4(v[0], v[1], v[2], v[3]);
    } else if (r < rows) {
      const index_t g = row0 + r;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (c + j >= L.out) break;
        float o = v[j];
        if (a.extra) o += a.extra[g * a.ld_extra + c + j];
        a.y[g * a.ldy + c + j] = o;
      }
    }
  }
}

/// The input norm of the block's tile, in place: each warp normalises rows warp, warp + 8, ...
__device__ __forceinline__ void normalise(const MlpArgs& a, float* tile, int lds) {
  const int tid = static_cast<int>(threadIdx.x);
  for (int r = tid / 32; r < kMlpRows; r += kThreads / 32)
    row_norm::apply(tile + r * lds, tile + r * lds, a.layers[0].in, a.norm.weight, a.norm.bias, a.norm.eps, a.norm.rms,
                    tid % 32);
}

__global__ void __launch_bounds__(kThreads) mlp_kernel(MlpArgs a, int lds) {
  SURROGATE_DYNAMIC_SHARED(float4, smem4);
  float* const smem = reinterpret_cast<float*>(smem4);
  float4* const ws = reinterpret_cast<float4*>(smem + 2 * kMlpRows * lds);  // [k][16] float4
  const int tid = static_cast<int>(threadIdx.x);
  const index_t row0 = static_cast<index_t>(blockIdx.x) * kMlpRows;
  const int rows = static_cast<int>(a.rows - row0 < kMlpRows ? a.rows - row0 : kMlpRows);

  {  // the input tile; padding rows and columns are zero
    const int in = a.layers[0].in;
    const int in4 = (in + 3) & ~3;
    for (int i = tid; i < kMlpRows * in4; i += kThreads) {
      const int r = i / in4, c = i - r * in4;
      smem[r * lds + c] = (r < rows && c < in) ? a.x[(row0 + r) * a.ldx + c] : 0.0f;
    }
    if (a.norm.weight) {
      __syncthreads();
      normalise(a, smem, lds);
    }
  }

  int cur = 0;
  for (int l = 0; l < a.num_layers; ++l) {
    const MlpLayer L = a.layers[l];
    const int k4 = (L.in + 3) & ~3;
    for (int c0 = 0; c0 < L.out; c0 += kCols) {
      __syncthreads();  // src is complete and nobody reads ws any more
      const float4* const wsrc = reinterpret_cast<const float4*>(L.weight_t + c0);
      for (int i = tid; i < k4 * (kCols / 4); i += kThreads) {
        const int k = i / (kCols / 4), c = i % (kCols / 4);
        ws[i] = __ldg(wsrc + static_cast<index_t>(k) * (L.ld / 4) + c);
      }
      __syncthreads();
      layer_pass(a, L, l + 1 == a.num_layers, smem + cur * kMlpRows * lds, smem + (cur ^ 1) * kMlpRows * lds, ws, c0,
                 lds, row0, rows);
    }
    cur ^= 1;
  }
}

// The streamed form, for MLPs up to 64 wide (FLARE's; one 64-column pass a layer): one wave of blocks,
// each taking a tile of 64 rows after another, a grid stride apart. Three tiles: the input rows, the
// layers' ping-pong partner, and the next tile's rows, which arrive by cp.async while the block computes;
// two weight stages: the next layer's W^T (or the first layer's, for the next tile) arrives while the
// current layer runs on the other. The same layer_pass as the staged kernel, so the same sums.
__global__ void __launch_bounds__(kThreads, 2) mlp_streamed_kernel(MlpArgs a, int lds, int w4) {
  SURROGATE_DYNAMIC_SHARED(float4, smem4);
  float* const smem = reinterpret_cast<float*>(smem4);
  float* const stages = smem + 3 * kMlpRows * lds;  // two of w4 x 64 floats: W^T as [k][16] float4
  const int tid = static_cast<int>(threadIdx.x);
  const index_t tiles = (a.rows + kMlpRows - 1) / kMlpRows;
  index_t tile = blockIdx.x;
  if (tile >= tiles) return;  // the whole block
  const int L = a.num_layers, in = a.layers[0].in, in4 = (in + 3) & ~3;
  auto rows_of = [&](index_t t) {
    const index_t left = a.rows - t * kMlpRows;
    return left < kMlpRows ? static_cast<int>(left) : kMlpRows;
  };
  auto fetch_rows = [&](index_t t, int to) {  // the tile's rows, zero padded to in4 columns
    row_tiles::load_async(a.x + t * kMlpRows * a.ldx, a.ldx, rows_of(t), in, kMlpRows, in4,
                          smem + to * kMlpRows * lds, lds, tid, kThreads);
  };
  auto fetch_layer = [&](int l, int stage) {  // W^T of layer l, its 64 columns, into a stage
    const MlpLayer& layer = a.layers[l];
    const int k4 = (layer.in + 3) & ~3;
    float* const to = stages + stage * w4 * kCols;
    for (int i = tid; i < k4 * (kCols / 4); i += kThreads)
      async_copy::copy<16>(to + 4 * i, layer.weight_t + static_cast<index_t>(i / (kCols / 4)) * layer.ld + 4 * (i % (kCols / 4)),
                           true);
  };
  constexpr int work = 1;        // the tile the layers write (and read, ping-pong with the input rows')
  int in_tile = 0, landing = 2;  // the input rows' tile and the next rows': they take turns
  int stage = 0;                 // the stage that holds the next layer to run
  fetch_rows(tile, in_tile);
  fetch_layer(0, stage);
  async_copy::commit();
  for (; tile < tiles; tile += gridDim.x) {
    const bool next_tile = tile + gridDim.x < tiles;
    async_copy::wait<0>();  // this tile's rows and its first layer: this thread's copies ...
    __syncthreads();        // ... and everyone's; nobody reads the tile the next rows replace any more
    if (next_tile) {
      fetch_rows(tile + gridDim.x, landing);  // meanwhile
      async_copy::commit();
    }
    if (a.norm.weight) {
      normalise(a, smem + in_tile * kMlpRows * lds, lds);
      __syncthreads();
    }
    int src = in_tile, dst = work;
    for (int l = 0; l < L; ++l) {
      if (l + 1 < L || next_tile) {  // the layer after this one, meanwhile
        fetch_layer((l + 1) % L, stage ^ 1);
        async_copy::commit();
      }
      layer_pass(a, a.layers[l], l + 1 == L, smem + src * kMlpRows * lds, smem + dst * kMlpRows * lds,
                 reinterpret_cast<const float4*>(stages + stage * w4 * kCols), 0, lds, tile * kMlpRows,
                 rows_of(tile));
      async_copy::wait<0>();  // the next layer's weights (and, early on, the next tile's rows) ...
      __syncthreads();        // ... for everyone; dst is complete; nobody reads src or this stage any more
      stage ^= 1;
      const int t = src;
      src = dst, dst = t;
    }
    const int next = landing;  // the next tile's rows; the two this one used are free
    landing = in_tile, in_tile = next;
  }
}

}  // namespace

/// Three tiles and two weight stages, for MLPs up to 64 wide; 0 for wider ones (the staged form).
std::size_t mlp_streamed_smem(int max_width) {
  if (max_width > kCols) return 0;
  const int w4 = static_cast<int>(round_up(max_width, 4)), lds = w4 + 4;
  return (static_cast<std::size_t>(3 * kMlpRows * lds) + static_cast<std::size_t>(2 * w4 * kCols)) * sizeof(float);
}

void mlp(const MlpArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, mlp(a, stream));
  if (a.rows <= 0) return;
  if (a.precision != MlpPrecision::fp32) {
    backend::mlp_tensor_cores(a, stream);
    return;
  }
  if (!a.layers || a.num_layers < 1) throw std::invalid_argument("cuda::mlp: no layers");
  if (a.max_width < 1 || a.max_width > kMaxMlpWidth)
    throw std::invalid_argument("cuda::mlp: layer width " + std::to_string(a.max_width) +
                                " is outside the fused kernel's range 1.." + std::to_string(kMaxMlpWidth));
  const int w4 = static_cast<int>(round_up(a.max_width, 4));
  const int lds = w4 + 4;
  const unsigned blocks = blocks_for("mlp_kernel", a.rows, kMlpRows);
  if (const std::size_t bytes = mlp_streamed_smem(a.max_width); bytes > 0) {
    allow_dynamic_shared(mlp_streamed_kernel, bytes, "mlp_streamed_kernel");
    const unsigned resident = resident_blocks(mlp_streamed_kernel, kThreads, bytes, "mlp_streamed_kernel");
    launch(mlp_streamed_kernel, std::min(blocks, resident), kThreads, bytes, stream, a, lds, w4);
    check_launch("mlp_streamed_kernel");
    return;
  }
  const std::size_t bytes = (static_cast<std::size_t>(2 * kMlpRows * lds) + static_cast<std::size_t>(w4) * kCols) * sizeof(float);
  allow_dynamic_shared(mlp_kernel, bytes, "mlp_kernel");
  launch(mlp_kernel, blocks, kThreads, bytes, stream, a, lds);
  check_launch("mlp_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
