// The Ops of rows.hpp on a CUDA device (CUDA builds only): each member is one launch of the device layers
// (device/layers.hpp, kernels/cuda*.hpp) on a stream, over all the rows it is given, with the weights in a
// WeightArena. `Upload` turns the host layers of HostOps into this Ops' layers (appended to an arena).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <span>
#include <stdexcept>
#include <vector>

#include "../device/layers.hpp"
#include "host_ops.hpp"
#include "rows.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/kernels/cuda_bsa_gate.hpp"
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
  /// On an uploaded arena's weights, with the dense layers and the ball attention in `precision`.
  CudaOps(const device::WeightArena& arena, cudaStream_t stream, kernels::cuda::MlpPrecision precision)
      : CudaOps(arena.data(), stream) {
    set_precision(precision, arena.words());
  }
  /// The dense layers and the ball attention on the tensor cores (precision tf32 / bf16; fp32: the FP32
  /// kernels), `words` the arena's fragments (device::WeightArena::words()).
  void set_precision(kernels::cuda::MlpPrecision precision, const std::uint32_t* words) {
    precision_ = precision;
    words_ = words;
  }

  /// The stream its launches go to and the weights they read: for a family's own members.
  cudaStream_t stream() const { return stream_; }
  const float* weights() const { return w_; }

  void dense(const DenseArgs<Dense>& a) const {
    device::dense(*a.layer, w_, a.x.data, a.x.ld, a.y.data, a.y.ld, a.x.rows, stream_, a.act, a.add.data, a.add.ld,
                  precision_, words_);
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
    l.precision = precision_;
    kernels::cuda::ball_attention(l, stream_);
  }

  void fourier(const FourierArgs<Vector>& a) const {
    kernels::cuda::FourierArgs f;
    f.positions = a.positions.data;
    f.ld_pos = a.positions.ld;
    f.rows = a.features.rows;
    f.dim = a.positions.width;
    f.freq = values(*a.frequencies);
    f.half = a.features.width / 2;
    f.features = a.features.data;
    f.ld_features = a.features.ld;
    kernels::cuda::fourier_features(f, stream_);
  }

  const float* values(const Vector& v) const { return v.size > 0 ? w_ + v.offset : nullptr; }

  /// Host layers (HostOps) -> this Ops' layers, appended to `arena` (uploaded afterwards).
  struct Upload {
    device::WeightArena* arena;
    Dense operator()(const HostOps::Dense& l) const { return arena->append_dense(l); }
    Norm operator()(const HostOps::Norm& n) const { return arena->append_norm(n); }
    Vector operator()(const HostOps::Vector& v) const {
      return v.empty() ? Vector{} : Vector{arena->append(v), v.size()};
    }
  };

  // -------------------------------------------------------------------------------------------------
  // BSA's members (rows.hpp): the ball-tree attention kernels of BSA, the gate, the compression.

  void map(const MapArgs& a) const {
    device::map_rows(a.op == Map::relu ? kernels::cuda::RowMap::relu : kernels::cuda::RowMap::sigmoid, a.x.data,
                     a.x.ld, a.x.rows, a.x.width, stream_);
  }

  /// The MLP: the gather of (block, head) rows through a.gather, the two layers with the ReLU between;
  /// the mean: segment_mean over the blocks' starts.
  void compress(const CompressArgs<Dense>& a) const {
    const int E = a.tokens.width / a.heads;
    if (a.mlp == nullptr) {
      segment_mean({a.tokens, a.start, a.out});
      return;
    }
    const index_t rows = a.out.rows * a.heads;  // (block, head)
    const int hidden = a.mlp[0].out;
    const index_t tokens = rows * a.C;
    copy({{a.tokens.data, E, tokens, E, a.tokens.place}, a.gather, {a.mlp_in.data, E, tokens, E, a.mlp_in.place}});
    const Rows in{a.mlp_in.data, static_cast<index_t>(a.C) * E, rows, a.C * E, a.mlp_in.place};
    const Rows hid{a.mlp_hidden.data, hidden, rows, hidden, a.mlp_hidden.place};
    dense({&a.mlp[0], in, hid});
    map({Map::relu, hid});
    dense({&a.mlp[1], hid, {a.out.data, E, rows, E, a.out.place}});
  }

  void coarse_select(const CoarseSelectArgs& a) const {
    const SparseShape& s = a.shape;
    const int E = a.q.width / a.heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    kernels::cuda::CoarseAttentionArgs coarse;
    coarse.samples = a.samples;
    coarse.heads = a.heads;
    coarse.E = E;
    coarse.q = s.coarse_q_attn ? a.qc.data : a.q.data;
    coarse.ldq = s.coarse_q_attn ? a.qc.ld : a.q.ld;
    coarse.queries = s.coarse_q_attn ? a.length / s.C : a.length;
    coarse.k = a.kc.data;
    coarse.v = a.vc.data;
    coarse.ldkv = a.kc.ld;
    coarse.keys = a.blocks;
    coarse.scale = scale;
    coarse.out = a.out.data;
    coarse.ldo = a.out.ld;
    coarse.copies = s.coarse_q_attn ? s.C : 1;
    kernels::cuda::BlockSelectionArgs sel;
    sel.samples = a.samples;
    sel.heads = a.heads;
    sel.E = E;
    sel.q = s.block_level ? a.qc.data : a.q.data;
    sel.ldq = s.block_level ? a.qc.ld : a.q.ld;
    sel.group = s.block_level ? 1 : s.tokens_per_row();
    sel.rows = s.selection_rows(a.length);
    sel.k = a.kc.data;
    sel.ldk = a.kc.ld;
    sel.blocks = a.blocks;
    sel.scale = scale;
    sel.S = s.S;
    if (s.mask_own_ball) {
      sel.ball_tokens = s.P;
      sel.ball_blocks = s.P / s.C;
    }
    sel.row_tokens = s.block_level ? s.C : s.tokens_per_row();
    sel.row0 = s.selection_rows(a.row0);
    sel.sel = a.sel;
    if (s.coarse_q_attn && s.S <= kernels::cuda::kMaxOnePassSelectedBlocks) {
      kernels::cuda::coarse_attention_and_select(coarse, sel, stream_);
    } else {
      kernels::cuda::coarse_attention(coarse, stream_);
      kernels::cuda::select_blocks(sel, stream_);
    }
  }

  void selected_attention(const SelectedAttentionArgs& a) const {
    const SparseShape& s = a.shape;
    const int E = a.q.width / a.heads;
    const index_t rows = s.selection_rows(a.length);
    kernels::cuda::SelectedBlockAttentionArgs f;
    f.samples = a.samples;
    f.n = a.length;
    f.heads = a.heads;
    f.E = E;
    f.q = a.q.data;
    f.k = a.k.data;
    f.v = a.v.data;
    f.ld = a.q.ld;
    f.scale = 1.0f / std::sqrt(static_cast<float>(E));
    f.C = s.C;
    f.S = s.S;
    f.tokens_per_row = static_cast<int>(a.length / rows);
    f.rows = rows;
    f.sel = a.sel;
    f.out = a.out.data;
    f.ldo = a.out.ld;
    if (a.first_row != nullptr) {
      f.first_row = a.first_row;
      f.blocks = a.blocks;
      f.ldkv = a.k.ld;
    }
    kernels::cuda::selected_block_attention(f, stream_);
  }

  void global_attention(const GlobalAttentionArgs& a) const {
    const int E = a.q.width / a.heads;
    kernels::cuda::CoarseAttentionArgs g;
    g.samples = a.samples;
    g.heads = a.heads;
    g.E = E;
    g.q = a.q.data;
    g.ldq = a.q.ld;
    g.queries = a.length;
    g.k = a.k.data;
    g.v = a.v.data;
    g.ldkv = a.k.ld;
    g.keys = a.keys;
    g.scale = 1.0f / std::sqrt(static_cast<float>(E));
    g.out = a.out.data;
    g.ldo = a.out.ld;
    g.copies = 1;
    kernels::cuda::coarse_attention(g, stream_);
  }

  void gated_sum(const GatedSumArgs<Vector>& a) const {
    kernels::cuda::GatedSumArgs g;
    g.local = a.local.data;
    g.coarse = a.coarse.data;
    g.fine = a.fine.data;
    g.ld = a.local.ld;  // (the three share it)
    g.out = a.out.data;
    g.ldo = a.out.ld;
    g.rows = a.out.rows;
    g.heads = a.heads;
    g.E = a.out.width / a.heads;
    if (a.gates.rows > 0) {
      g.gates = a.gates.data;
      g.ld_gates = a.gates.ld;
    } else {
      g.static_gates = values(*a.static_gates);
    }
    kernels::cuda::gated_sum(g, stream_);
  }

 private:
  const float* w_;
  cudaStream_t stream_;
  kernels::cuda::MlpPrecision precision_ = kernels::cuda::MlpPrecision::fp32;
  const std::uint32_t* words_ = nullptr;

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
  void tree_sums(const TreeSumsArgs& a) const {
    kernels::cuda::TreeSumsArgs t;
    t.x = a.x.data;
    t.x64 = a.x64;
    t.ldx = a.x.data != nullptr ? a.x.ld : a.width;
    t.first = a.first;
    t.rows = a.rows;
    t.lists = a.lists;
    t.width = a.width;
    t.sums = a.sums;
    t.counts = a.counts;
    t.means = a.means.data;
    t.ldm = a.means.ld;
    kernels::cuda::tree_sums(t, stream_);
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
