// FLARE's forward pass on the CPU (network.hpp).
//
// Per block b the only global quantity is the encode softmax over all points of a sample. The points are
// processed in the plan's tiles (one OpenMP thread per tile); each tile first finishes block b-1 (decode,
// out_proj, feed-forward: all point-local) and then starts block b (norm1, k/v projections and the
// tile's contribution to the encode). Between the tile sweeps the encode partials are merged over the
// threads and the ranks:
//   default mode:      per (sample, head, latent) running max, then rescaled sums (double), two allreduces;
//   reproducible mode: a global maximum, then exact fixed-point sums (int64, order independent).
// Memory is O(N C): the residual stream x, the keys K (needed again by the decode) and, in reproducible
// mode, the values V. No M x N score matrix is ever formed.
#include "network.hpp"
#include "program.hpp"
#include "surrogate/profile.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace {
// The phases this file times (surrogate/profile.hpp).
const surrogate::PhaseName kProjectionsEncodeAndDecodePhase{"projections, encode and decode (tile sweeps)"};
const surrogate::PhaseName kEncodeMergeOverThreadsPhase{"encode merge over threads and ranks"};
}  // namespace

namespace surrogate::flare {

using program::Rows;

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();
}  // namespace

Network::Network(const ModelFile& file, const Config& cfg)
    : num_blocks_(cfg.num_blocks), C_(cfg.channel_dim), H_(cfg.num_heads), M_(cfg.num_latents), E_(cfg.head_dim()) {
  ld_c_ = kernels::round_up(C_, kernels::kPad);
  const LayerNames names(cfg);
  const kernels::Activation act = kernel_activation(cfg);
  const double eps = norm_eps(cfg);

  in_proj_ = ResidualMlp(file, "in_proj", cfg.in_dim, cfg.in_proj_hidden_dim, C_, cfg.num_layers_in_out_proj, act,
                         false, true);
  if (cfg.out_proj_norm) out_norm_.emplace(file, names.out_norm(), C_, cfg.rmsnorm, eps);
  out_mlp_ = ResidualMlp(file, names.out_mlp(), C_, cfg.out_proj_hidden_dim, cfg.out_dim, cfg.num_layers_in_out_proj,
                         act, true, false);
  blocks_.resize(static_cast<std::size_t>(cfg.num_blocks));
  for (int b = 0; b < cfg.num_blocks; ++b) {
    Block& blk = blocks_[static_cast<std::size_t>(b)];
    const std::string p = LayerNames::block(b);
    blk.norm1 = NormLayer(file, names.norm1(b), C_, cfg.rmsnorm, eps);
    blk.norm2 = NormLayer(file, names.norm2(b), C_, cfg.rmsnorm, eps);
    blk.k_proj = ResidualMlp(file, p + "att.k_proj", C_, cfg.k_proj_hidden_dim, C_, cfg.num_layers_k_proj, act, true, true);
    blk.v_proj = ResidualMlp(file, p + "att.v_proj", C_, cfg.v_proj_hidden_dim, C_, cfg.num_layers_v_proj, act, true, true);
    blk.ffn = ResidualMlp(file, p + "mlp", C_, cfg.ffn_hidden_dim, C_, cfg.num_layers_ffn, act, true, true);
    blk.out_proj = pack_linear(file, p + "att.out_proj");
    const std::vector<float> q = latent_queries(file, cfg, b);
    blk.q.resize(q.size());
    std::copy(q.begin(), q.end(), blk.q.data());
    if (cfg.qk_norm) blk.k_norm.emplace(file, p + "att.k_norm", E_, cfg.rmsnorm, eps);
  }
  int widest = std::max({static_cast<int>(ld_c_), in_proj_.scratch_width(), out_mlp_.scratch_width()});
  for (const Block& blk : blocks_)
    widest = std::max({widest, blk.k_proj.scratch_width(), blk.v_proj.scratch_width(), blk.ffn.scratch_width()});
  ld_scratch_ = widest;
}

