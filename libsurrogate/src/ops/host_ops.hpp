// The Ops of rows.hpp on the CPU: each member is one call of the CPU kernel table (the norm through
// layers.hpp's NormLayer; batch_norm, copy, combine and segment_mean the plain loops the families' CPU
// forwards have always run) on the tile of rows it is given. One HostOps per OpenMP thread:
// a family's program runs on a thread's tiles, so the kernels' rules hold (row strides multiples of kPad,
// padding columns finite; a row's result never depends on the tile it is computed in).
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "../bsa/branches.hpp"
#include "../layers.hpp"
#include "../prefetch.hpp"
#include "rows.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::ops {

class HostOps {
 public:
  using Dense = kernels::PackedLinear;
  using Norm = NormLayer;  // layers.hpp
  using Vector = std::vector<float>;
  static constexpr Place place = Place::host;

  explicit HostOps(const kernels::CpuKernels& k) : k_(&k) {}

  void dense(const DenseArgs<Dense>& a) const {
    k_->linear({.layer = a.layer, .x = a.x.data, .ldx = a.x.ld, .y = a.y.data, .ldy = a.y.ld, .rows = a.x.rows,
                .act = a.act, .add1 = a.add.data, .ld_add1 = a.add.ld});
  }

  void norm(const NormArgs<Norm>& a) const { a.norm->apply(*k_, a.x.data, a.x.ld, a.y.data, a.y.ld, a.x.rows); }

  void batch_norm(const BatchNormArgs<Vector>& a) const {
    const float* alpha = a.bn->alpha.data();
    const float* beta = a.bn->beta.data();
    for (index_t r = 0; r < a.x.rows; ++r) {
      float* row = a.x.row(r);
      if (a.add.data != nullptr) {
        const float* add = a.add.row(r);
        for (int c = 0; c < a.x.width; ++c) row[c] += add[c];
      }
      for (int c = 0; c < a.x.width; ++c) row[c] = row[c] * alpha[c] + beta[c];
    }
  }

  /// Gathers ask for the source row a few rows ahead (sources anywhere in memory: a cache miss each).
  void copy(const CopyArgs& a) const {
    constexpr index_t kAhead = 8;
    const index_t rows = a.dst.rows;
    const auto bytes = sizeof(float) * static_cast<std::size_t>(a.dst.width);
    for (index_t r = 0; r < rows; ++r) {
      if (a.src_index != nullptr && r + kAhead < rows)
        surrogate::detail::prefetch_bytes(a.src.row(a.src_index[r + kAhead]), bytes);
      const float* src = a.src.row(a.src_index != nullptr ? a.src_index[r] : r);
      std::copy_n(src, a.dst.width, a.dst.row(a.dst_index != nullptr ? a.dst_index[r] : r));
    }
  }

  void combine(const CombineArgs& a) const {
    for (index_t r = 0; r < a.y.rows; ++r) {
      const float* x = a.a.row(r);
      const float* z = a.b.row(r);
      float* y = a.y.row(r);
      if (a.op == Combine::add)
        for (int c = 0; c < a.y.width; ++c) y[c] = x[c] + z[c];
      else
        for (int c = 0; c < a.y.width; ++c) y[c] = x[c] * z[c];
    }
  }

  void segment_mean(const SegmentMeanArgs& a) const {
    for (index_t i = 0; i < a.agg.rows; ++i) {
      float* acc = a.agg.row(i);
      std::fill_n(acc, a.agg.width, 0.0f);
      for (std::int64_t q = a.start[i]; q < a.start[i + 1]; ++q) {
        const float* msg = a.msg.row(q - a.start[0]);
        for (int c = 0; c < a.agg.width; ++c) acc[c] += msg[c];
      }
      const auto count = static_cast<float>(std::max<std::int64_t>(1, a.start[i + 1] - a.start[i]));
      for (int c = 0; c < a.agg.width; ++c) acc[c] /= count;
    }
  }

  /// Ball by ball: the distance tile of the ball (CpuKernels::ball_distances) when there is a bias.
  void ball_attention(const BallAttentionArgs<Vector>& a) {
    const int m = a.ball;
    const bool bias = a.sigma != nullptr && !a.sigma->empty();
    if (bias) dist_.resize(static_cast<std::size_t>(m) * static_cast<std::size_t>(m));
    for (index_t b0 = 0; b0 < a.q.rows; b0 += m) {
      if (bias) {
        kernels::BallDistanceArgs d;
        d.pos = a.positions.row(b0);
        d.m = m;
        d.dim = a.positions.width;
        d.dist = dist_.data();
        d.ld_dist = m;
        k_->ball_distances(d);
      }
      kernels::BallAttentionArgs t;
      t.m = m;
      t.heads = a.heads;
      t.E = a.q.width / a.heads;
      t.q = a.q.row(b0);
      t.k = a.k.row(b0);
      t.v = a.v.row(b0);
      t.ld = a.q.ld;
      t.scale = a.scale;
      t.sigma = bias ? a.sigma->data() : nullptr;
      t.bias = dist_.data();
      t.ld_bias = m;
      t.out = a.out.row(b0);
      t.ldo = a.out.ld;
      k_->ball_attention(t);
    }
  }

