// Erwin forward on the CPU (one process). Node arrays of a level are row-major (nodes x round_up(D,
// kPad)); every transformer block runs ball by ball, one ball per OpenMP iteration, so a ball's rows
// (and hence the result) do not depend on the thread count. Semantics: share/docs/balltree.md.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../layers.hpp"
#include "../prefetch.hpp"
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
using balltree::layers::ball_distances;
using balltree::layers::run_linear;
using balltree::layers::run_norm;

/// Eval BatchNorm as PyTorch's CPU inference kernel: y = x * alpha + beta with
/// alpha = weight / sqrt(running_var + eps), beta = bias - running_mean * alpha.
struct BatchNorm {
  int dim = 0;
  std::vector<float> alpha, beta;
  BatchNorm() = default;
  BatchNorm(const ModelFile& f, const std::string& p, int d) : dim(d), alpha(static_cast<std::size_t>(d)), beta(alpha) {
    const auto& w = f.weight(p + ".weight").values;
    const auto& b = f.weight(p + ".bias").values;
    const auto& mean = f.weight(p + ".running_mean").values;
    const auto& var = batch_norm_variance(f, p);
    for (std::size_t c = 0; c < alpha.size(); ++c) {
      const float inv_std = 1.0f / std::sqrt(var[c] + 1e-5f);
      alpha[c] = inv_std * w[c];
      beta[c] = b[c] - mean[c] * alpha[c];
    }
  }
  void apply(float* row) const {
    for (int c = 0; c < dim; ++c) row[c] = row[c] * alpha[static_cast<std::size_t>(c)] + beta[static_cast<std::size_t>(c)];
  }
};

struct Block {
  int dim = 0, heads = 0, ball = 0, hidden = 0;
  AlignedBuffer<float> norm1, norm2;
  PackedLinear qkv;  // rows reordered to [q | k | v], each head-major
  PackedLinear proj, pe, w1, w2, w3;
  std::vector<float> sigma;  // empty: no distance bias (erwin_flash)
};

struct Step {
  PackedLinear message, update;
  AlignedBuffer<float> message_w, message_b, update_w, update_b;
};


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
  PackedLinear embed;
  std::vector<Step> steps;
  std::vector<std::vector<Block>> encoder, decoder;  // decoder indexed by level
  std::vector<Block> bottleneck;
  std::vector<PackedLinear> pool, unpool;  // by level transition i
  std::vector<BatchNorm> pool_bn, unpool_bn;

  Block load_block(const ModelFile& f, const std::string& p, int dim, int heads, int ball) const;
  void run_mpnn(const CpuKernels& k, float* h, index_t ld, const float* pos, index_t n, index_t n_all,
                std::span<const std::int64_t> edge_index, const detail::HaloRefresh& refresh, int threads) const;
  void run_block(const CpuKernels& k, const Block& b, float* x, index_t ld, const std::vector<float>& pos, index_t n,
                 int threads) const;
  void run_blocks(const CpuKernels& k, const std::vector<Block>& blocks, AlignedBuffer<float>& x, index_t ld,
                  const std::vector<float>& pos, index_t n, const detail::RotatedOrder* rot, int level, int threads) const;
};

