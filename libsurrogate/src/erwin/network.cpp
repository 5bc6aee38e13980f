// Erwin forward on the CPU (one process). Node arrays of a level are row-major (nodes x round_up(D,
// kPad)); the stages are the program of program.hpp run by a HostExec on the CPU kernels (ops/host_ops.hpp):
// every transformer block ball by ball, one ball per OpenMP iteration, the row-wise stages in tiles of
// rows, so a ball's rows (and hence the result) do not depend on the thread count. Semantics:
// share/docs/balltree.md.
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "../layers.hpp"
#include "../thread_count.hpp"
#include "surrogate/profile.hpp"
#include "../balltree/layers.hpp"
#include "network.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kEmbeddingPhase{"embedding"};
const surrogate::PhaseName kMessagePassingPhase{"message passing"};
const surrogate::PhaseName kBallAttentionLevelsPhase{"ball attention levels"};
}  // namespace

namespace surrogate::erwin {
namespace {

using kernels::kPad;
using kernels::PackedLinear;
using kernels::round_up;
using ops::HostOps;
using ops::Rows;
using HostBlock = program::Block<HostOps>;

/// Eval BatchNorm folded as PyTorch's CPU inference kernel (ops::BatchNorm).
ops::BatchNorm<HostOps::Vector> fold_batch_norm(const ModelFile& f, const std::string& p, int dim) {
  ops::BatchNorm<HostOps::Vector> bn;
  bn.alpha.resize(static_cast<std::size_t>(dim));
  bn.beta.resize(static_cast<std::size_t>(dim));
  const auto& w = f.weight(p + ".weight").values;
  const auto& b = f.weight(p + ".bias").values;
  const auto& mean = f.weight(p + ".running_mean").values;
  const auto& var = batch_norm_variance(f, p);
  for (std::size_t c = 0; c < bn.alpha.size(); ++c) {
    const float inv_std = 1.0f / std::sqrt(var[c] + 1e-5f);
    bn.alpha[c] = inv_std * w[c];
    bn.beta[c] = b[c] - mean[c] * bn.alpha[c];
  }
  return bn;
}

/// A LayerNorm (rms false, eps 1e-5) or RMSNorm (rms true, float epsilon) of dim channels; null vectors:
/// weights 1, biases 0.
NormLayer host_norm(const float* weight, const float* bias, int dim, bool rms) {
  return {weight, bias, dim, rms, rms ? std::numeric_limits<float>::epsilon() : 1e-5f};
}

std::string level_name(int i) { return "level " + std::to_string(i); }

/// The levels, blocks and message-passing steps /config asks for, against the tensors present (each holds
/// at least one), before the expected shapes are built.
void check_repeat_counts(const ModelFile& file, const Config& c) {
  file.check_repeat_count("ball_sizes (levels)", static_cast<std::int64_t>(c.ball_sizes.size()));
  file.check_repeat_count("mp_steps", c.mp_steps);
  std::int64_t blocks = 0;
  for (const int d : c.enc_depths) blocks += d;
  for (const int d : c.dec_depths) blocks += d;
  file.check_repeat_count("enc_depths + dec_depths (blocks)", blocks);
}

}  // namespace

struct Network::Impl {
  Config cfg;
  std::int64_t parameters = 0;
  program::Layers<HostOps> layers;

