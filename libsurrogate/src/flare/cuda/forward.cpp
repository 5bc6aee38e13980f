// FLARE's forward pass on a CUDA device (forward.hpp).
//
// A forward copies the normalised inputs to the device (or gathers and normalises the caller's device
// arrays), runs the CPU's stage program (../program.hpp) with the kernels of surrogate/kernels/cuda.hpp
// as its Ops, and copies the outputs back (or de-normalises and scatters them). The only global
// quantities are the encode sums of each block: the device computes per-chunk partials and merges them
// per local segment, then the ranks merge exactly as the CPU does (encode_merge.cpp).
//
// Device memory is O(N C): the residual stream, one scratch (the decoded attention; the norms run inside
// the MLPs, as they read their input), the keys and the values; the MLPs' hidden activations never leave
// the chip.
#include "forward.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "../program.hpp"

namespace surrogate::flare::cuda {

using program::Rows;

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

/// program.hpp's Ops on this device: each member one or a few launches over all local rows. The MLP
/// kernel applies a deferred norm as it reads its rows (normed() only names it).
class Forward::DeviceOps {
 public:
  using Norm = device::Norm;
  DeviceOps(Forward& f, const Tables& t, bool reproducible) : f_(f), t_(t), reproducible_(reproducible) {}

  program::MlpInput<Norm> normed(const Norm& n, const Rows& x) const { return {x, &n}; }
  /// y = mlp(norm(x)) [+ extra] in one fused kernel; x may be y (in place).
  void mlp(const program::MlpArgs<Mlp, Norm>& a) const {
    cu::MlpArgs m;
    m.precision = f_.precision_;
    if (const Norm* n = a.in.norm) {
      m.norm.weight = f_.weights_.data() + n->weight;
      m.norm.bias = n->has_bias ? f_.weights_.data() + n->bias : nullptr;
      m.norm.eps = n->eps;
      m.norm.rms = n->rms;
    }
    m.layers = f_.layers_.data() + a.layer->first;
    m.num_layers = a.layer->count;
    m.max_width = a.layer->max_width;
    m.x = a.in.x.data;
    m.ldx = a.in.x.ld;
    m.y = a.y.data;
    m.ldy = a.y.ld;
    m.rows = a.y.rows;
    m.extra = a.extra.data;
    m.ld_extra = a.extra.ld;
    cu::mlp(m, f_.stream_.get());
  }
  /// Rows of C = H E values (ld C) normed as H rows of E each, in place.
  void head_norm(const Norm& n, const Rows& x) const {
    device::norm(n, f_.weights_.data(), x.data, f_.E_, x.data, f_.E_, x.rows * f_.H_, f_.stream_.get());
  }
  /// This rank's part of the encode of block b (of keys_ and values_), merged per local segment.
  void encode(int b, const Rows&, const Rows&) const {
    const cudaStream_t s = f_.stream_.get();
    const cu::LatentProblem p = f_.problem(t_, b);
    const std::size_t global_hm = static_cast<std::size_t>(f_.samples_) * f_.H_ * f_.M_;
    if (reproducible_) {
      cu::fill(f_.maxima_.data(), f_.maxima_.size(), -INFINITY, s);
      cu::latent_max_partials(p, f_.part_max_.data(), f_.part_vmax_.data(), s);
      cu::latent_max_merge(p, f_.part_max_.data(), f_.part_vmax_.data(), t_.segment_info(), f_.maxima_.data(),
                           f_.maxima_.data() + global_hm, s);
    } else {
      cu::fill(f_.local_ref_.data(), global_hm, kernels::kNoExponent, s);
      cu::zero(f_.sums_.data(), f_.sums_.bytes(), s);
      cu::latent_encode_partials(p, f_.part_ref_.data(), f_.part_acc_.data(), s);
      cu::latent_encode_merge(p, f_.part_ref_.data(), f_.part_acc_.data(), t_.segment_info(), f_.local_ref_.data(),
                              f_.sums_.data(), s);
    }
  }
  /// Z from the merged sums, then the decode of every local row into y.
  void decode(int b, const Rows& keys, const Rows& y) const {
    const cudaStream_t s = f_.stream_.get();
    const cu::SegmentInfo seg = t_.segment_info();
    const int H = f_.H_, M = f_.M_, E = f_.E_;
    if (reproducible_)
      cu::latent_exact_finalize(f_.exact_.data(), f_.exact_.data() + f_.exact_words(), seg, f_.scales_.data(),
                                f_.scales_.data() + seg.segments, H, M, E, f_.z_.data(), s);
    else
      cu::latent_encode_finalize(f_.sums_.data(), seg, H, M, E, f_.z_.data(), s);
    cu::LatentDecodeArgs d;
    d.q = f_.weights_.data() + f_.blocks_[static_cast<std::size_t>(b)].q;
    d.z = f_.z_.data();
    d.H = H;
    d.M = M;
    d.E = E;
    d.k = keys.data;
    d.ldk = keys.ld;
    d.y = y.data;
    d.ldy = y.ld;
    d.tiles = t_.tiles();
    d.num_tiles = t_.num_tiles();
    d.precision = f_.precision_;
    cu::latent_decode(d, s);
  }

