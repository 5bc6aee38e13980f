// BSA forward on the CPU (one process), and the stages both CPU forwards share (network.hpp). Token
// arrays are row-major (samples * n rows, n the common padded sample size, round_up(width, kPad)
// columns); the layers are the stage program of program.hpp run by a HostExec on the CPU kernels
// (ops/host_ops.hpp): the row-wise stages in tiles of 64 rows and the ball attention ball by ball, one tile
// per OpenMP iteration, the sample-wise branches (branches.hpp) as OpenMP loops over (sample, head, block)
// tasks, so the result does not depend on the thread count. Semantics: share/docs/balltree.md ("BSA").
#include <omp.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <string>

#include "../balltree/layers.hpp"
#include "../balltree/shapenet_wrapper.hpp"
#include "../layers.hpp"
#include "../thread_count.hpp"
#include "host_ops.hpp"
#include "network.hpp"
#include "program.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"
#include "surrogate/profile.hpp"

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kEmbeddingPhase{"embedding"};
const surrogate::PhaseName kSparseAttentionLayersPhase{"sparse attention layers"};
}  // namespace

namespace surrogate::bsa {
namespace {

using kernels::kPad;
using kernels::round_up;
using ops::Rows;

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

/// The rotated order of one process: rotated row i = tree row rot[i]; no other process.
class Permutation final : public detail::LayerExchanges {
 public:
  Permutation(const std::vector<std::int64_t>* rot, int threads) : rot_(rot), threads_(threads) {}
  void to_rotated(const float* rows, int width, float* rotated_rows) const override {
    balltree::layers::gather_rows(rows, width, *rot_, width, rotated_rows, width, threads_);
  }
  void from_rotated(const float* rotated_rows, int width, float* rows) const override {
    balltree::layers::scatter_rows(rotated_rows, width, *rot_, width, rows, width, threads_);
  }
  bool distributed() const override { return false; }
  void gather_blocks(const float*, index_t, int, float*) const override {
    throw Error(ErrorCode::internal, "bsa: no blocks to gather in one process");
  }
  void fetch_blocks(std::span<const std::int64_t>, const float*, int, float*) const override {
    throw Error(ErrorCode::internal, "bsa: no blocks to fetch in one process");
  }
  void fetch_samples(const float*, int, float*) const override {
    throw Error(ErrorCode::internal, "bsa: no samples to fetch in one process");
  }

 private:
  const std::vector<std::int64_t>* rot_;
  int threads_;
};

}  // namespace

struct Network::Impl {
  Config cfg;
  std::int64_t parameters = 0;
  program::Layers<BsaHostOps> layers;
  balltree::wrapper::Layers<ops::HostOps> wrapper;  // the ShapeNet-Car wrapper's layers
};

Network::Network(const ModelFile& file) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = Config::from_attributes(file.config);
  const Config& c = m.cfg;
  file.check_repeat_count("depth", c.depth, 1);
  const ExpectedShapes shapes = expected_shapes(c);
  file.check_weights(shapes);
  for (const auto& [key, shape] : shapes) {
    std::int64_t count = 1;
    for (const std::int64_t s : shape) count *= s;
    m.parameters += count;
  }
  program::Layers<BsaHostOps>& w = m.layers;
  w.embed = pack_linear(file, "embed");
  const int D = c.c_hidden;
  const float eps = std::numeric_limits<float>::epsilon();
  for (int l = 0; l < c.depth; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    const std::string a = p + "attn.";
    program::Layer<BsaHostOps> L;
    program::Block<BsaHostOps>& b = L.block;
    b.dim = D;
    b.heads = c.num_heads;
    b.ball = c.attention_type == AttentionType::ball ? c.attention_ball_size : c.ball_size;
    b.norm1 = NormLayer(file.weight(p + "norm1.weight").values.data(), nullptr, D, true, eps);  // RMSNorms
    b.norm2 = NormLayer(file.weight(p + "norm2.weight").values.data(), nullptr, D, true, eps);
    b.qkv = pack_linear(file, a + "qkv");  // rows [q | k | v], each head-major: the layout the kernels take
    b.proj = pack_linear(file, a + "out_proj");
    b.pe = pack_linear(file, a + "position_proj");
    b.w1 = pack_linear(file, p + "mlp.w1");
    b.w2 = pack_linear(file, p + "mlp.w2");
    b.w3 = pack_linear(file, p + "mlp.w3");
    b.hidden = b.w1.out();
    if (c.attention_type != AttentionType::global) b.sigma = file.weight(a + "sigma_att").values;
    if (c.attention_type == AttentionType::sparse) {
      if (c.use_compress_mlp) {
        for (int i = 0; i < 2; ++i) {
          const std::string idx = i == 0 ? ".0" : ".2";
          L.k_mlp[i] = pack_linear(file, a + "k_compress_mlp" + idx);
          L.v_mlp[i] = pack_linear(file, a + "v_compress_mlp" + idx);
          if (c.block_level_importance()) L.q_mlp[i] = pack_linear(file, a + "q_compress_mlp" + idx);
        }
      }
      if (c.use_token_gated_attention) {
        L.gate = pack_linear(file, a + "gated_attention.to_strategy.0");
      } else {
        L.static_gate = file.weight(a + "gated_attention.gates").values;
        for (float& g : L.static_gate) g = sigmoid(g);
      }
    }
    w.layers.push_back(std::move(L));
  }
  if (c.wrapper == Wrapper::shapenet_car) {
    m.wrapper = balltree::wrapper::read(file);
  }
}

Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
const Config& Network::config() const { return impl_->cfg; }
std::int64_t Network::parameter_count() const { return impl_->parameters; }

