// What the ball-tree families' stage programs share (erwin/program.hpp, bsa/program.hpp): the layers of
// a pre-norm transformer block over an Ops (ops/rows.hpp) and its two row-wise halves around the
// attention, and the embedding stage. Erwin runs a whole block in one tile (a ball); BSA runs the halves
// in row tiles with its sparse attention between them. share/docs/balltree.md, "Code layout".
#pragma once

#include <cmath>

#include "../ops/rows.hpp"

namespace surrogate::balltree::program {

using kernels::Activation;
using kernels::index_t;
using ops::Rows;

/// Rows per tile of the row-wise stages on the CPU.
inline constexpr index_t kTileRows = 64;

/// x += proj(attention(norm1(x) [+ pe(rel)])), x += w3(silu(w1 h) * w2 h) with h = norm2(x).
template <class Ops>
struct Block {
  int dim = 0, heads = 0, ball = 0, hidden = 0;
  typename Ops::Norm norm1, norm2;                // RMSNorms
  typename Ops::Dense qkv, proj, pe, w1, w2, w3;  // qkv rows [q | k | v], each head-major
  typename Ops::Vector sigma;                     // heads values; empty: no distance bias
};

/// x: the nodes (updated in place); pos, rel: their positions and ball-relative positions (rel without
/// rows: no position term); the rest work rows of as many rows (u: q | k | v, att: the attention's output).
struct BlockRows {
  Rows x, pos, rel, h, u, att, a1, a2;
};

/// u = qkv(norm1(x) [+ pe(rel)]); h holds the sum.
template <class Ops>
void attention_input(Ops& ops, const Block<Ops>& b, const BlockRows& r) {
  ops.norm({&b.norm1, r.x, r.h});
  if (r.rel.rows > 0) ops.dense({&b.pe, r.rel, r.h, Activation::none, r.h});
  ops.dense({&b.qkv, r.h, r.u});
}

/// x += proj(att), then x += w3(silu(w1 h) * w2 h) with h = norm2(x).
template <class Ops>
void attention_output(Ops& ops, const Block<Ops>& b, const BlockRows& r) {
  ops.dense({&b.proj, r.att, r.x, Activation::none, r.x});
  ops.norm({&b.norm2, r.x, r.h});
  ops.dense({&b.w1, r.h, r.a1, Activation::silu});
  ops.dense({&b.w2, r.h, r.a2});
  ops.combine({ops::Combine::multiply, r.a1, r.a2, r.a1});
  ops.dense({&b.w3, r.a1, r.x, Activation::none, r.x});
}

/// h = embed(features), in row tiles (Exec::tiles; Exec::layers().embed).
template <class Exec>
void embed(Exec& e, const Rows& features, const Rows& h) {
  e.tiles(h.rows, kTileRows, [&](auto& ops, auto&, index_t r0, index_t rows) {
    ops.dense({&e.layers().embed, features.range(r0, rows), h.range(r0, rows)});
  });
}

}  // namespace surrogate::balltree::program
