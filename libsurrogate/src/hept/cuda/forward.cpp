// HEPT's float32 forward on a CUDA device (device.hpp): the CPU's stage program (../program.hpp) through
// DeviceExec, its tile programs once over all rows with one call per layer (device/layers.hpp), its LSH
// stages the projections, keys, bucket sorts and bucket attention of
// surrogate/kernels/cuda_bucket_attention.hpp, on the padded rows of a plan's device geometry
// (geometry.hpp), from host rows or device rows (Model::predict_device). The projection ranges go through
// the host across ranks (the caller's `range` reduces them); split graphs sort on the host
// (split_buckets). share/docs/hept.md, "On a CUDA device".
#include "device.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <numeric>
#include <span>
#include <string>

#include "../../cuda_errors.hpp"
#include "../../device/compute_graph.hpp"
#include "../../device/layers.hpp"
#include "../../ops/cuda_ops.hpp"
#include "../program.hpp"
#include "../split_graphs.hpp"
#include "geometry.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bucket_attention.hpp"
#include "surrogate/kernels/cuda_hept_plan.hpp"

namespace surrogate::hept::gpu {
namespace {

namespace cu = kernels::cuda;
using surrogate::device::Dense;
using surrogate::device::Norm;
using kernels::index_t;

using surrogate::device::sized;

class CudaForward final : public DeviceForward {
 public:
  CudaForward(const Network<float>& net, int device);
  int device() const override { return device_; }
  std::unique_ptr<DeviceGeometry> build_geometry(const float* coords, const std::vector<std::int64_t>& sizes,
                                                 const std::vector<std::int64_t>& graph_ids,
                                                 const ReduceMax& reduce_max) override;
  std::unique_ptr<DeviceGeometry> upload_geometry(const Geometry& g, const float* coords, std::int64_t inputs) override;
  void forward(const DeviceGeometry& g, const float* x, float* out,
               const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
               const SplitStage* split) override;
  void* stream() const override { return stream_.get(); }
  void set_precision(Precision precision) override {
    precision_ = surrogate::device::tensor_core_precision(precision);
  }
  float* input_rows(std::int64_t rows) override {
    return sized(x_, static_cast<std::size_t>(rows) * static_cast<std::size_t>(cfg_.in_dim), device_);
  }
  float* output_rows(std::int64_t rows) override {
    return sized(out_rows_, static_cast<std::size_t>(rows) * static_cast<std::size_t>(cfg_.out_dim()), device_);
  }
  void forward_on_device(const DeviceGeometry& g, const float* x, float* out,
                         const std::function<void(std::vector<float>&, std::vector<float>&)>* range) override;

 private:
  struct Layer {
    Norm norm1, norm2;
    Dense wq, wk, wv, out_linear, ff0, ff2;
    std::size_t alpha = 0, scale = 0;
  };
  /// x and out in host memory, or with `on_device` in this device's memory. In one process (no ranges to
  /// reduce, no split stage) the network between the input's upload and the output's download is one
  /// captured CUDA graph on a kept geometry (device::ComputeGraph); otherwise run_layers() as it comes.
  void run(const PlanRows& g, const float* x, float* out,
           const std::function<void(std::vector<float>&, std::vector<float>&)>* range, const SplitStage* split,
           bool on_device);
  /// The whole forward, launched kernel by kernel (program::forward through DeviceExec): uploads x unless
  /// `on_device`, reduces the ranges over the ranks through `range`, runs a split bucket stage, downloads
  /// the output unless `on_device`.
  void run_layers(const PlanRows& g, const float* x, float* out,
                  const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                  const SplitStage* split, bool on_device);
  friend class DeviceExec;
  /// run()'s graph key: the geometry, the rows in and out and every work array.
  surrogate::device::ComputeGraph::Key graph_key(const PlanRows& g, const float* x, const float* out) const;
  /// run() on a geometry of this forward, with the device current and CUDA failures as Errors.
  void run_checked(const DeviceGeometry& geometry, const float* x, float* out,
                   const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                   const SplitStage* split, bool on_device);
  void split_buckets(const SplitStage& split, index_t np, const std::exception_ptr& failed);