Block Network::Impl::load_block(const ModelFile& f, const std::string& p, int dim, int heads, int ball) const {
  Block b;
  b.dim = dim;
  b.heads = heads;
  b.ball = ball;
  b.hidden = dim * cfg.mlp_ratio;
  b.norm1 = padded_vector(f.weight(p + "norm1.weight").values.data(), dim, 0.0f);
  b.norm2 = padded_vector(f.weight(p + "norm2.weight").values.data(), dim, 0.0f);
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
  check_repeat_counts(file, c);
  const ExpectedShapes shapes = expected_shapes(c);
  file.check_weights(shapes);
  for (const auto& [key, shape] : shapes) {
    std::int64_t count = 1;
    for (const std::int64_t s : shape) count *= s;
    m.parameters += count;
  }
  const int D0 = c.c_hidden[0];
  m.embed = pack_linear(file, "embed.embed_fn");
  const bool flash = c.variant == Variant::erwin_flash;
  for (int t = 0; t < c.mp_steps; ++t) {
    const std::string ts = std::to_string(t);
    const std::string msg = std::string("embed.mpnn.") + (flash ? "fused_message_update." : "message_fns.") + ts;
    const std::string upd = "embed.mpnn.update_fns." + ts;
    Step s;
    s.message = pack_linear(file, msg + ".0");
    s.update = pack_linear(file, upd + ".0");
    s.message_w = padded_vector(flash ? nullptr : file.weight(msg + ".2.weight").values.data(), D0, 1.0f);
    s.message_b = padded_vector(flash ? nullptr : file.weight(msg + ".2.bias").values.data(), D0, 0.0f);
    s.update_w = padded_vector(flash ? nullptr : file.weight(upd + ".1.weight").values.data(), D0, 1.0f);
    s.update_b = padded_vector(flash ? nullptr : file.weight(upd + ".1.bias").values.data(), D0, 0.0f);
    m.steps.push_back(std::move(s));
  }
  const int L = c.levels();
  m.encoder.resize(static_cast<std::size_t>(L - 1));
  m.decoder.resize(static_cast<std::size_t>(L - 1));
  for (int i = 0; i + 1 < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    const std::string p = "encoder." + std::to_string(i) + ".";
    for (int j = 0; j < c.enc_depths[iu]; ++j)
      m.encoder[iu].push_back(
          m.load_block(file, p + "blocks." + std::to_string(j) + ".", c.c_hidden[iu], c.enc_num_heads[iu], c.ball_sizes[iu]));
    m.pool.push_back(pack_linear(file, p + "pool.proj"));
    m.pool_bn.emplace_back(file, p + "pool.norm", c.c_hidden[iu + 1]);
  }
  for (int j = 0; j < c.enc_depths.back(); ++j)
    m.bottleneck.push_back(m.load_block(file, "bottleneck.blocks." + std::to_string(j) + ".", c.c_hidden.back(),
                                        c.enc_num_heads.back(), c.ball_sizes.back()));
  m.unpool.resize(static_cast<std::size_t>(L - 1));
  m.unpool_bn.resize(static_cast<std::size_t>(L - 1));
  for (int k = 0; k + 1 < L; ++k) {
    const auto i = static_cast<std::size_t>(L - 2 - k);
    const std::string p = "decoder." + std::to_string(k) + ".";
    m.unpool[i] = pack_linear(file, p + "unpool.proj");
    m.unpool_bn[i] = BatchNorm(file, p + "unpool.norm", c.c_hidden[i]);
    for (int j = 0; j < c.dec_depths[i]; ++j)
      m.decoder[i].push_back(
          m.load_block(file, p + "blocks." + std::to_string(j) + ".", c.c_hidden[i], c.dec_num_heads[i], c.ball_sizes[i]));
  }
}

Network::~Network() = default;
Network::Network(Network&&) noexcept = default;
Network& Network::operator=(Network&&) noexcept = default;
const Config& Network::config() const { return impl_->cfg; }
std::int64_t Network::parameter_count() const { return impl_->parameters; }

// ---------------------------------------------------------------------------------------------------
// Message passing on the original points: m_e = LN(GELU(W [h_j; h_i; p_j - p_i] + b)), mean over the
// edges of each receiver (in edge order, as index_add_), h_i += LN'(W' [h_i; mbar_i] + b'). Receivers are
// rows 0 .. n-1 of h; sources may also be halo rows n .. n_all-1 (refreshed before every step). Every
// message and update row is computed on its own, so the result does not depend on how rows are grouped.

