// FLARE forward pass on the CPU, distributed over the ranks of a Comm.
//
// Per block b the only global quantity is the encode softmax over all points of a sample. The points are
// processed in tiles of rows (one OpenMP thread per tile); each tile first finishes block b-1 (decode,
// out_proj, feed-forward: all point-local) and then starts block b (norm1, k/v projections and the
// tile's contribution to the encode). Between the tile sweeps the encode partials are merged over the
// threads and the ranks:
//   default mode:      per (sample, head, latent) running max, then rescaled sums (double), two allreduces;
//   reproducible mode: a global maximum, then exact fixed-point sums (int64, order independent).
// Memory is O(N C): the residual stream x, the keys K (needed again by the decode) and, in reproducible
// mode, the values V. No M x N score matrix is ever formed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "../layers.hpp"
#include "../device_support.hpp"
#include "flare_device.hpp"
#include "surrogate/flare.hpp"

namespace surrogate {
namespace {

constexpr index_t kTileRows = 240;  // 4 MLP blocks of 60 rows (multiples of the 6-row micro-kernel)

kernels::Activation to_kernel(FlareConfig::Activation a) {
  return a == FlareConfig::Activation::silu ? kernels::Activation::silu : kernels::Activation::gelu_tanh;
}

struct Tile {
  index_t begin, rows;
  int segment;
};

/// Per-thread scratch and encode partials.
struct ThreadWork {
  AlignedBuffer<float> normed, scratch_a, scratch_b, values, decoded;
  // encode partials per (local segment, head, latent), relative to 2^ref_exp
  AlignedBuffer<std::int32_t> ref_exp;  // [S][H][M]
  AlignedBuffer<double> sum;            // [S][H][M]
  AlignedBuffer<double> weighted;       // [S][H][M][E]
  // reproducible mode
  AlignedBuffer<float> logit_max;       // [S][H][M]
  AlignedBuffer<float> value_max;       // [S][H]
  AlignedBuffer<std::int64_t> exact;    // [S][H][M][E+1][2]
};

class FlareModel final : public Model {
 public:
  explicit FlareModel(const ModelFile& file);
  index_t parameter_count() const override { return parameters_; }
  std::vector<std::pair<std::string, std::string>> describe() const override { return cfg_.describe(); }

 protected:
  void forward_host(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
               index_t ld_out, const RunOptions& options) override;
  void predict_device_impl(const Comm& comm, const SampleLayout& layout, const DeviceArrays& arrays,
                           const RunOptions& options,
                           const std::function<void(const std::vector<std::uint64_t>&)>& check_inputs) override;

 private:
  /// Creates (or re-creates for another device) the device forward; collective, agreed.
  void ensure_device_forward(const Comm& comm, int device);
  struct Block {
    NormLayer norm1, norm2;
    ResidualMlp k_proj, v_proj, ffn;
    kernels::PackedLinear out_proj;
    std::optional<NormLayer> k_norm;
    AlignedBuffer<float> q;  // [H][M][E]: latent queries, q-normed, times attn_scale
  };

  void prepare(const SampleLayout& layout, int threads, bool reproducible);
  // tile stages
  void start_block(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w, bool reproducible);
  void finish_block(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w);
  void output_head(const CpuKernels& k, const Tile& tile, ThreadWork& w, float* out, index_t ld_out);
  void encode_exact(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w);
  // global merges (collective)
  void merge_encode(const Comm& comm, const SampleLayout& layout);
  void merge_encode_exact(const Comm& comm, const SampleLayout& layout, const CpuKernels& k, int b, int threads);

  FlareConfig cfg_;
  ModelFile file_;  // kept for uploading the weights to a device on first use
  std::unique_ptr<detail::FlareDeviceForward> device_forward_;
  index_t parameters_ = 0;
  ResidualMlp in_proj_, out_mlp_;
  std::optional<NormLayer> out_norm_;
  std::vector<Block> blocks_;
  int C_, H_, M_, E_;
  index_t ld_c_, ld_scratch_;