  const Network<float>* net_;
  Config cfg_;
  int device_;
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the dense layers and the bucket attention
  Dense enc0_, enc2_, head_, mlp_[5], out_proj_;
  Norm mlp_norms_[4];
  std::vector<Layer> layers_;
  std::size_t pids_ = 0;    // pileup: the particle-id embedding (kPidClasses x kPidEmbedding)
  std::size_t factor_ = 0;  // src: the key shifts' factor of every (table, head) row
  // Work arrays, grown to the largest batch seen.
  cu::DeviceBuffer<float> x_, xp_, cat_, hid_, xn_, q_, k_, v_, qh_, kh_, pq_, pk_, attn_, lo_, hi_,
      work_, eh_, ha_, hb_, res_, fin_, out_rows_;
  cu::DeviceBuffer<std::int64_t> perm_q_, perm_k_;
  cu::SegmentSortWork sort_work_;
  PlanScratch plan_scratch_;  // building plan rows (geometry.hpp)
  // The split bucket stage: keys on the host, values by head, every slot's rows and sums, each table's sums
  // at the queries' rows, the slots' identity order.
  std::vector<float> keys_q_, keys_k_;
  cu::DeviceBuffer<float> vt_, slot_q_, slot_k_, slot_v_, slot_num_, slot_den_, slot_work_, num_all_, den_all_;
  cu::DeviceBuffer<std::int64_t> identity_;
  surrogate::device::ComputeGraph graph_;  // run()'s, in one process
};

CudaForward::CudaForward(const Network<float>& net, int device) : net_(&net), cfg_(net.config()), device_(device) {
  surrogate::detail::require_visible_device("hept", device);
  if (cfg_.hash_dim() > cu::kMaxBucketWidth || cfg_.h_dim > cu::kMaxBucketWidth)
    throw Error(ErrorCode::unsupported, "hept: the CUDA bucket attention takes widths up to " +
                                            std::to_string(cu::kMaxBucketWidth) + "; the model has h_dim " +
                                            std::to_string(cfg_.h_dim) + " and hash_dim " + std::to_string(cfg_.hash_dim()));
  enc0_ = weights_.append_dense(net.encoder(0));
  enc2_ = weights_.append_dense(net.encoder(1));
  for (std::size_t i = 0; i < net.layers().size(); ++i) {
    const Network<float>::Layer& l = net.layers()[i];
    Layer d;
    d.norm1 = weights_.append_norm(l.norm1);
    d.norm2 = weights_.append_norm(l.norm2);
    d.wq = weights_.append_dense(l.wq);
    d.wk = weights_.append_dense(l.wk);
    d.wv = weights_.append_dense(l.wv);
    d.out_linear = weights_.append_dense(l.out_linear);
    d.ff0 = weights_.append_dense(l.ff0);
    d.ff2 = weights_.append_dense(l.ff2);
    d.alpha = weights_.append(l.alpha);
    d.scale = weights_.append(net.rbf_scale(static_cast<int>(i)));
    layers_.push_back(d);
  }
  head_ = weights_.append_dense(net.head());
  for (int j = 0; j < 5; ++j) mlp_[j] = weights_.append_dense(net.mlp(j));
  for (int j = 0; j < 4; ++j) mlp_norms_[j] = weights_.append_norm(net.mlp_norm(j));
  if (cfg_.num_classes > 0) out_proj_ = weights_.append_dense(net.out_proj());
  if (cfg_.task == Config::Task::pileup) pids_ = weights_.append(net.particle_embedding());
  if (cfg_.layout == Config::Layout::src) {  // the key shifts' factors: ceil(R_phi) + 1 of each row
    const int H = cfg_.num_heads;
    std::vector<float> factor(static_cast<std::size_t>(cfg_.n_hashes * H));
    for (std::size_t r = 0; r < factor.size(); ++r)
      factor[r] = std::ceil(net.regions()[(r / static_cast<std::size_t>(H)) * 2 * static_cast<std::size_t>(H) +
                                          r % static_cast<std::size_t>(H)]) + 1.0f;
    factor_ = weights_.append(factor);
  }
  surrogate::detail::on_device("hept", device_, [&] {
    stream_ = cu::Stream(device_);
    weights_.upload(device_, stream_.get());
  });
}

std::unique_ptr<DeviceGeometry> CudaForward::build_geometry(const float* coords, const std::vector<std::int64_t>& sizes,
                                                            const std::vector<std::int64_t>& graph_ids,
                                                            const ReduceMax& reduce_max) {
  return surrogate::detail::on_device("hept", device_, [&] {
    return build_plan_rows(cfg_, net_->regions(), device_, stream_.get(), plan_scratch_, coords, sizes, graph_ids,
                           reduce_max);
  });
}

std::unique_ptr<DeviceGeometry> CudaForward::upload_geometry(const Geometry& g, const float* coords,
                                                             std::int64_t inputs) {
  return surrogate::detail::on_device("hept", device_, [&] {
    return upload_plan_rows(cfg_, device_, stream_.get(), plan_scratch_, g, coords, inputs);
  });
}

void CudaForward::forward(const DeviceGeometry& geometry, const float* x, float* out,
                          const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                          const SplitStage* split) {
  run_checked(geometry, x, out, range, split, false);
}

void CudaForward::forward_on_device(const DeviceGeometry& geometry, const float* x, float* out,
                                    const std::function<void(std::vector<float>&, std::vector<float>&)>* range) {
  run_checked(geometry, x, out, range, nullptr, true);
}

void CudaForward::run_checked(const DeviceGeometry& geometry, const float* x, float* out,
                              const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                              const SplitStage* split, bool on_device) {
  const auto* g = dynamic_cast<const PlanRows*>(&geometry);
  if (g == nullptr || g->device() != device_)
    throw Error(ErrorCode::invalid_argument, "hept: the geometry was not made by this device forward");
  surrogate::detail::on_device("hept", device_, [&] { run(*g, x, out, range, split, on_device); });
}

void CudaForward::run(const PlanRows& g, const float* x, float* out,
                      const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                      const SplitStage* split, bool on_device) {
  if ((range && *range) || split || g.np == 0) {  // ranks wait for each other between the layers
    graph_.reset();
    return run_layers(g, x, out, range, split, on_device);
  }
  const cudaStream_t s = stream_.get();
  const std::int64_t od = cfg_.out_dim();
  const float* in = x;
  float* rows_out = out;
  if (!on_device) {
    surrogate::device::upload(x_, std::span<const float>(x, static_cast<std::size_t>(g.n * cfg_.in_dim)), device_, s);
    in = x_.data();
    rows_out = sized(out_rows_, static_cast<std::size_t>(g.n * od), device_);
  }
  graph_.run(device_, s, [&] { return graph_key(g, in, rows_out); },
             [&] { run_layers(g, in, rows_out, nullptr, nullptr, true); });
  if (on_device) return;
  cu::copy_to_host(out, rows_out, static_cast<std::size_t>(g.n * od) * sizeof(float), s);
  stream_.synchronize();
}

surrogate::device::ComputeGraph::Key CudaForward::graph_key(const PlanRows& g, const float* x, const float* out) const {
  surrogate::device::ComputeGraph::Key k =
      surrogate::device::ComputeGraph::key(
          {g.serial.value(), static_cast<std::uintptr_t>(g.np), static_cast<std::uintptr_t>(precision_)}, {x, out});
  for (const cu::DeviceBuffer<float>* b : {&xp_, &cat_, &hid_, &xn_, &q_, &k_, &v_, &qh_, &kh_, &pq_, &pk_, &attn_, &lo_,
                                           &hi_, &work_, &eh_, &ha_, &hb_, &res_, &fin_})
    k.push_back(reinterpret_cast<std::uintptr_t>(b->data()));
  for (const void* p : {static_cast<const void*>(perm_q_.data()), static_cast<const void*>(perm_k_.data()),
                        static_cast<const void*>(sort_work_.bytes.data())})
    k.push_back(reinterpret_cast<std::uintptr_t>(p));
  return k;
}

/// program.hpp's Ops on the device: CudaOps' dense layers and norms (every tile program once over all rows,
/// one launch per layer on the forward's stream, weights and precision) and HEPT's own members: tanh, the
/// bucket attention's rows and the work rows, the forward's arrays.
class DeviceOps : public ops::CudaOps {
 public:
  using R = program::Rows<float>;

