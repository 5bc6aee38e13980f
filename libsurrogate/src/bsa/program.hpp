// BSA's forward written once, for the CPU (network.cpp, network_distributed.cpp) and a CUDA device
// (cuda/forward.cpp, cuda/distributed.cpp): the layers over an Ops (ops/rows.hpp: BsaHostOps or CudaOps) and
// the stage sequence (the depth layers with the rotated order and the long residual; in a layer the
// row-wise halves of balltree/program.hpp's transformer block around the attention: ball, global, or the
// sparse branches with their gate) over an Exec:
//
//   using Ops;  const Config& config();  const Layers<Ops>& layers();  const RowLayout& layout();
//   tiles(n, tile, f)   f(Ops&, Work&, r0, rows) for rows r0 .. r0 + rows - 1 of n in tiles of `tile` rows
//                       (the CPU: one tile per OpenMP iteration; a device: once, all n rows)
//   whole(f)            f(Ops&) once, all rows (the CPU: the branch members spread over the threads)
//   Work::rows(slot, rows, width)   work rows of the tile
//   rows(rotated)       the layer's rows (LayerRows) in tree or rotated order; residual()
//   ball_relative(work, rows, ball, r0, n)   a tile's positions relative to their ball's centre
//   to_rotated(), from_rotated()   the rotated order (collective when distributed)
//   compressed(rows)    the compressed keys and values of every block of the layout's samples
//   selection(i)        segment i's selected blocks
//   fetch_selected(rows), fetch_samples(rows)   keys and values of other ranks (collective when
//                       distributed; nothing in one process)
//
// So the arithmetic on a row is the same on both (the CPU's bits do not depend on the tiles), and a change
// to the network is made once. share/docs/balltree.md, "Code layout".
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "../balltree/program.hpp"
#include "../ops/rows.hpp"
#include "network.hpp"
#include "surrogate/bsa.hpp"

