// The CPU forward of TreeTransformerSeg / TreeTransformerCls on a collated hierarchy (share/docs/sequoia.md,
// "Forward"): Init (projections and the positional max pooling), TreeBlocks, the heads.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "network_impl.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/nan_keeping.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/sequoia.hpp"

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kInitLevelsPhase{"initial levels and pooling"};
const surrogate::PhaseName kTreeBlocksPhase{"tree attention blocks"};
const surrogate::PhaseName kSequoiaHeadPhase{"head"};
}  // namespace

namespace surrogate::sequoia {

namespace {

/// out (n x d, its storage reused) = ReLU(BN(the attentions mixed with the block's weights)), row by row
/// (one pass over the rows, where mixing and norm were two).
void mixed_and_normed(const float mix[3], const Rows* parents, const Rows* children, const Rows* siblings, std::int64_t n,
                      int d, const BatchNorm& norm, Rows& out) {
  out.reshape(n, d);
#pragma omp parallel for schedule(static) if (n * d > kSerialWork)
  for (std::int64_t r = 0; r < n; ++r) {
    float* row = out.row(r);
    for (int c = 0; c < d; ++c) {
      const auto t = static_cast<std::size_t>(r * d + c);
      float s = parents ? mix[0] * parents->v[t] : 0.0f;
      if (children) s += mix[1] * children->v[t];
      if (siblings) s += mix[2] * siblings->v[t];
      row[c] = s;
    }
    norm.apply(row);
    for (int c = 0; c < d; ++c) row[c] = kernels::relu_keep_nan(row[c]);
  }
}

}  // namespace

Network::Network(const ModelFile& f, const Config& cfg) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = cfg;
  const int L = cfg.levels();
  const bool seg = cfg.kind == Config::Kind::segmentation;
  m.init.resize(static_cast<std::size_t>(L));
  m.init_norm.resize(static_cast<std::size_t>(L));
  m.init[0] = seg ? Dense(f, "_init.projections.0.0", true) : Dense(f, "_init.projections.0.conv.local_nn.lins.0", true);
  if (seg) m.init_norm[0] = BatchNorm(f, "_init.projections.0.1");
  for (int i = 1; i < L; ++i) {
    const std::string p = "_init.projections." + std::to_string(i);
    m.init[static_cast<std::size_t>(i)] = Dense(f, p + ".0", true);
    m.init_norm[static_cast<std::size_t>(i)] = BatchNorm(f, p + ".1");
  }
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string e = "enc." + std::to_string(l) + ".";
    Impl::Block b;
    const auto& w = f.weight(e + "attn2a.weight").values;
    const float mx = std::max({w[0], w[1], w[2]});
    double ex[3], sum = 0.0;
    for (int t = 0; t < 3; ++t) sum += ex[t] = std::exp(static_cast<double>(w[static_cast<std::size_t>(t)] - mx));
    for (int t = 0; t < 3; ++t) b.mix[t] = static_cast<float>(ex[t] / sum);
    for (int i = 0; i < L; ++i) {
      const std::string li = std::to_string(i), a = e + "attn2a.";
      Impl::Level v;
      v.mlp1 = Dense(f, e + "mlp1s." + li + ".0", false);
      v.mlp1_norm = BatchNorm(f, e + "mlp1s." + li + ".1");
      v.out_norm = BatchNorm(f, e + "attn2bs." + li + ".0");
      v.q = Dense(f, a + "linearQ." + li, false);
      v.k = Dense(f, a + "linearK." + li, false);
      v.v = Dense(f, a + "linearV." + li, false);
      if (i > 0) {
        v.expand_k = Dense(f, a + "expands_K." + std::to_string(i - 1), false);
        v.expand_v = Dense(f, a + "expands_V." + std::to_string(i - 1), false);
        v.children = PositionalMlp(f, a + "children_attns." + li);
      }
      if (i + 1 < L) {
        v.shrink_k = Dense(f, a + "shrinks_K." + li, false);
        v.shrink_v = Dense(f, a + "shrinks_V." + li, false);
        v.parents = PositionalMlp(f, a + "parents_attns." + li);
        v.siblings = PositionalMlp(f, a + "siblings_attns." + li);
      }
      b.levels.push_back(std::move(v));
    }
    m.blocks.push_back(std::move(b));
  }
  m.head0 = Dense(f, "cls.0", true);
  m.head3 = Dense(f, "cls.3", true);
  if (seg) {
    m.ln_w = f.weight("cls.1.weight").values;
    m.ln_b = f.weight("cls.1.bias").values;
  } else {
    m.head_bn = BatchNorm(f, "cls.1");
  }
}

Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
const Config& Network::config() const { return impl_->cfg; }