// ---------------------------------------------------------------------------------------------------

std::vector<float> Network::forward(std::span<const float> features, std::span<const float> positions,
                                    const balltree::Batch& batch, int threads) const {
  balltree::RotatedTrees trees;
  {
    const surrogate::detail::ThreadCount scope(threads);  // the tree build's tasks
    trees = build_trees(positions, batch);
  }
  return forward(trees, features, positions, batch, threads);
}

balltree::RotatedTrees Network::build_trees(std::span<const float> positions, const balltree::Batch& batch) const {
  const Config& c = impl_->cfg;
  const std::int64_t n = batch.points();
  const int d = c.dimensionality;
  if (static_cast<std::int64_t>(positions.size()) != n * d)
    throw Error(ErrorCode::input, "bsa: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(n) + " points x " + std::to_string(d));
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (!std::isfinite(positions[i]))
      throw Error(ErrorCode::input, "bsa: positions has a NaN/Inf coordinate at point " + std::to_string(i / static_cast<std::size_t>(d)));
  for (std::int64_t s = 0; s < batch.samples(); ++s)
    if (batch.size(s) < 2)
      throw Error(ErrorCode::input, "bsa: batch sample " + std::to_string(s) + " has " + std::to_string(batch.size(s)) +
                                        " point(s); the ball tree needs at least 2");
  balltree::RotatedTrees trees;
  if (c.should_rotate) {
    const std::vector<int> strides{1}, balls{c.ball_size, c.ball_size};
    trees = balltree::build_with_rotations(positions, d, batch, strides, balls, c.rotation_angle);
  } else {
    trees.tree = balltree::build(positions, d, batch);
  }
  return trees;
}

std::vector<float> Network::forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                    std::span<const float> positions, const balltree::Batch& batch, int threads) const {
  const Config& c = impl_->cfg;
  if (threads <= 0) threads = omp_get_max_threads();
  const int d = c.dimensionality, D = c.c_hidden;
  const index_t points = batch.points();
  const index_t n = detail::Stages::check_inputs(*this, trees, features, positions, batch);
  const balltree::Tree& tree = trees.tree;
  const int samples = static_cast<int>(batch.samples());
  const std::vector<std::int64_t>* rot = c.should_rotate ? &trees.rotated[1] : nullptr;

  // Embedding on the points, then the leaves in tree order.
  const index_t rows = tree.slots();
  const index_t ld = detail::Stages::row_stride(*this);
  AlignedBuffer<float> e(static_cast<std::size_t>(points * ld));
  detail::Stages::embed(*this, features, points, e.data(), threads);
  AlignedBuffer<float> x(static_cast<std::size_t>(rows * ld));
  std::vector<float> pos(static_cast<std::size_t>(rows * d));
  balltree::layers::gather_rows(e.data(), ld, tree.index, static_cast<int>(ld), x.data(), ld, threads);
  balltree::layers::gather_rows(positions.data(), d, tree.index, d, pos.data(), d, threads);
  const Permutation order(rot, threads);
  std::vector<float> pos_rot(rot ? pos.size() : 0);
  if (rot) order.to_rotated(pos.data(), d, pos_rot.data());
  detail::RowLayout layout;
  layout.rows = rows;
  layout.n = n;
  layout.samples = samples;
  layout.segments.push_back({0, samples, n, 0, 0});
  detail::Stages::layers(*this, x.data(), pos.data(), pos_rot.data(), layout, order, threads);

  // Output in input order (the slot holding each point with mask 1).
  const std::vector<std::int64_t> slot = tree.slot_of_point();
  std::vector<float> result(static_cast<std::size_t>(points * D));
  balltree::layers::gather_rows(x.data(), ld, slot, D, result.data(), D, threads);
  return result;
}

