// HEPT's forward (the official Transformer of HEPT's example/) written once, over an Exec and its Ops, for
// both backends: network.cpp runs it on the CPU (float or float64; the tile programs per tile of rows
// inside the OpenMP loops) and cuda/forward.cpp on a device (float; each tile program once over all rows).
//
//   encoder    e_0 = enc2(relu(enc0(x)))                      (tile program)
//   layer l    project(l)  xn = norm1(e_l); q_hat, k_hat, v per head; the E2LSH projections
//              ranges(l)   the range of every (table, head) row, reduced over the ranks
//              keys(l)     the projections shifted by the region codes
//              buckets(l)  the stable sorts and the bucket attention over the tables, OR-combined
//                          (or the split stage of graphs spread over ranks)
//              e_{l+1} = e_l + out_linear(attn); e_{l+1} += ff(norm2(e_{l+1}))   (tile program)
//   head       e = W [e_0 ; ... ; e_L]; out = e + mlp(e) (4 x Linear, LayerNorm, tanh; a Linear);
//              out_proj when the task has classes                               (tile programs)
//   store      each input row's result, the task's activation
//
// The LSH stages are each backend's own (the CPU's fused sweeps with the per-head scatter, the device's
// kernels): they are Exec members. The Ops members (each backend's types Dense, Norm; rows of T):
//   dense(DenseArgs)        y = act(x W^T + b) [+ add]   (add may alias y)
//   norm(NormArgs)          LayerNorm (biased variance, eps 1e-5) of x into y
//   tanh(rows)              in place
//   attention(r0, n)        the heads' bucket attention of rows r0 .. r0 + n - 1, H x h_dim a row (the CPU
//                           divides its sums here; the device's kernel has)
//   scratch(slot, n, w)     work rows of the tile
#pragma once

#include "../ops/rows.hpp"
#include "surrogate/hept.hpp"

namespace surrogate::hept::program {

using kernels::Activation;
using kernels::index_t;
template <class T>
using Rows = ops::RowsOf<T>;

/// Rows of a tile program; the head MLP's hidden width (mlp_out: Linear(h_dim / 2, 256), then 256 wide).
inline constexpr index_t kTileRows = 64;
inline constexpr int kHeadHidden = 256;

/// Work rows of a tile (the CPU: the thread's tile; a device: arrays for all rows).
enum class Slot : int { hidden, normed, head_a, head_b, count };
/// The parts of the forward an Exec may time (enter(): the CPU's profile phases).
enum class Part : int { layers, head };

/// The layers of a HEPT block the tile program reads, and those of the encoder and the head.
template <class Dense, class Norm>
struct Block {
  const Dense* out_linear = nullptr;
  const Dense* ff0 = nullptr;
  const Dense* ff2 = nullptr;
  const Norm* norm2 = nullptr;
};
template <class Dense, class Norm>
struct Head {
  const Dense* enc0 = nullptr;
  const Dense* enc2 = nullptr;
  const Dense* W = nullptr;
  const Dense* mlp[5] = {};
  const Norm* mlp_norms[4] = {};
  const Dense* out_proj = nullptr;  // null without classes
};

/// The forward. The Exec gives config(), the layers (head(), block(l)), the rows of the whole forward
/// (inputs(): the padded encoder inputs; concatenation(): [e_0 ; ... ; e_L], (L + 1) h_dim wide;
/// head_rows(), head_out(), classes(): h_dim / 2, h_dim / 2 and num_classes wide), tiles(f) (f(ops, r0, n)
/// on every tile, or once), and the stages load(), project(l), ranges(l), keys(l), buckets(l),
/// layer_done(l), store(); enter(part) as each part begins.
template <class Exec>
void forward(Exec& x) {
  using Ops = typename Exec::Ops;
  using R = Rows<typename Exec::Value>;
  using DenseArgs = ops::DenseArgs<typename Ops::Dense, R>;
  using NormArgs = ops::NormArgs<typename Ops::Norm, R>;
  const Config& c = x.config();
  const int D = c.h_dim, L = c.n_layers;
  const auto& head = x.head();
  x.load();
  const R in = x.inputs(), cat = x.concatenation();
  x.tiles([&](Ops& ops, index_t r0, index_t n) {  // the feature encoder into e_0
    const R hidden = ops.scratch(Slot::hidden, n, D);
    ops.dense(DenseArgs{head.enc0, in.range(r0, n), hidden, Activation::relu});
    ops.dense(DenseArgs{head.enc2, hidden, cat.range(r0, n).columns(0, D)});
  });
  x.enter(Part::layers);
  for (int l = 0; l < L; ++l) {
    x.project(l);
    x.ranges(l);
    x.keys(l);
    x.buckets(l);
    const auto& w = x.block(l);
    x.tiles([&](Ops& ops, index_t r0, index_t n) {  // the residuals into the next block of the concatenation
      const R rows = cat.range(r0, n), e = rows.columns(l * D, D), next = rows.columns((l + 1) * D, D);
      const R normed = ops.scratch(Slot::normed, n, D), hidden = ops.scratch(Slot::hidden, n, D);
      ops.dense(DenseArgs{w.out_linear, ops.attention(r0, n), next, Activation::none, e});
      ops.norm(NormArgs{w.norm2, next, normed});
      ops.dense(DenseArgs{w.ff0, normed, hidden, Activation::relu});
      ops.dense(DenseArgs{w.ff2, hidden, next, Activation::none, next});
    });
    x.layer_done(l);
  }
  x.enter(Part::head);
  const R eh = x.head_rows(), out = x.head_out();
  x.tiles([&](Ops& ops, index_t r0, index_t n) {  // the head, its MLP through the tile's work rows
    const R e = eh.range(r0, n);
    ops.dense(DenseArgs{head.W, cat.range(r0, n), e});
    R src = e;
    for (int j = 0; j < 4; ++j) {
      const R a = ops.scratch(Slot::head_a, n, kHeadHidden), b = ops.scratch(Slot::head_b, n, kHeadHidden);
      ops.dense(DenseArgs{head.mlp[j], src, a});
      ops.norm(NormArgs{head.mlp_norms[j], a, b});
      ops.tanh(b);
      src = b;
    }
    ops.dense(DenseArgs{head.mlp[4], src, out.range(r0, n), Activation::none, e});
  });
  if (head.out_proj) {
    const R classes = x.classes();
    x.tiles([&](Ops& ops, index_t r0, index_t n) {
      ops.dense(DenseArgs{head.out_proj, out.range(r0, n), classes.range(r0, n)});
    });
  }
  x.store();
}

}  // namespace surrogate::hept::program