  DeviceOps(const surrogate::device::WeightArena& weights, cudaStream_t stream, cu::MlpPrecision precision,
            const R (&slots)[static_cast<int>(program::Slot::count)], R attention)
      : CudaOps(weights, stream, precision), attention_(attention) {
    std::copy(std::begin(slots), std::end(slots), slots_);
  }
  void tanh(const R& x) const { surrogate::device::map_rows(cu::RowMap::tanh, x.data, x.ld, x.rows, x.width, stream()); }
  /// The bucket attention's output (the kernel divides its sums).
  R attention(index_t r0, index_t n) const { return attention_.range(r0, n); }
  R scratch(program::Slot slot, index_t n, int width) const {
    const R& s = slots_[static_cast<int>(slot)];
    return {s.data, s.ld, n, width, ops::Place::device};
  }

 private:
  R slots_[static_cast<int>(program::Slot::count)];
  R attention_;
};

/// program.hpp's Exec on the device: the tile programs once over all padded rows; the LSH stages as the
/// CudaForward's kernels. A device failure is kept until the next range reduction or split stage, which
/// every rank reaches (a failed rank hands NaN ranges to `range`, which fails everywhere), and thrown after
/// the last one: no rank waits in a collective another has left. With no padded rows and no split stage,
/// only the ranges are reduced (with the other ranks).
class DeviceExec {
 public:
  using Value = float;
  using Ops = DeviceOps;
  using R = program::Rows<float>;
  using Dense = surrogate::device::Dense;
  using Norm = surrogate::device::Norm;

