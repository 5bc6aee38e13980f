// The CPU forward of TreeTransformerSeg / TreeTransformerCls on a collated hierarchy (share/docs/sequoia.md,
// "Forward"): the layers read from the model file as HostOps' (ops/host_ops.hpp), and program.hpp's stages
// run by a HostExec: every stage in tiles of rows spread over OpenMP threads, each thread with its HostOps
// and work rows, so a row's result does not depend on the tiles or the thread count.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>

#include "network_impl.hpp"
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

Network::Network(const ModelFile& f, const Config& cfg) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = cfg;
  program::Layers<ops::HostOps>& w = m.layers;
  const int L = cfg.levels();
  const bool seg = cfg.kind == Config::Kind::segmentation;
  w.init.resize(static_cast<std::size_t>(L));
  w.init_norm.resize(static_cast<std::size_t>(L));
  if (seg) {
    w.init[0] = pack_dense(f, "_init.projections.0.0", true);
    w.init_norm[0] = fold_batch_norm(f, "_init.projections.0.1");
  } else {
    w.conv_w = f.weight("_init.projections.0.conv.local_nn.lins.0.weight").values;
    w.conv_b = f.weight("_init.projections.0.conv.local_nn.lins.0.bias").values;
  }
  for (int i = 1; i < L; ++i) {
    const std::string p = "_init.projections." + std::to_string(i);
    w.init[static_cast<std::size_t>(i)] = pack_dense(f, p + ".0", true);
    w.init_norm[static_cast<std::size_t>(i)] = fold_batch_norm(f, p + ".1");
  }
  for (int l = 0; l < cfg.layers; ++l) {
    const std::string e = "enc." + std::to_string(l) + ".";
    program::Block<ops::HostOps> b;
    const auto& mw = f.weight(e + "attn2a.weight").values;
    const float mx = std::max({mw[0], mw[1], mw[2]});
    double ex[3], sum = 0.0;
    for (int t = 0; t < 3; ++t) sum += ex[t] = std::exp(static_cast<double>(mw[static_cast<std::size_t>(t)] - mx));
    for (int t = 0; t < 3; ++t) b.mix[t] = static_cast<float>(ex[t] / sum);
    for (int i = 0; i < L; ++i) {
      const std::string li = std::to_string(i), a = e + "attn2a.";
      program::Level<ops::HostOps> v;
      v.mlp1 = pack_dense(f, e + "mlp1s." + li + ".0", false);
      v.mlp1_norm = fold_batch_norm(f, e + "mlp1s." + li + ".1");
      v.out_norm = fold_batch_norm(f, e + "attn2bs." + li + ".0");
      v.q = pack_dense(f, a + "linearQ." + li, false);
      v.k = pack_dense(f, a + "linearK." + li, false);
      v.v = pack_dense(f, a + "linearV." + li, false);
      if (i > 0) {
        v.expand_k = pack_dense(f, a + "expands_K." + std::to_string(i - 1), false);
        v.expand_v = pack_dense(f, a + "expands_V." + std::to_string(i - 1), false);
        v.children = PositionalMlp(f, a + "children_attns." + li);
      }
      if (i + 1 < L) {
        v.shrink_k = pack_dense(f, a + "shrinks_K." + li, false);
        v.shrink_v = pack_dense(f, a + "shrinks_V." + li, false);
        v.parents = PositionalMlp(f, a + "parents_attns." + li);
        v.siblings = PositionalMlp(f, a + "siblings_attns." + li);
      }
      b.levels.push_back(std::move(v));
    }
    w.blocks.push_back(std::move(b));
  }
  w.head0 = pack_dense(f, "cls.0", true);
  w.head3 = pack_dense(f, "cls.3", true);
  w.hidden = w.head0.out();
  if (seg) {
    w.ln_w = f.weight("cls.1.weight").values;
    w.ln_b = f.weight("cls.1.bias").values;
  } else {
    w.head_bn = fold_batch_norm(f, "cls.1");
  }
}

Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
const Config& Network::config() const { return impl_->cfg; }

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

