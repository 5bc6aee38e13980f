// The Ops of rows.hpp on a CUDA device (CUDA builds only): each member is one launch of the device layers
// (device/layers.hpp, kernels/cuda*.hpp) on a stream, over all the rows it is given, with the weights in a
// WeightArena. `Upload` turns the host layers of HostOps into this Ops' layers (appended to an arena).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <span>
#include <stdexcept>
#include <vector>

#include "../device/layers.hpp"
#include "host_ops.hpp"
#include "rows.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/kernels/cuda_tree_attention.hpp"  // Sequoia's members
#include "surrogate/kernels/cuda_tree_layers.hpp"     // Sequoia's members

namespace surrogate::ops {

/// A weight vector's place in a WeightArena (size 0: none).
struct DeviceVector {
  std::size_t offset = 0, size = 0;
};

class CudaOps {
 public:
  using Dense = device::Dense;
  using Norm = device::Norm;
  using Vector = DeviceVector;
  static constexpr Place place = Place::device;

  CudaOps(const float* weights, cudaStream_t stream) : w_(weights), stream_(stream) {}

  void dense(const DenseArgs<Dense>& a) const {
    device::dense(*a.layer, w_, a.x.data, a.x.ld, a.y.data, a.y.ld, a.x.rows, stream_, a.act, a.add.data, a.add.ld);
  }
  void norm(const NormArgs<Norm>& a) const {
    device::norm(*a.norm, w_, a.x.data, a.x.ld, a.y.data, a.y.ld, a.x.rows, stream_);
  }
  void batch_norm(const BatchNormArgs<Vector>& a) const {
    kernels::cuda::BatchNormArgs b;
    b.x = a.x.data;
    b.ld = a.x.ld;
    b.rows = a.x.rows;
    b.dim = a.x.width;
    b.alpha = values(a.bn->alpha);
    b.beta = values(a.bn->beta);
    b.add = a.add.data;
    b.ld_add = a.add.ld;
    kernels::cuda::batch_norm(b, stream_);
  }
  void copy(const CopyArgs& a) const {
    device::copy_rows(a.src.data, a.src.ld, a.src_index, a.dst.data, a.dst.ld, a.dst_index, a.dst.rows, a.dst.width,
                      stream_);
  }
  void combine(const CombineArgs& a) const {
    device::combine_rows(a.op == Combine::add ? kernels::cuda::RowOp::add : kernels::cuda::RowOp::multiply, a.a.data,
                         a.a.ld, a.b.data, a.b.ld, a.y.data, a.y.ld, a.y.rows, a.y.width, stream_);
  }
  void segment_mean(const SegmentMeanArgs& a) const {
    kernels::cuda::SegmentMeanArgs s;
    s.msg = a.msg.data;
    s.ld_msg = a.msg.ld;
    s.start = a.start;
    s.receivers = a.agg.rows;
    s.width = a.agg.width;
    s.agg = a.agg.data;
    s.ld_agg = a.agg.ld;
    kernels::cuda::segment_mean(s, stream_);
  }
  void ball_attention(const BallAttentionArgs<Vector>& a) const {
    kernels::cuda::BallAttentionLaunch l;
    l.rows = a.q.rows;
    l.ball = a.ball;
    l.heads = a.heads;
    l.E = a.q.width / a.heads;
    l.q = a.q.data;
    l.k = a.k.data;
    l.v = a.v.data;
    l.ld = a.q.ld;
    l.scale = a.scale;
    l.sigma = a.sigma != nullptr ? values(*a.sigma) : nullptr;
    l.positions = a.positions.data;
    l.ld_pos = a.positions.ld;
    l.dim = a.positions.width;
    l.out = a.out.data;
    l.ldo = a.out.ld;
    kernels::cuda::ball_attention(l, stream_);
  }

  const float* values(const Vector& v) const { return v.size > 0 ? w_ + v.offset : nullptr; }

  /// Host layers (HostOps) -> this Ops' layers, appended to `arena` (uploaded afterwards).
  struct Upload {
    device::WeightArena* arena;
    Dense operator()(const HostOps::Dense& l) const { return arena->append_dense(l); }
    Norm operator()(const HostOps::Norm& n) const {
      const auto dim = static_cast<std::size_t>(n.dim());
      std::span<const float> bias;  // none: RMSNorm
      if (n.bias() != nullptr) bias = {n.bias(), dim};
      return arena->append_norm({n.weight(), dim}, bias, n.rms(), n.eps());
    }
    Vector operator()(const HostOps::Vector& v) const {
      return v.empty() ? Vector{} : Vector{arena->append(v), v.size()};
    }
  };

 private:
  const float* w_;
  cudaStream_t stream_;

