// The Ops of rows.hpp on a CUDA device (CUDA builds only): each member is one launch of the device layers
// (device/layers.hpp, kernels/cuda*.hpp) on a stream, over all the rows it is given, with the weights in a
// WeightArena. `Upload` turns the host layers of HostOps into this Ops' layers (appended to an arena).
#pragma once

#include <cuda_runtime_api.h>

#include <span>
#include <vector>

#include "../device/layers.hpp"
#include "host_ops.hpp"
#include "rows.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

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
};

}  // namespace surrogate::ops