using kernels::kPad;
using program::Array;
using program::Slot;
using HostRows = ops::Rows;

/// A thread's work rows (ops::HostWork) and the target of a dense layer's padded rows.
class HostWork : public ops::HostWork<Slot> {
 public:
  /// y itself when the kernel may write whole rows of the layer's padded width there, else a tile.
  HostRows dense_target(const kernels::PackedLinear& l, const HostRows& y) {
    if (y.ld == l.out_pad() && y.width == l.out()) return y;
    return rows(Slot::dense, y.rows, l.out(), l.out_pad());
  }
};

/// program.hpp's Exec on the CPU: tiles over OpenMP threads (or on the calling thread for small stages),
/// the arrays as Rows kept for the forward (large ones through the network's block plan), the share's
/// moves as host exchanges.
class HostExec {
 public:
  using Ops = ops::HostOps;
  HostExec(const Network::Impl& m, const Share& s, const Hierarchy& h, const float* features,
           const float* sample_features, Network::Trace* trace)
      : m_(m), s_(s), h_(h), features_(features), sample_features_(sample_features), trace_(trace),
        arrays_(static_cast<std::size_t>(Array::count) * static_cast<std::size_t>(m.cfg.levels())),
        ops_(kernels::cpu()) {}

  const Config& config() const { return m_.cfg; }
  const program::Layers<Ops>& layers() const { return m_.layers; }
  const Share& share() const { return s_; }
  const Hierarchy& hierarchy() const { return h_; }
  const program::Geometry& geometry() const { return g_; }
  Network::Trace* trace() const { return trace_; }
  void prepare();

  /// The rows of array `a` at `level` (grown, never shrunk; contents kept). One process: the owned
  /// voxels are all of level 1, in order, and their rows are level 1's.
  HostRows array(Array a, int level, index_t rows, int width) {
    if (a == Array::part && !s_.split) a = Array::x;
    Rows& r = arrays_[static_cast<std::size_t>(a) * static_cast<std::size_t>(m_.cfg.levels()) + static_cast<std::size_t>(level)];
    const auto need = static_cast<std::size_t>(rows) * static_cast<std::size_t>(width);
    if (r.v.size() < need) r.v.resize(need);
    return {r.v.data(), width, rows, width, ops::Place::host};
  }

  template <class F>
  void tiles(index_t n, index_t tile, bool parallel, F&& f, bool dynamic = false) {
    const index_t count = (n + tile - 1) / tile;
    if (!parallel || count <= 1) {
      for (index_t t = 0; t < count; ++t) f(ops_, work_, t * tile, std::min(tile, n - t * tile));
      return;
    }
#pragma omp parallel
    {
      Ops ops(kernels::cpu());
      HostWork work;
      if (dynamic) {
#pragma omp for schedule(dynamic)
        for (index_t t = 0; t < count; ++t) f(ops, work, t * tile, std::min(tile, n - t * tile));
      } else {
#pragma omp for schedule(static)
        for (index_t t = 0; t < count; ++t) f(ops, work, t * tile, std::min(tile, n - t * tile));
      }
    }
  }

  /// Local work between the exchanges; on a split share an error of one rank is agreed by all.
  template <class F>
  void stage(F&& work) {
    if (s_.split) collectively(s_.voxels_to_all.comm(), work);
    else work();
  }
  /// rows: the points' rows, then the halo's (filled here from their owners).
  void to_halo(const HostRows& rows) {
    const auto n0 = static_cast<index_t>(s_.points.size());
    if (s_.split) s_.to_halo.forward(rows.data, rows.width, rows.row(n0));
  }
  /// The owned level-1 rows to every rank (all level-1 rows); one process: the same rows already.
  void voxels_to_all(const HostRows& part, const HostRows& all) {
    if (s_.split) s_.voxels_to_all.forward(part.data, part.width, all.data);
  }
  /// The classification head's double sums of `rows` owned voxels, and of every rank's voxels.
  double* sums(index_t rows, int cols) {
    part_sums_.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
    return part_sums_.data();
  }
  const double* voxel_sums_to_all(const double* part, int cols) {
    if (!s_.split) return part;
    all_sums_.resize(static_cast<std::size_t>(h_.nodes(1)) * static_cast<std::size_t>(cols));
    s_.voxels_to_all.forward(part, cols, all_sums_.data());
    return all_sums_.data();
  }
  std::vector<float> host_values(const HostRows& r) const {
    std::vector<float> v(static_cast<std::size_t>(r.rows) * static_cast<std::size_t>(r.width));
    for (index_t i = 0; i < r.rows; ++i) std::copy_n(r.row(i), r.width, v.begin() + i * r.width);
    return v;
  }
  std::vector<float> result(const HostRows& r) const { return host_values(r); }
  template <class F>
  void compute(F&& f) {
    f();
  }
  void phase(int i) {
    static const PhaseName* const names[] = {&kInitLevelsPhase, &kTreeBlocksPhase, &kSequoiaHeadPhase};
    phase_.reset();
    phase_.emplace(*names[i]);
  }

