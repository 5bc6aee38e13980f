// FLARE's forward pass on a CUDA device (forward.hpp).
//
// A forward copies the normalised inputs to the device (or gathers and normalises the caller's device
// arrays), runs every point-local stage with the kernels of surrogate/kernels/cuda.hpp, and copies the
// outputs back (or de-normalises and scatters them). The only global quantities are the encode sums of
// each block: the device computes per-chunk partials and merges them per local segment, then the ranks
// merge exactly as the CPU does (encode_merge.cpp).
//
// Device memory is O(N C): the residual stream, one scratch (the decoded attention; the norms run inside
// the MLPs, as they read their input), the keys and the values; the MLPs' hidden activations never leave
// the chip.
#include "forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace surrogate::flare::cuda {

const Tables& Forward::tables(Plan& plan) {
  if (const DeviceTables* kept = plan.device_tables(device_)) return static_cast<const Tables&>(*kept);
  // Encode chunks: about four blocks per multiprocessor over the whole local point set, at least 256
  // points each; decode tiles of kDecodeRows points.
  const index_t n = plan.layout().local_points();
  const cu::EncodeShape shape = cu::encode_shape(M_);
  const index_t target =
      std::max<index_t>(1, 4 * static_cast<index_t>(sm_count_) / (static_cast<index_t>(H_) * shape.groups));
  const index_t chunk_rows = std::max<index_t>(256, kernels::round_up((n + target - 1) / target, 256));
  auto tables = std::make_unique<Tables>(plan, device_, static_cast<int>(chunk_rows), stream_.get());
  const Tables& kept = *tables;
  plan.set_device_tables(std::move(tables));
  return kept;
}

void Forward::reserve(const Plan& plan, const Tables& t, bool reproducible) {
  const auto rows = static_cast<std::size_t>(std::max<index_t>(n_, 1));
  const std::size_t S = static_cast<std::size_t>(std::max(plan.segments(), 1));
  const std::size_t hm = static_cast<std::size_t>(H_) * M_;
  const std::size_t global_hm = static_cast<std::size_t>(samples_) * hm;
  const int num_chunks = t.num_chunks();
  const std::size_t parts = static_cast<std::size_t>(std::max(num_chunks, 1)) * static_cast<std::size_t>(slices_);
  const std::size_t width = static_cast<std::size_t>(E_) + 1;
  in_.resize(rows * cfg_.in_dim, device_);
  out_.resize(rows * cfg_.out_dim, device_);
  in_host_.resize(rows * cfg_.in_dim);
  out_host_.resize(rows * cfg_.out_dim);
  for (auto* buffer : {&x_, &scratch_, &keys_, &values_}) buffer->resize(rows * C_, device_);
  z_.resize(S * hm * E_, device_);
  if (reproducible) {
    part_max_.resize(parts * hm, device_);
    part_vmax_.resize(static_cast<std::size_t>(std::max(num_chunks, 1)) * H_, device_);
    maxima_.resize(global_hm + static_cast<std::size_t>(samples_) * H_, device_);
    exact_.resize(exact_size(), device_);
    scales_.resize(S * (1 + static_cast<std::size_t>(H_)), device_);
  } else {
    part_ref_.resize(parts * hm, device_);
    part_acc_.resize(parts * hm * width, device_);
    local_ref_.resize(global_hm, device_);
    global_ref_.resize(global_hm, device_);
    sums_.resize(global_hm * width, device_);
  }
}

void Forward::run_norm(const device::Norm& n, const float* x, index_t ldx, float* y, index_t ldy, index_t rows) {
  device::norm(n, weights_.data(), x, ldx, y, ldy, rows, stream_.get());
}

void Forward::run_mlp(const Mlp& m, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                      const device::Norm* norm, const float* extra, index_t ld_extra) {
  cu::MlpArgs a;
  a.precision = precision_;
  if (norm) {
    a.norm.weight = weights_.data() + norm->weight;
    a.norm.bias = norm->has_bias ? weights_.data() + norm->bias : nullptr;
    a.norm.eps = norm->eps;
    a.norm.rms = norm->rms;
  }
  a.layers = layers_.data() + m.first;
  a.num_layers = m.count;
  a.max_width = m.max_width;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.extra = extra;
  a.ld_extra = ld_extra;
  cu::mlp(a, stream_.get());
}

cu::LatentProblem Forward::problem(const Tables& t, int b) const {
  cu::LatentProblem p;
  p.q = weights_.data() + blocks_[static_cast<std::size_t>(b)].q;
  p.H = H_;
  p.M = M_;
  p.E = E_;
  p.k = keys_.data();
  p.v = values_.data();
  p.ld = C_;
  p.chunks = t.chunks();
  p.num_chunks = t.num_chunks();
  p.precision = precision_;
  return p;
}