  // ---------------------------------------------------------------------------------------------------
  // Sequoia's members (rows.hpp): the launchers of kernels/cuda_tree_attention.hpp and cuda_tree_layers.hpp.
 public:
  /// Double values in the arena: `size` doubles from float offset `offset` (16-byte aligned).
  using Wide = DeviceVector;
  using Positional = TreePositional<Vector, Wide>;
  /// The tree attention's scratch for heads wider than kMaxTreeHeadDim (grown on `scratch_device`).
  kernels::cuda::DeviceBuffer<double>* tree_scratch = nullptr;
  int scratch_device = 0;

  const double* wide(const Wide& v) const {
    return v.size > 0 ? reinterpret_cast<const double*>(w_ + v.offset) : nullptr;
  }

  void tree_attention(const TreeAttentionArgs<Positional>& a) const {
    kernels::cuda::TreeAttentionArgs t;
    t.queries = a.q.rows;
    t.heads = a.heads;
    t.e = a.q.width / a.heads;
    t.q = a.q.data;
    t.ldq = a.q.ld;
    t.k = a.k.data;
    t.v = a.v.data;
    t.ldkv = a.k.ld;
    t.query_positions = a.query_positions.data;
    t.key_positions = a.key_positions.data;
    t.first = a.first;
    t.keys = a.keys;
    t.pe_w1 = values(a.pe->w1);
    t.pe_b1 = values(a.pe->b1);
    t.bn_scale = values(a.pe->bn.alpha);
    t.bn_shift = values(a.pe->bn.beta);
    t.pe_w3 = wide(a.pe->w3);
    t.pe_b3 = wide(a.pe->b3);
    t.tau = a.tau;
    t.fixed_denom = a.fixed_denom;
    t.out = a.out.data;
    t.ldo = a.out.ld;
    if (t.e > kernels::cuda::kMaxTreeHeadDim && tree_scratch != nullptr) {
      tree_scratch->resize(std::max<std::size_t>(static_cast<std::size_t>(t.queries) * static_cast<std::size_t>(a.q.width), 1),
                           scratch_device);
      t.scratch = tree_scratch->data();
    }
    kernels::cuda::tree_attention(t, stream_);
  }
  void tree_pool(const TreePoolArgs& a) const {
    kernels::cuda::TreePoolArgs p;
    p.x = a.x.data;
    p.ldx = a.x.ld;
    p.first = a.first;
    p.rows = a.rows;
    p.parents = a.out.rows;
    p.width = a.out.width;
    p.out = a.out.data;
    p.ldo = a.out.ld;
    kernels::cuda::tree_pool(p, stream_);
  }
  /// The terms share a stride (the kernel's): a.ld of the first present one.
  void tree_mix(const TreeMixArgs& m) const {
    kernels::cuda::TreeMixArgs t;
    t.a = m.a.data;
    t.b = m.b.data;
    t.s = m.s.data;
    t.ld = m.a.data != nullptr ? m.a.ld : m.b.data != nullptr ? m.b.ld : m.s.ld;
    t.rows = m.y.rows;
    t.width = m.y.width;
    for (int i = 0; i < 3; ++i) t.w[i] = m.w[i];
    t.out = m.y.data;
    t.ldo = m.y.ld;
    kernels::cuda::tree_mix(t, stream_);
  }
  void tree_norm(const TreeNormArgs<Vector>& a) const {
    kernels::cuda::TreeNormArgs t;
    t.x = a.x.data;
    t.ld = a.x.ld;
    t.rows = a.x.rows;
    t.dim = a.x.width;
    t.scale = values(a.bn->alpha);
    t.shift = values(a.bn->beta);
    t.relu = a.relu;
    kernels::cuda::tree_norm(t, stream_);
  }
  void tree_layer_norm_relu(const TreeLayerNormArgs<Vector>& a) const {
    kernels::cuda::TreeLayerNormArgs t;
    t.x = a.x.data;
    t.ld = a.x.ld;
    t.rows = a.x.rows;
    t.dim = a.x.width;
    t.weight = values(*a.weight);
    t.bias = values(*a.bias);
    kernels::cuda::tree_layer_norm_relu(t, stream_);
  }
  /// All points at once: `self` must be 0 (the launch reads point i's position at row i).
  void point_conv(const PointConvArgs<Vector>& a) const {
    if (a.self != 0) throw std::invalid_argument("CudaOps::point_conv: a tile must start at point 0");
    if (a.y.rows == 0) return;
    kernels::cuda::PointConvArgs p;
    p.x = a.x.data;
    p.ldx = a.x.ld;
    p.c = a.x.width;
    p.positions = a.positions.data;
    p.keys = a.keys;
    p.k = a.k;
    p.points = a.y.rows;
    p.w = values(*a.w);
    p.b = values(*a.b);
    p.out = a.y.width;
    p.y = a.y.data;
    p.ldy = a.y.ld;
    kernels::cuda::point_conv_max(p, stream_);
  }
};

}  // namespace surrogate::ops