  // workspace, reused between calls
  std::vector<Tile> tiles_;
  std::vector<ThreadWork> work_;
  AlignedBuffer<float> x_, keys_, values_;
  AlignedBuffer<float> latents_;  // Z: [S][H][M][E]
  std::vector<float> max_buffer_;  // reproducible: [B][H][M] logit maxima, then [B][H] value maxima
  std::size_t value_max_count_ = 0;
  std::vector<double> sum_buffer_;
  std::vector<std::int32_t> exp_buffer_;
  std::vector<std::int64_t> exact_buffer_;
  int segments_ = 0;
  int threads_ = 1;                      // OpenMP threads of the current forward
  std::vector<index_t> segment_sample_;  // global sample of each local segment
  std::vector<index_t> segment_size_;    // global point count of that sample
};

FlareModel::FlareModel(const ModelFile& file)
    : Model(file, static_cast<int>(file.config.get_int("in_dim")), static_cast<int>(file.config.get_int("out_dim"))),
      cfg_(FlareConfig::from_attributes(file.config)),
      file_(file) {
  file.check_weights(cfg_.expected_shapes());
  for (const auto& [name, tensor] : file.weights) parameters_ += tensor.numel();
  C_ = cfg_.channel_dim;
  H_ = cfg_.num_heads;
  M_ = cfg_.num_latents;
  E_ = cfg_.head_dim();
  ld_c_ = kernels::round_up(C_, kernels::kPad);
  const bool paper = cfg_.key_layout == FlareConfig::KeyLayout::paper;
  const kernels::Activation act = to_kernel(cfg_.act);
  const double eps = cfg_.rmsnorm ? cfg_.rmsnorm_eps : cfg_.layernorm_eps;

  in_proj_ = ResidualMlp(file, "in_proj", cfg_.in_dim, cfg_.in_proj_hidden_dim, C_, cfg_.num_layers_in_out_proj, act,
                         false, true);
  if (cfg_.out_proj_norm) out_norm_.emplace(file, paper ? "out_proj.ln" : "out_proj.0", C_, cfg_.rmsnorm, eps);
  out_mlp_ = ResidualMlp(file, paper ? "out_proj.mlp" : "out_proj.1", C_, cfg_.out_proj_hidden_dim, cfg_.out_dim,
                         cfg_.num_layers_in_out_proj, act, true, false);
  blocks_.resize(static_cast<std::size_t>(cfg_.num_blocks));
  for (int b = 0; b < cfg_.num_blocks; ++b) {
    Block& blk = blocks_[static_cast<std::size_t>(b)];
    const std::string p = "blocks." + std::to_string(b) + ".";
    blk.norm1 = NormLayer(file, p + (paper ? "ln1" : "norm1"), C_, cfg_.rmsnorm, eps);
    blk.norm2 = NormLayer(file, p + (paper ? "ln2" : "norm2"), C_, cfg_.rmsnorm, eps);
    blk.k_proj = ResidualMlp(file, p + "att.k_proj", C_, cfg_.k_proj_hidden_dim, C_, cfg_.num_layers_k_proj, act, true, true);
    blk.v_proj = ResidualMlp(file, p + "att.v_proj", C_, cfg_.v_proj_hidden_dim, C_, cfg_.num_layers_v_proj, act, true, true);
    blk.ffn = ResidualMlp(file, p + "mlp", C_, cfg_.ffn_hidden_dim, C_, cfg_.num_layers_ffn, act, true, true);
    blk.out_proj = pack_linear(file, p + "att.out_proj");
    // latent_q (C, M) reinterpreted by a raw row-major reshape as (H, M, E).
    const Tensor32& latent_q = file.weight(p + "att.latent_q");
    blk.q.resize(static_cast<std::size_t>(H_) * M_ * E_);
    std::copy(latent_q.values.begin(), latent_q.values.end(), blk.q.data());
    if (cfg_.qk_norm) {
      const NormLayer q_norm(file, p + "att.q_norm", E_, cfg_.rmsnorm, eps);
      for (index_t hm = 0; hm < static_cast<index_t>(H_) * M_; ++hm) q_norm.apply_vector(blk.q.data() + hm * E_);
      blk.k_norm.emplace(file, p + "att.k_norm", E_, cfg_.rmsnorm, eps);
    }
    const auto scale = static_cast<float>(cfg_.attn_scale);
    for (std::size_t i = 0; i < blk.q.size(); ++i) blk.q[i] *= scale;
  }
  int widest = std::max({static_cast<int>(ld_c_), in_proj_.scratch_width(), out_mlp_.scratch_width()});
  for (const Block& blk : blocks_)
    widest = std::max({widest, blk.k_proj.scratch_width(), blk.v_proj.scratch_width(), blk.ffn.scratch_width()});
  ld_scratch_ = widest;
}

void FlareModel::prepare(const SampleLayout& layout, int threads, bool reproducible) {
  const index_t n = layout.local_points();
  const auto rows = static_cast<std::size_t>(std::max<index_t>(n, 1));
  x_.resize(rows * ld_c_);
  keys_.resize(rows * ld_c_);
  if (reproducible) values_.resize(rows * ld_c_);
  tiles_.clear();
  const auto& segments = layout.segments();
  segments_ = static_cast<int>(segments.size());
  segment_sample_.clear();
  segment_size_.clear();
  for (const auto& seg : segments) {
    segment_sample_.push_back(seg.sample);
    segment_size_.push_back(layout.sample_sizes()[static_cast<std::size_t>(seg.sample)]);
  }
  for (int s = 0; s < segments_; ++s)
    for (index_t r = segments[s].begin; r < segments[s].end; r += kTileRows)
      tiles_.push_back({r, std::min(kTileRows, segments[s].end - r), s});
  latents_.resize(static_cast<std::size_t>(std::max(segments_, 1)) * H_ * M_ * E_);
  const std::size_t shm = static_cast<std::size_t>(std::max(segments_, 1)) * H_ * M_;
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
      w.value_max.resize(static_cast<std::size_t>(std::max(segments_, 1)) * H_);
      w.exact.resize(shm * (E_ + 1) * 2);
    }
  }
}

