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

void Network::start_block(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w, bool reproducible) {
  const Block& blk = blocks_[static_cast<std::size_t>(b)];
  float* x = x_.data() + tile.begin * ld_c_;
  float* keys = keys_.data() + tile.begin * ld_c_;
  float* values = reproducible ? values_.data() + tile.begin * ld_c_ : w.values.data();
  blk.norm1.apply(k, x, ld_c_, w.normed.data(), ld_c_, tile.rows);
  blk.k_proj.run(k, w.normed.data(), ld_c_, keys, ld_c_, tile.rows, w.scratch_a.data(), w.scratch_b.data(), ld_scratch_);
  if (blk.k_norm) blk.k_norm->apply_grouped(keys, ld_c_, tile.rows, H_);
  blk.v_proj.run(k, w.normed.data(), ld_c_, values, ld_c_, tile.rows, w.scratch_a.data(), w.scratch_b.data(), ld_scratch_);

  const std::size_t base = static_cast<std::size_t>(tile.segment) * H_ * M_;
  if (reproducible) {
    for (int h = 0; h < H_; ++h) {
      kernels::LatentMaxArgs a;
      a.q = blk.q.data() + static_cast<std::size_t>(h) * M_ * E_;
      a.M = M_;
      a.E = E_;
      a.k = keys + h * E_;
      a.ldk = ld_c_;
      a.rows = tile.rows;
      a.max = w.logit_max.data() + base + static_cast<std::size_t>(h) * M_;
      k.latent_max(a);
      float& vmax = w.value_max[static_cast<std::size_t>(tile.segment) * H_ + h];
      for (index_t r = 0; r < tile.rows; ++r)
        for (int e = 0; e < E_; ++e) vmax = std::max(vmax, std::abs(values[r * ld_c_ + h * E_ + e]));
    }
    return;
  }
  for (int h = 0; h < H_; ++h) {
    const std::size_t shm = base + static_cast<std::size_t>(h) * M_;
    kernels::LatentEncodeArgs a;
    a.q = blk.q.data() + static_cast<std::size_t>(h) * M_ * E_;
    a.M = M_;
    a.E = E_;
    a.k = keys + h * E_;
    a.ldk = ld_c_;
    a.v = values + h * E_;
    a.ldv = ld_c_;
    a.rows = tile.rows;
    a.ref_exp = w.ref_exp.data() + shm;
    a.sum = w.sum.data() + shm;
    a.weighted = w.weighted.data() + shm * E_;
    k.latent_encode(a);
  }
}

void Network::finish_block(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w) {
  const Block& blk = blocks_[static_cast<std::size_t>(b)];
  float* x = x_.data() + tile.begin * ld_c_;
  const float* keys = keys_.data() + tile.begin * ld_c_;
  const float* z = latents_.data() + static_cast<std::size_t>(tile.segment) * H_ * M_ * E_;
  for (int h = 0; h < H_; ++h) {
    kernels::LatentDecodeArgs a;
    a.q = blk.q.data() + static_cast<std::size_t>(h) * M_ * E_;
    a.z = z + static_cast<std::size_t>(h) * M_ * E_;
    a.M = M_;
    a.E = E_;
    a.k = keys + h * E_;
    a.ldk = ld_c_;
    a.y = w.decoded.data() + h * E_;
    a.ldy = ld_c_;
    a.rows = tile.rows;
    k.latent_decode(a);
  }
  kernels::LinearArgs proj;
  proj.layer = &blk.out_proj;
  proj.x = w.decoded.data();
  proj.ldx = ld_c_;
  proj.y = x;
  proj.ldy = ld_c_;
  proj.rows = tile.rows;
  proj.add1 = x;  // x = x + out_proj(y)
  proj.ld_add1 = ld_c_;
  k.linear(proj);
  blk.norm2.apply(k, x, ld_c_, w.normed.data(), ld_c_, tile.rows);
  blk.ffn.run(k, w.normed.data(), ld_c_, x, ld_c_, tile.rows, w.scratch_a.data(), w.scratch_b.data(), ld_scratch_, x,
              ld_c_);
}

void Network::output_head(const CpuKernels& k, const Tile& tile, ThreadWork& w, float* out, index_t ld_out) {
  const float* x = x_.data() + tile.begin * ld_c_;
  const float* head_in = x;
  if (out_norm_) {
    out_norm_->apply(k, x, ld_c_, w.normed.data(), ld_c_, tile.rows);
    head_in = w.normed.data();
  }
  out_mlp_.run(k, head_in, ld_c_, out + tile.begin * ld_out, ld_out, tile.rows, w.scratch_a.data(), w.scratch_b.data(),
               ld_scratch_);
}

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
  const std::vector<Tile>& tiles = plan.tiles();
  // Sweep b (b = 0 .. blocks): finish block b-1 (or the input projection), then start block b (or the
  // output head); between sweeps, the encode of block b is merged over threads and ranks.
  threads_ = threads;
  for (int b = 0; b <= num_blocks_; ++b) {
    Status status;
    if (b < num_blocks_)
      for (int t = 0; t < threads; ++t) reset_encode_partials(work_[static_cast<std::size_t>(t)], reproducible);
    {
      const ScopedPhase sweep(kProjectionsEncodeAndDecodePhase);
#pragma omp parallel num_threads(threads)
      {
        ThreadWork& w = work_[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
        for (std::size_t i = 0; i < tiles.size(); ++i) {
          const Tile& tile = tiles[i];
          try {
            if (b == 0)
              in_proj_.run(k, in + tile.begin * ld_in, ld_in, x_.data() + tile.begin * ld_c_, ld_c_, tile.rows,
                           w.scratch_a.data(), w.scratch_b.data(), ld_scratch_);
            else
              finish_block(k, b - 1, tile, w);
            if (b < num_blocks_) start_block(k, b, tile, w, reproducible);
            else output_head(k, tile, w, out, ld_out);
          } catch (...) {
#pragma omp critical(surrogate_flare_error)
            if (status.ok()) status = Status::from_current_exception();
          }
        }
      }
    }
    comm.agree_or_throw(status);
    if (b == num_blocks_) break;
    const ScopedPhase merge(kEncodeMergeOverThreadsPhase);
    if (reproducible) merge_encode_exact(comm, plan, k, b);
    else merge_encode(comm, plan);
  }
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