  const kernels::CpuKernels& kernels() const { return *k_; }

  // -------------------------------------------------------------------------------------------------
  // BSA's members (rows.hpp): the branches of bsa/branches.hpp on `threads()` threads, map and
  // gated_sum on the tile's rows.

  /// The threads the branch members spread over (their own OpenMP loops); 1 unless set.
  void set_threads(int threads) { threads_ = threads; }
  int threads() const { return threads_; }

  void map(const MapArgs& a) const {
    for (index_t r = 0; r < a.x.rows; ++r) {
      float* x = a.x.row(r);
      if (a.op == Map::relu)
        for (int c = 0; c < a.x.width; ++c) x[c] = kernels::relu_keep_nan(x[c]);
      else
        for (int c = 0; c < a.x.width; ++c) x[c] = 1.0f / (1.0f + std::exp(-x[c]));
    }
  }

  void compress(const CompressArgs<Dense>& a) const {
    bsa::detail::compress_blocks(*k_, a.mlp, a.tokens.data, a.tokens.ld, a.out.rows, a.C, a.heads,
                                 a.tokens.width / a.heads, a.out.data, a.out.ld, threads_);
  }

  void coarse_select(const CoarseSelectArgs& a) const {
    const bsa::detail::Blocks b{a.qc.data, a.kc.data, a.vc.data, a.kc.ld, a.blocks};
    bsa::detail::coarse_and_select(*k_, tokens(a.q, a.q, a.q, a.heads, a.samples, a.length, a.row0), b, a.shape,
                                   a.out.data, a.out.ld, a.sel, threads_);
  }

  void selected_attention(const SelectedAttentionArgs& a) const {
    const bsa::detail::Tokens t = tokens(a.q, a.k, a.v, a.heads, a.samples, a.length, 0);
    if (a.first_row == nullptr) {
      bsa::detail::fine_branch(*k_, t, a.shape, a.sel, a.out.data, a.out.ld, threads_);
      return;
    }
    const bsa::detail::SelectedRows from{a.k.data, a.v.data, a.k.ld, a.blocks, a.first_row};
    bsa::detail::fine_branch(*k_, t, a.shape, a.sel, a.out.data, a.out.ld, threads_, &from);
  }

  void global_attention(const GlobalAttentionArgs& a) const {
    const bsa::detail::SampleKeys keys{a.k.data, a.v.data, a.k.ld, a.keys};
    bsa::detail::global_attention(*k_, tokens(a.q, a.k, a.v, a.heads, a.samples, a.length, 0), a.out.data, a.out.ld,
                                  threads_, &keys);
  }

  void gated_sum(const GatedSumArgs<Vector>& a) const {
    const int H = a.heads, E = a.out.width / H;
    const bool token_gates = a.gates.rows > 0;
    for (index_t r = 0; r < a.out.rows; ++r) {
      const float *local = a.local.row(r), *coarse = a.coarse.row(r), *fine = a.fine.row(r);
      float* o = a.out.row(r);
      for (int hd = 0; hd < H; ++hd) {
        float g0 = 1.0f, g1, g2;
        if (token_gates) {
          const float* g = a.gates.row(r) + 3 * hd;
          g0 = g[0];
          g1 = g[1];
          g2 = g[2];
        } else {
          g1 = (*a.static_gates)[static_cast<std::size_t>(2 * hd)];
          g2 = (*a.static_gates)[static_cast<std::size_t>(2 * hd + 1)];
        }
        for (int e = hd * E; e < (hd + 1) * E; ++e) o[e] = g0 * local[e] + g1 * coarse[e] + g2 * fine[e];
      }
    }
  }

 private:
  static bsa::detail::Tokens tokens(const Rows& q, const Rows& k, const Rows& v, int heads, int samples,
                                    index_t length, index_t row0) {
    bsa::detail::Tokens t;
    t.q = q.data;
    t.k = k.data;
    t.v = v.data;
    t.ld = q.ld;
    t.samples = samples;
    t.n = length;
    t.heads = heads;
    t.E = q.width / heads;
    t.row0 = row0;
    return t;
  }

  const kernels::CpuKernels* k_;
  std::vector<float> dist_;  // one ball's distance tile
  int threads_ = 1;
};

}  // namespace surrogate::ops
