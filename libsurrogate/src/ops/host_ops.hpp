// The Ops of rows.hpp on the CPU: each member is one call of the CPU kernel table (the norm through
// layers.hpp's NormLayer; batch_norm, copy, combine and segment_mean the plain loops the families' CPU
// forwards have always run) on the tile of rows it is given. One HostOps per OpenMP thread:
// a family's program runs on a thread's tiles, so the kernels' rules hold (row strides multiples of kPad,
// padding columns finite; a row's result never depends on the tile it is computed in).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "../layers.hpp"
#include "../prefetch.hpp"
#include "rows.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/nan_keeping.hpp"  // Sequoia's members
#include "surrogate/kernels/tree_attention.hpp"  // Sequoia's members

namespace surrogate::ops {

/// A thread's work rows, one buffer per slot of a family's `Slot` enum (`Slot::count` slots): grown on
/// demand, zeroed when made, rows padded to kPad (or to `ld`) as the kernels want them.
template <class Slot>
class HostWork {
 public:
  Rows rows(Slot slot, index_t rows, int width) { return this->rows(slot, rows, width, kernels::round_up(width, kernels::kPad)); }
  Rows rows(Slot slot, index_t rows, int width, index_t ld) {
    kernels::AlignedBuffer<float>& b = buffers_[static_cast<std::size_t>(slot)];
    b.resize(static_cast<std::size_t>(std::max<index_t>(rows * ld, 1)));
    return {b.data(), ld, rows, width, Place::host};
  }

 private:
  std::array<kernels::AlignedBuffer<float>, static_cast<std::size_t>(Slot::count)> buffers_;
};

/// f(ops, work, r0, rows) for the tiles of `tile` rows of n rows, spread over `threads` OpenMP threads,
/// each with its own Ops and Work; a static schedule, so a tile's rows never depend on the thread count.
template <class Ops, class Work, class F>
void parallel_tiles(int threads, index_t n, index_t tile, F&& f) {
  const index_t count = (n + tile - 1) / tile;
#pragma omp parallel num_threads(threads)
  {
    Ops ops(kernels::cpu());
    Work work;
#pragma omp for schedule(static)
    for (index_t t = 0; t < count; ++t) f(ops, work, t * tile, std::min(tile, n - t * tile));
  }
}

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

  void fourier(const FourierArgs<Vector>& a) const {
    const int d = a.positions.width, half = a.features.width / 2;
    const float* freq = a.frequencies->data();
    for (index_t r = 0; r < a.features.rows; ++r) {
      const float* p = a.positions.row(r);
      float* f = a.features.row(r);
      for (int j = 0; j < half; ++j) {
        float proj = 0.0f;
        for (int e = 0; e < d; ++e) proj += p[e] * freq[j * d + e];
        f[j] = std::cos(proj);
        f[half + j] = std::sin(proj);
      }
    }
  }

  const kernels::CpuKernels& kernels() const { return *k_; }

  // -------------------------------------------------------------------------------------------------
  // Row maps and BSA's gated sum (rows.hpp), on the tile's rows. BSA's sample-wise branches are
  // BsaHostOps' (bsa/host_ops.hpp).