void Network::prepare(const Plan& plan, int threads, bool reproducible) {
  const index_t n = plan.layout().local_points();
  const auto rows = static_cast<std::size_t>(std::max<index_t>(n, 1));
  x_.resize(rows * ld_c_);
  keys_.resize(rows * ld_c_);
  if (reproducible) values_.resize(rows * ld_c_);
  const int segments = plan.segments();
  latents_.resize(static_cast<std::size_t>(std::max(segments, 1)) * H_ * M_ * E_);
  const std::size_t shm = static_cast<std::size_t>(std::max(segments, 1)) * H_ * M_;
  if (static_cast<int>(work_.size()) < threads) work_.resize(static_cast<std::size_t>(threads));
  for (int t = 0; t < threads; ++t) {
    ThreadWork& w = work_[static_cast<std::size_t>(t)];
    const auto tile_floats = static_cast<std::size_t>(kTileRows * ld_scratch_);
    w.normed.resize(tile_floats);
    w.scratch_a.resize(tile_floats);
    w.scratch_b.resize(tile_floats);
    w.values.resize(tile_floats);
    w.decoded.resize(tile_floats);
    w.ref_exp.resize(shm);
    w.sum.resize(shm);
    w.weighted.resize(shm * E_);
    if (reproducible) {
      w.logit_max.resize(shm);
      w.value_max.resize(static_cast<std::size_t>(std::max(segments, 1)) * H_);
      w.exact.resize(shm * (E_ + 1) * 2);
      w.exact_bad.resize(shm);
    }
  }
}

void Network::reset_encode_partials(ThreadWork& w, bool reproducible) {
  std::fill(w.ref_exp.data(), w.ref_exp.data() + w.ref_exp.size(), kernels::kNoExponent);
  std::fill(w.sum.data(), w.sum.data() + w.sum.size(), 0.0);
  std::fill(w.weighted.data(), w.weighted.data() + w.weighted.size(), 0.0);
  if (reproducible) {
    std::fill(w.logit_max.data(), w.logit_max.data() + w.logit_max.size(), kNegInf);
    std::fill(w.value_max.data(), w.value_max.data() + w.value_max.size(), 0.0f);
  }
}

/// program.hpp's Ops on one tile of the plan, on one thread: the CPU kernel table, the thread's scratch and
/// encode partials, the tile's segment.
class Network::TileOps {
 public:
  using Norm = NormLayer;
  TileOps(const Network& net, const CpuKernels& k, ThreadWork& w, const Tile& tile, bool reproducible)
      : net_(net), k_(k), w_(w), tile_(tile), reproducible_(reproducible) {}

  /// norm(x) into the thread's scratch, read by the MLPs that follow.
  program::MlpInput<Norm> normed(const Norm& n, const Rows& x) const {
    n.apply(k_, x.data, x.ld, w_.normed.data(), net_.ld_c_, x.rows);
    return {{w_.normed.data(), net_.ld_c_, x.rows, x.width, ops::Place::host}};
  }
  void mlp(const program::MlpArgs<ResidualMlp, Norm>& a) const {
    a.layer->run(k_, a.in.x.data, a.in.x.ld, a.y.data, a.y.ld, a.y.rows, w_.scratch_a.data(), w_.scratch_b.data(),
                 net_.ld_scratch_, a.extra.data, a.extra.ld);
  }
  void mlp(const program::MlpArgs<kernels::PackedLinear, Norm>& a) const {
    k_.linear({.layer = a.layer, .x = a.in.x.data, .ldx = a.in.x.ld, .y = a.y.data, .ldy = a.y.ld, .rows = a.y.rows,
               .add1 = a.extra.data, .ld_add1 = a.extra.ld});
  }
  void head_norm(const Norm& n, const Rows& x) const { n.apply_grouped(x.data, x.ld, x.rows, net_.H_); }

