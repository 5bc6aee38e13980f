// The scratch of the attention operators' forwards on the CPU (AttentionS2, NeighborhoodAttentionS2),
// kept between forwards in a pool (../workspace_pool.hpp) instead of being allocated per forward
// (AttentionS2 did) or held per calling thread for the life of the thread (NeighborhoodAttentionS2 did).
// The SphericalTransformer's blocks share one pool: one set of buffers for all its layers. Buffers are not
// zeroed on reuse: every forward writes what it reads. Internal to libsurrogate.
#pragma once

#include <cstddef>
#include <vector>

#include "../workspace_pool.hpp"
#include "heads.hpp"

namespace surrogate::sphere::detail {

struct S2Workspace {
  kernels::AlignedBuffer<float> pad_q, pad_k, pad_v;     // inputs in padded rows (when in_channels needs it)
  kernels::AlignedBuffer<float> proj_q, proj_k, proj_v;  // AttentionS2: projections before the rows of common width
  CommonWidthOperands common;                           // AttentionS2
  PlainOperands plain;                                   // NeighborhoodAttentionS2
  kernels::AlignedBuffer<float> k_rings;                 // NeighborhoodAttentionS2: key rings
  kernels::AlignedBuffer<float> v_rings;                 // and value rings
  kernels::AlignedBuffer<float> attention;              // softmax results before the output projection
  kernels::AlignedBuffer<float> projected;              // output projection rows (out_channels not a multiple of kPad)
  std::vector<kernels::AlignedBuffer<float>> sink_blocks;  // project_plain: per OpenMP thread, a k and a v row block

  std::size_t bytes() const {
    const std::size_t floats = pad_q.size() + pad_k.size() + pad_v.size() + proj_q.size() + proj_k.size() +
                               proj_v.size() + common.q.size() + common.k.size() + common.v.size() +
                               plain.q.size() + plain.k.size() + plain.v.size() + k_rings.size() + v_rings.size() +
                               attention.size() + projected.size();
    std::size_t blocks = 0;
    for (const auto& b : sink_blocks) blocks += b.size();
    return (floats + blocks) * sizeof(float);
  }
};

using S2WorkspacePool = WorkspacePool<S2Workspace>;

}  // namespace surrogate::sphere::detail
