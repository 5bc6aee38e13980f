// Erwin's forward written once, for the CPU (network.cpp) and a CUDA device (cuda/forward.cpp): the layers
// of the network over an Ops (ops/rows.hpp: HostOps or CudaOps), the tile programs (a transformer block,
// pooling, unpooling, a message-passing step) as calls of the Ops on rows, and the stage sequence (the
// embedding, the message passing, the U-Net with its rotated blocks) over an Exec:
//
//   using Ops;  const Config& config();  const Layers<Ops>& layers();
//   tiles(n, tile, f)     f(Ops&, Work&, r0, rows) for rows r0 .. r0 + rows - 1 of n in tiles of `tile`
//                         rows (the CPU: one tile per OpenMP iteration; a device: once, all n rows)
//   chunks(list, f)       f(Ops&, Work&, r0, r1) for each receiver range of `list` (the same)
//   Work::rows(slot, rows, width)   work rows of the tile (the CPU: a thread's tile, rows padded to kPad)
//   level(i), rotated(i)  a level's rows (node array, positions, ball centres or ball-relative positions,
//                         children)
//   ball_relative(work, level, ball, r0, rows)   a tile's positions relative to their ball's centre (the
//                         CPU: computed in the tile from the centres; a device: rows of its geometry)
//   prepare_rotated(i), to_rotated(i), from_rotated(i)   the rotated order (collective when distributed)
//   refresh_halo(), edges()   the message passing's halo and edge arrays
//
// So a tile program's arithmetic on a row is the same on both (the CPU's bits do not depend on the tiles),
// and a change to the network is made once. share/docs/balltree.md, "Code layout".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "../balltree/program.hpp"
#include "../ops/rows.hpp"
#include "surrogate/erwin.hpp"