/// norm1, k/v projections and this rank's part of the encode of block b (up to the per-sample merge).
void Forward::start_block(const Tables& t, int b, bool reproducible) {
  const Block& blk = blocks_[static_cast<std::size_t>(b)];
  const cudaStream_t s = stream_.get();
  run_mlp(blk.k_proj, x_.data(), C_, keys_.data(), C_, n_, &blk.norm1);  // k = k_proj(norm1(x))
  if (blk.k_norm) run_norm(*blk.k_norm, keys_.data(), E_, keys_.data(), E_, n_ * H_);  // per head, in place
  run_mlp(blk.v_proj, x_.data(), C_, values_.data(), C_, n_, &blk.norm1);
  const cu::LatentProblem p = problem(t, b);
  const std::size_t global_hm = static_cast<std::size_t>(samples_) * H_ * M_;
  if (reproducible) {
    cu::fill(maxima_.data(), maxima_.size(), -INFINITY, s);
    cu::latent_max_partials(p, part_max_.data(), part_vmax_.data(), s);
    cu::latent_max_merge(p, part_max_.data(), part_vmax_.data(), t.segment_info(), maxima_.data(),
                         maxima_.data() + global_hm, s);
  } else {
    cu::fill(local_ref_.data(), global_hm, kernels::kNoExponent, s);
    cu::zero(sums_.data(), sums_.bytes(), s);
    cu::latent_encode_partials(p, part_ref_.data(), part_acc_.data(), s);
    cu::latent_encode_merge(p, part_ref_.data(), part_acc_.data(), t.segment_info(), local_ref_.data(), sums_.data(), s);
  }
}

/// Z from the reduced sums, decode, out_proj, norm2 and the feed-forward of block b.
void Forward::finish_block(const Tables& t, int b, bool reproducible) {
  const Block& blk = blocks_[static_cast<std::size_t>(b)];
  const cudaStream_t s = stream_.get();
  const cu::SegmentInfo seg = t.segment_info();
  if (reproducible) {
    cu::latent_exact_finalize(exact_.data(), exact_.data() + exact_words(), seg, scales_.data(), scales_.data() + seg.segments,
                              H_, M_, E_, z_.data(), s);
  }
  else
    cu::latent_encode_finalize(sums_.data(), seg, H_, M_, E_, z_.data(), s);
  cu::LatentDecodeArgs d;
  d.q = weights_.data() + blk.q;
  d.z = z_.data();
  d.H = H_;
  d.M = M_;
  d.E = E_;
  d.k = keys_.data();
  d.ldk = C_;
  d.y = scratch_.data();
  d.ldy = C_;
  d.tiles = t.tiles();
  d.num_tiles = t.num_tiles();
  d.precision = precision_;
  cu::latent_decode(d, s);
  run_mlp(blk.out_proj, scratch_.data(), C_, x_.data(), C_, n_, nullptr, x_.data(), C_);  // x = x + out_proj(y)
  run_mlp(blk.ffn, x_.data(), C_, x_.data(), C_, n_, &blk.norm2, x_.data(), C_);  // x = x + mlp(norm2(x)), in place
}

void Forward::compute_direct(const Tables& t) {
  run_mlp(in_proj_, in_.data(), cfg_.in_dim, x_.data(), C_, n_);
  for (int b = 0; b < cfg_.num_blocks; ++b) {
    start_block(t, b, false);  // one process: nothing to merge between the two halves of a block
    finish_block(t, b, false);
  }
  run_mlp(out_mlp_, x_.data(), C_, out_.data(), cfg_.out_dim, n_, out_norm_ ? &*out_norm_ : nullptr);
}

void Forward::compute(const Tables& t) {
  // Everything a captured kernel reads or writes: the tables, the sizes, the precision, the buffers
  // (reserve() may have moved them); the weights never move.
  const auto key = [&] {
    return device::ComputeGraph::key(
        {t.serial(), static_cast<std::uintptr_t>(n_), static_cast<std::uintptr_t>(samples_),
         static_cast<std::uintptr_t>(precision_)},
        {in_.data(), x_.data(), scratch_.data(), keys_.data(), values_.data(), out_.data(), z_.data(), part_ref_.data(),
         part_acc_.data(), local_ref_.data(), sums_.data()});
  };
  graph_.run(device_, stream_.get(), key, [&] { compute_direct(t); });
}