/// Level 0 of the points of `s` (features and positions: its extended rows; PointConv reads the halo).
Rows Network::Impl::init_level0(const Share& s, const std::vector<float>& positions, const float* features) const {
  const auto n = static_cast<std::int64_t>(s.points.size());
  const int c = cfg.c;
  if (cfg.kind == Config::Kind::segmentation) {
    Rows x(n, c);
    std::copy(features, features + n * c, x.v.begin());
    Rows y = init[0].apply(x);
    init_norm[0].apply(y, true);
    return y;
  }
  // PointConv (max aggregation) over the 16 nearest points of the sample, self included: message from
  // neighbour j to point i = W [x_j ; p_j - p_i] + b. Padding repeats an entry: the max is unchanged.
  const int k = Config::k_pointconv;
  const std::vector<std::int64_t>& nb = s.pointconv.keys;
  const auto& pos = positions;
  Rows y(n, init[0].out);
#pragma omp parallel if (n * k * init[0].out > kSerialWork)
  {
    std::vector<float> in(static_cast<std::size_t>(c) + 3), msg(static_cast<std::size_t>(init[0].out));
#pragma omp for schedule(static)
    for (std::int64_t i = 0; i < n; ++i) {
      float* out = y.row(i);
      for (int t = 0; t < k; ++t) {
        const std::int64_t j = nb[static_cast<std::size_t>(i * k + t)];
        std::copy(features + j * c, features + (j + 1) * c, in.begin());
        for (int a = 0; a < 3; ++a) in[static_cast<std::size_t>(c + a)] = pos[static_cast<std::size_t>(j * 3 + a)] - pos[static_cast<std::size_t>(i * 3 + a)];
        init[0].apply(in.data(), msg.data());
        for (int o = 0; o < init[0].out; ++o) out[o] = t == 0 ? msg[static_cast<std::size_t>(o)] : kernels::max_keep_nan(out[o], msg[static_cast<std::size_t>(o)]);
      }
    }
  }
  return y;
}