std::vector<float> Network::forward_shapenet(std::span<const float> positions, const balltree::Batch& batch,
                                             int threads) const {
  const Config& c = impl_->cfg;
  if (c.wrapper != Wrapper::shapenet_car)
    throw Error(ErrorCode::unsupported, "bsa: forward_shapenet needs a model file with the ShapeNet-Car wrapper");
  const int d = c.dimensionality;
  const index_t points = batch.points();
  if (static_cast<index_t>(positions.size()) != points * d)
    throw Error(ErrorCode::input, "bsa: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(points) + " points x " + std::to_string(d));
  const std::vector<float> y = forward(detail::Stages::fourier(*this, positions, threads), positions, batch, threads);
  return detail::Stages::head(*this, y, threads);
}

// ---------------------------------------------------------------------------------------------------
// The stages (network.hpp).

namespace detail {

index_t Stages::row_stride(const Network& net) { return round_up(net.config().c_hidden, kPad); }

const program::Layers<BsaHostOps>& Stages::program_layers(const Network& net) { return net.impl_->layers; }

void Stages::check_sample_size(const Network& net, index_t n) {
  const Config& c = net.config();
  auto multiple = [&](int of, const char* name) {
    if (n % of != 0)
      throw Error(ErrorCode::input, "bsa: the padded sample size " + std::to_string(n) + " is not a multiple of " + name +
                                        " = " + std::to_string(of) + " (too few points for this model?)");
  };
  if (c.attention_type == AttentionType::ball) multiple(c.attention_ball_size, "attention_ball_size");
  if (c.attention_type == AttentionType::sparse) {
    multiple(c.ball_size, "ball_size");
    multiple(c.compress_block_size, "compress_block_size");
    if (c.use_group_selection) multiple(c.group_selection_size, "group_selection_size");
    if (n / c.compress_block_size < c.selected_blocks_number)
      throw Error(ErrorCode::input, "bsa: a sample of " + std::to_string(n) + " slots has " +
                                        std::to_string(n / c.compress_block_size) +
                                        " blocks, fewer than selected_blocks_number = " +
                                        std::to_string(c.selected_blocks_number));
  }
}

index_t Stages::check_inputs(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch) {
  const Config& c = net.config();
  const int d = c.dimensionality;
  const index_t points = batch.points();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::input, "bsa: " + what); };
  if (points < 1) bad("no points");
  if (static_cast<index_t>(features.size()) != points * c.c_in)
    bad("features has " + std::to_string(features.size()) + " values, expected " + std::to_string(points) +
        " points x c_in " + std::to_string(c.c_in));
  if (static_cast<index_t>(positions.size()) != points * d)
    bad("positions has " + std::to_string(positions.size()) + " values, expected " + std::to_string(points) +
        " points x " + std::to_string(d));
  check_features(net, features, 0);
  return check_geometry(net, trees, positions, batch);
}