  void map(const MapArgs& a) const {
    for (index_t r = 0; r < a.x.rows; ++r) {
      float* x = a.x.row(r);
      if (a.op == Map::relu)
        for (int c = 0; c < a.x.width; ++c) x[c] = kernels::relu_keep_nan(x[c]);
      else
        for (int c = 0; c < a.x.width; ++c) x[c] = 1.0f / (1.0f + std::exp(-x[c]));
    }
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
  const kernels::CpuKernels* k_;
  std::vector<float> dist_;  // one ball's distance tile

  // ---------------------------------------------------------------------------------------------------
  // Sequoia's members (rows.hpp): the loops of Sequoia's CPU forward, on the tile of rows they are given.
 public:
  using Wide = std::vector<double>;
  using Positional = TreePositional<Vector, Wide>;

  /// The tile's queries in one kernel call (kernels/tree_attention.hpp), scratch for its longest list.
  void tree_attention(const TreeAttentionArgs<Positional>& a) {
    std::int64_t most = 0;
    for (index_t r = 0; r < a.q.rows; ++r) most = std::max(most, a.first[r + 1] - a.first[r]);
    const int e = a.q.width / a.heads;
    tree_scratch_.resize(static_cast<std::size_t>(kernels::tree_attention_scratch(a.heads, e, most)));
    kernels::TreeAttentionArgs t;
    t.queries = a.q.rows;
    t.heads = a.heads;
    t.e = e;
    t.q = a.q.data;
    t.ldq = a.q.ld;
    t.k = a.k.data;
    t.v = a.v.data;
    t.ldkv = a.k.ld;
    t.query_positions = a.query_positions.data;
    t.key_positions = a.key_positions.data;
    t.first = a.first;
    t.keys = a.keys;
    t.pe_w1 = a.pe->w1.data();
    t.pe_b1 = a.pe->b1.data();
    t.bn_scale = a.pe->bn.alpha.data();
    t.bn_shift = a.pe->bn.beta.data();
    t.pe_w3 = a.pe->w3.data();
    t.pe_b3 = a.pe->b3.data();
    t.tau = a.tau;
    t.fixed_denom = a.fixed_denom;
    t.out = a.out.data;
    t.ldo = a.out.ld;
    t.scratch = tree_scratch_.data();
    k_->tree_attention(t);
  }

  void tree_pool(const TreePoolArgs& a) const {
    for (index_t p = 0; p < a.out.rows; ++p) {
      float* dst = a.out.row(p);
      if (a.first[p] == a.first[p + 1]) std::fill_n(dst, a.out.width, 0.0f);
      for (std::int64_t j = a.first[p]; j < a.first[p + 1]; ++j) {
        const float* src = a.x.row(a.rows[j]);
        for (int c = 0; c < a.out.width; ++c) dst[c] = j > a.first[p] ? kernels::max_keep_nan(dst[c], src[c]) : src[c];
      }
    }
  }

  void tree_sums(const TreeSumsArgs& a) const {
    for (index_t l = 0; l < a.lists; ++l) {
      const std::int64_t j0 = a.first[l], j1 = a.first[l + 1];
      for (int c = 0; c < a.width; ++c) {
        double s = 0.0;
        for (std::int64_t j = j0; j < j1; ++j)
          s += a.x.data != nullptr ? static_cast<double>(a.x.row(a.rows[j])[c]) : a.x64[a.rows[j] * a.width + c];
        if (a.means.data == nullptr) a.sums[l * a.width + c] = s;
        else a.means.row(l)[c] = static_cast<float>(s / (a.counts ? a.counts[l] : static_cast<double>(j1 - j0)));
      }
    }
  }

  void tree_mix(const TreeMixArgs& m) const {
    for (index_t r = 0; r < m.y.rows; ++r) {
      const float* a = m.a.data != nullptr ? m.a.row(r) : nullptr;
      const float* b = m.b.data != nullptr ? m.b.row(r) : nullptr;
      const float* s = m.s.data != nullptr ? m.s.row(r) : nullptr;
      float* y = m.y.row(r);
      for (int c = 0; c < m.y.width; ++c) {
        float v = a ? m.w[0] * a[c] : 0.0f;
        if (b) v += m.w[1] * b[c];
        if (s) v += m.w[2] * s[c];
        y[c] = v;
      }
    }
  }

  void tree_norm(const TreeNormArgs<Vector>& a) const {
    const float* scale = a.bn->alpha.data();
    const float* shift = a.bn->beta.data();
    for (index_t r = 0; r < a.x.rows; ++r) {
      float* row = a.x.row(r);
      for (int c = 0; c < a.x.width; ++c)
        row[c] = static_cast<float>(static_cast<double>(row[c]) * scale[c] + static_cast<double>(shift[c]));
      if (a.relu)
        for (int c = 0; c < a.x.width; ++c) row[c] = kernels::relu_keep_nan(row[c]);
    }
  }

  /// Eight rows' sums interleaved (the last row repeated for a short group), each row's double arithmetic
  /// in the order written.
  void tree_layer_norm_relu(const TreeLayerNormArgs<Vector>& a) const {
    constexpr int kInterleaved = 8;
    const int width = a.x.width;
    const std::vector<float>& ln_w = *a.weight;
    const std::vector<float>& ln_b = *a.bias;
    for (index_t g0 = 0; g0 < a.x.rows; g0 += kInterleaved) {
      const int nr = static_cast<int>(std::min<index_t>(kInterleaved, a.x.rows - g0));
      float* row[kInterleaved];
      for (int i = 0; i < kInterleaved; ++i) row[i] = a.x.row(g0 + std::min(i, nr - 1));
      double mean[kInterleaved] = {}, var[kInterleaved] = {};
      for (int c = 0; c < width; ++c)
        for (int i = 0; i < kInterleaved; ++i) mean[i] += row[i][c];
      for (int i = 0; i < kInterleaved; ++i) mean[i] /= width;
      for (int c = 0; c < width; ++c)
        for (int i = 0; i < kInterleaved; ++i) var[i] += (row[i][c] - mean[i]) * (row[i][c] - mean[i]);
      for (int i = 0; i < nr; ++i) {
        const double inv = 1.0 / std::sqrt(var[i] / width + 1e-5);
        for (int c = 0; c < width; ++c)
          row[i][c] = kernels::relu_keep_nan(static_cast<float>((row[i][c] - mean[i]) * inv * ln_w[static_cast<std::size_t>(c)] +
                                                                ln_b[static_cast<std::size_t>(c)]));
      }
    }
  }

  /// Each message W [x_j ; p_j - p_i] + b summed in double (inputs in order), rounded to float once.
  void point_conv(const PointConvArgs<Vector>& a) {
    const int c = a.x.width, out = a.y.width, in = c + 3;
    conv_in_.resize(static_cast<std::size_t>(in));
    conv_msg_.resize(static_cast<std::size_t>(out));
    const float* w = a.w->data();
    const float* b = a.b->data();
    for (index_t i = 0; i < a.y.rows; ++i) {
      float* y = a.y.row(i);
      const float* pi = a.positions.row(a.self + i);
      for (int t = 0; t < a.k; ++t) {
        const std::int64_t j = a.keys[i * a.k + t];
        std::copy_n(a.x.row(j), c, conv_in_.begin());
        const float* pj = a.positions.row(j);
        for (int d = 0; d < 3; ++d) conv_in_[static_cast<std::size_t>(c + d)] = pj[d] - pi[d];
        for (int o = 0; o < out; ++o) {
          const float* wo = w + static_cast<std::size_t>(o) * static_cast<std::size_t>(in);
          double s = a.b->empty() ? 0.0 : static_cast<double>(b[o]);
          for (int k = 0; k < in; ++k) s += static_cast<double>(wo[k]) * static_cast<double>(conv_in_[static_cast<std::size_t>(k)]);
          conv_msg_[static_cast<std::size_t>(o)] = static_cast<float>(s);
        }
        for (int o = 0; o < out; ++o)
          y[o] = t == 0 ? conv_msg_[static_cast<std::size_t>(o)] : kernels::max_keep_nan(y[o], conv_msg_[static_cast<std::size_t>(o)]);
      }
    }
  }

 private:
  std::vector<double> tree_scratch_;        // the tree attention's
  std::vector<float> conv_in_, conv_msg_;  // one PointConv message
};

}  // namespace surrogate::ops