void Forward::run(const Comm& comm, Plan& plan, const RunOptions& options, const Stage& load, const Stage& store,
                  const std::function<void()>& finish, const std::function<void()>& loaded) {
  const int blocks = cfg_.num_blocks;
  const bool reproducible = options.reproducible;
  precision_ = device::tensor_core_precision(options.precision);
  n_ = plan.layout().local_points();
  samples_ = plan.layout().num_samples();
  transport_ = comm.size() > 1 ? &comm.device_transport(device_) : nullptr;  // collective on first use
  timing_.transport = comm.size() == 1 ? "none" : transport_->name();
  // One process in default mode has no collective and no host wait between its kernels: its compute is one
  // stream of work, run as one graph from a point set's second forward on (compute()).
  const bool one_graph = comm.size() == 1 && !reproducible;
  const Tables* t = nullptr;
  local_step(comm, [&] {
    t = &tables(plan);
    reserve(plan, *t, reproducible);
    const cudaStream_t s = stream_.get();
    ev_start_.record(s);
    load(s, *t);
    ev_uploaded_.record(s);
    if (one_graph) {
      compute(*t);
      return;
    }
    run_mlp(in_proj_, in_.data(), cfg_.in_dim, x_.data(), C_, n_);
    if (blocks > 0) start_block(*t, 0, reproducible);
  });
  if (loaded) {  // reads what the load stage copied back: after it is done (across ranks the step waited)
    if (comm.size() == 1) local_step(comm, [&] { stream_.synchronize(); });
    loaded();
  }
  for (int b = 0; b < blocks && !one_graph; ++b) {
    merge_encode(comm, plan, *t, b, reproducible);
    local_step(comm, [&] {
      finish_block(*t, b, reproducible);
      if (b + 1 < blocks) start_block(*t, b + 1, reproducible);
    });
  }
  local_step(comm, [&] {
    const cudaStream_t s = stream_.get();
    if (!one_graph) run_mlp(out_mlp_, x_.data(), C_, out_.data(), cfg_.out_dim, n_, out_norm_ ? &*out_norm_ : nullptr);
    ev_computed_.record(s);
    store(s, *t);
    ev_end_.record(s);
    stream_.synchronize();
    finish();
    timing_.upload_ms = ev_uploaded_.elapsed_ms_since(ev_start_);
    timing_.compute_ms = ev_computed_.elapsed_ms_since(ev_uploaded_);
    timing_.download_ms = ev_end_.elapsed_ms_since(ev_computed_);
    timing_.total_ms = ev_end_.elapsed_ms_since(ev_start_);
  });
}

void Forward::forward_host_arrays(const Comm& comm, Plan& plan, const float* in, index_t ld_in, float* out,
                                  index_t ld_out, const RunOptions& options) {
  const auto in_dim = static_cast<std::size_t>(cfg_.in_dim);
  const auto out_dim = static_cast<std::size_t>(cfg_.out_dim);
  run(
      comm, plan, options,
      [&](cudaStream_t s, const Tables&) {
        for (index_t r = 0; r < n_; ++r)
          std::memcpy(in_host_.data() + static_cast<std::size_t>(r) * in_dim, in + r * ld_in, in_dim * sizeof(float));
        cu::copy_to_device(in_.data(), in_host_.data(), static_cast<std::size_t>(n_) * in_dim * sizeof(float), s);
      },
      [&](cudaStream_t s, const Tables&) {
        cu::copy_to_host(out_host_.data(), out_.data(), static_cast<std::size_t>(n_) * out_dim * sizeof(float), s);
      },
      [&] {
        for (index_t r = 0; r < n_; ++r)
          std::memcpy(out + r * ld_out, out_host_.data() + static_cast<std::size_t>(r) * out_dim, out_dim * sizeof(float));
      });
}

void Forward::forward_device_arrays(const Comm& comm, Plan& plan, const surrogate::Model::DeviceArrays& arrays,
                                    const RunOptions& options, const CountCheck& check_inputs,
                                    const CountCheck& check_outputs) {
  const bool count_outputs = static_cast<bool>(check_outputs);
  run(
      comm, plan, options,
      // The per-channel counts of non-finite inputs are the only thing read back before the forward; they
      // are checked once every rank has loaded (below), before any collective.
      [&](cudaStream_t s, const Tables& t) { caller_->gather(arrays, t.order(), n_, in_.data(), cfg_.in_dim, s); },
      [&](cudaStream_t s, const Tables& t) {
        caller_->scatter(arrays, t.order(), n_, out_.data(), cfg_.out_dim, count_outputs, s);
      },
      [] {}, [&] { check_inputs(caller_->input_counts()); });
  if (count_outputs) check_outputs(caller_->output_counts());
}

}  // namespace surrogate::flare::cuda