void FlareModel::start_block(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w, bool reproducible) {
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

void FlareModel::finish_block(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w) {
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

void FlareModel::output_head(const CpuKernels& k, const Tile& tile, ThreadWork& w, float* out, index_t ld_out) {
  const float* x = x_.data() + tile.begin * ld_c_;
  const float* head_in = x;
  if (out_norm_) {
    out_norm_->apply(k, x, ld_c_, w.normed.data(), ld_c_, tile.rows);
    head_in = w.normed.data();
  }
  out_mlp_.run(k, head_in, ld_c_, out + tile.begin * ld_out, ld_out, tile.rows, w.scratch_a.data(), w.scratch_b.data(),
               ld_scratch_);
}

void FlareModel::encode_exact(const CpuKernels& k, int b, const Tile& tile, ThreadWork& w) {
  const Block& blk = blocks_[static_cast<std::size_t>(b)];
  const std::size_t base = static_cast<std::size_t>(tile.segment) * H_ * M_;
  const auto sample = static_cast<std::size_t>(segment_sample_[static_cast<std::size_t>(tile.segment)]);
  const index_t count = segment_size_[static_cast<std::size_t>(tile.segment)];
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
    k.latent_encode_exact(a);
  }
}


namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void reset_encode_partials(ThreadWork& w, bool reproducible) {
  std::fill(w.ref_exp.data(), w.ref_exp.data() + w.ref_exp.size(), kernels::kNoExponent);
  std::fill(w.sum.data(), w.sum.data() + w.sum.size(), 0.0);
  std::fill(w.weighted.data(), w.weighted.data() + w.weighted.size(), 0.0);
  if (reproducible) {
    std::fill(w.logit_max.data(), w.logit_max.data() + w.logit_max.size(), kNegInf);
    std::fill(w.value_max.data(), w.value_max.data() + w.value_max.size(), 0.0f);
  }
}
}  // namespace