  HostBlock load_block(const ModelFile& f, const std::string& p, int dim, int heads, int ball) const;
};

HostBlock Network::Impl::load_block(const ModelFile& f, const std::string& p, int dim, int heads, int ball) const {
  HostBlock b;
  b.dim = dim;
  b.heads = heads;
  b.ball = ball;
  b.hidden = dim * cfg.mlp_ratio;
  b.norm1 = host_norm(f.weight(p + "norm1.weight").values.data(), nullptr, dim, true);
  b.norm2 = host_norm(f.weight(p + "norm2.weight").values.data(), nullptr, dim, true);
  const auto& w = f.weight(p + "BMSA.qkv.weight").values;
  const auto& bias = f.weight(p + "BMSA.qkv.bias").values;
  std::vector<float> wr(w.size()), br(bias.size());
  const auto D = static_cast<std::size_t>(dim);
  for (std::size_t s = 0; s < 3; ++s)
    for (std::size_t c = 0; c < D; ++c) {
      const std::size_t src = cfg.variant == Variant::erwin ? 3 * c + s : s * D + c;
      std::copy_n(w.begin() + static_cast<std::ptrdiff_t>(src * D), D, wr.begin() + static_cast<std::ptrdiff_t>((s * D + c) * D));
      br[s * D + c] = bias[src];
    }
  b.qkv = PackedLinear(wr.data(), br.data(), 3 * dim, dim);
  b.proj = pack_linear(f, p + "BMSA.proj");
  b.pe = pack_linear(f, p + "BMSA.pe_proj");
  b.w1 = pack_linear(f, p + "swiglu.w1");
  b.w2 = pack_linear(f, p + "swiglu.w2");
  b.w3 = pack_linear(f, p + "swiglu.w3");
  if (cfg.variant == Variant::erwin) b.sigma = f.weight(p + "BMSA.sigma_att").values;
  return b;
}

Network::Network(const ModelFile& file) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = Config::from_attributes(file.config);
  const Config& c = m.cfg;
  program::Layers<HostOps>& w = m.layers;
  check_repeat_counts(file, c);
  const ExpectedShapes shapes = expected_shapes(c);
  file.check_weights(shapes);
  for (const auto& [key, shape] : shapes) {
    std::int64_t count = 1;
    for (const std::int64_t s : shape) count *= s;
    m.parameters += count;
  }
  const int D0 = c.c_hidden[0];
  w.embed = pack_linear(file, "embed.embed_fn");
  const bool flash = c.variant == Variant::erwin_flash;
  auto values = [&](const std::string& name) { return flash ? nullptr : file.weight(name).values.data(); };
  for (int t = 0; t < c.mp_steps; ++t) {
    const std::string ts = std::to_string(t);
    const std::string msg = std::string("embed.mpnn.") + (flash ? "fused_message_update." : "message_fns.") + ts;
    const std::string upd = "embed.mpnn.update_fns." + ts;
    program::Step<HostOps> s;
    s.message = pack_linear(file, msg + ".0");
    s.update = pack_linear(file, upd + ".0");
    s.message_norm = host_norm(values(msg + ".2.weight"), values(msg + ".2.bias"), D0, false);
    s.update_norm = host_norm(values(upd + ".1.weight"), values(upd + ".1.bias"), D0, false);
    w.steps.push_back(std::move(s));
  }
  const int L = c.levels();
  w.encoder.resize(static_cast<std::size_t>(L - 1));
  w.decoder.resize(static_cast<std::size_t>(L - 1));
  for (int i = 0; i + 1 < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    const std::string p = "encoder." + std::to_string(i) + ".";
    for (int j = 0; j < c.enc_depths[iu]; ++j)
      w.encoder[iu].push_back(
          m.load_block(file, p + "blocks." + std::to_string(j) + ".", c.c_hidden[iu], c.enc_num_heads[iu], c.ball_sizes[iu]));
    w.pool.push_back(pack_linear(file, p + "pool.proj"));
    w.pool_bn.push_back(fold_batch_norm(file, p + "pool.norm", c.c_hidden[iu + 1]));
  }
  for (int j = 0; j < c.enc_depths.back(); ++j)
    w.bottleneck.push_back(m.load_block(file, "bottleneck.blocks." + std::to_string(j) + ".", c.c_hidden.back(),
                                        c.enc_num_heads.back(), c.ball_sizes.back()));
  w.unpool.resize(static_cast<std::size_t>(L - 1));
  w.unpool_bn.resize(static_cast<std::size_t>(L - 1));
  for (int k = 0; k + 1 < L; ++k) {
    const auto i = static_cast<std::size_t>(L - 2 - k);
    const std::string p = "decoder." + std::to_string(k) + ".";
    w.unpool[i] = pack_linear(file, p + "unpool.proj");
    w.unpool_bn[i] = fold_batch_norm(file, p + "unpool.norm", c.c_hidden[i]);
    for (int j = 0; j < c.dec_depths[i]; ++j)
      w.decoder[i].push_back(
          m.load_block(file, p + "blocks." + std::to_string(j) + ".", c.c_hidden[i], c.dec_num_heads[i], c.ball_sizes[i]));
  }
}

Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
const Config& Network::config() const { return impl_->cfg; }
std::int64_t Network::parameter_count() const { return impl_->parameters; }