  /// Default mode: the tile's running maxima and rescaled sums per (segment, head, latent); reproducible
  /// mode: the logit and |v| maxima only (the exact sums follow in merge_encode_exact).
  void encode(int b, const Rows& keys, const Rows& values) const {
    const int H = net_.H_, M = net_.M_, E = net_.E_;
    const float* q = net_.blocks_[static_cast<std::size_t>(b)].q.data();
    const std::size_t base = static_cast<std::size_t>(tile_.segment) * H * M;
    for (int h = 0; h < H; ++h) {
      const std::size_t shm = base + static_cast<std::size_t>(h) * M;
      if (reproducible_) {
        kernels::LatentMaxArgs a;
        a.q = q + static_cast<std::size_t>(h) * M * E;
        a.M = M;
        a.E = E;
        a.k = keys.data + h * E;
        a.ldk = keys.ld;
        a.rows = keys.rows;
        a.max = w_.logit_max.data() + shm;
        k_.latent_max(a);
        float& vmax = w_.value_max[static_cast<std::size_t>(tile_.segment) * H + h];
        for (index_t r = 0; r < values.rows; ++r)
          for (int e = 0; e < E; ++e) vmax = std::max(vmax, std::abs(values.row(r)[h * E + e]));
        continue;
      }
      kernels::LatentEncodeArgs a;
      a.q = q + static_cast<std::size_t>(h) * M * E;
      a.M = M;
      a.E = E;
      a.k = keys.data + h * E;
      a.ldk = keys.ld;
      a.v = values.data + h * E;
      a.ldv = values.ld;
      a.rows = keys.rows;
      a.ref_exp = w_.ref_exp.data() + shm;
      a.sum = w_.sum.data() + shm;
      a.weighted = w_.weighted.data() + shm * E;
      k_.latent_encode(a);
    }
  }
  void decode(int b, const Rows& keys, const Rows& y) const {
    const int H = net_.H_, M = net_.M_, E = net_.E_;
    const float* z = net_.latents_.data() + static_cast<std::size_t>(tile_.segment) * H * M * E;
    for (int h = 0; h < H; ++h) {
      kernels::LatentDecodeArgs a;
      a.q = net_.blocks_[static_cast<std::size_t>(b)].q.data() + static_cast<std::size_t>(h) * M * E;
      a.z = z + static_cast<std::size_t>(h) * M * E;
      a.M = M;
      a.E = E;
      a.k = keys.data + h * E;
      a.ldk = keys.ld;
      a.y = y.data + h * E;
      a.ldy = y.ld;
      a.rows = keys.rows;
      k_.latent_decode(a);
    }
  }

 private:
  const Network& net_;
  const CpuKernels& k_;
  ThreadWork& w_;
  const Tile& tile_;
  bool reproducible_;
};

/// program.hpp's Exec on the CPU: each sweep over the plan's tiles, a static schedule over the threads
/// (a tile's rows and arithmetic never depend on the thread count), errors agreed after the sweep.
class Network::Exec {
 public:
  Exec(Network& net, const Comm& comm, const Plan& plan, const CpuKernels& k, const float* in, index_t ld_in,
       float* out, index_t ld_out, bool reproducible)
      : net_(net), comm_(comm), plan_(plan), k_(k), in_(in), ld_in_(ld_in), out_(out), ld_out_(ld_out),
        reproducible_(reproducible) {}
  int blocks() const { return net_.num_blocks_; }
  const Block& block(int b) const { return net_.blocks_[static_cast<std::size_t>(b)]; }
  const ResidualMlp& in_proj() const { return net_.in_proj_; }
  const ResidualMlp& out_mlp() const { return net_.out_mlp_; }
  const NormLayer* out_norm() const { return net_.out_norm_ ? &*net_.out_norm_ : nullptr; }