void FlareModel::merge_encode(const Comm& comm, const SampleLayout& layout) {
  const std::size_t hm = static_cast<std::size_t>(H_) * M_;
  const std::size_t global_hm = static_cast<std::size_t>(layout.num_samples()) * hm;
  const int threads = threads_;
  // 1. Global reference exponent per (sample, head, latent).
  exp_buffer_.assign(global_hm, kernels::kNoExponent);
  for (int s = 0; s < segments_; ++s) {
    std::int32_t* gexp = exp_buffer_.data() + static_cast<std::size_t>(segment_sample_[s]) * hm;
    for (int t = 0; t < threads; ++t) {
      const std::int32_t* texp = work_[t].ref_exp.data() + s * hm;
      for (std::size_t i = 0; i < hm; ++i) gexp[i] = std::max(gexp[i], texp[i]);
    }
  }
  comm.allreduce(std::span<std::int32_t>(exp_buffer_), ReduceOp::max);
  // 2. Partial sums moved to the global reference (exact powers of two), then summed over the ranks.
  const std::size_t width = static_cast<std::size_t>(E_) + 1;
  sum_buffer_.assign(global_hm * width, 0.0);
  for (int s = 0; s < segments_; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample_[s]) * hm;
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
  for (int s = 0; s < segments_; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample_[s]) * hm;
    for (std::size_t i = 0; i < hm; ++i) {
      const double* src = sum_buffer_.data() + (g + i) * width;
      for (int e = 0; e < E_; ++e)
        latents_[(s * hm + i) * E_ + e] = static_cast<float>(src[1 + e] / src[0]);
    }
  }
}

void FlareModel::merge_encode_exact(const Comm& comm, const SampleLayout& layout, const CpuKernels& k, int b,
                                    int threads) {
  const std::size_t hm = static_cast<std::size_t>(H_) * M_;
  const std::size_t samples = static_cast<std::size_t>(layout.num_samples());
  // 1. Global maxima: logits per (sample, head, latent) and |V| per (sample, head). Maxima are exact, so
  //    they do not depend on the order in which they are taken.
  value_max_count_ = samples * H_;
  max_buffer_.assign(samples * hm + value_max_count_, kNegInf);
  float* value_max = max_buffer_.data() + samples * hm;
  for (int s = 0; s < segments_; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample_[s]);
    for (int t = 0; t < threads; ++t) {
      const ThreadWork& w = work_[t];
      for (std::size_t i = 0; i < hm; ++i)
        max_buffer_[g * hm + i] = std::max(max_buffer_[g * hm + i], w.logit_max[s * hm + i]);
      for (int h = 0; h < H_; ++h) value_max[g * H_ + h] = std::max(value_max[g * H_ + h], w.value_max[s * H_ + h]);
    }
  }
  comm.allreduce(std::span<float>(max_buffer_), ReduceOp::max);
  // 2. Exact fixed-point sums over the local points.
  for (int t = 0; t < threads; ++t) std::fill(work_[t].exact.data(), work_[t].exact.data() + work_[t].exact.size(), 0);
#pragma omp parallel num_threads(threads)
  {
    ThreadWork& w = work_[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
    for (std::size_t i = 0; i < tiles_.size(); ++i) encode_exact(k, b, tiles_[i], w);
  }
  const std::size_t width = (static_cast<std::size_t>(E_) + 1) * 2;
  exact_buffer_.assign(samples * hm * width, 0);
  for (int s = 0; s < segments_; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample_[s]);
    for (int t = 0; t < threads; ++t)
      for (std::size_t i = 0; i < hm * width; ++i) exact_buffer_[g * hm * width + i] += work_[t].exact[s * hm * width + i];
  }
  comm.allreduce(std::span<std::int64_t>(exact_buffer_), ReduceOp::sum);
  // 3. Z = U / S from the exact sums.
  for (int s = 0; s < segments_; ++s) {
    const std::size_t g = static_cast<std::size_t>(segment_sample_[s]);
    const index_t count = segment_size_[static_cast<std::size_t>(s)];
    const kernels::ExactScale sum_scale = kernels::exact_scale(count, 1.0);
    for (int h = 0; h < H_; ++h) {
      const kernels::ExactScale value_scale = kernels::exact_scale(count, value_max[g * H_ + h]);
      for (int m = 0; m < M_; ++m) {
        const std::size_t i = static_cast<std::size_t>(h) * M_ + m;
        const std::int64_t* acc = exact_buffer_.data() + (g * hm + i) * width;
        const double total = kernels::exact_value(acc[0], acc[1], sum_scale);
        for (int e = 0; e < E_; ++e) {
          const double weighted = kernels::exact_value(acc[2 * (1 + e)], acc[2 * (1 + e) + 1], value_scale);
          latents_[(s * hm + i) * E_ + e] = static_cast<float>(weighted / total);
        }
      }
    }
  }
}

