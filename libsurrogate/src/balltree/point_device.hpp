// Host-side pieces shared by the Erwin and BSA CUDA forwards (CUDA builds only): the weight arena that is
// uploaded once per model, uploads of host arrays, ball-relative positions, and the launches of the
// point-layer kernels on a layer's place in the arena.
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/model.hpp"  // index_t

namespace surrogate::balltree::device {

/// A dense layer's place in the weight arena: the CPU's packed W^T (in x ldw) and its padded bias.
struct Dense {
  std::size_t wt = 0, bias = 0;
  int in = 0, out = 0;
  index_t ldw = 0;
};

/// Appends `count` values to the host image of the weights at a 16-byte aligned offset; returns the offset.
inline std::size_t append(std::vector<float>& arena, const float* values, std::size_t count) {
  const std::size_t offset = (arena.size() + 3) / 4 * 4;
  arena.resize(offset);
  arena.insert(arena.end(), values, values + count);
  return offset;
}

/// Appends a packed Linear layer (W^T with its padded row stride, then the padded bias).
inline Dense append_dense(std::vector<float>& arena, const kernels::PackedLinear& layer) {
  Dense d;
  d.in = layer.in();
  d.out = layer.out();
  d.ldw = layer.out_pad();
  d.wt = append(arena, layer.wt(), static_cast<std::size_t>(std::max(d.in, 1)) * static_cast<std::size_t>(d.ldw));
  d.bias = append(arena, layer.bias(), static_cast<std::size_t>(d.ldw));
  return d;
}

/// Copies host values into dst (grown as needed) on `stream`. From pageable memory the runtime stages the
/// values before it returns, so `src` may be a temporary.
template <class T>
void upload(kernels::cuda::DeviceBuffer<T>& dst, std::span<const T> src, int device, cudaStream_t stream) {
  dst.resize(std::max<std::size_t>(src.size(), 1), device);
  if (!src.empty()) kernels::cuda::copy_to_device(dst.data(), src.data(), src.size() * sizeof(T), stream);
}

/// Offsets of rows from their ball's centre (mean_pool, the CPU's summation), balls of `ball` rows.
inline std::vector<float> ball_relative(const std::vector<float>& pos, int d, int ball) {
  const std::vector<float> centres = mean_pool(pos, d, ball);
  std::vector<float> rel(pos.size());
  for (std::size_t r = 0; r < pos.size() / static_cast<std::size_t>(d); ++r)
    for (int c = 0; c < d; ++c) rel[r * d + c] = pos[r * d + c] - centres[(r / static_cast<std::size_t>(ball)) * d + c];
  return rel;
}

/// y = act(x W^T + b) (+ add_rows) for `rows` rows, the layer read from the uploaded arena `weights`.
inline void dense(const Dense& l, const float* weights, const float* x, index_t ldx, float* y, index_t ldy,
                  index_t rows, kernels::Activation act, const float* add_rows, index_t ld_add, cudaStream_t stream) {
  kernels::cuda::DenseArgs a;
  a.wt = weights + l.wt;
  a.bias = weights + l.bias;
  a.in = l.in;
  a.out = l.out;
  a.ldw = l.ldw;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.act = act;
  a.add = add_rows;
  a.ld_add = ld_add;
  kernels::cuda::dense(a, stream);
}

/// Row gather/scatter: dst[dst_index[r]] = src[src_index[r]] (an index array may be null: r itself).
inline void copy_rows(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
                      const std::int64_t* dst_index, index_t rows, int width, cudaStream_t stream) {
  kernels::cuda::RowCopyArgs a;
  a.src = src;
  a.ld_src = ld_src;
  a.src_index = src_index;
  a.dst = dst;
  a.ld_dst = ld_dst;
  a.dst_index = dst_index;
  a.rows = rows;
  a.width = width;
  kernels::cuda::copy_rows(a, stream);
}

}  // namespace surrogate::balltree::device