Rows Network::Impl::head(const Share& s, const Hierarchy& h, const Rows& x0, const float* sample_features) const {
  // Blocks of rows through cls.0, LayerNorm(512) and ReLU, and cls.3 in tiles per thread (the 512-wide
  // activations never fill a points x 512 array); eight rows' LayerNorm sums interleaved, each row's
  // double arithmetic in the order written.
  constexpr std::int64_t kRows = 64;
  constexpr int kInterleaved = 8;
  const std::int64_t n = x0.rows;
  const int zc = cfg.dim + cfg.n_class, width = head0.out, ld_u = head0.packed.out_pad(), ld_o = head3.packed.out_pad();
  Rows y(n, head3.out, Rows::Uninitialised{});
#pragma omp parallel if (n > kRows)
  {
    std::vector<float> z(static_cast<std::size_t>(kRows * zc)), u(static_cast<std::size_t>(kRows * ld_u)),
        o(static_cast<std::size_t>(kRows * ld_o));
#pragma omp for schedule(static)
    for (std::int64_t r0 = 0; r0 < n; r0 += kRows) {
      const std::int64_t rows = std::min(kRows, n - r0);
      for (std::int64_t r = 0; r < rows; ++r) {
        const std::int64_t t = r0 + r;
        const std::int64_t b = h.level_batch[0][static_cast<std::size_t>(s.points[static_cast<std::size_t>(t)])];
        std::copy(x0.row(t), x0.row(t) + cfg.dim, z.data() + r * zc);
        std::copy(sample_features + b * cfg.n_class, sample_features + (b + 1) * cfg.n_class, z.data() + r * zc + cfg.dim);
      }
      head0.apply_rows(z.data(), zc, u.data(), ld_u, rows);
      for (std::int64_t g0 = 0; g0 < rows; g0 += kInterleaved) {  // LayerNorm(512), eps 1e-5, then ReLU
        const int nr = static_cast<int>(std::min<std::int64_t>(kInterleaved, rows - g0));
        float* row[kInterleaved];
        for (int i = 0; i < kInterleaved; ++i) row[i] = u.data() + (g0 + std::min(i, nr - 1)) * ld_u;  // (last repeated)
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
      head3.apply_rows(u.data(), ld_u, o.data(), ld_o, rows);
      for (std::int64_t r = 0; r < rows; ++r) std::copy_n(o.data() + r * ld_o, head3.out, y.row(r0 + r));
    }
  }
  return y;
}

// A block of 64 rows at a time per thread through mlp1, BatchNorm + ReLU, then q, k and v, while the
// block's y rows are in the caches (where each was a pass over the level's rows); each row's operations
// are those of Dense::apply and BatchNorm::apply.
void Network::Impl::projections(const Level& lv, const Rows& x, Rows& y, Rows& Q, Rows& K, Rows& V) {
  constexpr std::int64_t kChunk = 64;
  const std::int64_t n = x.rows;
  y.reshape(n, lv.mlp1.out);
  Q.reshape(n, lv.q.out);
  K.reshape(n, lv.k.out);
  V.reshape(n, lv.v.out);
  int pad = 0;
  for (const Dense* d : {&lv.mlp1, &lv.q, &lv.k, &lv.v}) pad = std::max(pad, d->packed.out_pad());
#pragma omp parallel if (n > kChunk)
  {
    std::vector<float> tile(static_cast<std::size_t>(kChunk * pad));  // for outputs narrower than the kernel's width
    const auto dense = [&tile](const Dense& d, const float* in, std::int64_t ldx, Rows& out, std::int64_t r0, std::int64_t rows) {
      const int ld = d.packed.out_pad();
      if (ld == d.out) return d.apply_rows(in, ldx, out.row(r0), ld, rows);
      d.apply_rows(in, ldx, tile.data(), ld, rows);
      for (std::int64_t r = 0; r < rows; ++r) std::copy_n(tile.data() + r * ld, d.out, out.row(r0 + r));
    };
#pragma omp for schedule(static)
    for (std::int64_t r0 = 0; r0 < n; r0 += kChunk) {
      const std::int64_t rows = std::min(kChunk, n - r0);
      dense(lv.mlp1, x.row(r0), x.cols, y, r0, rows);
      for (std::int64_t r = 0; r < rows; ++r) {
        float* row = y.row(r0 + r);
        lv.mlp1_norm.apply(row);
        for (int c = 0; c < y.cols; ++c) row[c] = kernels::relu_keep_nan(row[c]);
      }
      dense(lv.q, y.row(r0), y.cols, Q, r0, rows);
      dense(lv.k, y.row(r0), y.cols, K, r0, rows);
      dense(lv.v, y.row(r0), y.cols, V, r0, rows);
    }
  }
}

int Network::Impl::head_level() const {
  return cfg.selection == "root" ? cfg.depth : cfg.selection == "inner" ? cfg.depth - 1 : 0;
}

std::vector<double> Network::Impl::mean_terms(const Share& s, const Rows& xs, int level) const {
  if (level > 0) return {xs.v.begin(), xs.v.end()};
  std::vector<double> sums(s.voxels.size() * static_cast<std::size_t>(xs.cols), 0.0);
  for (std::int64_t t = 0; t < xs.rows; ++t) {
    const auto v = static_cast<std::size_t>(s.slot[static_cast<std::size_t>(t)]);
    for (int c = 0; c < xs.cols; ++c) sums[v * static_cast<std::size_t>(xs.cols) + static_cast<std::size_t>(c)] += xs.row(t)[c];
  }
  return sums;
}

Rows Network::Impl::sample_means(const Hierarchy& h, const std::vector<double>& all, int level, int cols) const {
  const auto B = static_cast<std::size_t>(h.samples());
  const auto& batch = h.level_batch[static_cast<std::size_t>(std::max(level, 1))];
  std::vector<double> sum(B * static_cast<std::size_t>(cols), 0.0);
  std::vector<std::int64_t> count(B, 0);
  for (std::size_t r = 0; r < batch.size(); ++r) {
    const auto b = static_cast<std::size_t>(batch[r]);
    ++count[b];
    for (int c = 0; c < cols; ++c) sum[b * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)] += all[r * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)];
  }
  if (level == 0)
    for (std::size_t b = 0; b < B; ++b) count[b] = h.point_offsets[b + 1] - h.point_offsets[b];
  Rows z(static_cast<std::int64_t>(B), cols);
  for (std::size_t b = 0; b < B; ++b)
    for (int c = 0; c < cols; ++c)
      z.row(static_cast<std::int64_t>(b))[c] =
          static_cast<float>(sum[b * static_cast<std::size_t>(cols) + static_cast<std::size_t>(c)] / static_cast<double>(count[b]));
  return z;
}