void FlareModel::ensure_device_forward(const Comm& comm, int device) {
  Status status;
  try {
    if (!device_forward_ || device_forward_->device() != device)
#if SURROGATE_HAVE_CUDA
      device_forward_ = detail::make_flare_cuda_forward(cfg_, file_, device);
#else
      detail::refuse_without_cuda_backend("flare", device);
#endif
  } catch (...) {
    status = Status::from_current_exception();
  }
  comm.agree_or_throw(status);
}

void FlareModel::predict_device_impl(const Comm& comm, const SampleLayout& layout, const DeviceArrays& arrays,
                                     const RunOptions& options,
                                     const std::function<void(const std::vector<std::uint64_t>&)>& check_inputs) {
  ensure_device_forward(comm, options.cuda_device);
  device_forward_->predict_device(comm, layout, arrays, options, check_inputs);
}

void FlareModel::forward_host(const Comm& comm, const SampleLayout& layout, const float* in, index_t ld_in, float* out,
                         index_t ld_out, const RunOptions& options) {
  if (options.cuda_device >= 0) {
    ensure_device_forward(comm, options.cuda_device);
    device_forward_->forward(comm, layout, in, ld_in, out, ld_out, options);
    return;
  }
  const CpuKernels& k = kernels::cpu();
  const bool reproducible = options.reproducible;
  const int threads = options.threads > 0 ? options.threads : omp_get_max_threads();
  {
    Status status;
    try {
      prepare(layout, threads, reproducible);
    } catch (...) {
      status = Status::from_current_exception();
    }
    comm.agree_or_throw(status);
  }
  const int blocks = cfg_.num_blocks;
  // Sweep b (b = 0 .. blocks): finish block b-1 (or the input projection), then start block b (or the
  // output head); between sweeps, the encode of block b is merged over threads and ranks.
  threads_ = threads;
  for (int b = 0; b <= blocks; ++b) {
    Status status;
    if (b < blocks)
      for (int t = 0; t < threads; ++t) reset_encode_partials(work_[static_cast<std::size_t>(t)], reproducible);
#pragma omp parallel num_threads(threads)
    {
      ThreadWork& w = work_[static_cast<std::size_t>(omp_get_thread_num())];
#pragma omp for schedule(static)
      for (std::size_t i = 0; i < tiles_.size(); ++i) {
        const Tile& tile = tiles_[i];
        try {
          if (b == 0)
            in_proj_.run(k, in + tile.begin * ld_in, ld_in, x_.data() + tile.begin * ld_c_, ld_c_, tile.rows,
                         w.scratch_a.data(), w.scratch_b.data(), ld_scratch_);
          else
            finish_block(k, b - 1, tile, w);
          if (b < blocks) start_block(k, b, tile, w, reproducible);
          else output_head(k, tile, w, out, ld_out);
        } catch (...) {
#pragma omp critical(surrogate_flare_error)
          if (status.ok()) status = Status::from_current_exception();
        }
      }
    }
    comm.agree_or_throw(status);
    if (b == blocks) break;
    if (reproducible) merge_encode_exact(comm, layout, k, b, threads);
    else merge_encode(comm, layout);
  }
}

}  // namespace

namespace flare {
std::unique_ptr<Model> make_model(const ModelFile& file) { return std::make_unique<FlareModel>(file); }
}  // namespace flare

}  // namespace surrogate
