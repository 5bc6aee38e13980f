// HEPT's float32 forward on a CUDA device (device.hpp): network.cpp's stages on device arrays, one call
// per layer (device/layers.hpp), the LSH projections, keys, bucket sorts and bucket attention of
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
  /// The whole forward, launched kernel by kernel: uploads x unless `on_device`, reduces the ranges over
  /// the ranks through `range`, runs a split bucket stage, downloads the output unless `on_device`.
  void run_layers(const PlanRows& g, const float* x, float* out,
                  const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                  const SplitStage* split, bool on_device);
  /// run()'s graph key: the geometry, the rows in and out and every work array.
  surrogate::device::ComputeGraph::Key graph_key(const PlanRows& g, const float* x, const float* out) const;
  /// run() on a geometry of this forward, with the device current and CUDA failures as Errors.
  void run_checked(const DeviceGeometry& geometry, const float* x, float* out,
                   const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                   const SplitStage* split, bool on_device);
  void split_buckets(const SplitStage& split, index_t np, const std::exception_ptr& failed);
  void dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
             kernels::Activation act = kernels::Activation::none) {
    surrogate::device::dense(l, weights_.data(), x, ldx, y, ldy, rows, stream_.get(), act, nullptr, 0, precision_,
                             weights_.words());
  }
  void dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows, const float* residual,
             index_t ld_residual) {
    surrogate::device::dense(l, weights_.data(), x, ldx, y, ldy, rows, stream_.get(), kernels::Activation::none,
                             residual, ld_residual, precision_, weights_.words());
  }
  void norm(const Norm& n, const float* x, index_t ldx, float* y, index_t ldy, index_t rows) {
    surrogate::device::norm(n, weights_.data(), x, ldx, y, ldy, rows, stream_.get());
  }
  void map(kernels::cuda::RowMap op, float* x, index_t ld, index_t rows, int width) {
    surrogate::device::map_rows(op, x, ld, rows, width, stream_.get());
  }

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