void Network::Impl::run_mpnn(const CpuKernels& k, float* h, index_t ld, const float* pos, index_t n, index_t n_all,
                             std::span<const std::int64_t> edge_index, const detail::HaloRefresh& refresh,
                             int threads) const {
  const int D = cfg.c_hidden[0], d = cfg.dimensionality;
  const auto E = static_cast<index_t>(edge_index.size() / 2);
  const std::int64_t* src = edge_index.data();
  const std::int64_t* dst = edge_index.data() + E;
  // Edges grouped by receiver, each group in edge order.
  std::vector<index_t> start(static_cast<std::size_t>(n) + 1, 0), order(static_cast<std::size_t>(E));
  for (index_t e = 0; e < E; ++e) ++start[static_cast<std::size_t>(dst[e]) + 1];
  for (index_t i = 0; i < n; ++i) start[static_cast<std::size_t>(i) + 1] += start[static_cast<std::size_t>(i)];
  {
    std::vector<index_t> fill(start.begin(), start.end() - 1);
    for (index_t e = 0; e < E; ++e) order[static_cast<std::size_t>(fill[static_cast<std::size_t>(dst[e])]++)] = e;
  }
  const index_t ld_msg = round_up(2 * D + d, kPad), ld_upd = round_up(2 * D, kPad);
  AlignedBuffer<float> agg(static_cast<std::size_t>(n * ld)), next(static_cast<std::size_t>(n * ld));
  constexpr index_t kRows = 64;
  constexpr index_t kAhead = 8;  // edges between a sender row's prefetch and its copy
  static_cast<void>(n_all);
  for (const Step& step : steps) {
    if (refresh) refresh(h, ld);
#pragma omp parallel num_threads(threads)
    {
      AlignedBuffer<float> in(static_cast<std::size_t>(kRows * std::max(ld_msg, ld_upd)));
      AlignedBuffer<float> out(static_cast<std::size_t>(kRows * ld));
      // Messages, receiver by receiver (chunks of receivers per iteration).
#pragma omp for schedule(static)
      for (index_t r0 = 0; r0 < n; r0 += kRows) {
        const index_t r1 = std::min(n, r0 + kRows);
        for (index_t i = r0; i < r1; ++i) std::fill_n(agg.data() + i * ld, ld, 0.0f);
        index_t e0 = start[static_cast<std::size_t>(r0)];
        const index_t e_end = start[static_cast<std::size_t>(r1)];
        while (e0 < e_end) {
          const index_t e1 = std::min(e_end, e0 + kRows);
          for (index_t q = e0; q < e1; ++q) {
            const index_t e = order[static_cast<std::size_t>(q)];
            if (q + kAhead < e_end) {  // senders are anywhere in h: ask for the row a few edges ahead
              const std::int64_t ahead = src[order[static_cast<std::size_t>(q + kAhead)]];
              surrogate::detail::prefetch_bytes(h + ahead * ld, sizeof(float) * static_cast<std::size_t>(D));
            }
            float* row = in.data() + (q - e0) * ld_msg;
            std::fill_n(row, ld_msg, 0.0f);
            std::copy_n(h + src[e] * ld, D, row);
            std::copy_n(h + dst[e] * ld, D, row + D);
            for (int c = 0; c < d; ++c) row[2 * D + c] = pos[src[e] * d + c] - pos[dst[e] * d + c];
          }
          run_linear(k, step.message, in.data(), ld_msg, out.data(), ld, e1 - e0, kernels::Activation::gelu_erf);
          run_norm(k, out.data(), ld, out.data(), ld, e1 - e0, D, step.message_w, &step.message_b, 1e-5f, false);
          for (index_t q = e0; q < e1; ++q) {
            const index_t e = order[static_cast<std::size_t>(q)];
            float* acc = agg.data() + dst[e] * ld;
            const float* msg = out.data() + (q - e0) * ld;
            for (int c = 0; c < D; ++c) acc[c] += msg[c];
          }
          e0 = e1;
        }
        for (index_t i = r0; i < r1; ++i) {
          const auto count = static_cast<float>(std::max<index_t>(1, start[static_cast<std::size_t>(i) + 1] - start[static_cast<std::size_t>(i)]));
          for (int c = 0; c < D; ++c) agg[static_cast<std::size_t>(i * ld + c)] /= count;
        }
      }
      // Update (all messages of this step are complete).
#pragma omp for schedule(static)
      for (index_t r0 = 0; r0 < n; r0 += kRows) {
        const index_t rows = std::min(kRows, n - r0);
        for (index_t q = 0; q < rows; ++q) {
          float* row = in.data() + q * ld_upd;
          std::fill_n(row, ld_upd, 0.0f);
          std::copy_n(h + (r0 + q) * ld, D, row);
          std::copy_n(agg.data() + (r0 + q) * ld, D, row + D);
        }
        run_linear(k, step.update, in.data(), ld_upd, out.data(), ld, rows);
        run_norm(k, out.data(), ld, out.data(), ld, rows, D, step.update_w, &step.update_b, 1e-5f, false);
        for (index_t q = 0; q < rows; ++q)
          for (index_t c = 0; c < ld; ++c)
            next[static_cast<std::size_t>((r0 + q) * ld + c)] = h[(r0 + q) * ld + c] + out[static_cast<std::size_t>(q * ld + c)];
      }
    }
    std::copy_n(next.data(), n * ld, h);
  }
}

// ---------------------------------------------------------------------------------------------------
// One transformer block on a node array whose balls are consecutive runs of b.ball nodes:
// x += proj(BMSA(RMSNorm1(x))), x += w3(w2(h) * silu(w1(h))) with h = RMSNorm2(x).

