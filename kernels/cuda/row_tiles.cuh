// A warp's tile of rows between global and shared memory, for the kernels that take a few rows through
// several layers on chip (the tensor-core MLP). Every lane issues a batch of independent loads before its
// first store: a store waiting on each load in turn would serialise the warp on memory latency. 16-byte
// accesses where the rows allow them (strides, widths and addresses multiples of 4 floats), else 4-byte.
// The batch is small on purpose: the kernel's registers, not the loads in flight, bound its occupancy.
// load_async() fills a tile by cp.async instead: a warp issues its next rows and computes meanwhile.
#pragma once

#include <cstdint>

#include "async_copy.cuh"
#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace row_tiles {

constexpr int kBatch = 4;  // accesses in flight per lane (16-byte: 2 KiB a warp; 4-byte: four times as many)

__device__ __forceinline__ bool aligned4(const float* p, index_t ld, int width) {
  return (reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ld % 4 == 0 && width % 4 == 0;
}

__device__ __forceinline__ float zero(float) { return 0.0f; }
__device__ __forceinline__ float4 zero(float4) { return make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
__device__ __forceinline__ float sum(float a, float b) { return a + b; }
__device__ __forceinline__ float4 sum(float4 a, float4 b) {
  return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w);
}

/// load() in accesses of V (float or float4): element e of the warp's sweep is row e / per_row, its
/// columns from kW (e % per_row).
template <typename V>
__device__ __forceinline__ void load_as(const float* x, index_t ldx, int rows, int in, int tile_rows, int width,
                                        float* tile, int ldt, int lane) {
  constexpr int kW = sizeof(V) / sizeof(float), kN = 4 * kBatch / kW;
  const int per_row = width / kW, total = tile_rows * per_row;
  for (int e0 = 0; e0 < total; e0 += 32 * kN) {
    V v[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int e = e0 + 32 * u + lane, r = e / per_row, c = kW * (e - r * per_row);
      v[u] = e < total && r < rows && c < in ? *reinterpret_cast<const V*>(x + r * ldx + c) : zero(V{});
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int e = e0 + 32 * u + lane, r = e / per_row, c = kW * (e - r * per_row);
      if (e < total) *reinterpret_cast<V*>(tile + r * ldt + c) = v[u];
    }
  }
}

/// store() in accesses of V.
template <typename V>
__device__ __forceinline__ void store_as(const float* tile, int ldt, int rows, int out, float* y, index_t ldy,
                                         const float* extra, index_t ld_extra, int lane) {
  constexpr int kW = sizeof(V) / sizeof(float), kN = 4 * kBatch / kW;
  const int per_row = out / kW, total = rows * per_row;
  for (int e0 = 0; e0 < total; e0 += 32 * kN) {
    V add[kN];
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int e = e0 + 32 * u + lane, r = e / per_row, c = kW * (e - r * per_row);
      add[u] = extra && e < total ? *reinterpret_cast<const V*>(extra + r * ld_extra + c) : zero(V{});
    }
#pragma unroll
    for (int u = 0; u < kN; ++u) {
      const int e = e0 + 32 * u + lane, r = e / per_row, c = kW * (e - r * per_row);
      if (e >= total) continue;
      const V v = *reinterpret_cast<const V*>(tile + r * ldt + c);
      *reinterpret_cast<V*>(y + r * ldy + c) = extra ? sum(v, add[u]) : v;
    }
  }
}

/// tile[r * ldt + c] = x[r * ldx + c] for r < rows, c < in; zero for rows <= r < tile_rows or
/// in <= c < width. width and ldt multiples of 4 floats, tile 16-byte aligned. Plain loads: x may be the
/// output the caller writes later. The whole warp calls it.
__device__ __forceinline__ void load(const float* x, index_t ldx, int rows, int in, int tile_rows, int width,
                                     float* tile, int ldt, int lane) {
  if (aligned4(x, ldx, in))
    load_as<float4>(x, ldx, rows, in, tile_rows, width, tile, ldt, lane);
  else
    load_as<float>(x, ldx, rows, in, tile_rows, width, tile, ldt, lane);
}

/// load() in asynchronous copies of kBytes (async_copy.cuh), one an element of the sweep, no registers;
/// thread `lane` of `threads` (a warp, or a block that loads a tile together).
template <int kBytes>
__device__ __forceinline__ void load_async_as(const float* x, index_t ldx, int rows, int in, int tile_rows, int width,
                                              float* tile, int ldt, int lane, int threads = 32) {
  constexpr int kW = kBytes / static_cast<int>(sizeof(float));
  const int per_row = width / kW, total = tile_rows * per_row;
  for (int e = lane; e < total; e += threads) {
    const int r = e / per_row, c = kW * (e - r * per_row);
    const bool valid = r < rows && c < in;
    async_copy::copy<kBytes>(tile + r * ldt + c, valid ? x + r * ldx + c : x, valid);
  }
}

/// The tile of load(), by asynchronous copies: complete once each thread's async_copy::wait covers the
/// group the caller commits next, and the barrier after it (__syncwarp, or __syncthreads when a block of
/// `threads` loads it together). For the rows a warp or block takes next while it computes on others.
__device__ __forceinline__ void load_async(const float* x, index_t ldx, int rows, int in, int tile_rows, int width,
                                           float* tile, int ldt, int lane, int threads = 32) {
  if (aligned4(x, ldx, in))
    load_async_as<16>(x, ldx, rows, in, tile_rows, width, tile, ldt, lane, threads);
  else
    load_async_as<4>(x, ldx, rows, in, tile_rows, width, tile, ldt, lane, threads);
}

/// y[r * ldy + c] = tile[r * ldt + c] (+ extra[r * ld_extra + c]) for r < rows, c < out. extra may alias
/// y: each lane reads a batch of extra before it writes the same elements. The whole warp calls it.
__device__ __forceinline__ void store(const float* tile, int ldt, int rows, int out, float* y, index_t ldy,
                                      const float* extra, index_t ld_extra, int lane) {
  if (aligned4(y, ldy, out) && (extra == nullptr || aligned4(extra, ld_extra, out)))
    store_as<float4>(tile, ldt, rows, out, y, ldy, extra, ld_extra, lane);
  else
    store_as<float>(tile, ldt, rows, out, y, ldy, extra, ld_extra, lane);
}

}  // namespace row_tiles
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
