// The CPU forward of TreeTransformerSeg / TreeTransformerCls on a collated hierarchy (share/docs/sequoia.md,
// "Forward"): Init (projections and the positional max pooling), TreeBlocks, the heads.
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>

#include "layers.hpp"
#include "surrogate/error.hpp"
#include "surrogate/profile.hpp"
#include "surrogate/sequoia.hpp"

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kInitLevelsPhase{"initial levels and pooling"};
const surrogate::PhaseName kTreeBlocksPhase{"tree attention blocks"};
const surrogate::PhaseName kSequoiaHeadPhase{"head"};
}  // namespace

namespace surrogate::sequoia {

struct Network::Impl {
  struct Level {  // one model level of one block
    Dense mlp1, q, k, v, expand_k, expand_v, shrink_k, shrink_v;
    BatchNorm mlp1_norm, out_norm;
    PositionalMlp parents, children, siblings;
  };
  struct Block {
    std::vector<Level> levels;
    float mix[3] = {0, 0, 0};  // softmax of attn2a.weight
  };
  Config cfg;
  std::vector<Dense> init;          // level 0 (seg: Linear; cls: PointConv's Linear), then one per level
  std::vector<BatchNorm> init_norm; // seg level 0 and every level >= 1 (index = level; cls level 0 unused)
  std::vector<Block> blocks;
  Dense head0, head3;
  BatchNorm head_bn;                // cls
  std::vector<float> ln_w, ln_b;    // seg LayerNorm(512)

  Rows init_level0(const Hierarchy& h, const float* features) const;
  Rows head(const Hierarchy& h, const std::vector<Rows>& x, const float* sample_features) const;
};

namespace {

Rows softmax_mixed(const float mix[3], const Rows* parents, const Rows* children, const Rows* siblings, std::int64_t n,
                   int d) {
  Rows out(n, d, Rows::Uninitialised{});
  for (std::size_t t = 0; t < out.v.size(); ++t) {
    float s = parents ? mix[0] * parents->v[t] : 0.0f;
    if (children) s += mix[1] * children->v[t];
    if (siblings) s += mix[2] * siblings->v[t];
    out.v[t] = s;
  }
  return out;
}

KeyLists lists_of(const std::vector<std::pair<std::int64_t, std::int64_t>>& edges, std::int64_t queries) {
  KeyLists l;
  l.first.assign(static_cast<std::size_t>(queries) + 1, 0);
  for (const auto& [qi, key] : edges) ++l.first[static_cast<std::size_t>(qi) + 1];
  for (std::size_t a = 0; a < static_cast<std::size_t>(queries); ++a) l.first[a + 1] += l.first[a];
  l.keys.reserve(edges.size());
  for (const auto& e : edges) l.keys.push_back(e.second);  // edges are sorted by query
  return l;
}

KeyLists fixed_lists(const std::vector<std::int64_t>& lists, std::int64_t queries, int k) {
  KeyLists l;
  l.first.resize(static_cast<std::size_t>(queries) + 1);
  for (std::int64_t a = 0; a <= queries; ++a) l.first[static_cast<std::size_t>(a)] = a * k;
  l.keys = lists;
  return l;
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

Rows Network::Impl::init_level0(const Hierarchy& h, const float* features) const {
  const std::int64_t n = h.nodes(0);
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
  const std::vector<std::int64_t> nb = sibling_lists(h, 0, k);
  const auto& pos = h.level_positions[0];
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
        for (int o = 0; o < init[0].out; ++o) out[o] = t == 0 ? msg[static_cast<std::size_t>(o)] : std::max(out[o], msg[static_cast<std::size_t>(o)]);
      }
    }
  }
  return y;
}