void Network::Impl::run_block(const CpuKernels& k, const Block& b, float* x, index_t ld, const std::vector<float>& pos,
                              index_t n, int threads) const {
  const int m = b.ball, D = b.dim, d = cfg.dimensionality, E = D / b.heads;
  const index_t balls = n / m;
  const std::vector<float> centres = balltree::mean_pool(pos, d, m);  // PyTorch's mean over the ball
  const index_t ld_u = round_up(3 * D, kPad), ld_h = round_up(b.hidden, kPad), ld_r = round_up(d, kPad);
  const float eps = std::numeric_limits<float>::epsilon();
  const float scale = 1.0f / std::sqrt(static_cast<float>(E));
#pragma omp parallel num_threads(threads)
  {
    AlignedBuffer<float> h(static_cast<std::size_t>(m * ld)), att(static_cast<std::size_t>(m * ld));
    AlignedBuffer<float> u(static_cast<std::size_t>(m * ld_u)), rel(static_cast<std::size_t>(m * ld_r));
    AlignedBuffer<float> a1(static_cast<std::size_t>(m * ld_h)), a2(static_cast<std::size_t>(m * ld_h));
    std::vector<float> dist(b.sigma.empty() ? 0 : static_cast<std::size_t>(m) * static_cast<std::size_t>(m));
#pragma omp for schedule(static)
    for (index_t ball = 0; ball < balls; ++ball) {
      float* rows = x + ball * m * ld;
      const float* p = pos.data() + ball * m * d;
      const float* centre = centres.data() + ball * d;
      run_norm(k, rows, ld, h.data(), ld, m, D, b.norm1, nullptr, eps, true);
      for (int r = 0; r < m; ++r)
        for (int c = 0; c < d; ++c) rel[static_cast<std::size_t>(r * ld_r + c)] = p[r * d + c] - centre[c];
      run_linear(k, b.pe, rel.data(), ld_r, h.data(), ld, m, kernels::Activation::none, h.data(), ld);
      run_linear(k, b.qkv, h.data(), ld, u.data(), ld_u, m);
      if (!dist.empty()) ball_distances(k, p, m, d, dist.data());
      kernels::BallAttentionArgs a;
      a.m = m;
      a.heads = b.heads;
      a.E = E;
      a.q = u.data();
      a.k = u.data() + D;
      a.v = u.data() + 2 * D;
      a.ld = ld_u;
      a.scale = scale;
      a.sigma = b.sigma.empty() ? nullptr : b.sigma.data();
      a.bias = dist.data();
      a.ld_bias = m;
      a.out = att.data();
      a.ldo = ld;
      k.ball_attention(a);
      run_linear(k, b.proj, att.data(), ld, rows, ld, m, kernels::Activation::none, rows, ld);
      run_norm(k, rows, ld, h.data(), ld, m, D, b.norm2, nullptr, eps, true);
      run_linear(k, b.w1, h.data(), ld, a1.data(), ld_h, m, kernels::Activation::silu);
      run_linear(k, b.w2, h.data(), ld, a2.data(), ld_h, m);
      for (index_t i = 0; i < m * ld_h; ++i) a1[static_cast<std::size_t>(i)] *= a2[static_cast<std::size_t>(i)];
      run_linear(k, b.w3, a1.data(), ld_h, rows, ld, m, kernels::Activation::none, rows, ld);
    }
  }
}

void Network::Impl::run_blocks(const CpuKernels& k, const std::vector<Block>& blocks, AlignedBuffer<float>& x,
                               index_t ld, const std::vector<float>& pos, index_t n, const detail::RotatedOrder* rot,
                               int level, int threads) const {
  const int d = cfg.dimensionality;
  AlignedBuffer<float> xr;
  std::vector<float> pr;
  bool have_rotated_positions = false;  // a flag, not xr.size(): the exchanges are collective, also for n = 0
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    const bool rotated = cfg.rotate > 0 && j % 2 == 1;
    if (!rotated) {
      run_block(k, blocks[j], x.data(), ld, pos, n, threads);
      continue;
    }
    // The block sees the nodes in the rotated tree's order; the result goes back to the level's order.
    if (!have_rotated_positions) {
      xr.resize(static_cast<std::size_t>(n * ld));
      pr.resize(static_cast<std::size_t>(n * d));
      rot->to_rotated(level, pos.data(), d, pr.data());
      have_rotated_positions = true;
    }
    rot->to_rotated(level, x.data(), static_cast<int>(ld), xr.data());
    run_block(k, blocks[j], xr.data(), ld, pr, n, threads);
    rot->from_rotated(level, xr.data(), static_cast<int>(ld), x.data());
  }
}

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
  const balltree::RotatedTrees trees =
      balltree::build_with_rotations(positions, c.dimensionality, batch, c.strides, c.ball_sizes, c.rotate);
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
// The stages (network.hpp).