 private:
  const Network::Impl& m_;
  const Share& s_;
  const Hierarchy& h_;
  const float* features_;
  const float* sample_features_;
  Network::Trace* trace_;
  std::vector<Rows> arrays_;
  Ops ops_;  // the calling thread's
  HostWork work_;
  program::Geometry g_;
  program::HostGeometry hg_;
  Rows ext_features_;
  std::vector<double> part_sums_, all_sums_;
  std::optional<ScopedPhase> phase_;
};

void HostExec::prepare() {
  const Config& cfg = m_.cfg;
  const int L = cfg.levels();
  const bool seg = cfg.kind == Config::Kind::segmentation;
  program::check_inputs(cfg, h_, sample_features_);
  const auto n0 = static_cast<index_t>(s_.points.size()), ne = n0 + static_cast<index_t>(s_.halo.size());
  const auto host = [](const float* data, int width, index_t rows) {
    return ops::view(data, width, rows, width, ops::Place::host);
  };
  const auto lists = [](const std::vector<KeyLists>& l, std::size_t i) {
    return i < l.size() ? program::Lists{l[i].first.data(), l[i].keys.data()} : program::Lists{};
  };
  hg_ = program::host_geometry(cfg, s_, h_);
  g_.pos.push_back(host(hg_.pos0.data(), 3, ne));
  for (int i = 1; i < L; ++i) g_.pos.push_back(host(h_.level_positions[static_cast<std::size_t>(i)].data(), 3, h_.nodes(i)));
  g_.pos1 = host(hg_.pos1.data(), 3, static_cast<index_t>(s_.voxels.size()));
  g_.voxels = s_.voxels.data();
  for (std::size_t i = 0; i < static_cast<std::size_t>(L); ++i) {
    g_.parents.push_back(lists(s_.parents, i));
    g_.children.push_back(lists(s_.children, i));
    g_.siblings.push_back(lists(s_.siblings, i));
    g_.pool.push_back(lists(hg_.pool, i));
  }
  g_.conv = {s_.pointconv.first.data(), s_.pointconv.keys.data()};
  if (seg) {
    g_.features = host(features_, cfg.c, n0);
    g_.batch = hg_.batch.data();
    g_.classes = host(sample_features_, cfg.n_class, h_.samples());
  } else {
    ext_features_ = Rows(ne, cfg.c, Rows::Uninitialised{});
    std::copy(features_, features_ + n0 * cfg.c, ext_features_.v.begin());
    g_.features = {ext_features_.v.data(), cfg.c, ne, cfg.c, ops::Place::host};
    g_.samples = {hg_.samples.first.data(), hg_.samples.keys.data()};
    g_.sample_counts = hg_.sample_counts.empty() ? nullptr : hg_.sample_counts.data();
  }
}

}  // namespace

std::vector<float> Network::forward(const Share& s, const Hierarchy& h, const float* features, const float* sample_features,
                                    Trace* trace) const {
  const kernels::BlockPlan::Scope work_blocks(&impl_->work_blocks);
  HostExec exec(*impl_, s, h, features, sample_features, trace);
  return program::forward(exec);
}

}  // namespace surrogate::sequoia