namespace surrogate::bsa::program {

using balltree::program::Block;
using balltree::program::BlockRows;
using balltree::program::kTileRows;
using kernels::index_t;
using detail::RowLayout;
using ops::Rows;

/// One layer: the transformer block (pe = position_proj, proj = out_proj, sigma for ball and sparse
/// attention) and the sparse attention's compression MLPs (Linear, ReLU, Linear; q only with block-level
/// importance), token gate (D -> 3 H, sigmoid) or static gates ([H][2], sigmoid applied).
template <class Ops>
struct Layer {
  Block<Ops> block;
  typename Ops::Dense q_mlp[2], k_mlp[2], v_mlp[2], gate;
  typename Ops::Vector static_gate;
};

template <class Ops>
struct Layers {
  typename Ops::Dense embed;
  std::vector<Layer<Ops>> layers;
};

/// The layers of one Ops as another's, layer by layer with `f` (Dense, Norm and Vector overloads).
template <class To, class From, class F>
Layers<To> convert(const Layers<From>& from, const F& f) {
  Layers<To> to;
  to.embed = f(from.embed);
  for (const Layer<From>& l : from.layers) {
    const Block<From>& b = l.block;
    Layer<To> t;
    t.block = {b.dim, b.heads, b.ball, b.hidden, f(b.norm1), f(b.norm2), f(b.qkv), f(b.proj),
               f(b.pe),  f(b.w1),    f(b.w2),   f(b.w3),     f(b.sigma)};
    for (int i = 0; i < 2; ++i) {
      t.q_mlp[i] = f(l.q_mlp[i]);
      t.k_mlp[i] = f(l.k_mlp[i]);
      t.v_mlp[i] = f(l.v_mlp[i]);
    }
    t.gate = f(l.gate);
    t.static_gate = f(l.static_gate);
    to.layers.push_back(std::move(t));
  }
  return to;
}

/// The work rows of a tile (Work::rows).
enum class Slot : std::uint8_t { rel, a1, a2, count };

/// A layer's rows (all of the layout's rows): the tokens x (updated in place), their positions with the
/// balls' centres (one row per ball) or the ball-relative positions (the exec's ball_relative reads
/// either), and the layer's arrays: h (D), u (q | k | v), gates (3 H), o (the attention), the sparse
/// branches local, coarse, fine and the compressed kc, vc, qc (a row per block); on a device the
/// compression's index arrays and work rows (CompressArgs).
struct LayerRows {
  Rows x, pos, centres, rel;
  Rows h, u, gates, o, local, coarse, fine, kc, vc, qc;
  const std::int64_t *compress_gather = nullptr, *block_start = nullptr;
  Rows mlp_in, mlp_hidden;
};

/// The keys and values of the selected blocks of the segments that hold part of a sample (fetched from
/// their owners): block b of the i-th such segment's sample at row first_row[i * blocks + b] of k and v.
struct SelectedKeys {
  Rows k, v;
  const std::int64_t* first_row = nullptr;
};

/// The compressed keys and values of every block of the layout's samples (sample s's at rows s blocks ..).
struct CompressedBlocks {
  Rows k, v;
};

inline ops::SparseShape sparse_shape(const Config& c) {
  ops::SparseShape s;
  s.P = c.ball_size;
  s.C = c.compress_block_size;
  s.S = c.selected_blocks_number;
  s.G = c.group_selection_size;
  s.group_selection = c.use_group_selection;
  s.mask_own_ball = c.should_mask_blocks_in_ball;
  s.coarse_q_attn = c.use_coarse_q_attn;
  s.block_level = c.block_level_importance();
  return s;
}

/// x += out_proj(attention(...)) and the SwiGLU half: the block's halves in row tiles around the attention.
template <class Exec, class Ops>
void layer(Exec& e, const Layer<Ops>& L, const LayerRows& r);

// ---------------------------------------------------------------------------------------------------
// The attention stages.

/// Global attention: every query attends to all rows of its sample (a segment holding part of a sample:
/// the sample's keys and values fetched from their owners, n rows of [k | v] per such segment).
template <class Exec>
void global_attention(Exec& e, const LayerRows& r) {
  const Config& c = e.config();
  const int D = c.c_hidden, H = c.num_heads;
  const RowLayout& layout = e.layout();
  const Rows q = r.u.columns(0, D), k = r.u.columns(D, D), v = r.u.columns(2 * D, D);
  const Rows fetched = e.fetch_samples(r);
  e.whole([&](auto& ops) {
    index_t partial = 0;
    for (const RowLayout::Segment& g : layout.segments) {
      const index_t rows = g.samples * g.length;
      ops::GlobalAttentionArgs a{H,         g.samples,          g.length,           layout.n, q.range(g.begin, rows),
                                 k.range(g.begin, rows), v.range(g.begin, rows), r.o.range(g.begin, rows)};
      if (g.length < layout.n) {
        const Rows kv = fetched.range(partial++ * layout.n, layout.n);
        a.k = kv.columns(0, D);
        a.v = kv.columns(D, D);
      }
      ops.global_attention(a);
    }
  });
}

/// Sparse attention (NativeSparseAttention over the ball tree): the local branch (ball attention with the
/// distance bias), the compressed blocks, the coarse branch with the top-S block selection and the
/// selected blocks' branch per segment, then the gate.
template <class Exec, class Ops>
void sparse_attention(Exec& e, const Layer<Ops>& L, const LayerRows& r) {
  const Config& c = e.config();
  const int D = c.c_hidden, H = c.num_heads, E = c.head_dim();
  const RowLayout& layout = e.layout();
  const ops::SparseShape s = sparse_shape(c);
  const index_t n = r.x.rows, nb = layout.n / s.C;
  const Rows q = r.u.columns(0, D), k = r.u.columns(D, D), v = r.u.columns(2 * D, D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(E));
  e.tiles(n, s.P, [&](Ops& ops, auto&, index_t r0, index_t rows) {
    ops.ball_attention({s.P, H, q.range(r0, rows), k.range(r0, rows), v.range(r0, rows), scale, &L.block.sigma,
                        r.pos.range(r0, rows), r.local.range(r0, rows)});
  });
  e.whole([&](Ops& ops) {
    auto compress = [&](const typename Ops::Dense* mlp, const Rows& tokens, const Rows& out) {
      ops.compress({c.use_compress_mlp ? mlp : nullptr, s.C, H, tokens, out, r.compress_gather, r.block_start,
                    r.mlp_in, r.mlp_hidden});
    };
    compress(L.k_mlp, k, r.kc);
    compress(L.v_mlp, v, r.vc);
    if (s.block_level) compress(L.q_mlp, q, r.qc);
  });
  const CompressedBlocks all = e.compressed(r);
  // The coarse branch and the selection per segment (the window's in-sample offset row0 places the
  // own-ball mask).
  e.whole([&](Ops& ops) {
    for (std::size_t i = 0; i < layout.segments.size(); ++i) {
      const RowLayout::Segment& g = layout.segments[i];
      const index_t rows = g.samples * g.length, blocks = g.samples * nb;
      ops.coarse_select({s, H, g.samples, g.length, g.row0, nb, q.range(g.begin, rows),
                         s.block_level ? r.qc.range(g.begin / s.C, rows / s.C) : Rows{},
                         all.k.range(g.sample * nb, blocks), all.v.range(g.sample * nb, blocks),
                         r.coarse.range(g.begin, rows), e.selection(i)});
    }
  });
  // The fine branch: a whole sample's own rows, a part of a sample the selected blocks fetched.
  const SelectedKeys fetched = e.fetch_selected(r);
  e.whole([&](Ops& ops) {
    index_t partial = 0;
    for (std::size_t i = 0; i < layout.segments.size(); ++i) {
      const RowLayout::Segment& g = layout.segments[i];
      const index_t rows = g.samples * g.length;
      ops::SelectedAttentionArgs a{s,
                                   H,
                                   g.samples,
                                   g.length,
                                   nb,
                                   q.range(g.begin, rows),
                                   k.range(g.begin, rows),
                                   v.range(g.begin, rows),
                                   e.selection(i),
                                   nullptr,
                                   r.fine.range(g.begin, rows)};
      if (g.length < layout.n) {
        a.k = fetched.k;
        a.v = fetched.v;
        a.first_row = fetched.first_row + partial++ * nb;
      }
      ops.selected_attention(a);
    }
  });
  // o = g_local local + g_coarse coarse + g_fine fine per head.
  const bool token_gate = c.use_token_gated_attention;
  e.tiles(n, kTileRows, [&](Ops& ops, auto&, index_t r0, index_t rows) {
    ops.gated_sum({H, r.local.range(r0, rows), r.coarse.range(r0, rows), r.fine.range(r0, rows),
                   token_gate ? r.gates.range(r0, rows) : Rows{}, &L.static_gate, r.o.range(r0, rows)});
  });
}

template <class Exec, class Ops>
void layer(Exec& e, const Layer<Ops>& L, const LayerRows& r) {
  const Config& c = e.config();
  const Block<Ops>& b = L.block;
  const int D = c.c_hidden, H = c.num_heads, E = c.head_dim();
  const index_t n = r.x.rows;
  const bool global = c.attention_type == AttentionType::global;
  const bool token_gate = c.attention_type == AttentionType::sparse && c.use_token_gated_attention;
  const int ball = c.attention_type == AttentionType::ball ? c.attention_ball_size : c.ball_size;
  // Norm, position term (not for global attention), q/k/v, token gate.
  e.tiles(n, kTileRows, [&](Ops& ops, auto& work, index_t r0, index_t rows) {
    const Rows h = r.h.range(r0, rows);
    balltree::program::attention_input(
        ops, b, {r.x.range(r0, rows), {}, global ? Rows{} : e.ball_relative(work, r, ball, r0, rows), h,
                 r.u.range(r0, rows), {}, {}, {}});
    if (!token_gate) return;
    const Rows gates = r.gates.range(r0, rows);
    ops.dense({&L.gate, h, gates});
    ops.map({ops::Map::sigmoid, gates});
  });
  // Attention into o.
  if (c.attention_type == AttentionType::sparse) {
    sparse_attention(e, L, r);
  } else if (global) {
    global_attention(e, r);
  } else {
    const Rows q = r.u.columns(0, D), k = r.u.columns(D, D), v = r.u.columns(2 * D, D);
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    e.tiles(n, ball, [&](Ops& ops, auto&, index_t r0, index_t rows) {
      ops.ball_attention({ball, H, q.range(r0, rows), k.range(r0, rows), v.range(r0, rows), scale, &b.sigma,
                          r.pos.range(r0, rows), r.o.range(r0, rows)});
    });
  }
  // Output projection with the residual, then the SwiGLU half.
  e.tiles(n, kTileRows, [&](Ops& ops, auto& work, index_t r0, index_t rows) {
    balltree::program::attention_output(
        ops, b,
        {r.x.range(r0, rows), {}, {}, r.h.range(r0, rows), {}, r.o.range(r0, rows),
         work.rows(Slot::a1, rows, b.hidden), work.rows(Slot::a2, rows, b.hidden)});
  });
}

/// The depth layers with the long residual on the tokens: odd layers of a rotated model see them in the
/// rotated tree's order; after every block_size layers (and the last) x += residual, residual = x.
template <class Exec>
void layers(Exec& e) {
  const Config& c = e.config();
  const Rows x = e.rows(false).x, residual = e.residual();
  e.tiles(x.rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t rows) {
    ops.copy({x.range(r0, rows), nullptr, residual.range(r0, rows)});
  });
  for (int l = 0; l < c.depth; ++l) {
    const auto& L = e.layers().layers[static_cast<std::size_t>(l)];
    if (c.should_rotate && l % 2 == 1) {
      e.to_rotated();
      layer(e, L, e.rows(true));
      e.from_rotated();
    } else {
      layer(e, L, e.rows(false));
    }
    if ((l + 1) % c.block_size == 0 || l + 1 == c.depth) {
      e.tiles(x.rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t rows) {
        const Rows xr = x.range(r0, rows), res = residual.range(r0, rows);
        ops.combine({ops::Combine::add, xr, res, xr});
        ops.copy({xr, nullptr, res});
      });
    }
  }
}

}  // namespace surrogate::bsa::program