namespace surrogate::erwin::program {

using kernels::Activation;
using kernels::index_t;
using ops::Rows;
// The transformer block, its row sets and the embedding stage (balltree/program.hpp).
using balltree::program::Block;
using balltree::program::BlockRows;
using balltree::program::embed;
using balltree::program::kTileRows;

template <class Ops>
struct Step {
  typename Ops::Dense message, update;
  typename Ops::Norm message_norm, update_norm;  // LayerNorms
};

template <class Ops>
struct Layers {
  typename Ops::Dense embed;
  std::vector<Step<Ops>> steps;
  std::vector<std::vector<Block<Ops>>> encoder, decoder;  // by level (decoder: the level it ends at)
  std::vector<Block<Ops>> bottleneck;
  std::vector<typename Ops::Dense> pool, unpool;  // by level transition i -> i + 1
  std::vector<ops::BatchNorm<typename Ops::Vector>> pool_bn, unpool_bn;
};

/// The layers of one Ops as another's, layer by layer with `f` (Dense, Norm and Vector overloads).
template <class To, class From, class F>
Layers<To> convert(const Layers<From>& from, const F& f) {
  auto block = [&](const Block<From>& b) {
    return Block<To>{b.dim, b.heads, b.ball, b.hidden, f(b.norm1), f(b.norm2), f(b.qkv), f(b.proj),
                     f(b.pe),  f(b.w1),    f(b.w2),   f(b.w3),     f(b.sigma)};
  };
  auto blocks = [&](const std::vector<Block<From>>& v) {
    std::vector<Block<To>> out;
    for (const Block<From>& b : v) out.push_back(block(b));
    return out;
  };
  Layers<To> to;
  to.embed = f(from.embed);
  for (const Step<From>& s : from.steps)
    to.steps.push_back({f(s.message), f(s.update), f(s.message_norm), f(s.update_norm)});
  for (const auto& level : from.encoder) to.encoder.push_back(blocks(level));
  for (const auto& level : from.decoder) to.decoder.push_back(blocks(level));
  to.bottleneck = blocks(from.bottleneck);
  for (const auto& l : from.pool) to.pool.push_back(f(l));
  for (const auto& l : from.unpool) to.unpool.push_back(f(l));
  for (const auto& b : from.pool_bn) to.pool_bn.push_back({f(b.alpha), f(b.beta)});
  for (const auto& b : from.unpool_bn) to.unpool_bn.push_back({f(b.alpha), f(b.beta)});
  return to;
}

// ---------------------------------------------------------------------------------------------------
// Tile programs: the layer calls of one stage on the rows of a tile.

/// The work rows of a tile (Work::rows).
enum class Slot : std::uint8_t { h, u, att, a1, a2, join, z, msg_in, msg, upd_in, upd, rel, count };

/// One transformer block on whole balls: the halves of balltree/program.hpp around BMSA (ball attention,
/// with the distance bias when b.sigma holds values).
template <class Ops>
void block(Ops& ops, const Block<Ops>& b, const BlockRows& r) {
  const int D = b.dim, E = D / b.heads;
  balltree::program::attention_input(ops, b, r);
  ops.ball_attention({b.ball, b.heads, r.u.columns(0, D), r.u.columns(D, D), r.u.columns(2 * D, D),
                      1.0f / std::sqrt(static_cast<float>(E)), &b.sigma, r.pos, r.att});
  balltree::program::attention_output(ops, b, r);
}

/// children: the s children of every parent (parents x s node rows); child_rel: per parent the children's
/// positions relative to it (s x d values); out: the parents' rows.
struct PoolRows {
  Rows children, child_rel, join, out;
};

/// Pooling: [x of the s children | their positions relative to the parent] -> Linear -> BatchNorm.
template <class Ops>
void pool(Ops& ops, const typename Ops::Dense& layer, const ops::BatchNorm<typename Ops::Vector>& bn, int s,
          const PoolRows& r) {
  const int Din = r.children.width;
  for (int j = 0; j < s; ++j) ops.copy({r.children.every(s, j), nullptr, r.join.columns(j * Din, Din)});
  ops.copy({r.child_rel, nullptr, r.join.columns(s * Din, r.child_rel.width)});
  ops.dense({&layer, r.join, r.out});
  ops.batch_norm({&bn, r.out});
}

/// parents: the coarse level's rows; children: the skip (parents x s rows), updated in place.
struct UnpoolRows {
  Rows parents, child_rel, join, z, children;
};

/// Unpooling: [x of the parent | its children's positions relative to it] -> Linear (s x Dout per parent),
/// added to the skip's children, then BatchNorm.
template <class Ops>
void unpool(Ops& ops, const typename Ops::Dense& layer, const ops::BatchNorm<typename Ops::Vector>& bn, int s,
            const UnpoolRows& r) {
  const int Din = r.parents.width, Dout = r.children.width;
  ops.copy({r.parents, nullptr, r.join.columns(0, Din)});
  ops.copy({r.child_rel, nullptr, r.join.columns(Din, r.child_rel.width)});
  ops.dense({&layer, r.join, r.z});
  if (r.z.ld == r.z.width) {  // z's rows are the children's rows side by side: one call
    ops.batch_norm({&bn, r.children, {r.z.data, Dout, r.children.rows, Dout, r.z.place}});
    return;
  }
  for (int j = 0; j < s; ++j) ops.batch_norm({&bn, r.children.every(s, j), r.z.columns(j * Dout, Dout)});
}

/// The receivers agg.rows of a chunk: h all source rows (with the halo), src/dst/edge_rel their edges
/// (grouped by receiver, in edge order), start the receivers' first edges (agg.rows + 1 entries); the
/// messages are computed `tile` edges at a time (msg_in holds tile rows, msg all of the chunk's).
struct MessageRows {
  Rows h;
  const std::int64_t *src = nullptr, *dst = nullptr;
  Rows edge_rel;
  const std::int64_t* start = nullptr;
  Rows msg_in, msg, agg;
  index_t tile = 1;
};

/// Messages m = LayerNorm(GELU(W [h_src | h_dst | p_src - p_dst] + b)), their mean per receiver.
template <class Ops>
void messages(Ops& ops, const Step<Ops>& step, const MessageRows& r) {
  const int D = r.h.width;
  for (index_t q = 0; q < r.msg.rows; q += r.tile) {
    const index_t rows = std::min(r.tile, r.msg.rows - q);
    const Rows in = r.msg_in.range(0, rows), out = r.msg.range(q, rows);
    ops.copy({r.h, r.src + q, in.columns(0, D)});
    ops.copy({r.h, r.dst + q, in.columns(D, D)});
    ops.copy({r.edge_rel.range(q, rows), nullptr, in.columns(2 * D, r.edge_rel.width)});
    ops.dense({&step.message, in, out, Activation::gelu_erf});
    ops.norm({&step.message_norm, out, out});
  }
  ops.segment_mean({r.msg, r.start, r.agg});
}

struct UpdateRows {
  Rows h, agg, upd_in, upd;
};

/// h += LayerNorm'(W' [h | mean of its messages] + b').
template <class Ops>
void update(Ops& ops, const Step<Ops>& step, const UpdateRows& r) {
  const int D = r.h.width;
  ops.copy({r.h, nullptr, r.upd_in.columns(0, D)});
  ops.copy({r.agg, nullptr, r.upd_in.columns(D, D)});
  ops.dense({&step.update, r.upd_in, r.upd});
  ops.norm({&step.update_norm, r.upd, r.upd});
  ops.combine({ops::Combine::add, r.h, r.upd, r.h});
}

// ---------------------------------------------------------------------------------------------------
// The stage sequence over an Exec (see the top of this file).

/// A level's rows: the node array, positions (d per row), the balls' centres (one row per ball) or the
/// positions relative to them (the exec's ball_relative reads either), and per parent of the next level
/// its children's positions relative to it (none at the last level).
struct LevelRows {
  Rows x, pos, centres, rel, child_rel;
};

/// What the message passing runs on: h (points + halo rows), agg (points rows), the edges grouped by
/// receiver with p_src - p_dst, start (points + 1 entries; start_host its host copy) and the receiver
/// chunks, and the edges whose messages are computed at once (0: all edges of a chunk).
struct EdgeRows {
  Rows h, agg, edge_rel;
  const std::int64_t *src = nullptr, *dst = nullptr, *start = nullptr;
  const std::int64_t* start_host = nullptr;
  std::span<const std::pair<index_t, index_t>> chunks;
  index_t edge_tile = 0;
};

/// The mp_steps message-passing steps: the halo refreshed, the messages' means, the update.
template <class Exec>
void message_passing(Exec& e) {
  const EdgeRows g = e.edges();
  const int D = g.h.width, d = g.edge_rel.width;
  for (const auto& step : e.layers().steps) {
    e.refresh_halo();
    e.chunks(g.chunks, [&](auto& ops, auto& work, index_t r0, index_t r1) {
      const index_t e0 = g.start_host[r0], m = g.start_host[r1] - e0;
      const index_t tile = g.edge_tile > 0 ? std::min(g.edge_tile, m) : m;
      messages(ops, step,
               {g.h, g.src + e0, g.dst + e0, g.edge_rel.range(e0, m), g.start + r0,
                work.rows(Slot::msg_in, tile, 2 * D + d), work.rows(Slot::msg, m, D), g.agg.range(r0, r1 - r0),
                std::max<index_t>(1, tile)});
    });
    e.tiles(g.agg.rows, kTileRows, [&](auto& ops, auto& work, index_t r0, index_t rows) {
      update(ops, step, {g.h.range(r0, rows), g.agg.range(r0, rows), work.rows(Slot::upd_in, rows, 2 * D),
                         work.rows(Slot::upd, rows, D)});
    });
  }
}

/// One block on every ball of a level's rows.
template <class Exec, class B>
void block_stage(Exec& e, const B& b, const LevelRows& lv) {
  e.tiles(lv.x.rows, b.ball, [&](auto& ops, auto& work, index_t r0, index_t rows) {
    block(ops, b,
          {lv.x.range(r0, rows), lv.pos.range(r0, rows), e.ball_relative(work, lv, b.ball, r0, rows),
           work.rows(Slot::h, rows, b.dim), work.rows(Slot::u, rows, 3 * b.dim), work.rows(Slot::att, rows, b.dim),
           work.rows(Slot::a1, rows, b.hidden), work.rows(Slot::a2, rows, b.hidden)});
  });
}

/// The blocks of a level: odd blocks of a rotated model see the nodes in the rotated tree's order.
template <class Exec, class B>
void blocks(Exec& e, const std::vector<B>& bs, int level) {
  bool rotated_ready = false;  // a flag: the exchanges are collective, also for a rank without nodes
  for (std::size_t j = 0; j < bs.size(); ++j) {
    if (!(e.config().rotate > 0 && j % 2 == 1)) {
      block_stage(e, bs[j], e.level(level));
      continue;
    }
    if (!rotated_ready) e.prepare_rotated(level);
    rotated_ready = true;
    e.to_rotated(level);
    block_stage(e, bs[j], e.rotated(level));
    e.from_rotated(level);
  }
}

/// The U-Net: encoder blocks and pooling (the encoder's node array of each level stays as the decoder's
/// skip), the bottleneck, then unpooling into the skip and the decoder blocks.
template <class Exec>
void levels(Exec& e) {
  const Config& c = e.config();
  const auto& w = e.layers();
  const int L = c.levels(), d = c.dimensionality;
  for (int i = 0; i + 1 < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    blocks(e, w.encoder[iu], i);
    const LevelRows lv = e.level(i), next = e.level(i + 1);
    const int s = c.strides[iu], Din = lv.x.width;
    e.tiles(next.x.rows, kTileRows, [&](auto& ops, auto& work, index_t r0, index_t rows) {
      if (s == 1) {
        ops.copy({lv.x.range(r0, rows), nullptr, next.x.range(r0, rows)});
        return;
      }
      pool(ops, w.pool[iu], w.pool_bn[iu], s,
           {lv.x.range(r0 * s, rows * s), lv.child_rel.range(r0, rows), work.rows(Slot::join, rows, s * (Din + d)),
            next.x.range(r0, rows)});
    });
  }
  blocks(e, w.bottleneck, L - 1);
  for (int i = L - 2; i >= 0; --i) {
    const auto iu = static_cast<std::size_t>(i);
    const LevelRows lv = e.level(i), parent = e.level(i + 1);
    const int s = c.strides[iu], Din = parent.x.width, Dout = lv.x.width;
    e.tiles(parent.x.rows, kTileRows, [&](auto& ops, auto& work, index_t r0, index_t rows) {
      unpool(ops, w.unpool[iu], w.unpool_bn[iu], s,
             {parent.x.range(r0, rows), lv.child_rel.range(r0, rows), work.rows(Slot::join, rows, Din + s * d),
              work.rows(Slot::z, rows, s * Dout), lv.x.range(r0 * s, rows * s)});
    });
    blocks(e, w.decoder[iu], i);
  }
}

// ---------------------------------------------------------------------------------------------------
// Host arithmetic both execs share.

/// Row r of `rows` (n x d) minus the mean of its group of `group` consecutive rows (balltree::mean_pool),
/// written with row stride ld (padding zero): ball-relative positions, children relative to their parent.
std::vector<float> relative_to_group(std::span<const float> rows, int d, int group, index_t ld);

/// The edges (2 x E: sources < n_all, receivers < n) grouped by receiver, each group in edge order:
/// start (n + 1 entries), sources, receivers and p_src - p_dst (d per edge) in that order, and chunks of
/// receivers [r0, r1) with at most `chunk_edges` edges (a receiver with more alone). `bad_edge`: the first
/// edge out of range (then no edges are kept), or -1. The per-edge gathers on `threads` OpenMP threads.
struct EdgeOrder {
  template <class T>
  using Values = std::vector<T, kernels::FirstTouchAllocator<T>>;  // written by the parallel gathers
  std::vector<std::int64_t> start;
  Values<std::int64_t> src, dst;
  Values<float> rel;
  std::vector<std::pair<index_t, index_t>> chunks;
  std::int64_t bad_edge = -1;
};
EdgeOrder order_edges(std::span<const std::int64_t> edge_index, std::span<const float> positions, int d, index_t n,
                      index_t n_all, index_t chunk_edges, int threads);
/// order_edges()'s chunks of the n receivers from their edge offsets `start` (n + 1 entries).
std::vector<std::pair<index_t, index_t>> receiver_chunks(std::span<const std::int64_t> start, index_t n,
                                                         index_t chunk_edges);

}  // namespace surrogate::erwin::program
