// Sequoia's forward written once, for the CPU (network.cpp) and a CUDA device (cuda/forward.cpp): the layers
// of TreeTransformerSeg / Cls over an Ops (ops/rows.hpp: HostOps or CudaOps), and the stage sequence (Init,
// the TreeBlocks, the heads) as calls of the Ops on rows, over an Exec:
//
//   using Ops;  const Config& config();  const Layers<Ops>& layers();  share();  hierarchy();
//   prepare(), geometry()   the checks of the inputs; the share's positions, key lists and inputs where
//                         the rows live (Geometry)
//   array(a, level, rows, width)   a forward's rows (kept from one block to the next)
//   tiles(n, tile, parallel, f)    f(Ops&, Work&, r0, rows) for rows r0 .. r0 + rows - 1 of n in tiles of
//                         `tile` rows (the CPU: OpenMP iterations when `parallel`; a device: once, all n)
//   Work::dense_target(layer, y)   where a dense layer writes y's rows (the CPU: a padded tile if needed)
//   stage(f)              local work between two moves (split share: an error of one rank agreed by all)
//   to_halo(rows), voxels_to_all(part, all)   the share's moves (collective on a split share)
//   host_values(rows)     rows as host floats (a classification's result)
//   sums(rows, cols), voxel_sums_to_all(part, cols)   the classification head's double sums of the owned
//                         voxels, and of every rank's voxels (a move on a split share; else `part` itself)
//   result(rows)          the segmentation head's rows as the forward's result: host floats, or (a device
//                         forward on device rows) left on the device for the caller, returning nothing
//   trace()               the CPU's intermediate results (a device: none);  phase(i)  the profile's phases
//   compute(f)            the network and its head between prepare() and the result: the CPU runs f; a
//                         device on a whole share replays it as one captured graph on a kept geometry
//
// So a row's arithmetic is the same on both (the CPU's bits do not depend on the tiles), and a change to the
// network is made once. share/docs/sequoia.md, "Code layout".
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "../ops/host_ops.hpp"
#include "../ops/rows.hpp"
#include "share.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/sequoia.hpp"

