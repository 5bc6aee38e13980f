// FLARE's forward (FLARE.py's FLAREModel) written once, over an Exec and its Ops, for both backends:
// network.cpp runs it on the CPU (a sweep step per tile of the plan, inside the OpenMP loop) and
// cuda/forward.cpp on a device (a sweep step once over all local rows).
//
// Sweep b = 0 .. blocks finishes block b - 1 (or runs the input projection) and starts block b (or runs the
// output head); between sweeps the encode of block b, the forward's only global quantity, is merged over
// the threads and the ranks (Exec::merge_encode). Per block:
//   start:  k = k_proj(norm1(x)) [then k_norm per head], v = v_proj(norm1(x)), this sweep's encode partials
//   finish: y = decode(k), x = x + out_proj(y), x = x + ffn(norm2(x))
//
// The Ops members (each backend's types: Norm, the MLP and Linear layers):
//   normed(norm, x)       the MLP input norm(x): the CPU writes it once (k and v read it), a device hands x
//                         and the norm to the MLP kernel, which applies it as it reads its rows
//   mlp(MlpArgs)          y = mlp(in) [+ extra]: FLARE's ResidualMLP, or one Linear (out_proj)
//   head_norm(norm, x)   the norm of each head's columns of x, in place (qk_norm)
//   encode(b, k, v)       the rows' partials of block b's encode (default or reproducible mode)
//   decode(b, k, y)       y = the decode of block b's latents for the rows' keys
#pragma once

#include <type_traits>

#include "../ops/rows.hpp"

namespace surrogate::flare::program {

using ops::Rows;

/// The rows an MLP reads, and, where the backend defers it (normed()), the norm it applies to them.
template <class Norm>
struct MlpInput {
  Rows x;
  const Norm* norm = nullptr;
};

template <class Layer, class Norm>
struct MlpArgs {
  const Layer* layer = nullptr;
  MlpInput<Norm> in;
  Rows y;
  Rows extra{};  // optional: added to the output; may alias y (a residual)
};

/// The rows of one sweep step: one tile's (CPU) or every local row (device).
struct SweepRows {
  Rows in;       // the normalised inputs (sweep 0)
  Rows x;        // the residual stream, C wide
  Rows keys;     // k of the current block (kept for its decode in the next sweep)
  Rows values;   // v of the current block
  Rows decoded;  // the decode's output
  Rows out;      // the outputs (last sweep)
};

template <class Ops, class Block>
void start_block(Ops& ops, const Block& blk, int b, const SweepRows& r) {
  using Norm = typename Ops::Norm;
  const MlpInput<Norm> in = ops.normed(blk.norm1, r.x);
  ops.mlp(MlpArgs<decltype(blk.k_proj), Norm>{&blk.k_proj, in, r.keys});
  if (blk.k_norm) ops.head_norm(*blk.k_norm, r.keys);
  ops.mlp(MlpArgs<decltype(blk.v_proj), Norm>{&blk.v_proj, in, r.values});
  ops.encode(b, r.keys, r.values);
}

template <class Ops, class Block>
void finish_block(Ops& ops, const Block& blk, int b, const SweepRows& r) {
  using Norm = typename Ops::Norm;
  ops.decode(b, r.keys, r.decoded);
  ops.mlp(MlpArgs<decltype(blk.out_proj), Norm>{&blk.out_proj, {r.decoded}, r.x, r.x});  // x = x + out_proj(y)
  ops.mlp(MlpArgs<decltype(blk.ffn), Norm>{&blk.ffn, ops.normed(blk.norm2, r.x), r.x, r.x});  // x = x + ffn(norm2(x))
}

/// The forward. The Exec gives the layers (blocks(), block(b), in_proj(), out_mlp(), out_norm(): null
/// without one), sweep(b, f) (f(ops, rows) on every tile, or once; errors agreed) and merge_encode(b).
template <class Exec>
void forward(Exec& e) {
  const int blocks = e.blocks();
  for (int b = 0; b <= blocks; ++b) {
    e.sweep(b, [&](auto& ops, const SweepRows& r) {
      using Ops = std::remove_reference_t<decltype(ops)>;
      using Norm = typename Ops::Norm;
      if (b == 0)
        ops.mlp(MlpArgs<std::remove_cvref_t<decltype(e.in_proj())>, Norm>{&e.in_proj(), {r.in}, r.x});
      else
        finish_block(ops, e.block(b - 1), b - 1, r);
      if (b < blocks) {
        start_block(ops, e.block(b), b, r);
      } else {
        const Norm* out_norm = e.out_norm();
        ops.mlp(MlpArgs<std::remove_cvref_t<decltype(e.out_mlp())>, Norm>{
            &e.out_mlp(), out_norm ? ops.normed(*out_norm, r.x) : MlpInput<Norm>{r.x}, r.out});
      }
    });
    if (b < blocks) e.merge_encode(b);
  }
}

}  // namespace surrogate::flare::program