 private:
  Forward& f_;
  const Tables& t_;
  bool reproducible_;
};

/// program.hpp's Exec on this device: a sweep step is the launches over all local rows; across ranks (or
/// in reproducible mode) each sweep is a local step whose errors are agreed, and the encode merged over
/// the ranks between them. Without a Comm (the one-process graph) the launches only.
class Forward::DeviceExec {
 public:
  DeviceExec(Forward& f, const Tables& t, bool reproducible, const Comm* comm = nullptr, const Plan* plan = nullptr)
      : f_(f), t_(t), reproducible_(reproducible), comm_(comm), plan_(plan) {}
  int blocks() const { return f_.cfg_.num_blocks; }
  const Block& block(int b) const { return f_.blocks_[static_cast<std::size_t>(b)]; }
  const Mlp& in_proj() const { return f_.in_proj_; }
  const Mlp& out_mlp() const { return f_.out_mlp_; }
  const device::Norm* out_norm() const { return f_.out_norm_ ? &*f_.out_norm_ : nullptr; }

  template <class F>
  void sweep(int /*b*/, F&& step) {
    DeviceOps ops(f_, t_, reproducible_);
    const index_t n = f_.n_;
    const int C = f_.C_, in = f_.cfg_.in_dim, out = f_.cfg_.out_dim;
    const auto dev = ops::Place::device;
    program::SweepRows r;
    r.in = {f_.in_.data(), in, n, in, dev};
    r.x = {f_.x_.data(), C, n, C, dev};
    r.keys = {f_.keys_.data(), C, n, C, dev};
    r.values = {f_.values_.data(), C, n, C, dev};
    r.decoded = {f_.scratch_.data(), C, n, C, dev};
    r.out = {f_.out_.data(), out, n, out, dev};
    if (comm_ == nullptr) return step(ops, r);
    f_.local_step(*comm_, [&] { step(ops, r); });
  }
  void merge_encode(int b) {
    if (comm_ != nullptr) f_.merge_encode(*comm_, *plan_, t_, b, reproducible_);
  }

 private:
  Forward& f_;
  const Tables& t_;
  bool reproducible_;
  const Comm* comm_;
  const Plan* plan_;
};

void Forward::compute_direct(const Tables& t) {
  DeviceExec exec(*this, t, false);  // one process: nothing to merge between the two halves of a block
  program::forward(exec);
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
    if (one_graph) compute(*t);
  });
  if (loaded) {  // reads what the load stage copied back: after it is done (across ranks the step waited)
    if (comm.size() == 1) local_step(comm, [&] { stream_.synchronize(); });
    loaded();
  }
  if (!one_graph) {
    DeviceExec exec(*this, *t, reproducible, &comm, &plan);
    program::forward(exec);
  }
  local_step(comm, [&] {
    const cudaStream_t s = stream_.get();
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