namespace surrogate::sequoia::program {

using kernels::index_t;
using ops::Rows;

template <class Ops>
using BatchNorm = ops::BatchNorm<typename Ops::Vector>;

template <class Ops>
struct Level {  // one model level of one block
  typename Ops::Dense mlp1, q, k, v, expand_k, expand_v, shrink_k, shrink_v;
  BatchNorm<Ops> mlp1_norm, out_norm;
  typename Ops::Positional parents, children, siblings;
};

template <class Ops>
struct Block {
  std::vector<Level<Ops>> levels;
  float mix[3] = {0, 0, 0};  // softmax of attn2a.weight
};

template <class Ops>
struct Layers {
  std::vector<typename Ops::Dense> init;  // seg: every level; cls: levels >= 1 (level 0: conv_w, conv_b)
  std::vector<BatchNorm<Ops>> init_norm;  // as init
  typename Ops::Vector conv_w, conv_b;    // cls: PointConv's Linear, out x (c + 3)
  std::vector<Block<Ops>> blocks;
  typename Ops::Dense head0, head3;
  int hidden = 0;                   // head0's outputs
  typename Ops::Vector ln_w, ln_b;  // seg: LayerNorm(hidden)
  BatchNorm<Ops> head_bn;           // cls
};

/// The layers of one Ops as another's, layer by layer with `f` (Dense, Vector and Wide overloads).
template <class To, class From, class F>
Layers<To> convert(const Layers<From>& from, const F& f) {
  auto bn = [&](const BatchNorm<From>& b) { return BatchNorm<To>{f(b.alpha), f(b.beta)}; };
  auto pe = [&](const typename From::Positional& p) {
    return typename To::Positional{f(p.w1), f(p.b1), bn(p.bn), f(p.w3), f(p.b3)};
  };
  Layers<To> to;
  for (const auto& d : from.init) to.init.push_back(f(d));
  for (const auto& b : from.init_norm) to.init_norm.push_back(bn(b));
  to.conv_w = f(from.conv_w);
  to.conv_b = f(from.conv_b);
  for (const Block<From>& b : from.blocks) {
    Block<To> t;
    std::copy(b.mix, b.mix + 3, t.mix);
    for (const Level<From>& l : b.levels)
      t.levels.push_back({f(l.mlp1), f(l.q), f(l.k), f(l.v), f(l.expand_k), f(l.expand_v), f(l.shrink_k), f(l.shrink_v),
                          bn(l.mlp1_norm), bn(l.out_norm), pe(l.parents), pe(l.children), pe(l.siblings)});
    to.blocks.push_back(std::move(t));
  }
  to.head0 = f(from.head0);
  to.head3 = f(from.head3);
  to.hidden = from.hidden;
  to.ln_w = f(from.ln_w);
  to.ln_b = f(from.ln_b);
  to.head_bn = bn(from.head_bn);
  return to;
}

/// Key lists where the rows live: first (queries + 1 offsets into keys), keys.
struct Lists {
  const std::int64_t* first = nullptr;
  const std::int64_t* keys = nullptr;
};

/// What a forward runs on (Exec::geometry): per model level the nodes' positions (level 0: the extended
/// rows, points then halo), the owned voxels' positions and ids, the share's key lists, the pooling lists
/// (per parent its children's rows, level 0: the points of each owned voxel), the input features (cls:
/// extended rows, the halo's filled by to_halo), the segmentation head's sample of every point, and the
/// classification head's lists (per sample its rows of the head level, level 0: every rank's voxels) and
/// divisors (level 0: the sample's points; above: null, the list's length).
struct Geometry {
  std::vector<Rows> pos;
  Rows pos1;
  const std::int64_t* voxels = nullptr;
  std::vector<Lists> parents, children, siblings, pool;
  Lists conv;
  Rows features;
  const std::int64_t* batch = nullptr;
  Rows classes;
  Lists samples;
  const double* sample_counts = nullptr;
};

/// The forward's arrays (Exec::array; one per kind and level).
enum class Array : std::uint8_t { x, part, pooled, y, q, k, v, q1, kw, vw, att_p, att_c, att_s, means, out, count };
/// The work rows of a tile (Work::rows).
enum class Slot : std::uint8_t { dense, z, u, count };

/// Rows per tile of the row-wise stages on the CPU.
inline constexpr index_t kTileRows = 64;
/// Work below which a CPU stage runs on the calling thread: a parallel region costs a barrier, and on a
/// busy machine a barrier can wait a whole time slice for a descheduled thread (the top levels are small).
inline constexpr std::int64_t kSerialWork = 1 << 15;

/// y = x W^T + b through the rows the Work gives for the layer (y, or a padded tile copied into y).
template <class Ops, class Work>
void dense(Ops& ops, Work& work, const typename Ops::Dense& l, const Rows& x, const Rows& y) {
  const Rows t = work.dense_target(l, y);
  ops.dense({&l, x, t});
  if (t.data != y.data) ops.copy({t, nullptr, y});
}

/// y = ReLU(BN(x W^T)) of a level's rows, then its queries, keys and values from y, tile by tile while
/// the tile's y rows are in the caches.
template <class Exec>
void projections(Exec& e, const Level<typename Exec::Ops>& lv, const Rows& x, const Rows& y, const Rows& q, const Rows& k,
                 const Rows& v) {
  e.tiles(x.rows, kTileRows, x.rows > kTileRows, [&](auto& ops, auto& work, index_t r0, index_t n) {
    const Rows yt = y.range(r0, n);
    dense(ops, work, lv.mlp1, x.range(r0, n), yt);
    ops.tree_norm({&lv.mlp1_norm, yt, true});
    dense(ops, work, lv.q, yt, q.range(r0, n));
    dense(ops, work, lv.k, yt, k.range(r0, n));
    dense(ops, work, lv.v, yt, v.range(r0, n));
  });
}

/// out = dense(x) of all rows (the keys and values that a level's parents or children attention reads).
template <class Exec>
void dense_all(Exec& e, const typename Exec::Ops::Dense& l, const Rows& x, const Rows& out) {
  e.tiles(x.rows, kTileRows, x.rows > kTileRows, [&](auto& ops, auto& work, index_t r0, index_t n) {
    dense(ops, work, l, x.range(r0, n), out.range(r0, n));
  });
}

/// Tree attention of the queries q over key rows k, v: tiles of queries, dynamically scheduled.
template <class Exec>
void attend(Exec& e, const typename Exec::Ops::Positional& pe, const Rows& q, const Rows& qpos, const Rows& k,
            const Rows& v, const Rows& kpos, const Lists& lists, std::int64_t keys, float fixed_denom, const Rows& out) {
  const Config& c = e.config();
  const auto tau = static_cast<float>(std::sqrt(static_cast<double>(c.dim)));
  e.tiles(q.rows, kTileRows, keys * q.width > kSerialWork, [&](auto& ops, auto&, index_t r0, index_t n) {
    ops.tree_attention({&pe, c.heads, q.range(r0, n), k, v, qpos.range(r0, n), kpos, lists.first + r0, lists.keys, tau,
                        fixed_denom, out.range(r0, n)});
  }, true);
}

/// out = ReLU(BN(x W^T)) of the max-pooled rows of x (lists: per out row its rows of x).
template <class Exec>
void pool_level(Exec& e, const typename Exec::Ops::Dense& l, const BatchNorm<typename Exec::Ops>& bn, const Rows& x,
                const Lists& lists, const Rows& pooled, const Rows& out) {
  e.tiles(pooled.rows, kTileRows, false, [&](auto& ops, auto&, index_t r0, index_t n) {
    ops.tree_pool({x, lists.first + r0, lists.keys, pooled.range(r0, n)});
  });
  e.tiles(out.rows, kTileRows, out.rows > kTileRows, [&](auto& ops, auto& work, index_t r0, index_t n) {
    dense(ops, work, l, pooled.range(r0, n), out.range(r0, n));
    ops.tree_norm({&bn, out.range(r0, n), true});
  });
}

/// The rows each level's queries are computed for here: level 0 the points, level 1 the owned voxels,
/// the levels above all nodes.
inline index_t query_rows(const Share& s, const Hierarchy& h, int level) {
  return level == 0 ? static_cast<index_t>(s.points.size()) : level == 1 ? static_cast<index_t>(s.voxels.size()) : h.nodes(level);
}

/// Init: level 0 from the point features (seg: Linear, BN, ReLU; cls: PointConv), the owned lowest voxels
/// from their points' max, then each level above from the max-pooled level below (on every rank).
template <class Exec>
void init(Exec& e) {
  const Config& c = e.config();
  const auto& w = e.layers();
  const Share& s = e.share();
  const Hierarchy& h = e.hierarchy();
  const Geometry& g = e.geometry();
  const int L = c.levels();
  const auto n0 = static_cast<index_t>(s.points.size()), nv = static_cast<index_t>(s.voxels.size());
  const bool seg = c.kind == Config::Kind::segmentation;
  const Rows x0 = e.array(Array::x, 0, n0, c.dim);
  const Rows part = e.array(Array::part, 1, nv, c.width(1));
  e.stage([&] {
    if (seg) {
      e.tiles(n0, kTileRows, n0 > kTileRows, [&](auto& ops, auto& work, index_t r0, index_t n) {
        dense(ops, work, w.init[0], g.features.range(r0, n), x0.range(r0, n));
        ops.tree_norm({&w.init_norm[0], x0.range(r0, n), true});
      });
    } else {
      const int k = Config::k_pointconv;
      e.tiles(n0, kTileRows, n0 * k * c.dim > kSerialWork, [&](auto& ops, auto&, index_t r0, index_t n) {
        ops.point_conv({&w.conv_w, &w.conv_b, g.features, g.pos[0], g.conv.keys + r0 * k, k, r0, x0.range(r0, n)});
      });
    }
    pool_level(e, w.init[1], w.init_norm[1], x0, g.pool[0], e.array(Array::pooled, 0, nv, c.dim), part);
  });
  e.voxels_to_all(part, e.array(Array::x, 1, h.nodes(1), c.width(1)));
  e.stage([&] {
    for (int i = 1; i + 1 < L; ++i)
      pool_level(e, w.init[static_cast<std::size_t>(i) + 1], w.init_norm[static_cast<std::size_t>(i) + 1],
                 e.array(Array::x, i, h.nodes(i), c.width(i)), g.pool[static_cast<std::size_t>(i)],
                 e.array(Array::pooled, i, h.nodes(i + 1), c.width(i)),
                 e.array(Array::x, i + 1, h.nodes(i + 1), c.width(i + 1)));
    if (Network::Trace* t = e.trace()) {
      t->init.clear();
      for (int i = 0; i < L; ++i)
        t->init.push_back(e.host_values(e.array(Array::x, i, i == 0 ? n0 : h.nodes(i), c.width(i))));
    }
  });
}

/// One TreeBlock: every level's y, queries, keys and values (level 0's keys and values completed with the
/// halo's rows), then per level the parents, siblings and children attentions of the queries computed
/// here, mixed with the block's weights, BN, ReLU, into the level's rows (level 1: the owned voxels').
template <class Exec>
void tree_block(Exec& e, std::size_t index) {
  const Config& c = e.config();
  const Block<typename Exec::Ops>& b = e.layers().blocks[index];
  const Share& s = e.share();
  const Hierarchy& h = e.hierarchy();
  const Geometry& g = e.geometry();
  const int L = c.levels();
  const auto n0 = static_cast<index_t>(s.points.size()), ne = n0 + static_cast<index_t>(s.halo.size());
  const auto nodes = [&](int i) { return i == 0 ? n0 : h.nodes(i); };
  const auto rows_of = [&](Array a, int i, index_t n) { return e.array(a, i, n, c.width(i)); };
  e.stage([&] {
    for (int i = 0; i < L; ++i) {
      const index_t room = i == 0 ? ne : nodes(i);  // level 0's keys and values: room for the halo
      projections(e, b.levels[static_cast<std::size_t>(i)], rows_of(Array::x, i, nodes(i)), rows_of(Array::y, i, nodes(i)),
                  rows_of(Array::q, i, nodes(i)), rows_of(Array::k, i, room).range(0, nodes(i)),
                  rows_of(Array::v, i, room).range(0, nodes(i)));
    }
  });
  e.to_halo(rows_of(Array::k, 0, ne));
  e.to_halo(rows_of(Array::v, 0, ne));
  const float sib_denom = static_cast<float>(std::sqrt(static_cast<double>(c.dim)) * c.k_siblings() + 1e-8);
  e.stage([&] {
    for (int i = 0; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      const Level<typename Exec::Ops>& lv = b.levels[si];
      const int wi = c.width(i);
      const index_t queries = query_rows(s, h, i);
      Rows q = rows_of(Array::q, i, nodes(i)).range(0, queries);
      Rows qpos = g.pos[si];
      if (i == 1) {  // the owned voxels' queries
        const Rows all = rows_of(Array::q, 1, nodes(1)), q1 = rows_of(Array::q1, 1, queries);
        e.tiles(queries, kTileRows, false, [&](auto& ops, auto&, index_t r0, index_t n) {
          ops.copy({all, g.voxels + r0, q1.range(r0, n)});
        });
        q = q1;
        qpos = g.pos1;
      }
      const Rows none{};
      Rows att_p = none, att_c = none, att_s = none;
      if (i + 1 < L) {
        const index_t keys = nodes(i + 1);
        const Rows kw = e.array(Array::kw, 0, keys, wi), vw = e.array(Array::vw, 0, keys, wi);
        dense_all(e, lv.shrink_k, rows_of(Array::k, i + 1, keys), kw);
        dense_all(e, lv.shrink_v, rows_of(Array::v, i + 1, keys), vw);
        att_p = e.array(Array::att_p, 0, queries, wi);
        attend(e, lv.parents, q, qpos, kw, vw, g.pos[si + 1], g.parents[si], keys, 0.0f, att_p);
        const index_t own = i == 0 ? ne : nodes(i);
        att_s = e.array(Array::att_s, 0, queries, wi);
        attend(e, lv.siblings, q, qpos, rows_of(Array::k, i, own), rows_of(Array::v, i, own), g.pos[si], g.siblings[si],
               own, sib_denom, att_s);
      }
      if (i > 0) {
        const index_t keys = nodes(i - 1);
        const Rows kw = e.array(Array::kw, 0, keys, wi), vw = e.array(Array::vw, 0, keys, wi);
        dense_all(e, lv.expand_k, rows_of(Array::k, i - 1, keys), kw);
        dense_all(e, lv.expand_v, rows_of(Array::v, i - 1, keys), vw);
        att_c = e.array(Array::att_c, 0, queries, wi);
        attend(e, lv.children, q, qpos, kw, vw, g.pos[si - 1], g.children[si], keys, 0.0f, att_c);
      }
      const Rows out = i == 1 ? rows_of(Array::part, 1, queries) : rows_of(Array::x, i, queries);
      e.tiles(queries, kTileRows, queries * wi > kSerialWork, [&](auto& ops, auto&, index_t r0, index_t n) {
        const auto part = [&](const Rows& r) { return r.data != nullptr ? r.range(r0, n) : r; };
        ops.tree_mix({{b.mix[0], b.mix[1], b.mix[2]}, part(att_p), part(att_c), part(att_s), out.range(r0, n)});
        ops.tree_norm({&lv.out_norm, out.range(r0, n), true});
      });
      if (Network::Trace* t = index == 0 ? e.trace() : nullptr) {
        t->block0_y.push_back(e.host_values(rows_of(Array::y, i, nodes(i))));
        t->block0_parents.push_back(e.host_values(att_p));
        t->block0_children.push_back(e.host_values(att_c));
        t->block0_siblings.push_back(e.host_values(att_s));
        t->block0_out.push_back(e.host_values(out));
      }
    }
  });
  e.voxels_to_all(rows_of(Array::part, 1, query_rows(s, h, 1)), rows_of(Array::x, 1, nodes(1)));
}

/// Segmentation head: [x ; class vector of the point's sample] -> Linear -> LayerNorm -> ReLU -> Linear,
/// tile by tile (the 512-wide activations never fill a points x 512 array).
template <class Exec>
void segmentation_head(Exec& e) {
  const Config& c = e.config();
  const auto& w = e.layers();
  const Geometry& g = e.geometry();
  const auto n0 = static_cast<index_t>(e.share().points.size());
  const Rows x0 = e.array(Array::x, 0, n0, c.dim), y = e.array(Array::out, 0, n0, c.n_part);
  e.stage([&] {
    e.tiles(n0, kTileRows, n0 > kTileRows, [&](auto& ops, auto& work, index_t r0, index_t n) {
      const Rows z = work.rows(Slot::z, n, c.dim + c.n_class), u = work.rows(Slot::u, n, w.hidden);
      ops.copy({x0.range(r0, n), nullptr, z.columns(0, c.dim)});
      if (c.n_class > 0) ops.copy({g.classes, g.batch + r0, z.columns(c.dim, c.n_class)});
      const Rows ut = work.dense_target(w.head0, u);
      ops.dense({&w.head0, z, ut});
      ops.tree_layer_norm_relu({&w.ln_w, &w.ln_b, ut});
      dense(ops, work, w.head3, ut, y.range(r0, n));
    });
  });
}

/// The model level the classification head reads (root, inner or the points).
int head_level(const Config& c);

/// Classification head: per sample the mean of the head level's rows in double, rounded once (level 0, the
/// points: the sums of each owned lowest voxel's points in order, then of every rank's voxels in node
/// order, so the same sums on any ranks), then Linear, BN, ReLU, Linear on the B means, into the `out`
/// array (B x classes).
template <class Exec>
void classification_head(Exec& e) {
  const Config& c = e.config();
  const auto& w = e.layers();
  const Share& s = e.share();
  const Hierarchy& h = e.hierarchy();
  const Geometry& g = e.geometry();
  const int level = head_level(c), cols = c.width(level), classes = c.classes;
  const index_t B = h.samples();
  const Rows z = e.array(Array::means, 0, B, cols), o = e.array(Array::out, 0, B, classes);
  const double* all = nullptr;
  if (level == 0) {
    const auto n0 = static_cast<index_t>(s.points.size()), nv = static_cast<index_t>(s.voxels.size());
    const Rows x0 = e.array(Array::x, 0, n0, cols);
    double* part = e.sums(nv, cols);
    e.stage([&] {
      e.tiles(nv, kTileRows, false, [&](auto& ops, auto&, index_t r0, index_t n) {
        ops.tree_sums({x0, nullptr, g.pool[0].first + r0, g.pool[0].keys, n, cols, part + r0 * cols});
      });
    });
    all = e.voxel_sums_to_all(part, cols);
  }
  e.stage([&] {
    const Rows x = level == 0 ? Rows{} : e.array(Array::x, level, h.nodes(level), cols);
    e.tiles(B, kTileRows, false, [&](auto& ops, auto& work, index_t r0, index_t n) {
      ops.tree_sums({x, all, g.samples.first + r0, g.samples.keys, n, cols, nullptr,
                     g.sample_counts ? g.sample_counts + r0 : nullptr, z.range(r0, n)});
      const Rows ut = work.dense_target(w.head0, work.rows(Slot::u, n, w.hidden));
      ops.dense({&w.head0, z.range(r0, n), ut});
      ops.tree_norm({&w.head_bn, ut, true});
      dense(ops, work, w.head3, ut, o.range(r0, n));
    });
  });
}

/// Throws for a hierarchy of another depth than the model's, or a segmentation model's missing class vectors.
void check_inputs(const Config& c, const Hierarchy& h, const float* sample_features);

/// The host arrays a Geometry is made of, for either exec: the extended rows' positions (points then
/// halo), the owned voxels' positions, the pooling lists of every level but the last (level 0: the share's
/// points into its owned voxels; per parent its rows in order) and, segmentation, every point's sample;
/// classification, the head's per-sample lists and divisors (Geometry).
struct HostGeometry {
  std::vector<float> pos0, pos1;
  std::vector<KeyLists> pool;
  std::vector<std::int64_t> batch;
  KeyLists samples;
  std::vector<double> sample_counts;
};
HostGeometry host_geometry(const Config& c, const Share& s, const Hierarchy& h);

/// Init, the blocks and the head. Returns segmentation: share points x n_part (e.result()); classification:
/// B x classes (host values).
template <class Exec>
std::vector<float> forward(Exec& e) {
  const Config& c = e.config();
  const Share& s = e.share();
  const Hierarchy& h = e.hierarchy();
  const bool seg = c.kind == Config::Kind::segmentation;
  e.stage([&] { e.prepare(); });  // the checks and the geometry
  if (!seg) e.to_halo(e.geometry().features);
  e.compute([&] {
    e.phase(0);
    init(e);
    e.phase(1);
    for (std::size_t b = 0; b < e.layers().blocks.size(); ++b) tree_block(e, b);
    e.phase(2);
    if (seg) segmentation_head(e);
    else classification_head(e);
  });
  // Segmentation: the points' rows (left on the device for device rows); classification: B x classes.
  const Rows y = seg ? e.array(Array::out, 0, static_cast<index_t>(s.points.size()), c.n_part)
                     : e.array(Array::out, 0, h.samples(), c.classes);
  std::vector<float> result;
  e.stage([&] { result = seg ? e.result(y) : e.host_values(y); });
  return result;
}

}  // namespace surrogate::sequoia::program