void CudaForward::run_layers(const PlanRows& g, const float* x, float* out,
                             const std::function<void(std::vector<float>&, std::vector<float>&)>* range,
                             const SplitStage* split, bool on_device) {
  const int H = cfg_.num_heads, D = cfg_.h_dim, C = cfg_.n_hashes, cd = cfg_.coords_dim, Dh = cfg_.hash_dim();
  const int R = C * H, L = cfg_.n_layers, HD = H * D, in = cfg_.encoder_in(), half = D / 2, od = cfg_.out_dim();
  const index_t np = g.np, ldcat = static_cast<index_t>(L + 1) * D;
  const auto n = static_cast<std::size_t>(np);
  const bool src_layout = cfg_.layout == Config::Layout::src, pileup = cfg_.task == Config::Task::pileup;
  const cudaStream_t s = stream_.get();
  std::vector<float> lo(static_cast<std::size_t>(R)), hi(lo.size());
  const bool ranks = range && *range;  // the ranges reduced over ranks on the host
  if (np == 0 && !split) {  // no graph here: the ranges are still reduced once per layer with the other ranks
    for (int l = 0; l < L; ++l) {
      std::fill(lo.begin(), lo.end(), INFINITY);
      std::fill(hi.begin(), hi.end(), -INFINITY);
      if (range && *range) (*range)(lo, hi);
    }
    return;
  }
  // A device error before a range would leave the other ranks waiting in it: this rank then hands NaN
  // ranges to `range` (which fails on every rank) and throws its own error.
  std::exception_ptr failed;
  const auto reduce = [&] {
    if (failed) std::fill(lo.begin(), lo.end(), NAN);
    if (range && *range) {
      if (!failed) return (*range)(lo, hi);
      try {
        (*range)(lo, hi);
      } catch (...) {
      }
    }
    if (failed) std::rethrow_exception(failed);
  };
  const int dev = device_;
  try {
    // The inputs on the device, padded there (duplicates copy their originals; src zero pads stay zero).
    if (!on_device) surrogate::device::upload(x_, std::span<const float>(x, static_cast<std::size_t>(g.n * cfg_.in_dim)), dev, s);
    cu::HeptPadRowsArgs pa;
    pa.padded = np;
    pa.pad_seq = g.pad_seq.data();
    pa.in = on_device ? x : x_.data();
    pa.ldi = cfg_.in_dim;
    pa.kept = pileup ? cfg_.in_dim - 1 : cfg_.in_dim;
    pa.embedding = pileup ? weights_.data() + pids_ : nullptr;
    pa.classes = kPidClasses;
    pa.embedded = kPidEmbedding;
    pa.out = sized(xp_, n * static_cast<std::size_t>(in), dev);
    pa.ldo = in;
    cu::hept_pad_rows(pa, s);
    sized(cat_, n * static_cast<std::size_t>(ldcat), dev);
    sized(hid_, n * static_cast<std::size_t>(D), dev);
    sized(xn_, n * static_cast<std::size_t>(D), dev);
    sized(q_, n * static_cast<std::size_t>(HD), dev);
    sized(k_, n * static_cast<std::size_t>(HD), dev);
    sized(v_, n * static_cast<std::size_t>(HD), dev);
    sized(qh_, static_cast<std::size_t>(H) * n * static_cast<std::size_t>(Dh), dev);
    sized(kh_, static_cast<std::size_t>(H) * n * static_cast<std::size_t>(Dh), dev);
    sized(pq_, static_cast<std::size_t>(R) * n, dev);
    sized(pk_, static_cast<std::size_t>(R) * n, dev);
    sized(attn_, n * static_cast<std::size_t>(HD), dev);
    sized(lo_, lo.size(), dev);
    sized(hi_, hi.size(), dev);
    sized(work_, cu::gaussian_buckets_work(C, H, np, D), dev);
    sized(perm_q_, static_cast<std::size_t>(R) * n, dev);
    sized(perm_k_, static_cast<std::size_t>(R) * n, dev);
  } catch (...) {
    failed = std::current_exception();
  }
  float* const cat = cat_.data();
  float* const hid = hid_.data();
  float* const xn = xn_.data();
  float* const q = q_.data();
  float* const k = k_.data();
  float* const v = v_.data();
  float* const qh = qh_.data();
  float* const kh = kh_.data();
  float* const pq = pq_.data();
  float* const pk = pk_.data();
  float* const attn = attn_.data();
  float* const d_lo = lo_.data();
  float* const d_hi = hi_.data();
  float* const work = work_.data();
  std::int64_t* const perm_q = perm_q_.data();
  std::int64_t* const perm_k = perm_k_.data();
  if (!failed) {
    try {
      // Feature encoder: Linear, ReLU, Linear into the first block of the concatenation.
      dense(enc0_, xp_.data(), in, hid, D, np, kernels::Activation::relu);
      dense(enc2_, hid, D, cat, ldcat, np);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  for (int l = 0; l < L; ++l) {
    const Layer& layer = layers_[static_cast<std::size_t>(l)];
    float* e = cat + static_cast<index_t>(l) * D;
    float* next = e + D;
    if (!failed) try {
      norm(layer.norm1, e, ldcat, xn, D, np);
      dense(layer.wq, xn, D, q, HD, np);
      dense(layer.wk, xn, D, k, HD, np);
      dense(layer.wv, xn, D, v, HD, np);
      cu::LshProjectionArgs pa;
      pa.heads = H;
      pa.tables = C;
      pa.dq = D;
      pa.cd = cd;
      pa.points = np;
      pa.q = q;
      pa.k = k;
      pa.ldqk = HD;
      pa.coords = g.coords.data();
      pa.ldc = cd;
      pa.scale = weights_.data() + layer.scale;
      pa.alpha = weights_.data() + layer.alpha;
      pa.zero = src_layout ? g.zero.data() : nullptr;
      pa.v = src_layout ? v : nullptr;
      pa.ldv = HD;
      pa.qh = qh;
      pa.kh = kh;
      pa.pq = pq;
      pa.pk = pk;
      cu::lsh_projections(pa, s);
      // The range of every (table, head) over the batch: reduced over the ranks by `range` on the host;
      // without one (one process) it stays on the device.
      cu::lsh_ranges(R, np, pq, pk, d_lo, d_hi, s);
      if (ranks) {
        cu::copy_to_host(lo.data(), d_lo, lo.size() * sizeof(float), s);
        cu::copy_to_host(hi.data(), d_hi, hi.size() * sizeof(float), s);
        stream_.synchronize();
      }
    } catch (...) {
      failed = std::current_exception();
    }
    reduce();
    if (!failed) try {
      if (ranks) {
        surrogate::device::upload(lo_, std::span<const float>(lo), dev, s);
        surrogate::device::upload(hi_, std::span<const float>(hi), dev, s);
      }
      cu::LshKeyArgs ka;
      ka.rows = R;
      ka.points = np;
      ka.lo = d_lo;
      ka.hi = d_hi;
      ka.a = src_layout ? g.region_phi.data() : g.padded_codes.data();
      ka.b = src_layout ? g.region_eta.data() : nullptr;
      ka.factor = src_layout ? weights_.data() + factor_ : nullptr;
      ka.pad = src_layout ? g.zero.data() : nullptr;
      ka.pq = pq;
      ka.pk = pk;
      cu::lsh_keys(ka, s);
    } catch (...) {
      failed = std::current_exception();
    }
    if (split) split_buckets(*split, np, failed);  // collective: a failure so far is agreed there first
    if (!failed) try {
      if (!split) {
        // Stable sorts within each graph, then every table's buckets, OR-combined, divided.
        cu::SegmentSortLaunchOf<float> sa;
        sa.rows = R;
        sa.points = np;
        sa.segments = static_cast<int>(g.small.padded_sizes.size());
        sa.first = g.padded_first.data();
        sa.work = &sort_work_;
        sa.keys = pq;
        sa.perm = perm_q;
        cu::segment_sort(sa, s);
        sa.keys = pk;
        sa.perm = perm_k;
        cu::segment_sort(sa, s);
        cu::GaussianBucketsLaunchOf<float> ga;
        ga.tables = C;
        ga.heads = H;
        ga.points = np;
        ga.bucket = cfg_.block_size;
        ga.dh = Dh;
        ga.dv = D;
        ga.qh = qh;
        ga.kh = kh;
        ga.v = v;
        ga.ldv = HD;
        ga.perm_q = perm_q;
        ga.perm_k = perm_k;
        ga.out = attn;
        ga.ldo = HD;
        ga.work = work;
        ga.precision = precision_;
        cu::gaussian_buckets(ga, s);
      }
      // Residuals into the next block of the concatenation: e + attn, then + ff(LN2(.)).
      dense(layer.out_linear, attn, HD, next, ldcat, np, e, ldcat);
      norm(layer.norm2, next, ldcat, xn, D, np);
      dense(layer.ff0, xn, D, hid, D, np, kernels::Activation::relu);
      dense(layer.ff2, hid, D, next, ldcat, np, next, ldcat);
    } catch (...) {
      failed = std::current_exception();
    }
  }
  if (failed) std::rethrow_exception(failed);  // after the last range: agreed by the caller
  // Head: e = W [e_0 ; ... ; e_L]; out = e + MLP(e) (4 x Linear, LayerNorm, tanh; a last Linear).
  float* eh = sized(eh_, n * static_cast<std::size_t>(half), dev);
  float* ha = sized(ha_, n * 256, dev);
  float* hb = sized(hb_, n * 256, dev);
  float* res = sized(res_, n * static_cast<std::size_t>(half), dev);
  dense(head_, cat, ldcat, eh, half, np);
  const float* src = eh;
  index_t ld = half;
  for (int j = 0; j < 4; ++j) {
    dense(mlp_[j], src, ld, ha, 256, np);
    norm(mlp_norms_[j], ha, 256, hb, 256, np);
    map(cu::RowMap::tanh, hb, 256, np, 256);
    src = hb;
    ld = 256;
  }
  dense(mlp_[4], src, ld, res, half, np, eh, half);
  const float* result = res;
  if (cfg_.num_classes > 0) {
    float* fin = sized(fin_, n * static_cast<std::size_t>(cfg_.num_classes), dev);
    dense(out_proj_, res, half, fin, cfg_.num_classes, np);
    result = fin;
  }
  // Each input row's result (its original's padded row), the task's activation (pileup: the sigmoid).
  float* rows_out = on_device ? out : sized(out_rows_, static_cast<std::size_t>(g.n) * static_cast<std::size_t>(od), dev);
  surrogate::device::copy_rows(result, od, g.point_row.data(), rows_out, od, nullptr, g.n, od, s);
  if (pileup) map(cu::RowMap::sigmoid, rows_out, od, g.n, od);
  if (on_device) return;
  cu::copy_to_host(out, rows_out, static_cast<std::size_t>(g.n * od) * sizeof(float), s);
  stream_.synchronize();
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