index_t Stages::check_geometry(const Network& net, const balltree::RotatedTrees& trees, std::span<const float> positions,
                               const balltree::Batch& batch) {
  const Config& c = net.config();
  const int d = c.dimensionality;
  const index_t points = batch.points();
  auto bad = [](const std::string& what) { throw Error(ErrorCode::input, "bsa: " + what); };
  if (points < 1) bad("no points");
  if (static_cast<index_t>(positions.size()) != points * d)
    bad("positions has " + std::to_string(positions.size()) + " values, expected " + std::to_string(points) +
        " points x " + std::to_string(d));
  for (std::size_t i = 0; i < positions.size(); ++i)
    if (!std::isfinite(positions[i]))
      bad("positions has a NaN/Inf coordinate at point " + std::to_string(i / static_cast<std::size_t>(d)));
  // Equal padded sample sizes (the official reshape to (B, n, D)), whole balls, blocks and groups.
  const balltree::Tree& tree = trees.tree;
  const int samples = static_cast<int>(batch.samples());
  if (tree.mask.size() != tree.index.size() || static_cast<int>(tree.slot_offsets.size()) != samples + 1)
    bad("trees.tree does not belong to this batch");
  const index_t n = tree.slot_offsets[1] - tree.slot_offsets[0];
  for (int s = 1; s < samples; ++s)
    if (tree.slot_offsets[static_cast<std::size_t>(s) + 1] - tree.slot_offsets[static_cast<std::size_t>(s)] != n)
      bad("batch sample " + std::to_string(s) + " pads to " +
          std::to_string(tree.slot_offsets[static_cast<std::size_t>(s) + 1] - tree.slot_offsets[static_cast<std::size_t>(s)]) +
          " tree slots but sample 0 to " + std::to_string(n) +
          "; BSA needs every sample padded to the same size (the same next power of two of its point count)");
  for (const std::int64_t s : tree.index)
    if (s < 0 || s >= points) bad("trees.tree.index holds " + std::to_string(s) + ", not a point index");
  check_sample_size(net, n);
  if (c.should_rotate) {
    if (trees.rotated.size() != 2) bad("should_rotate needs trees.rotated with the two permutations of strides [1]");
    const std::vector<std::int64_t>* rot = &trees.rotated[1];
    if (static_cast<index_t>(rot->size()) != tree.slots()) bad("trees.rotated[1] does not match the tree");
    std::vector<std::uint8_t> seen(rot->size(), 0);
    for (const std::int64_t v : *rot) {
      if (v < 0 || v >= tree.slots() || seen[static_cast<std::size_t>(v)]) bad("trees.rotated[1] is not a permutation");
      seen[static_cast<std::size_t>(v)] = 1;
    }
  }
  return n;
}

void Stages::check_features(const Network& net, std::span<const float> features, index_t first_point) {
  const int c_in = net.config().c_in;
  for (std::size_t i = 0; i < features.size(); ++i)
    if (!std::isfinite(features[i]))
      throw Error(ErrorCode::input, "bsa: features has a NaN/Inf value at point " +
                                        std::to_string(first_point + static_cast<index_t>(i / static_cast<std::size_t>(c_in))));
}

namespace {

/// A thread's work rows.
using HostWork = ops::HostWork<program::Slot>;

/// The CPU's Exec (program.hpp): tiles spread over OpenMP threads, each with its BsaHostOps and HostWork
/// (static schedules, so a tile's rows never depend on the thread count); the branch members (whole) on
/// one BsaHostOps whose own OpenMP loops use the threads.
class HostExec {
 public:
  using Ops = BsaHostOps;
  HostExec(const Network& net, int threads)
      : cfg_(&net.config()),
        layers_(&Stages::program_layers(net)),
        threads_(threads <= 0 ? omp_get_max_threads() : threads) {}
  const Config& config() const { return *cfg_; }
  const program::Layers<BsaHostOps>& layers() const { return *layers_; }