Rows Network::Impl::classify(const Rows& z) const {
  Rows u = head0.apply(z);
  head_bn.apply(u, true);
  return head3.apply(u);
}

void Network::check(const Hierarchy& h) const {
  if (impl_->cfg.kind != Config::Kind::segmentation) return;
  for (int i = 0; i < h.depth; ++i) {  // levels with siblings: all but the roots
    const auto& batch = h.level_batch[static_cast<std::size_t>(i)];
    for (std::size_t r = 0; r < batch.size(); ++r) {
      const bool alone = (r == 0 || batch[r - 1] != batch[r]) && (r + 1 == batch.size() || batch[r + 1] != batch[r]);
      if (!alone) continue;
      const std::int64_t sample = h.sample_ids.empty() ? batch[r] : h.sample_ids[static_cast<std::size_t>(batch[r])];
      throw Error(ErrorCode::input,
                  "sequoia TreeTransformerSeg: sample " + std::to_string(sample) + " has a single " +
                      (i == 0 ? std::string("point") : "voxel at model level " + std::to_string(i)) +
                      " (one point, identical points or a tiny extent); the segmentation model needs at least "
                      "two nodes per level (the reference fails there)");
    }
  }
}

std::vector<float> Network::forward(const Hierarchy& h, const float* features, const float* sample_features, Trace* trace,
                                    const std::vector<std::vector<std::int64_t>>* siblings) const {
  if (h.depth != impl_->cfg.depth)
    throw Error(ErrorCode::invalid_argument, "sequoia: hierarchy of depth " + std::to_string(h.depth) +
                                                 " for a model of depth " + std::to_string(impl_->cfg.depth));
  check(h);
  return forward(Share::whole(h, impl_->cfg, siblings), h, features, sample_features, trace);
}

namespace {

Rows rows_of(const Rows& x, const std::vector<std::int64_t>& rows) {
  Rows s(static_cast<std::int64_t>(rows.size()), x.cols, Rows::Uninitialised{});
  for (std::size_t t = 0; t < rows.size(); ++t) std::copy(x.row(rows[t]), x.row(rows[t] + 1), s.row(static_cast<std::int64_t>(t)));
  return s;
}

/// Rows of `part` (rows computed here) then `more` rows received from other ranks.
Rows extended(const Rows& part, std::int64_t more) {
  Rows e(part.rows + more, part.cols, Rows::Uninitialised{});
  std::copy(part.v.begin(), part.v.end(), e.v.begin());
  return e;
}

}  // namespace