  template <class F>
  void sweep(int b, F&& f) {
    const int threads = net_.threads_;
    if (b < net_.num_blocks_)
      for (int t = 0; t < threads; ++t) reset_encode_partials(net_.work_[static_cast<std::size_t>(t)], reproducible_);
    const std::vector<Tile>& tiles = plan_.tiles();
    const index_t ld_c = net_.ld_c_;
    const auto host = ops::Place::host;
    Status status;
    {
      const ScopedPhase phase(kProjectionsEncodeAndDecodePhase);
#pragma omp parallel num_threads(threads)
      {
        ThreadWork& w = net_.work_[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
        for (std::size_t i = 0; i < tiles.size(); ++i) {
          const Tile& tile = tiles[i];
          try {
            TileOps ops(net_, k_, w, tile, reproducible_);
            const index_t n = tile.rows, first = tile.begin;
            const int C = net_.C_;
            program::SweepRows r;
            r.in = ops::view(in_ + first * ld_in_, ld_in_, n, net_.in_proj_.in(), host);
            r.x = {net_.x_.data() + first * ld_c, ld_c, n, C, host};
            r.keys = {net_.keys_.data() + first * ld_c, ld_c, n, C, host};
            r.values = {reproducible_ ? net_.values_.data() + first * ld_c : w.values.data(), ld_c, n, C, host};
            r.decoded = {w.decoded.data(), ld_c, n, C, host};
            r.out = {out_ + first * ld_out_, ld_out_, n, net_.out_mlp_.out(), host};
            f(ops, r);
          } catch (...) {
#pragma omp critical(surrogate_flare_error)
            if (status.ok()) status = Status::from_current_exception();
          }
        }
      }
    }
    comm_.agree_or_throw(status);
  }

  void merge_encode(int b) {
    const ScopedPhase merge(kEncodeMergeOverThreadsPhase);
    if (reproducible_) net_.merge_encode_exact(comm_, plan_, k_, b);
    else net_.merge_encode(comm_, plan_);
  }

 private:
  Network& net_;
  const Comm& comm_;
  const Plan& plan_;
  const CpuKernels& k_;
  const float* in_;
  index_t ld_in_;
  float* out_;
  index_t ld_out_;
  bool reproducible_;
};

void Network::encode_exact(const CpuKernels& k, const Plan& plan, int b, const Tile& tile, ThreadWork& w) {
  const Block& blk = blocks_[static_cast<std::size_t>(b)];
  const std::size_t base = static_cast<std::size_t>(tile.segment) * H_ * M_;
  const auto sample = static_cast<std::size_t>(plan.segment_sample()[static_cast<std::size_t>(tile.segment)]);
  const index_t count = plan.segment_size()[static_cast<std::size_t>(tile.segment)];
  const std::size_t value_max_offset = max_buffer_.size() - value_max_count_;
  for (int h = 0; h < H_; ++h) {
    kernels::LatentExactArgs a;
    a.q = blk.q.data() + static_cast<std::size_t>(h) * M_ * E_;
    a.M = M_;
    a.E = E_;
    a.k = keys_.data() + tile.begin * ld_c_ + h * E_;
    a.ldk = ld_c_;
    a.v = values_.data() + tile.begin * ld_c_ + h * E_;
    a.ldv = ld_c_;
    a.rows = tile.rows;
    a.ref_max = max_buffer_.data() + (sample * H_ + h) * M_;
    a.sum_scale = kernels::exact_scale(count, 1.0);
    a.value_scale = kernels::exact_scale(count, max_buffer_[value_max_offset + sample * H_ + h]);
    a.acc = w.exact.data() + (base + static_cast<std::size_t>(h) * M_) * (E_ + 1) * 2;
    a.bad = w.exact_bad.data() + base + static_cast<std::size_t>(h) * M_;
    k.latent_encode_exact(a);
  }
}

void Network::forward(const Comm& comm, const Plan& plan, const float* in, index_t ld_in, float* out, index_t ld_out,
                      const RunOptions& options) {
  // bf16: the Linear layers on BF16 operands (Model::check_precision found the instructions).
  const CpuKernels& k = options.precision == Precision::bf16 ? kernels::cpu_bf16() : kernels::cpu();
  const bool reproducible = options.reproducible;
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  collectively(comm, [&] { prepare(plan, threads, reproducible); });
  threads_ = threads;
  Exec exec(*this, comm, plan, k, in, ld_in, out, ld_out, reproducible);
  program::forward(exec);
}

// ---------------------------------------------------------------------------------------------------
// The encode of a block merged over the threads and the ranks.

void Network::merge_encode(const Comm& comm, const Plan& plan) {
  const std::size_t hm = static_cast<std::size_t>(H_) * M_;
  const std::size_t global_hm = static_cast<std::size_t>(plan.layout().num_samples()) * hm;
  const int threads = threads_;
  const int segments = plan.segments();
  const std::vector<index_t>& segment_sample = plan.segment_sample();
  // 1. Global reference exponent per (sample, head, latent).
  exp_buffer_.assign(global_hm, kernels::kNoExponent);
  for (int s = 0; s < segments; ++s) {
    std::int32_t* gexp = exp_buffer_.data() + static_cast<std::size_t>(segment_sample[s]) * hm;
    for (int t = 0; t < threads; ++t) {
      const std::int32_t* texp = work_[t].ref_exp.data() + s * hm;
      for (std::size_t i = 0; i < hm; ++i) gexp[i] = std::max(gexp[i], texp[i]);
    }
  }
  comm.allreduce(std::span<std::int32_t>(exp_buffer_), ReduceOp::max);
  // 2. Partial sums moved to the global reference (exact powers of two), then summed over the ranks.
  const std::size_t width = static_cast<std::size_t>(E_) + 1;
  sum_buffer_.assign(global_hm * width, 0.0);
  for (int s = 0; s < segments; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample[s]) * hm;
    for (int t = 0; t < threads; ++t) {
      const ThreadWork& w = work_[t];
      for (std::size_t i = 0; i < hm; ++i) {
        const std::int32_t texp = w.ref_exp[s * hm + i];
        if (texp == kernels::kNoExponent) continue;
        const double scale = std::ldexp(1.0, texp - exp_buffer_[g + i]);
        double* dst = sum_buffer_.data() + (g + i) * width;
        dst[0] += scale * w.sum[s * hm + i];
        for (int e = 0; e < E_; ++e) dst[1 + e] += scale * w.weighted[(s * hm + i) * E_ + e];
      }
    }
  }
  comm.allreduce(std::span<double>(sum_buffer_), ReduceOp::sum);
  // 3. Z = U / S for the local samples.
  for (int s = 0; s < segments; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample[s]) * hm;
    for (std::size_t i = 0; i < hm; ++i) {
      const double* src = sum_buffer_.data() + (g + i) * width;
      for (int e = 0; e < E_; ++e)
        latents_[(s * hm + i) * E_ + e] = static_cast<float>(src[1 + e] / src[0]);
    }
  }
}