  DeviceExec(CudaForward& f, const PlanRows& g, const float* x, float* out,
             const std::function<void(std::vector<float>&, std::vector<float>&)>* range, const SplitStage* split,
             bool on_device)
      : f_(f), g_(g), cfg_(f.cfg_), x_(x), out_(out), range_(range), split_(split), on_device_(on_device),
        idle_(g.np == 0 && !split) {
    const int D = cfg_.h_dim, tables_heads = cfg_.n_hashes * cfg_.num_heads;
    np_ = g.np;
    ldcat_ = static_cast<index_t>(cfg_.n_layers + 1) * D;
    lo_.resize(static_cast<std::size_t>(tables_heads));
    hi_.resize(lo_.size());
    head_ = {&f.enc0_, &f.enc2_, &f.head_, {}, {}, cfg_.num_classes > 0 ? &f.out_proj_ : nullptr};
    for (int j = 0; j < 5; ++j) head_.mlp[j] = &f.mlp_[j];
    for (int j = 0; j < 4; ++j) head_.mlp_norms[j] = &f.mlp_norms_[j];
    for (const auto& l : f.layers_) blocks_.push_back({&l.out_linear, &l.ff0, &l.ff2, &l.norm2});
  }

  const Config& config() const { return cfg_; }
  const program::Head<Dense, Norm>& head() const { return head_; }
  const program::Block<Dense, Norm>& block(int l) const { return blocks_[static_cast<std::size_t>(l)]; }
  R inputs() const { return rows(f_.xp_.data(), cfg_.encoder_in()); }
  R concatenation() const { return rows(f_.cat_.data(), static_cast<int>(ldcat_)); }
  R head_rows() const { return rows(f_.eh_.data(), cfg_.h_dim / 2); }
  R head_out() const { return rows(f_.res_.data(), cfg_.h_dim / 2); }
  R classes() const { return rows(f_.fin_.data(), cfg_.num_classes); }

  template <class F>
  void tiles(F&& fn) {
    step([&] {
      DeviceOps o = ops();
      fn(o, index_t{0}, np_);
    });
  }
  void enter(program::Part) {}
  void layer_done(int) {}
  void load();
  void project(int l);
  void ranges(int l);
  void keys(int l);
  void buckets(int l);
  void store();