Rows Network::Impl::head(const Hierarchy& h, const std::vector<Rows>& x, const float* sample_features) const {
  const std::int64_t B = h.samples();
  if (cfg.kind == Config::Kind::segmentation) {
    const Rows& x0 = x[0];
    Rows z(x0.rows, cfg.dim + cfg.n_class);
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t r = h.point_offsets[static_cast<std::size_t>(b)]; r < h.point_offsets[static_cast<std::size_t>(b) + 1]; ++r) {
        std::copy(x0.row(r), x0.row(r) + cfg.dim, z.row(r));
        std::copy(sample_features + b * cfg.n_class, sample_features + (b + 1) * cfg.n_class, z.row(r) + cfg.dim);
      }
    Rows u = head0.apply(z);
    for (std::int64_t r = 0; r < u.rows; ++r) {  // LayerNorm(512), eps 1e-5, then ReLU
      float* row = u.row(r);
      double mean = 0.0, var = 0.0;
      for (int c = 0; c < u.cols; ++c) mean += row[c];
      mean /= u.cols;
      for (int c = 0; c < u.cols; ++c) var += (row[c] - mean) * (row[c] - mean);
      const double inv = 1.0 / std::sqrt(var / u.cols + 1e-5);
      for (int c = 0; c < u.cols; ++c)
        row[c] = std::max(0.0f, static_cast<float>((row[c] - mean) * inv * ln_w[static_cast<std::size_t>(c)] + ln_b[static_cast<std::size_t>(c)]));
    }
    return head3.apply(u);
  }
  const int level = cfg.selection == "root" ? cfg.depth : cfg.selection == "inner" ? cfg.depth - 1 : 0;
  const Rows& xs = x[static_cast<std::size_t>(level)];
  const auto& batch = h.level_batch[static_cast<std::size_t>(level)];
  Rows z(B, xs.cols);
  std::vector<double> sum(static_cast<std::size_t>(B) * static_cast<std::size_t>(xs.cols), 0.0);
  std::vector<std::int64_t> count(static_cast<std::size_t>(B), 0);
  for (std::int64_t r = 0; r < xs.rows; ++r) {  // root: one node per sample; inner, leaf: the mean
    const auto b = static_cast<std::size_t>(batch[static_cast<std::size_t>(r)]);
    ++count[b];
    for (int c = 0; c < xs.cols; ++c) sum[b * static_cast<std::size_t>(xs.cols) + static_cast<std::size_t>(c)] += xs.row(r)[c];
  }
  for (std::int64_t b = 0; b < B; ++b)
    for (int c = 0; c < xs.cols; ++c)
      z.row(b)[c] = static_cast<float>(sum[static_cast<std::size_t>(b * xs.cols + c)] / static_cast<double>(count[static_cast<std::size_t>(b)]));
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
  const Impl& m = *impl_;
  const Config& cfg = m.cfg;
  const int L = cfg.levels();
  if (h.depth != cfg.depth)
    throw Error(ErrorCode::invalid_argument, "sequoia: hierarchy of depth " + std::to_string(h.depth) +
                                                 " for a model of depth " + std::to_string(cfg.depth));
  check(h);
  if (cfg.kind == Config::Kind::segmentation && cfg.n_class > 0 && !sample_features)
    throw Error(ErrorCode::input, "sequoia TreeTransformerSeg: the per-sample class vector is missing");
  // Init: level 0 from the point features, then each level from the max-pooled level below.
  std::optional<ScopedPhase> phase(std::in_place, kInitLevelsPhase);
  std::vector<Rows> x(static_cast<std::size_t>(L));
  x[0] = m.init_level0(h, features);
  for (int i = 0; i + 1 < L; ++i) {
    const Rows& child = x[static_cast<std::size_t>(i)];
    Rows pooled(h.nodes(i + 1), child.cols);
    std::vector<char> filled(static_cast<std::size_t>(pooled.rows), 0);
    const auto& parent = h.pool_parent[static_cast<std::size_t>(i)];
    for (std::int64_t r = 0; r < child.rows && r < static_cast<std::int64_t>(parent.size()); ++r) {
      const std::int64_t p = parent[static_cast<std::size_t>(r)];
      float* dst = pooled.row(p);
      for (int c = 0; c < child.cols; ++c) dst[c] = filled[static_cast<std::size_t>(p)] ? std::max(dst[c], child.row(r)[c]) : child.row(r)[c];
      filled[static_cast<std::size_t>(p)] = 1;
    }
    x[static_cast<std::size_t>(i) + 1] = m.init[static_cast<std::size_t>(i) + 1].apply(pooled);
    m.init_norm[static_cast<std::size_t>(i) + 1].apply(x[static_cast<std::size_t>(i) + 1], true);
  }
  if (trace) {
    trace->init.clear();
    for (const Rows& r : x) trace->init.push_back(r.values());
  }
  phase.reset();
  phase.emplace(kTreeBlocksPhase);
  // Sibling lists (the same in every block).
  const int ks = cfg.k_siblings();
  std::vector<KeyLists> sib(static_cast<std::size_t>(L));
  for (int i = 0; i + 1 < L; ++i)
    sib[static_cast<std::size_t>(i)] =
        fixed_lists(siblings ? (*siblings)[static_cast<std::size_t>(i)] : sibling_lists(h, i, ks), h.nodes(i), ks);
  std::vector<KeyLists> up(static_cast<std::size_t>(L)), down(static_cast<std::size_t>(L));
  for (int i = 0; i < L; ++i) {
    up[static_cast<std::size_t>(i)] = lists_of(h.parent_edges[static_cast<std::size_t>(i)], h.nodes(i));
    down[static_cast<std::size_t>(i)] = lists_of(h.child_edges[static_cast<std::size_t>(i)], h.nodes(i));
  }
  const float tau = static_cast<float>(std::sqrt(static_cast<double>(cfg.dim)));
  const float sib_denom = static_cast<float>(std::sqrt(static_cast<double>(cfg.dim)) * ks + 1e-8);
  for (std::size_t l = 0; l < m.blocks.size(); ++l) {
    const Impl::Block& b = m.blocks[l];
    std::vector<Rows> y(static_cast<std::size_t>(L)), Q(y.size()), K(y.size()), V(y.size());
    for (std::size_t i = 0; i < y.size(); ++i) {
      const Impl::Level& lv = b.levels[i];
      y[i] = lv.mlp1.apply(x[i]);
      lv.mlp1_norm.apply(y[i], true);
      Q[i] = lv.q.apply(y[i]);
      K[i] = lv.k.apply(y[i]);
      V[i] = lv.v.apply(y[i]);
    }
    for (int i = 0; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      const Impl::Level& lv = b.levels[si];
      const auto& p = h.level_positions[si];
      Rows parents, children, sibl;
      if (i + 1 < L) {
        parents = tree_attention(Q[si], lv.shrink_k.apply(K[si + 1]), lv.shrink_v.apply(V[si + 1]), p,
                                 h.level_positions[si + 1], up[si], lv.parents, cfg.heads, tau, 0.0f);
        sibl = tree_attention(Q[si], K[si], V[si], p, p, sib[si], lv.siblings, cfg.heads, tau, sib_denom);
      }
      if (i > 0)
        children = tree_attention(Q[si], lv.expand_k.apply(K[si - 1]), lv.expand_v.apply(V[si - 1]), p,
                                  h.level_positions[si - 1], down[si], lv.children, cfg.heads, tau, 0.0f);
      Rows out = softmax_mixed(b.mix, i + 1 < L ? &parents : nullptr, i > 0 ? &children : nullptr,
                               i + 1 < L ? &sibl : nullptr, h.nodes(i), cfg.width(i));
      lv.out_norm.apply(out, true);
      if (trace && l == 0) {
        trace->block0_y.push_back(y[si].values());
        trace->block0_parents.push_back(parents.values());
        trace->block0_children.push_back(children.values());
        trace->block0_siblings.push_back(sibl.values());
        trace->block0_out.push_back(out.values());
      }
      x[si] = std::move(out);
    }
  }
  phase.reset();
  const ScopedPhase head_phase(kSequoiaHeadPhase);
  return m.head(h, x, sample_features).values();
}

}  // namespace surrogate::sequoia