namespace detail {

index_t Stages::row_stride(const Network& net) { return round_up(net.impl_->cfg.c_hidden[0], kPad); }

NetworkWeights Stages::weights(const Network& net) {
  const Network::Impl& m = *net.impl_;
  auto block = [](const Block& b) {
    BlockWeights w;
    w.dim = b.dim;
    w.heads = b.heads;
    w.ball = b.ball;
    w.hidden = b.hidden;
    w.norm1 = b.norm1.data();
    w.norm2 = b.norm2.data();
    w.qkv = &b.qkv;
    w.proj = &b.proj;
    w.pe = &b.pe;
    w.w1 = &b.w1;
    w.w2 = &b.w2;
    w.w3 = &b.w3;
    w.sigma = &b.sigma;
    return w;
  };
  auto blocks = [&](const std::vector<Block>& v) {
    std::vector<BlockWeights> out;
    for (const Block& b : v) out.push_back(block(b));
    return out;
  };
  NetworkWeights w;
  w.embed = &m.embed;
  for (const Step& s : m.steps)
    w.steps.push_back({&s.message, &s.update, s.message_w.data(), s.message_b.data(), s.update_w.data(), s.update_b.data()});
  for (const auto& level : m.encoder) w.encoder.push_back(blocks(level));
  for (const auto& level : m.decoder) w.decoder.push_back(blocks(level));
  w.bottleneck = blocks(m.bottleneck);
  for (const PackedLinear& p : m.pool) w.pool.push_back(&p);
  for (const PackedLinear& p : m.unpool) w.unpool.push_back(&p);
  for (const BatchNorm& b : m.pool_bn) w.pool_bn.push_back({&b.alpha, &b.beta});
  for (const BatchNorm& b : m.unpool_bn) w.unpool_bn.push_back({&b.alpha, &b.beta});
  return w;
}

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
  const Network::Impl& m = *net.impl_;
  const Config& c = m.cfg;
  const CpuKernels& k = kernels::cpu();
  if (threads <= 0) threads = omp_get_max_threads();
  const index_t ld = row_stride(net), ld_in = round_up(c.c_in, kPad);
  AlignedBuffer<float> in(static_cast<std::size_t>(n * ld_in));
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t i = 0; i < n; ++i) std::copy_n(features.data() + i * c.c_in, c.c_in, in.data() + i * ld_in);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (index_t r0 = 0; r0 < n; r0 += 64)
    run_linear(k, m.embed, in.data() + r0 * ld_in, ld_in, h + r0 * ld, ld, std::min<index_t>(64, n - r0));
}

void Stages::message_passing(const Network& net, float* h, const float* pos, index_t n_recv, index_t n_all,
                             std::span<const std::int64_t> edges, const HaloRefresh& refresh, int threads) {
  const ScopedPhase phase(kMessagePassingPhase);
  if (threads <= 0) threads = omp_get_max_threads();
  net.impl_->run_mpnn(kernels::cpu(), h, row_stride(net), pos, n_recv, n_all, edges, refresh, threads);
}