 private:
  R rows(float* data, int width) const { return {data, width, np_, width, ops::Place::device}; }
  DeviceOps ops() const {
    const int D = cfg_.h_dim, HD = cfg_.num_heads * D;
    const R slots[] = {rows(f_.hid_.data(), D), rows(f_.xn_.data(), D), rows(f_.ha_.data(), program::kHeadHidden),
                       rows(f_.hb_.data(), program::kHeadHidden)};
    return DeviceOps(f_.weights_, f_.stream_.get(), f_.precision_, slots, rows(f_.attn_.data(), HD));
  }
  /// Launches and copies of this rank, skipped after a failure (kept for the next collective point) and
  /// when there is nothing to compute.
  template <class F>
  void step(F&& f) {
    if (failed_ || idle_) return;
    try {
      f();
    } catch (...) {
      failed_ = std::current_exception();
    }
  }

  CudaForward& f_;
  const PlanRows& g_;
  const Config& cfg_;
  const float* x_;
  float* out_;
  const std::function<void(std::vector<float>&, std::vector<float>&)>* range_;
  const SplitStage* split_;
  bool on_device_, idle_;
  index_t np_ = 0, ldcat_ = 0;
  program::Head<Dense, Norm> head_;
  std::vector<program::Block<Dense, Norm>> blocks_;
  std::vector<float> lo_, hi_;
  std::exception_ptr failed_;
};

void DeviceExec::load() {
  // The inputs on the device, padded there (duplicates copy their originals; src zero pads stay zero).
  step([&] {
    const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes, Dh = cfg_.hash_dim(), in = cfg_.encoder_in();
    const std::size_t n = static_cast<std::size_t>(np_), rows = static_cast<std::size_t>(C * H);
    const bool pileup = cfg_.task == Config::Task::pileup;
    const int dev = f_.device_;
    const cudaStream_t s = f_.stream_.get();
    if (!on_device_)
      surrogate::device::upload(f_.x_, std::span<const float>(x_, static_cast<std::size_t>(g_.n * cfg_.in_dim)), dev, s);
    cu::HeptPadRowsArgs pa;
    pa.padded = np_;
    pa.pad_seq = g_.pad_seq.data();
    pa.in = on_device_ ? x_ : f_.x_.data();
    pa.ldi = cfg_.in_dim;
    pa.kept = pileup ? cfg_.in_dim - 1 : cfg_.in_dim;
    pa.embedding = pileup ? f_.weights_.data() + f_.pids_ : nullptr;
    pa.classes = kPidClasses;
    pa.embedded = kPidEmbedding;
    pa.out = sized(f_.xp_, n * static_cast<std::size_t>(in), dev);
    pa.ldo = in;
    cu::hept_pad_rows(pa, s);
    const auto HD = static_cast<std::size_t>(H * D);
    sized(f_.cat_, n * static_cast<std::size_t>(ldcat_), dev);
    for (cu::DeviceBuffer<float>* b : {&f_.hid_, &f_.xn_}) sized(*b, n * static_cast<std::size_t>(D), dev);
    for (cu::DeviceBuffer<float>* b : {&f_.q_, &f_.k_, &f_.v_, &f_.attn_}) sized(*b, n * HD, dev);
    for (cu::DeviceBuffer<float>* b : {&f_.qh_, &f_.kh_}) sized(*b, static_cast<std::size_t>(H) * n * static_cast<std::size_t>(Dh), dev);
    for (cu::DeviceBuffer<float>* b : {&f_.pq_, &f_.pk_}) sized(*b, rows * n, dev);
    for (cu::DeviceBuffer<float>* b : {&f_.lo_, &f_.hi_}) sized(*b, rows, dev);
    sized(f_.work_, cu::gaussian_buckets_work(C, H, np_, D), dev);
    for (cu::DeviceBuffer<std::int64_t>* b : {&f_.perm_q_, &f_.perm_k_}) sized(*b, rows * n, dev);
    for (cu::DeviceBuffer<float>* b : {&f_.eh_, &f_.res_}) sized(*b, n * static_cast<std::size_t>(D / 2), dev);
    for (cu::DeviceBuffer<float>* b : {&f_.ha_, &f_.hb_}) sized(*b, n * program::kHeadHidden, dev);
    if (cfg_.num_classes > 0) sized(f_.fin_, n * static_cast<std::size_t>(cfg_.num_classes), dev);
  });
}

void DeviceExec::project(int l) {
  // xn = norm1(e_l); q, k, v; q_hat, k_hat [h][n][Dh] and the E2LSH projections (src: the pads' zero).
  step([&] {
    const int H = cfg_.num_heads, D = cfg_.h_dim, HD = H * D;
    const auto& layer = f_.layers_[static_cast<std::size_t>(l)];
    const R xn = rows(f_.xn_.data(), D);
    const DeviceOps o = ops();
    o.norm(ops::NormArgs<Norm, R>{&layer.norm1, concatenation().columns(l * D, D), xn});
    o.dense(ops::DenseArgs<Dense, R>{&layer.wq, xn, rows(f_.q_.data(), HD)});
    o.dense(ops::DenseArgs<Dense, R>{&layer.wk, xn, rows(f_.k_.data(), HD)});
    o.dense(ops::DenseArgs<Dense, R>{&layer.wv, xn, rows(f_.v_.data(), HD)});
    const bool src_layout = cfg_.layout == Config::Layout::src;
    cu::LshProjectionArgs pa;
    pa.heads = H;
    pa.tables = cfg_.n_hashes;
    pa.dq = D;
    pa.cd = cfg_.coords_dim;
    pa.points = np_;
    pa.q = f_.q_.data();
    pa.k = f_.k_.data();
    pa.ldqk = HD;
    pa.coords = g_.coords.data();
    pa.ldc = cfg_.coords_dim;
    pa.scale = f_.weights_.data() + layer.scale;
    pa.alpha = f_.weights_.data() + layer.alpha;
    pa.zero = src_layout ? g_.zero.data() : nullptr;
    pa.v = src_layout ? f_.v_.data() : nullptr;
    pa.ldv = HD;
    pa.qh = f_.qh_.data();
    pa.kh = f_.kh_.data();
    pa.pq = f_.pq_.data();
    pa.pk = f_.pk_.data();
    cu::lsh_projections(pa, f_.stream_.get());
  });
}

void DeviceExec::ranges(int /*l*/) {
  // The range of every (table, head) over the batch: reduced over the ranks by `range` on the host;
  // without one (one process) it stays on the device.
  const bool ranks = range_ && *range_;
  std::fill(lo_.begin(), lo_.end(), INFINITY);
  std::fill(hi_.begin(), hi_.end(), -INFINITY);
  step([&] {
    const cudaStream_t s = f_.stream_.get();
    cu::lsh_ranges(cfg_.n_hashes * cfg_.num_heads, np_, f_.pq_.data(), f_.pk_.data(), f_.lo_.data(), f_.hi_.data(), s);
    if (!ranks) return;
    cu::copy_to_host(lo_.data(), f_.lo_.data(), lo_.size() * sizeof(float), s);
    cu::copy_to_host(hi_.data(), f_.hi_.data(), hi_.size() * sizeof(float), s);
    f_.stream_.synchronize();
  });
  if (!ranks) return;
  if (!failed_) {
    (*range_)(lo_, hi_);
  } else {  // the other ranks wait in this reduction: NaN ranges fail it everywhere
    std::fill(lo_.begin(), lo_.end(), NAN);
    try {
      (*range_)(lo_, hi_);
    } catch (...) {
    }
    std::rethrow_exception(failed_);
  }
  step([&] {
    surrogate::device::upload(f_.lo_, std::span<const float>(lo_), f_.device_, f_.stream_.get());
    surrogate::device::upload(f_.hi_, std::span<const float>(hi_), f_.device_, f_.stream_.get());
  });
}

void DeviceExec::keys(int /*l*/) {
  step([&] {
    const bool src_layout = cfg_.layout == Config::Layout::src;
    cu::LshKeyArgs ka;
    ka.rows = cfg_.n_hashes * cfg_.num_heads;
    ka.points = np_;
    ka.lo = f_.lo_.data();
    ka.hi = f_.hi_.data();
    ka.a = src_layout ? g_.region_phi.data() : g_.padded_codes.data();
    ka.b = src_layout ? g_.region_eta.data() : nullptr;
    ka.factor = src_layout ? f_.weights_.data() + f_.factor_ : nullptr;
    ka.pad = src_layout ? g_.zero.data() : nullptr;
    ka.pq = f_.pq_.data();
    ka.pk = f_.pk_.data();
    cu::lsh_keys(ka, f_.stream_.get());
  });
}

void DeviceExec::buckets(int /*l*/) {
  if (split_) return f_.split_buckets(*split_, np_, failed_);  // collective: a failure so far is agreed there
  // Stable sorts within each graph, then every table's buckets, OR-combined, divided.
  step([&] {
    const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes;
    const cudaStream_t s = f_.stream_.get();
    cu::SegmentSortLaunchOf<float> sa;
    sa.rows = C * H;
    sa.points = np_;
    sa.segments = static_cast<int>(g_.small.padded_sizes.size());
    sa.first = g_.padded_first.data();
    sa.work = &f_.sort_work_;
    sa.keys = f_.pq_.data();
    sa.perm = f_.perm_q_.data();
    cu::segment_sort(sa, s);
    sa.keys = f_.pk_.data();
    sa.perm = f_.perm_k_.data();
    cu::segment_sort(sa, s);
    cu::GaussianBucketsLaunchOf<float> ga;
    ga.tables = C;
    ga.heads = H;
    ga.points = np_;
    ga.bucket = cfg_.block_size;
    ga.dh = cfg_.hash_dim();
    ga.dv = D;
    ga.qh = f_.qh_.data();
    ga.kh = f_.kh_.data();
    ga.v = f_.v_.data();
    ga.ldv = H * D;
    ga.perm_q = f_.perm_q_.data();
    ga.perm_k = f_.perm_k_.data();
    ga.out = f_.attn_.data();
    ga.ldo = H * D;
    ga.work = f_.work_.data();
    ga.precision = f_.precision_;
    cu::gaussian_buckets(ga, s);
  });
}

void DeviceExec::store() {
  if (failed_) std::rethrow_exception(failed_);  // after the last range: agreed by the caller
  if (idle_) return;
  // Each input row's result (its original's padded row), the task's activation (pileup: the sigmoid).
  const int od = cfg_.out_dim();
  const int dev = f_.device_;
  const cudaStream_t s = f_.stream_.get();
  const float* result = cfg_.num_classes > 0 ? f_.fin_.data() : f_.res_.data();
  float* rows_out = on_device_ ? out_ : sized(f_.out_rows_, static_cast<std::size_t>(g_.n) * static_cast<std::size_t>(od), dev);
  surrogate::device::copy_rows(result, od, g_.point_row.data(), rows_out, od, nullptr, g_.n, od, s);
  if (cfg_.task == Config::Task::pileup) surrogate::device::map_rows(cu::RowMap::sigmoid, rows_out, od, g_.n, od, s);
  if (on_device_) return;
  cu::copy_to_host(out_, rows_out, static_cast<std::size_t>(g_.n * od) * sizeof(float), s);
  f_.stream_.synchronize();
}

void CudaForward::run_layers(const PlanRows& g, const float* x, float* out,
                             const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                             const SplitStage* split, bool on_device) {
  DeviceExec exec(*this, g, x, out, range, split, on_device);
  program::forward(exec);
}

void CudaForward::split_buckets(const SplitStage& split, index_t np, const std::exception_ptr& failed) {
  // The keys to the host, where the plan's sort makes every table's buckets; the buckets' rows moved to
  // their ranks' devices, each bucket's sums there, moved back to the queries' rows, combined over the
  // tables in order (the one-process kernel's sums and order). Collective: a failure is agreed before
  // the next move.
  const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes, Dh = cfg_.hash_dim();
  const auto n = static_cast<std::size_t>(np), per_table = static_cast<std::size_t>(H) * n;
  const cudaStream_t s = stream_.get();
  const Comm& comm = *split.comm;
  const Place place{device_, s, &comm.device_transport(device_)};
  const int dev = device_;
  Status status;
  const auto attempt = [&](auto&& step) {
    if (!status.ok()) return;
    try {
      step();
    } catch (...) {
      status = surrogate::detail::status_of_current_cuda_error("hept", device_);
    }
  };
  if (failed) attempt([&] { std::rethrow_exception(failed); });  // the layer's earlier failure, agreed below
  attempt([&] {
    keys_q_.resize(std::max<std::size_t>(C * per_table, 1));
    keys_k_.resize(keys_q_.size());
    if (n > 0) {
      cu::copy_to_host(keys_q_.data(), pq_.data(), C * per_table * sizeof(float), s);
      cu::copy_to_host(keys_k_.data(), pk_.data(), C * per_table * sizeof(float), s);
    }
    // The values by head ([h][rows][h_dim]): the rows the plans name h * rows + j.
    float* vt = sized(vt_, per_table * static_cast<std::size_t>(D), dev);
    for (int h = 0; h < H; ++h)
      surrogate::device::copy_rows(v_.data() + h * D, static_cast<index_t>(H) * D, nullptr, vt + h * n * D, D, nullptr,
                                   np, D, s);
    sized(num_all_, C * per_table * static_cast<std::size_t>(D), dev);
    sized(den_all_, C * per_table, dev);
    stream_.synchronize();
  });
  comm.agree_or_throw(status);
  for (int c = 0; c < C; ++c) {
    const SplitGraphs::BucketMoves moves = split.graphs->bucket_moves<float>(
        comm, c, keys_q_.data() + c * per_table, keys_k_.data() + c * per_table, 0);
    const auto slots = static_cast<std::size_t>(moves.slots);
    attempt([&] {
      sized(slot_q_, slots * static_cast<std::size_t>(Dh), dev);
      sized(slot_k_, slots * static_cast<std::size_t>(Dh), dev);
      sized(slot_v_, slots * static_cast<std::size_t>(D), dev);
      sized(slot_num_, slots * static_cast<std::size_t>(D), dev);
      sized(slot_den_, slots, dev);
      sized(slot_work_, 2 * slots, dev);
      if (identity_.size() < slots) {
        std::vector<std::int64_t> order(slots);
        std::iota(order.begin(), order.end(), std::int64_t{0});
        surrogate::device::upload(identity_, std::span<const std::int64_t>(order), dev, s);
      }
    });
    comm.agree_or_throw(status);
    moves.queries.forward(qh_.data(), Dh, slot_q_.data(), Dh, Dh, place);
    moves.keys.forward(kh_.data(), Dh, slot_k_.data(), Dh, Dh, place);
    moves.keys.forward(vt_.data(), D, slot_v_.data(), D, D, place);
    attempt([&] {
      // One bucket after another in slot order: a single (table, head) row, the identity as both orders.
      cu::GaussianBucketsLaunchOf<float> a;
      a.tables = 1;
      a.heads = 1;
      a.points = moves.slots;
      a.bucket = cfg_.block_size;
      a.dh = Dh;
      a.dv = D;
      a.qh = slot_q_.data();
      a.kh = slot_k_.data();
      a.v = slot_v_.data();
      a.ldv = D;
      a.perm_q = identity_.data();
      a.perm_k = identity_.data();
      a.work = slot_work_.data();
      a.precision = precision_;
      cu::gaussian_bucket_sums(a, slot_num_.data(), slot_den_.data(), s);
    });
    comm.agree_or_throw(status);
    moves.queries.backward(slot_num_.data(), D, num_all_.data() + c * per_table * D, D, D, place);
    moves.queries.backward(slot_den_.data(), 1, den_all_.data() + c * per_table, 1, 1, place);
  }
  attempt([&] {
    cu::GaussianBucketsLaunchOf<float> a;
    a.tables = C;
    a.heads = H;
    a.points = np;
    a.bucket = cfg_.block_size;
    a.dv = D;
    a.out = attn_.data();
    a.ldo = static_cast<index_t>(H) * D;
    cu::gaussian_buckets_combine(a, num_all_.data(), den_all_.data(), s);
  });
  comm.agree_or_throw(status);
}

}  // namespace

std::unique_ptr<DeviceForward> make_cuda_forward(const Network<float>& net, int device) {
  return std::make_unique<CudaForward>(net, device);
}

}  // namespace surrogate::hept::gpu
