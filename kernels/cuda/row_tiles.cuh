// A warp's tile of rows between global and shared memory, for the kernels that take a few rows through
// several layers on chip (the tensor-core MLP). Every lane issues a batch of independent loads before its
// first store: a store waiting on each load in turn would serialise the warp on memory latency. 16-byte
// accesses where the rows allow them (strides, widths and addresses multiples of 4 floats), else 4-byte.
// The batch is small on purpose: the kernel's registers, not the loads in flight, bound its occupancy.
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace row_tiles {

constexpr int kBatch = 4;  // accesses in flight per lane (16-byte: 2 KiB a warp)

__device__ __forceinline__ bool aligned4(const float* p, index_t ld, int width) {
  return (reinterpret_cast<std::uintptr_t>(p) % 16 == 0) && ld % 4 == 0 && width % 4 == 0;
}

/// tile[r * ldt + c] = x[r * ldx + c] for r < rows, c < in; zero for rows <= r < tile_rows or
/// in <= c < width. width and ldt multiples of 4 floats, tile 16-byte aligned. Plain loads: x may be the
/// output the caller writes later. The whole warp calls it.
__device__ __forceinline__ void load(const float* x, index_t ldx, int rows, int in, int tile_rows, int width,
                                     float* tile, int ldt, int lane) {
  if (aligned4(x, ldx, in)) {
    const int per_row = width / 4, total = tile_rows * per_row;
    for (int e0 = 0; e0 < total; e0 += 32 * kBatch) {
      float4 v[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + 32 * u + lane, r = e / per_row, c = 4 * (e - r * per_row);
        v[u] = e < total && r < rows && c < in ? *reinterpret_cast<const float4*>(x + r * ldx + c)
                                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + 32 * u + lane, r = e / per_row, c = 4 * (e - r * per_row);
        if (e < total) *reinterpret_cast<float4*>(tile + r * ldt + c) = v[u];
      }
    }
    return;
  }
  const int total = tile_rows * width;
  for (int e0 = 0; e0 < total; e0 += 32 * 4 * kBatch) {
    float v[4 * kBatch];
#pragma unroll
    for (int u = 0; u < 4 * kBatch; ++u) {
      const int e = e0 + 32 * u + lane, r = e / width, c = e - r * width;
      v[u] = e < total && r < rows && c < in ? x[r * ldx + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4 * kBatch; ++u) {
      const int e = e0 + 32 * u + lane, r = e / width, c = e - r * width;
      if (e < total) tile[r * ldt + c] = v[u];
    }
  }
}

/// y[r * ldy + c] = tile[r * ldt + c] (+ extra[r * ld_extra + c]) for r < rows, c < out. extra may alias
/// y: each lane reads a batch of extra before it writes the same elements. The whole warp calls it.
__device__ __forceinline__ void store(const float* tile, int ldt, int rows, int out, float* y, index_t ldy,
                                      const float* extra, index_t ld_extra, int lane) {
  if (aligned4(y, ldy, out) && (extra == nullptr || aligned4(extra, ld_extra, out))) {
    const int per_row = out / 4, total = rows * per_row;
    for (int e0 = 0; e0 < total; e0 += 32 * kBatch) {
      float4 add[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + 32 * u + lane, r = e / per_row, c = 4 * (e - r * per_row);
        add[u] = extra && e < total ? *reinterpret_cast<const float4*>(extra + r * ld_extra + c)
                                    : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      }
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int e = e0 + 32 * u + lane, r = e / per_row, c = 4 * (e - r * per_row);
        if (e >= total) continue;
        float4 v = *reinterpret_cast<const float4*>(tile + r * ldt + c);
        if (extra) v = make_float4(v.x + add[u].x, v.y + add[u].y, v.z + add[u].z, v.w + add[u].w);
        *reinterpret_cast<float4*>(y + r * ldy + c) = v;
      }
    }
    return;
  }
  const int total = rows * out;
  for (int e0 = 0; e0 < total; e0 += 32 * 4 * kBatch) {
    float add[4 * kBatch];
#pragma unroll
    for (int u = 0; u < 4 * kBatch; ++u) {
      const int e = e0 + 32 * u + lane, r = e / out, c = e - r * out;
      add[u] = extra && e < total ? extra[r * ld_extra + c] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4 * kBatch; ++u) {
      const int e = e0 + 32 * u + lane, r = e / out, c = e - r * out;
      if (e < total) y[r * ldy + c] = extra ? tile[r * ldt + c] + add[u] : tile[r * ldt + c];
    }
  }
}

}  // namespace row_tiles
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