void Stages::levels(const Network& net, AlignedBuffer<float>& x, std::vector<float> pos, std::span<const index_t> nodes,
                    const RotatedOrder* rot, int threads) {
  const ScopedPhase phase(kBallAttentionLevelsPhase);
  const Network::Impl& m = *net.impl_;
  const Config& c = m.cfg;
  const CpuKernels& k = kernels::cpu();
  if (threads <= 0) threads = omp_get_max_threads();
  const int d = c.dimensionality, L = c.levels();
  index_t ld = row_stride(net);
  // Encoder: blocks, then pooling; the blocks' output of each level is the decoder's skip.
  std::vector<AlignedBuffer<float>> skip_x(static_cast<std::size_t>(L));
  std::vector<std::vector<float>> skip_pos(static_cast<std::size_t>(L));
  for (int i = 0; i + 1 < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    const index_t nn = nodes[iu];
    m.run_blocks(k, m.encoder[iu], x, ld, pos, nn, rot, i, threads);
    const int s = c.strides[iu];
    const int Din = c.c_hidden[iu], Dout = c.c_hidden[iu + 1];
    const index_t ld_out = round_up(Dout, kPad);
    if (s == 1) {
      skip_x[iu] = AlignedBuffer<float>(static_cast<std::size_t>(nn * ld));
      std::copy_n(x.data(), nn * ld, skip_x[iu].data());
      skip_pos[iu] = pos;
      continue;
    }
    const index_t np = nn / s;
    std::vector<float> centres = balltree::mean_pool(pos, d, s);
    const index_t ld_pin = round_up(static_cast<index_t>(s) * (Din + d), kPad);
    AlignedBuffer<float> pooled(static_cast<std::size_t>(np * ld_out));
#pragma omp parallel num_threads(threads)
    {
      AlignedBuffer<float> in(static_cast<std::size_t>(64 * ld_pin));
#pragma omp for schedule(static)
      for (index_t r0 = 0; r0 < np; r0 += 64) {
        const index_t rows = std::min<index_t>(64, np - r0);
        for (index_t q = 0; q < rows; ++q) {
          const index_t par = r0 + q;
          float* row = in.data() + q * ld_pin;
          for (int j = 0; j < s; ++j) {
            std::copy_n(x.data() + (par * s + j) * ld, Din, row + static_cast<index_t>(j) * Din);
            for (int e = 0; e < d; ++e)
              row[static_cast<index_t>(s) * Din + j * d + e] = pos[static_cast<std::size_t>((par * s + j) * d + e)] - centres[static_cast<std::size_t>(par * d + e)];
          }
        }
        run_linear(k, m.pool[iu], in.data(), ld_pin, pooled.data() + r0 * ld_out, ld_out, rows);
        for (index_t q = 0; q < rows; ++q) m.pool_bn[iu].apply(pooled.data() + (r0 + q) * ld_out);
      }
    }
    skip_x[iu] = std::move(x);
    skip_pos[iu] = std::move(pos);
    x = std::move(pooled);
    pos = std::move(centres);
    ld = ld_out;
  }
  m.run_blocks(k, m.bottleneck, x, ld, pos, nodes.back(), rot, L - 1, threads);

  // Decoder: unpooling with the skip, BatchNorm, blocks.
  for (int i = L - 2; i >= 0; --i) {
    const auto iu = static_cast<std::size_t>(i);
    const int s = c.strides[iu];
    const int Din = c.c_hidden[iu + 1], Dout = c.c_hidden[iu];
    const index_t np = nodes[iu + 1], nn = nodes[iu];
    const index_t ld_out = round_up(Dout, kPad);
    const index_t ld_uin = round_up(Din + static_cast<index_t>(s) * d, kPad);
    const index_t ld_z = round_up(static_cast<index_t>(s) * Dout, kPad);
    AlignedBuffer<float>& out = skip_x[iu];
    const std::vector<float>& child_pos = skip_pos[iu];
#pragma omp parallel num_threads(threads)
    {
      AlignedBuffer<float> in(static_cast<std::size_t>(64 * ld_uin)), z(static_cast<std::size_t>(64 * ld_z));
#pragma omp for schedule(static)
      for (index_t r0 = 0; r0 < np; r0 += 64) {
        const index_t rows = std::min<index_t>(64, np - r0);
        for (index_t q = 0; q < rows; ++q) {
          const index_t par = r0 + q;
          float* row = in.data() + q * ld_uin;
          std::copy_n(x.data() + par * ld, Din, row);
          for (int j = 0; j < s; ++j)
            for (int e = 0; e < d; ++e)
              row[Din + j * d + e] = child_pos[static_cast<std::size_t>((par * s + j) * d + e)] - pos[static_cast<std::size_t>(par * d + e)];
        }
        run_linear(k, m.unpool[iu], in.data(), ld_uin, z.data(), ld_z, rows);
        for (index_t q = 0; q < rows; ++q)
          for (int j = 0; j < s; ++j) {
            float* child = out.data() + ((r0 + q) * s + j) * ld_out;
            const float* zz = z.data() + q * ld_z + static_cast<index_t>(j) * Dout;
            for (int ch = 0; ch < Dout; ++ch) child[ch] += zz[ch];
            m.unpool_bn[iu].apply(child);
          }
      }
    }
    x = std::move(out);
    pos = child_pos;
    ld = ld_out;
    m.run_blocks(k, m.decoder[iu], x, ld, pos, nn, rot, i, threads);
  }

}

}  // namespace detail

}  // namespace surrogate::erwin