void Network::merge_encode_exact(const Comm& comm, const Plan& plan, const CpuKernels& k, int b) {
  const std::size_t hm = static_cast<std::size_t>(H_) * M_;
  const std::size_t samples = static_cast<std::size_t>(plan.layout().num_samples());
  const int threads = threads_;
  const int segments = plan.segments();
  const std::vector<index_t>& segment_sample = plan.segment_sample();
  const std::vector<Tile>& tiles = plan.tiles();
  // 1. Global maxima: logits per (sample, head, latent) and |V| per (sample, head). Maxima are exact, so
  //    they do not depend on the order in which they are taken.
  value_max_count_ = samples * H_;
  max_buffer_.assign(samples * hm + value_max_count_, kNegInf);
  float* value_max = max_buffer_.data() + samples * hm;
  for (int s = 0; s < segments; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample[s]);
    for (int t = 0; t < threads; ++t) {
      const ThreadWork& w = work_[t];
      for (std::size_t i = 0; i < hm; ++i)
        max_buffer_[g * hm + i] = std::max(max_buffer_[g * hm + i], w.logit_max[s * hm + i]);
      for (int h = 0; h < H_; ++h) value_max[g * H_ + h] = std::max(value_max[g * H_ + h], w.value_max[s * H_ + h]);
    }
  }
  comm.allreduce(std::span<float>(max_buffer_), ReduceOp::max);
  // 2. Exact fixed-point sums over the local points.
  for (int t = 0; t < threads; ++t) {
    std::fill(work_[t].exact.data(), work_[t].exact.data() + work_[t].exact.size(), 0);
    std::fill(work_[t].exact_bad.data(), work_[t].exact_bad.data() + work_[t].exact_bad.size(), 0);
  }
#pragma omp parallel num_threads(threads)
  {
    ThreadWork& w = work_[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (std::size_t i = 0; i < tiles.size(); ++i) encode_exact(k, plan, b, tiles[i], w);
  }
  const std::size_t width = (static_cast<std::size_t>(E_) + 1) * 2;
  exact_buffer_.assign(samples * hm * (width + 1), 0);
  std::int64_t* bad = exact_buffer_.data() + samples * hm * width;
  for (int s = 0; s < segments; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample[s]);
    for (int t = 0; t < threads; ++t) {
      for (std::size_t i = 0; i < hm * width; ++i) exact_buffer_[g * hm * width + i] += work_[t].exact[s * hm * width + i];
      for (std::size_t i = 0; i < hm; ++i) bad[g * hm + i] += work_[t].exact_bad[s * hm + i];
    }
  }
  comm.allreduce(std::span<std::int64_t>(exact_buffer_), ReduceOp::sum);
  // 3. Z = U / S from the exact sums.
  for (int s = 0; s < segments; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample[s]);
    const index_t count = plan.segment_size()[static_cast<std::size_t>(s)];
    const kernels::ExactScale sum_scale = kernels::exact_scale(count, 1.0);
    for (int h = 0; h < H_; ++h) {
      const kernels::ExactScale value_scale = kernels::exact_scale(count, value_max[g * H_ + h]);
      for (int m = 0; m < M_; ++m) {
        const std::size_t i = static_cast<std::size_t>(h) * M_ + m;
        const std::int64_t* acc = exact_buffer_.data() + (g * hm + i) * width;
        const double total = kernels::exact_value(acc[0], acc[1], sum_scale);
        for (int e = 0; e < E_; ++e) {
          const double weighted = kernels::exact_value(acc[2 * (1 + e)], acc[2 * (1 + e) + 1], value_scale);
          // A term that did not fit (NaN or Inf keys, values or logits): not a number, as the default mode
          // gives, and predict() reports it as a non-finite prediction.
          latents_[(s * hm + i) * E_ + e] = bad[g * hm + i] > 0 ? std::numeric_limits<float>::quiet_NaN()
                                                                : static_cast<float>(weighted / total);
        }
      }
    }
  }
}

}  // namespace surrogate::flare