  template <class F>
  void tiles(index_t n, index_t tile, F&& f) const {
    ops::parallel_tiles<BsaHostOps, HostWork>(threads_, n, tile, f);
  }
  template <class F>
  void whole(F&& f) const {
    BsaHostOps ops(kernels::cpu());
    ops.set_threads(threads_);
    f(ops);
  }

 protected:
  const Config* cfg_;
  const program::Layers<BsaHostOps>* layers_;
  int threads_;
};

/// The layers' rows: the caller's tokens and positions, the layer arrays (kept across the layers of a
/// forward: each layer writes every element it reads, the padding columns stay as first zeroed, and a
/// fresh mapping per layer would have the kernel clear its pages again), the balls' centres, the
/// selection; what crosses processes through `ex`.
class HostLayers final : public HostExec {
 public:
  HostLayers(const Network& net, float* x, const float* pos, const float* pos_rot, const RowLayout& layout,
             const LayerExchanges& ex, int threads)
      : HostExec(net, threads), x_(x), pos_(pos), pos_rot_(pos_rot), layout_(&layout), ex_(&ex) {
    const Config& c = *cfg_;
    const int D = c.c_hidden, H = c.num_heads, d = c.dimensionality;
    const index_t rows = layout.rows;
    ld_ = round_up(D, kPad);
    ld_u_ = round_up(3 * D, kPad);
    ld_g_ = round_up(3 * H, kPad);
    auto make = [](AlignedBuffer<float>& b, index_t count, index_t ld) {
      b.resize(static_cast<std::size_t>(count * ld));
    };
    for (AlignedBuffer<float>* b : {&h_, &o_, &residual_}) make(*b, rows, ld_);
    if (c.should_rotate) make(xr_, rows, ld_);
    make(u_, rows, ld_u_);
    if (c.attention_type == AttentionType::sparse) {
      if (c.use_token_gated_attention) make(gates_, rows, ld_g_);
      for (AlignedBuffer<float>* b : {&local_, &coarse_, &fine_}) make(*b, rows, ld_);
      const index_t blocks = rows / c.compress_block_size;
      make(kc_, blocks, ld_);
      make(vc_, blocks, ld_);
      if (c.block_level_importance()) make(qc_, blocks, ld_);
      const ops::SparseShape s = program::sparse_shape(c);
      sel_offsets_.assign(1, 0);
      for (const RowLayout::Segment& g : layout.segments)
        sel_offsets_.push_back(sel_offsets_.back() +
                               static_cast<std::size_t>(g.samples * H * s.selection_rows(g.length) * s.S));
      sel_.resize(sel_offsets_.back());
    }
    if (c.attention_type != AttentionType::global) {
      const int ball = c.attention_type == AttentionType::ball ? c.attention_ball_size : c.ball_size;
      const auto values = static_cast<std::size_t>(rows * d);
      centres_ = balltree::mean_pool({pos, values}, d, ball);
      if (c.should_rotate) centres_rot_ = balltree::mean_pool({pos_rot, values}, d, ball);
    }
  }

  const RowLayout& layout() const { return *layout_; }

  program::LayerRows rows(bool rotated) {
    const Config& c = *cfg_;
    const int D = c.c_hidden, H = c.num_heads, d = c.dimensionality;
    const index_t n = layout_->rows, blocks = c.attention_type == AttentionType::sparse ? n / c.compress_block_size : 0;
    const auto place = ops::Place::host;
    auto rows_of = [&](AlignedBuffer<float>& b, index_t count, index_t ld, int width) {
      return b.size() == 0 ? Rows{} : Rows{b.data(), ld, count, width, place};
    };
    program::LayerRows r;
    r.x = {rotated ? xr_.data() : x_, ld_, n, D, place};
    r.pos = ops::view(rotated ? pos_rot_ : pos_, d, n, d, place);
    const std::vector<float>& centres = rotated ? centres_rot_ : centres_;
    if (!centres.empty()) r.centres = ops::view(centres.data(), d, static_cast<index_t>(centres.size()) / d, d, place);
    r.h = rows_of(h_, n, ld_, D);
    r.u = rows_of(u_, n, ld_u_, 3 * D);
    r.gates = rows_of(gates_, n, ld_g_, 3 * H);
    r.o = rows_of(o_, n, ld_, D);
    r.local = rows_of(local_, n, ld_, D);
    r.coarse = rows_of(coarse_, n, ld_, D);
    r.fine = rows_of(fine_, n, ld_, D);
    r.kc = rows_of(kc_, blocks, ld_, D);
    r.vc = rows_of(vc_, blocks, ld_, D);
    r.qc = rows_of(qc_, blocks, ld_, D);
    return r;
  }
  Rows residual() { return {residual_.data(), ld_, layout_->rows, cfg_->c_hidden, ops::Place::host}; }