std::vector<float> Network::forward(const Share& s, const Hierarchy& h, const float* features, const float* sample_features,
                                    Trace* trace) const {
  const kernels::BlockPlan::Scope work_blocks(&impl_->work_blocks);
  const Impl& m = *impl_;
  const Config& cfg = m.cfg;
  const int L = cfg.levels();
  const bool seg = cfg.kind == Config::Kind::segmentation;
  const auto n0 = static_cast<std::int64_t>(s.points.size());
  const auto halo = static_cast<std::int64_t>(s.halo.size());
  const auto owned_voxels = static_cast<std::int64_t>(s.voxels.size());
  // Local work between the exchanges; on a split share an error of one rank is agreed by all.
  const auto stage = [&](auto&& work) {
    if (s.split) collectively(s.voxels_to_all.comm(), work);
    else work();
  };
  // The owned level-1 rows to every rank (all level-1 rows); double rows for the classification partials.
  const auto voxels_to_all = [&](auto& part, auto& all, int cols) {
    if (!s.split) return std::swap(part, all);
    all.resize(static_cast<std::size_t>(h.nodes(1)) * static_cast<std::size_t>(cols));
    s.voxels_to_all.forward(part.data(), cols, all.data());
  };
  std::vector<float> pos0;  // the extended rows' positions
  Rows ext_features;        // classification: the extended rows' features
  stage([&] {
    if (h.depth != cfg.depth)
      throw Error(ErrorCode::invalid_argument, "sequoia: hierarchy of depth " + std::to_string(h.depth) +
                                                   " for a model of depth " + std::to_string(cfg.depth));
    if (seg && cfg.n_class > 0 && !sample_features)
      throw Error(ErrorCode::input, "sequoia TreeTransformerSeg: the per-sample class vector is missing");
    pos0.resize(static_cast<std::size_t>(n0 + halo) * 3);
    for (std::int64_t t = 0; t < n0 + halo; ++t) {
      const std::int64_t r = t < n0 ? s.points[static_cast<std::size_t>(t)] : s.halo[static_cast<std::size_t>(t - n0)];
      std::copy_n(h.level_positions[0].begin() + r * 3, 3, pos0.begin() + t * 3);
    }
    if (!seg) {
      ext_features = Rows(n0 + halo, cfg.c, Rows::Uninitialised{});
      std::copy(features, features + n0 * cfg.c, ext_features.v.begin());
    }
  });
  if (!seg && s.split) s.to_halo.forward(features, cfg.c, ext_features.row(n0));

  // Init: level 0 from the point features, then each level from the max-pooled level below.
  std::optional<ScopedPhase> phase(std::in_place, kInitLevelsPhase);
  std::vector<Rows> x(static_cast<std::size_t>(L));
  Rows x1;  // the owned lowest voxels
  stage([&] {
    x[0] = m.init_level0(s, pos0, seg ? features : ext_features.v.data());
    Rows pooled(owned_voxels, x[0].cols);
    std::vector<char> filled(static_cast<std::size_t>(pooled.rows), 0);
    for (std::int64_t t = 0; t < n0; ++t) {
      const std::int64_t p = s.slot[static_cast<std::size_t>(t)];
      float* dst = pooled.row(p);
      for (int c = 0; c < pooled.cols; ++c) dst[c] = filled[static_cast<std::size_t>(p)] ? kernels::max_keep_nan(dst[c], x[0].row(t)[c]) : x[0].row(t)[c];
      filled[static_cast<std::size_t>(p)] = 1;
    }
    x1 = m.init[1].apply(pooled);
    m.init_norm[1].apply(x1, true);
  });
  x[1] = Rows(h.nodes(1), x1.cols, Rows::Uninitialised{});
  voxels_to_all(x1.v, x[1].v, x1.cols);
  stage([&] {
    for (int i = 1; i + 1 < L; ++i) {  // the levels above, on every rank
      const Rows& child = x[static_cast<std::size_t>(i)];
      Rows pooled(h.nodes(i + 1), child.cols);
      std::vector<char> filled(static_cast<std::size_t>(pooled.rows), 0);
      const auto& parent = h.pool_parent[static_cast<std::size_t>(i)];
      for (std::int64_t r = 0; r < child.rows && r < static_cast<std::int64_t>(parent.size()); ++r) {
        const std::int64_t p = parent[static_cast<std::size_t>(r)];
        float* dst = pooled.row(p);
        for (int c = 0; c < child.cols; ++c) dst[c] = filled[static_cast<std::size_t>(p)] ? kernels::max_keep_nan(dst[c], child.row(r)[c]) : child.row(r)[c];
        filled[static_cast<std::size_t>(p)] = 1;
      }
      x[static_cast<std::size_t>(i) + 1] = m.init[static_cast<std::size_t>(i) + 1].apply(pooled);
      m.init_norm[static_cast<std::size_t>(i) + 1].apply(x[static_cast<std::size_t>(i) + 1], true);
    }
    if (trace) {
      trace->init.clear();
      for (const Rows& r : x) trace->init.push_back(r.values());
    }
  });
  phase.reset();
  phase.emplace(kTreeBlocksPhase);

  const int ks = cfg.k_siblings();
  const float tau = static_cast<float>(std::sqrt(static_cast<double>(cfg.dim)));
  const float sib_denom = static_cast<float>(std::sqrt(static_cast<double>(cfg.dim)) * ks + 1e-8);
  std::vector<float> pos1;  // the owned voxels' positions
  for (const std::int64_t v : s.voxels) pos1.insert(pos1.end(), h.level_positions[1].begin() + v * 3, h.level_positions[1].begin() + (v + 1) * 3);
  // Every block's MLP outputs, queries, keys and values have the previous block's shapes: their storage
  // is kept from block to block (not mapped and cleared again), as is each level's input, which is dead
  // once its queries, keys and values are formed and takes the level's output.
  std::vector<Rows> y(static_cast<std::size_t>(L)), Q(y.size()), K(y.size()), V(y.size());
  for (std::size_t l = 0; l < m.blocks.size(); ++l) {
    const Impl::Block& b = m.blocks[l];
    Rows k0, v0;  // level 0's keys and values on the extended rows
    stage([&] {
      for (std::size_t i = 0; i < y.size(); ++i) {
        const Impl::Level& lv = b.levels[i];
        Impl::projections(lv, x[i], y[i], Q[i], K[i], V[i]);
      }
      if (halo > 0 || s.split) {
        k0 = extended(K[0], halo);
        v0 = extended(V[0], halo);
      }
    });
    if (s.split) {
      s.to_halo.forward(K[0].v.data(), cfg.dim, k0.row(n0));
      s.to_halo.forward(V[0].v.data(), cfg.dim, v0.row(n0));
    }
    const Rows& keys0 = halo > 0 || s.split ? k0 : K[0];
    const Rows& values0 = halo > 0 || s.split ? v0 : V[0];
    Rows out1;
    stage([&] {
      for (int i = 0; i < L; ++i) {
        const auto si = static_cast<std::size_t>(i);
        const Impl::Level& lv = b.levels[si];
        // The queries computed here: level 0 the points, level 1 the owned voxels, the others all nodes.
        const Rows q = i == 1 ? rows_of(Q[1], s.voxels) : Rows{};
        const Rows& queries = i == 1 ? q : Q[si];
        const std::vector<float>& qpos = i == 0 ? pos0 : i == 1 ? pos1 : h.level_positions[si];
        Rows parents, children, sibl;
        if (i + 1 < L) {
          parents = tree_attention(queries, lv.shrink_k.apply(K[si + 1]), lv.shrink_v.apply(V[si + 1]), qpos,
                                   h.level_positions[si + 1], s.parents[si], lv.parents, cfg.heads, tau, 0.0f);
          sibl = i == 0 ? tree_attention(queries, keys0, values0, qpos, pos0, s.siblings[0], lv.siblings, cfg.heads, tau, sib_denom)
                        : tree_attention(queries, K[si], V[si], qpos, h.level_positions[si], s.siblings[si], lv.siblings,
                                         cfg.heads, tau, sib_denom);
        }
        if (i > 0)
          children = tree_attention(queries, lv.expand_k.apply(K[si - 1]), lv.expand_v.apply(V[si - 1]), qpos,
                                    i == 1 ? pos0 : h.level_positions[si - 1], s.children[si], lv.children, cfg.heads,
                                    tau, 0.0f);
        Rows out = std::move(x[si]);
        mixed_and_normed(b.mix, i + 1 < L ? &parents : nullptr, i > 0 ? &children : nullptr, i + 1 < L ? &sibl : nullptr,
                         queries.rows, cfg.width(i), lv.out_norm, out);
        if (trace && l == 0) {
          trace->block0_y.push_back(y[si].values());
          trace->block0_parents.push_back(parents.values());
          trace->block0_children.push_back(children.values());
          trace->block0_siblings.push_back(sibl.values());
          trace->block0_out.push_back(out.values());
        }
        if (i == 1) out1 = std::move(out);
        else x[si] = std::move(out);
      }
    });
    if (s.split) {
      x[1] = Rows(h.nodes(1), out1.cols, Rows::Uninitialised{});
      voxels_to_all(out1.v, x[1].v, out1.cols);
    } else {
      x[1] = std::move(out1);  // (one process: the owned voxels are all of level 1, in order)
    }
  }
  for (auto* kept : {&y, &Q, &K, &V}) kept->clear();  // (freed before the head's buffers are taken)
  phase.reset();
  const ScopedPhase head_phase(kSequoiaHeadPhase);
  std::vector<float> result;
  if (seg) {
    stage([&] { result = m.head(s, h, x[0], sample_features).values(); });
    return result;
  }
  // Classification: the mean of a level's nodes per sample (root: its one node). The points' mean adds
  // per lowest voxel first (its points in order), then the voxels in order: the same sums on any ranks.
  const int level = m.head_level();
  const int cols = x[static_cast<std::size_t>(level)].cols;
  std::vector<double> terms;  // level >= 1: every node's row; points: this rank's voxels' partial sums
  stage([&] { terms = m.mean_terms(s, x[static_cast<std::size_t>(level)], level); });
  std::vector<double> all;
  if (level == 0) voxels_to_all(terms, all, cols);
  else all = std::move(terms);
  stage([&] { result = m.classify(m.sample_means(h, all, level, cols)).values(); });
  return result;
}

}  // namespace surrogate::sequoia