// ---------------------------------------------------------------------------------------------------

std::vector<float> Network::forward(std::span<const float> features, std::span<const float> positions,
                                    const balltree::Batch& batch, std::span<const std::int64_t> edge_index,
                                    int threads) const {
  const Config& c = impl_->cfg;
  const std::int64_t n = batch.points();
  if (static_cast<std::int64_t>(positions.size()) != n * c.dimensionality)
    throw Error(ErrorCode::input, "erwin: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(n) + " points x " + std::to_string(c.dimensionality));
  if (c.rotate > 0 && c.dimensionality != 2 && c.dimensionality != 3)
    throw Error(ErrorCode::unsupported, "erwin: rotated blocks need dimensionality 2 or 3 (the official rotation)");
  balltree::RotatedTrees trees;
  {
    const surrogate::detail::ThreadCount scope(threads);  // the tree build's tasks
    trees = balltree::build_with_rotations(positions, c.dimensionality, batch, c.strides, c.ball_sizes, c.rotate);
  }
  return forward(trees, features, positions, batch, edge_index, threads);
}

namespace {

/// The rotated orders of a single-process run: rotated row r of level i is node rotated[i][r].
class PermutationOrder final : public detail::RotatedOrder {
 public:
  PermutationOrder(const std::vector<std::vector<std::int64_t>>& rotated, int threads)
      : rotated_(rotated), threads_(threads) {}
  void to_rotated(int level, const float* rows, int width, float* rotated_rows) const override {
    balltree::layers::gather_rows(rows, width, rotated_[static_cast<std::size_t>(level)], width, rotated_rows, width,
                                  threads_);
  }
  void from_rotated(int level, const float* rotated_rows, int width, float* rows) const override {
    balltree::layers::scatter_rows(rotated_rows, width, rotated_[static_cast<std::size_t>(level)], width, rows, width,
                                   threads_);
  }

 private:
  const std::vector<std::vector<std::int64_t>>& rotated_;
  int threads_;
};

}  // namespace

std::vector<float> Network::forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                    std::span<const float> positions, const balltree::Batch& batch,
                                    std::span<const std::int64_t> edge_index, int threads) const {
  const Config& c = impl_->cfg;
  if (threads <= 0) threads = omp_get_max_threads();
  const int d = c.dimensionality, L = c.levels();
  const index_t n = batch.points();
  if (n < 1) throw Error(ErrorCode::input, "erwin: no points");
  if (static_cast<index_t>(features.size()) != n * c.c_in)
    throw Error(ErrorCode::input, "erwin: features has " + std::to_string(features.size()) + " values, expected " +
                                      std::to_string(n) + " points x c_in " + std::to_string(c.c_in));
  if (static_cast<index_t>(positions.size()) != n * d)
    throw Error(ErrorCode::input, "erwin: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(n) + " points x " + std::to_string(d));
  detail::Stages::check_features(*this, features, 0);
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (!std::isfinite(positions[i]))
      throw Error(ErrorCode::input, "erwin: positions has a NaN/Inf coordinate at point " + std::to_string(i / static_cast<std::size_t>(d)));
  if (c.mp_steps > 0) {
    if (edge_index.empty() || edge_index.size() % 2 != 0)
      throw Error(ErrorCode::input, "erwin: edge_index must hold 2 x E entries (E > 0) when mp_steps > 0, found " +
                                        std::to_string(edge_index.size()));
    for (std::size_t i = 0; i < edge_index.size(); ++i)
      if (edge_index[i] < 0 || edge_index[i] >= n)
        throw Error(ErrorCode::input, "erwin: edge_index[" + std::to_string(i < edge_index.size() / 2 ? 0 : 1) + "][" +
                                          std::to_string(i % (edge_index.size() / 2)) + "] = " + std::to_string(edge_index[i]) +
                                          " is not a point index (0 .. " + std::to_string(n - 1) + ")");
  }
  const balltree::Tree& tree = trees.tree;
  if (tree.mask.size() != tree.index.size() || tree.slots() < n)
    throw Error(ErrorCode::input, "erwin: trees.tree does not belong to these points");
  for (const std::int64_t s : tree.index)
    if (s < 0 || s >= n) throw Error(ErrorCode::input, "erwin: trees.tree.index holds " + std::to_string(s) + ", not a point index");
  if (c.rotate > 0 && static_cast<int>(trees.rotated.size()) != L)
    throw Error(ErrorCode::input, "erwin: rotate > 0 needs one rotated permutation per level, trees.rotated has " +
                                      std::to_string(trees.rotated.size()));
  const std::vector<index_t> nodes = detail::Stages::level_nodes(*this, tree.slots());
  if (c.rotate > 0)
    for (int i = 0; i < L; ++i) {
      const auto iu = static_cast<std::size_t>(i);
      const auto& r = trees.rotated[iu];
      if (static_cast<index_t>(r.size()) != nodes[iu])
        throw Error(ErrorCode::input, "erwin: trees.rotated[" + std::to_string(i) + "] has " + std::to_string(r.size()) +
                                          " entries, level has " + std::to_string(nodes[iu]) + " nodes");
      for (const std::int64_t v : r)
        if (v < 0 || v >= nodes[iu])
          throw Error(ErrorCode::input, "erwin: trees.rotated[" + std::to_string(i) + "] holds " + std::to_string(v));
    }

  // Embedding and message passing on the original points.
  const index_t ld = detail::Stages::row_stride(*this);
  AlignedBuffer<float> h(static_cast<std::size_t>(n * ld));
  detail::Stages::embed(*this, features, n, h.data(), threads);
  if (c.mp_steps > 0) detail::Stages::message_passing(*this, h.data(), positions.data(), n, n, edge_index, {}, threads);

  // Level 0 in tree order, then the U-Net.
  AlignedBuffer<float> x(static_cast<std::size_t>(nodes[0] * ld));
  std::vector<float> pos(static_cast<std::size_t>(nodes[0] * d));
  const std::span<const std::int64_t> leaves(tree.index.data(), static_cast<std::size_t>(nodes[0]));
  balltree::layers::gather_rows(h.data(), ld, leaves, static_cast<int>(ld), x.data(), ld, threads);
  balltree::layers::gather_rows(positions.data(), d, leaves, d, pos.data(), d, threads);
  const PermutationOrder order(trees.rotated, threads);
  detail::Stages::levels(*this, x, std::move(pos), nodes, c.rotate > 0 ? &order : nullptr, threads);

  // Output in input order (the slot holding each point with mask 1).
  const int D0 = c.c_hidden[0];
  const std::vector<std::int64_t> slot = tree.slot_of_point();
  std::vector<float> result(static_cast<std::size_t>(n * D0));
  balltree::layers::gather_rows(x.data(), ld, slot, D0, result.data(), D0, threads);
  return result;
}


// ---------------------------------------------------------------------------------------------------
// The stages (network.hpp): program.hpp's stage sequence on the CPU.

namespace detail {
namespace {

/// A thread's work rows.
using HostWork = ops::HostWork<program::Slot>;

/// The CPU's Exec (program.hpp): tiles and chunks spread over OpenMP threads, each with its HostOps and
/// HostWork; static schedules, so a tile's rows never depend on the thread count.
class HostExec {
 public:
  using Ops = HostOps;
  HostExec(const Network& net, const program::Layers<HostOps>& layers, int threads)
      : cfg_(&net.config()), layers_(&layers), threads_(threads <= 0 ? omp_get_max_threads() : threads) {}
  const Config& config() const { return *cfg_; }
  const program::Layers<HostOps>& layers() const { return *layers_; }

  template <class F>
  void tiles(index_t n, index_t tile, F&& f) const {
    ops::parallel_tiles<HostOps, HostWork>(threads_, n, tile, f);
  }
  template <class F>
  void chunks(std::span<const std::pair<index_t, index_t>> list, F&& f) const {
    const auto count = static_cast<index_t>(list.size());
#pragma omp parallel num_threads(threads_)
    {
      HostOps ops(kernels::cpu());
      HostWork work;
#pragma omp for schedule(static)
      for (index_t t = 0; t < count; ++t) {
        const auto& [r0, r1] = list[static_cast<std::size_t>(t)];
        f(ops, work, r0, r1);
      }
    }
  }

 protected:
  const Config* cfg_;
  const program::Layers<HostOps>* layers_;
  int threads_;
};

/// The message passing's rows: h (receivers, then the halo), the edges in receiver order; tiles of 64
/// receivers, their messages 64 edges at a time.
class HostMessagePassing final : public HostExec {
 public:
  HostMessagePassing(const Network& net, const program::Layers<HostOps>& layers, float* h, const float* pos,
                     index_t n, index_t n_all, std::span<const std::int64_t> edges, const HaloRefresh& refresh,
                     int threads)
      : HostExec(net, layers, threads), h_(h), n_(n), n_all_(n_all), refresh_(&refresh) {
    const int d = cfg_->dimensionality;
    order_ = program::order_edges(edges, {pos, static_cast<std::size_t>(n_all * d)}, d, n, n_all, program::kTileRows,
                                  threads_);
    if (order_.bad_edge >= 0)
      throw Error(ErrorCode::internal, "erwin: local edge " + std::to_string(order_.bad_edge) + " out of range");
    for (index_t r0 = 0; r0 < n; r0 += program::kTileRows)
      chunks_.emplace_back(r0, std::min(n, r0 + program::kTileRows));
    agg_ = AlignedBuffer<float>(static_cast<std::size_t>(n * ld()));
  }
  index_t ld() const { return round_up(cfg_->c_hidden[0], kPad); }
  void refresh_halo() const {
    if (*refresh_) (*refresh_)(h_, ld());
  }
  program::EdgeRows edges() {
    const int D = cfg_->c_hidden[0], d = cfg_->dimensionality;
    const auto E = static_cast<index_t>(order_.src.size());
    return {{h_, ld(), n_all_, D, ops::Place::host}, {agg_.data(), ld(), n_, D, ops::Place::host},
            ops::view(order_.rel.data(), d, E, d, ops::Place::host), order_.src.data(), order_.dst.data(),
            order_.start.data(), order_.start.data(), chunks_, program::kTileRows};
  }

 private:
  float* h_;
  index_t n_, n_all_;
  const HaloRefresh* refresh_;
  program::EdgeOrder order_;
  std::vector<std::pair<index_t, index_t>> chunks_;  // receivers in tiles of kTileRows
  AlignedBuffer<float> agg_;
};

/// The U-Net's levels: level 0 the caller's node array, the others made here; positions, the balls'
/// centres and children relative to their parent per level; the rotated order through `rot`.
class HostUNet final : public HostExec {
 public:
  HostUNet(const Network& net, const program::Layers<HostOps>& layers, AlignedBuffer<float>& x, std::vector<float> pos,
           std::span<const index_t> nodes, const RotatedOrder* rot, int threads)
      : HostExec(net, layers, threads), rot_(rot) {
    const Config& c = *cfg_;
    const int d = c.dimensionality, L = c.levels();
    levels_.resize(static_cast<std::size_t>(L));
    for (int i = 0; i < L; ++i) {
      const auto iu = static_cast<std::size_t>(i);
      Level& lv = levels_[iu];
      lv.nodes = nodes[iu];
      lv.width = c.c_hidden[iu];
      lv.ld = round_up(lv.width, kPad);
      if (i == 0) {
        lv.x = x.data();
      } else {
        lv.own = AlignedBuffer<float>(static_cast<std::size_t>(lv.nodes * lv.ld));
        lv.x = lv.own.data();
      }
      lv.ball = c.ball_sizes[iu];
      lv.centres = balltree::mean_pool(pos, d, lv.ball);
      if (i + 1 < L) {
        const int s = c.strides[iu];
        lv.stride = s;
        lv.child_rel = program::relative_to_group(pos, d, s, d);
        std::vector<float> parent = s == 1 ? pos : balltree::mean_pool(pos, d, s);
        lv.pos = std::move(pos);
        pos = std::move(parent);
      } else {
        lv.pos = std::move(pos);
      }
    }
  }

  program::LevelRows level(int i) { return rows(levels_[static_cast<std::size_t>(i)], false); }
  program::LevelRows rotated(int i) { return rows(levels_[static_cast<std::size_t>(i)], true); }
  /// The rotated positions of level i (an exchange) and their balls' centres, and its rotated node array.
  void prepare_rotated(int i) {
    Level& lv = levels_[static_cast<std::size_t>(i)];
    const int d = cfg_->dimensionality;
    lv.xr = AlignedBuffer<float>(static_cast<std::size_t>(lv.nodes * lv.ld));
    lv.pos_rot.resize(static_cast<std::size_t>(lv.nodes * d));
    rot_->to_rotated(i, lv.pos.data(), d, lv.pos_rot.data());
    lv.centres_rot = balltree::mean_pool(lv.pos_rot, d, lv.ball);
  }
  /// A tile's positions relative to their ball's centre, computed in the thread's work rows.
  Rows ball_relative(HostWork& work, const program::LevelRows& lv, int ball, index_t r0, index_t rows) const {
    const int d = cfg_->dimensionality;
    const Rows rel = work.rows(program::Slot::rel, rows, d);
    for (index_t r = 0; r < rows; ++r) {
      const float* p = lv.pos.row(r0 + r);
      const float* centre = lv.centres.row((r0 + r) / ball);
      for (int c = 0; c < d; ++c) rel.row(r)[c] = p[c] - centre[c];
    }
    return rel;
  }
  void to_rotated(int i) {
    Level& lv = levels_[static_cast<std::size_t>(i)];
    rot_->to_rotated(i, lv.x, static_cast<int>(lv.ld), lv.xr.data());
  }
  void from_rotated(int i) {
    Level& lv = levels_[static_cast<std::size_t>(i)];
    rot_->from_rotated(i, lv.xr.data(), static_cast<int>(lv.ld), lv.x);
  }

 private:
  struct Level {
    index_t nodes = 0, ld = 0;
    int width = 0, ball = 1, stride = 0;  // stride: to the next level (0: the last level)
    float* x = nullptr;
    AlignedBuffer<float> own, xr;
    std::vector<float> pos, centres, child_rel, pos_rot, centres_rot;
  };
  program::LevelRows rows(Level& lv, bool rotated) const {
    const int d = cfg_->dimensionality;
    const auto place = ops::Place::host;
    program::LevelRows r;
    r.x = {rotated ? lv.xr.data() : lv.x, lv.ld, lv.nodes, lv.width, place};
    r.pos = ops::view((rotated ? lv.pos_rot : lv.pos).data(), d, lv.nodes, d, place);
    r.centres = ops::view((rotated ? lv.centres_rot : lv.centres).data(), d, lv.nodes / lv.ball, d, place);
    if (lv.stride > 0)  // per parent: its children's positions relative to it
      r.child_rel = ops::view(lv.child_rel.data(), lv.stride * d, lv.nodes / lv.stride, lv.stride * d, place);
    return r;
  }

  const RotatedOrder* rot_;
  std::vector<Level> levels_;
};

}  // namespace

index_t Stages::row_stride(const Network& net) { return round_up(net.impl_->cfg.c_hidden[0], kPad); }

const program::Layers<HostOps>& Stages::layers(const Network& net) { return net.impl_->layers; }

std::vector<index_t> Stages::level_nodes(const Network& net, index_t total_slots) {
  const Config& c = net.impl_->cfg;
  const int L = c.levels();
  // Every level must be made of whole balls and whole stride groups.
  std::vector<index_t> nodes(static_cast<std::size_t>(L), total_slots);
  for (int i = 0; i < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    if (i > 0) nodes[iu] = nodes[iu - 1] / c.strides[iu - 1];
    if (nodes[iu] % c.ball_sizes[iu] != 0)
      throw Error(ErrorCode::input, "erwin: " + level_name(i) + " has " + std::to_string(nodes[iu]) +
                                        " nodes, not a multiple of ball_sizes[" + std::to_string(i) + "] = " +
                                        std::to_string(c.ball_sizes[iu]) + " (too few points for this model?)");
    if (i + 1 < L && nodes[iu] % c.strides[iu] != 0)
      throw Error(ErrorCode::input, "erwin: " + level_name(i) + " has " + std::to_string(nodes[iu]) +
                                        " nodes, not a multiple of strides[" + std::to_string(i) + "] = " + std::to_string(c.strides[iu]));
  }
  return nodes;
}

void Stages::check_features(const Network& net, std::span<const float> features, index_t first_point) {
  const auto cin = static_cast<std::size_t>(net.impl_->cfg.c_in);
  for (std::size_t i = 0; i < features.size(); ++i)
    if (!std::isfinite(features[i]))
      throw Error(ErrorCode::input, "erwin: features has a NaN/Inf value at point " +
                                        std::to_string(first_point + static_cast<index_t>(i / cin)) + ", channel " +
                                        std::to_string(i % cin));
}

void Stages::embed(const Network& net, std::span<const float> features, index_t n, float* h, int threads) {
  const ScopedPhase phase(kEmbeddingPhase);
  const Config& c = net.impl_->cfg;
  const HostExec e(net, net.impl_->layers, threads);
  const index_t ld_in = round_up(c.c_in, kPad);
  AlignedBuffer<float> in(static_cast<std::size_t>(n * ld_in));
  e.tiles(n, program::kTileRows, [&](HostOps&, HostWork&, index_t r0, index_t rows) {
    for (index_t i = r0; i < r0 + rows; ++i) std::copy_n(features.data() + i * c.c_in, c.c_in, in.data() + i * ld_in);
  });
  program::embed(e, {in.data(), ld_in, n, c.c_in, ops::Place::host},
                 {h, row_stride(net), n, c.c_hidden[0], ops::Place::host});
}

void Stages::message_passing(const Network& net, float* h, const float* pos, index_t n_recv, index_t n_all,
                             std::span<const std::int64_t> edges, const HaloRefresh& refresh, int threads) {
  const ScopedPhase phase(kMessagePassingPhase);
  HostMessagePassing e(net, net.impl_->layers, h, pos, n_recv, n_all, edges, refresh, threads);
  program::message_passing(e);
}

void Stages::levels(const Network& net, AlignedBuffer<float>& x, std::vector<float> pos, std::span<const index_t> nodes,
                    const RotatedOrder* rot, int threads) {
  const ScopedPhase phase(kBallAttentionLevelsPhase);
  HostUNet e(net, net.impl_->layers, x, std::move(pos), nodes, rot, threads);
  program::levels(e);
}

}  // namespace detail

}  // namespace surrogate::erwin