  /// A tile's positions relative to their ball's centre, computed in the thread's work rows.
  Rows ball_relative(HostWork& work, const program::LayerRows& r, int ball, index_t r0, index_t rows) const {
    const int d = cfg_->dimensionality;
    const Rows rel = work.rows(program::Slot::rel, rows, d);
    for (index_t i = 0; i < rows; ++i) {
      const float* p = r.pos.row(r0 + i);
      const float* centre = r.centres.row((r0 + i) / ball);
      for (int e = 0; e < d; ++e) rel.row(i)[e] = p[e] - centre[e];
    }
    return rel;
  }
  void to_rotated() { ex_->to_rotated(x_, static_cast<int>(ld_), xr_.data()); }
  void from_rotated() { ex_->from_rotated(xr_.data(), static_cast<int>(ld_), x_); }

  /// One process: the layer's own blocks; distributed: every rank's, all-gathered.
  program::CompressedBlocks compressed(const program::LayerRows& r) {
    if (!ex_->distributed()) return {r.kc, r.vc};
    const auto all = static_cast<std::size_t>(layout_->samples * (layout_->n / cfg_->compress_block_size) * ld_);
    kc_all_.resize(all);
    vc_all_.resize(all);
    ex_->gather_blocks(r.kc.data, r.kc.rows, static_cast<int>(ld_), kc_all_.data());
    ex_->gather_blocks(r.vc.data, r.vc.rows, static_cast<int>(ld_), vc_all_.data());
    const index_t rows = static_cast<index_t>(all) / ld_;
    const auto host = ops::Place::host;
    return {{kc_all_.data(), ld_, rows, r.kc.width, host}, {vc_all_.data(), ld_, rows, r.vc.width, host}};
  }
  std::int32_t* selection(std::size_t i) { return sel_.data() + sel_offsets_[i]; }

  /// Distributed: the token keys and values of the blocks the partial segments selected, fetched from their
  /// owners (collective), and per partial segment its blocks' first fetched rows.
  program::SelectedKeys fetch_selected(const program::LayerRows& r) {
    if (!ex_->distributed()) return {};
    const int D = cfg_->c_hidden, C = cfg_->compress_block_size;
    const index_t nb = layout_->n / C, rows = layout_->rows;
    std::vector<std::int64_t> wanted;
    for (std::size_t i = 0; i < layout_->segments.size(); ++i) {
      const RowLayout::Segment& g = layout_->segments[i];
      if (g.length == layout_->n) continue;
      for (std::size_t j = sel_offsets_[i]; j < sel_offsets_[i + 1]; ++j) wanted.push_back(g.sample * nb + sel_[j]);
    }
    std::sort(wanted.begin(), wanted.end());
    wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
    const int kv_width = 2 * D;
    AlignedBuffer<float> kv(static_cast<std::size_t>(rows * kv_width));
    for (index_t i = 0; i < rows; ++i) std::copy_n(r.u.row(i) + D, kv_width, kv.data() + i * kv_width);
    fetched_ = AlignedBuffer<float>(wanted.size() * static_cast<std::size_t>(C * kv_width));
    ex_->fetch_blocks(wanted, kv.data(), kv_width, fetched_.data());
    first_row_.clear();
    for (const RowLayout::Segment& g : layout_->segments) {
      if (g.length == layout_->n) continue;
      for (index_t b = 0; b < nb; ++b) {
        const auto it = std::lower_bound(wanted.begin(), wanted.end(), g.sample * nb + b);
        first_row_.push_back(it != wanted.end() && *it == g.sample * nb + b ? (it - wanted.begin()) * C : -1);
      }
    }
    const auto fetched_rows = static_cast<index_t>(wanted.size()) * C;
    const Rows f{fetched_.data(), kv_width, fetched_rows, kv_width, ops::Place::host};
    return {f.columns(0, D), f.columns(D, D), first_row_.data()};
  }
  /// Distributed (global attention): [k | v] of every row of the samples the partial segments belong to.
  Rows fetch_samples(const program::LayerRows& r) {
    if (!ex_->distributed()) return {};
    const int D = cfg_->c_hidden, kv_width = 2 * D;
    const index_t rows = layout_->rows, fetched_rows = layout_->partial_samples() * layout_->n;
    AlignedBuffer<float> kv(static_cast<std::size_t>(rows * kv_width));
    for (index_t i = 0; i < rows; ++i) std::copy_n(r.u.row(i) + D, kv_width, kv.data() + i * kv_width);
    fetched_ = AlignedBuffer<float>(static_cast<std::size_t>(fetched_rows * kv_width));
    ex_->fetch_samples(kv.data(), kv_width, fetched_.data());
    return {fetched_.data(), kv_width, fetched_rows, kv_width, ops::Place::host};
  }

 private:
  float* x_;
  const float *pos_, *pos_rot_;
  const RowLayout* layout_;
  const LayerExchanges* ex_;
  index_t ld_ = 0, ld_u_ = 0, ld_g_ = 0;
  AlignedBuffer<float> xr_, residual_, h_, u_, gates_, o_, local_, coarse_, fine_, kc_, vc_, qc_;
  AlignedBuffer<float> kc_all_, vc_all_, fetched_;
  std::vector<float> centres_, centres_rot_;
  std::vector<std::int32_t> sel_;
  std::vector<std::size_t> sel_offsets_;  // segment i's selection at sel_[sel_offsets_[i]]
  std::vector<std::int64_t> first_row_;
};

}  // namespace

void Stages::embed(const Network& net, std::span<const float> features, index_t points, float* h, int threads) {
  const ScopedPhase phase(kEmbeddingPhase);
  const int c_in = net.config().c_in;
  const index_t ld_in = round_up(c_in, kPad);
  const HostExec e(net, threads);
  AlignedBuffer<float> in(static_cast<std::size_t>(points * ld_in));
  e.tiles(points, program::kTileRows, [&](BsaHostOps&, HostWork&, index_t r0, index_t rows) {
    for (index_t i = r0; i < r0 + rows; ++i) std::copy_n(features.data() + i * c_in, c_in, in.data() + i * ld_in);
  });
  balltree::program::embed(e, {in.data(), ld_in, points, c_in, ops::Place::host},
                           {h, row_stride(net), points, net.config().c_hidden, ops::Place::host});
}

void Stages::layers(const Network& net, float* x, const float* pos, const float* pos_rot, const RowLayout& layout,
                    const LayerExchanges& ex, int threads) {
  const ScopedPhase phase(kSparseAttentionLayersPhase);
  HostLayers e(net, x, pos, pos_rot, layout, ex, threads);
  program::layers(e);
}

std::vector<float> Stages::fourier(const Network& net, std::span<const float> positions, int threads) {
  return balltree::wrapper::fourier(net.impl_->wrapper, positions, net.config().dimensionality, threads);
}

std::vector<float> Stages::head(const Network& net, std::span<const float> y, int threads) {
  return balltree::wrapper::head(net.impl_->wrapper, y, net.config().c_hidden, threads);
}

const balltree::wrapper::Layers<ops::HostOps>& Stages::wrapper_layers(const Network& net) { return net.impl_->wrapper; }

}  // namespace detail

}  // namespace surrogate::bsa

