// Sequoia's float32 forward on a CUDA device (device.hpp): program.hpp's stages, the CPU forward's program,
// on device arrays through CudaOps (ops/cuda_ops.hpp: one launch per layer over all rows of a stage), from
// and to host rows or device rows. The hierarchy's positions and key lists are built on the host as for the
// CPU and uploaded once per plan; the classification head runs on the device, only its B x classes result
// comes back.
// share/docs/sequoia.md, "On a CUDA device".
#include "device.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <span>
#include <string>

#include "../../cuda_errors.hpp"
#include "../../device/compute_graph.hpp"
#include "../../device/nearest_lists.hpp"
#include "../../device/voxel_hierarchy.hpp"
#include "../../ops/cuda_ops.hpp"
#include "../network_impl.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sequoia::gpu {
namespace {

namespace cu = kernels::cuda;
using kernels::index_t;
using ops::CudaOps;
using program::Array;
using program::Slot;
using surrogate::device::upload;
using DeviceRows = ops::Rows;

using surrogate::device::sized;

/// Key lists on the device.
struct Lists {
  cu::DeviceBuffer<std::int64_t> first, keys;
  void upload_from(const KeyLists& l, int device, cudaStream_t s) {
    upload(first, std::span<const std::int64_t>(l.first), device, s);
    upload(keys, std::span<const std::int64_t>(l.keys), device, s);
  }
  program::Lists rows() const { return {first.data(), keys.data()}; }
};

/// CudaOps' Upload with the positional MLPs' double vectors (their bytes in the float arena, 16-byte
/// aligned; CudaOps::wide reads them).
struct Upload : CudaOps::Upload {
  using CudaOps::Upload::operator();
  ops::DeviceVector operator()(const std::vector<double>& v) const {
    if (v.empty()) return {};
    std::vector<float> bytes(2 * v.size());
    std::memcpy(bytes.data(), v.data(), v.size() * sizeof(double));
    return {arena->append(bytes), v.size()};
  }
};

class CudaForward final : public DeviceForward {
 public:
  CudaForward(const Network& net, int device);
  int device() const override { return device_; }
  std::vector<float> forward(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                             const float* sample_features, std::uint64_t geometry) override;
  std::vector<float> forward_rows(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                  const float* sample_features, std::uint64_t geometry, float* out) override;
  float* input_rows(std::int64_t rows) override { return rows_of(in_rows_, rows, cfg_.c); }
  float* output_rows(std::int64_t rows) override { return rows_of(out_rows_, rows, cfg_.n_part); }
  void* stream() const override { return stream_.get(); }
  void set_precision(Precision precision) override {
    precision_ = surrogate::device::tensor_core_precision(precision);
  }
  std::vector<std::int64_t> nearest_lists(const std::vector<float>& positions, const std::vector<std::int64_t>& batch,
                                          int k, const std::vector<std::int64_t>& queries) override {
    try {
      return nearest_(device_, stream_.get(), positions, batch, k, queries);
    } catch (...) {
      surrogate::detail::raise_current_cuda_error("sequoia neighbour lists", device_);
    }
  }
  Hierarchy hierarchy(const std::vector<SamplePoints>& samples, int divide, int depth,
                      std::vector<index_t> sample_ids) override {
    try {
      return hierarchy_(device_, stream_.get(), samples, divide, depth, std::move(sample_ids), false);
    } catch (...) {  // the host builder's Error (input it refuses) passes through

      surrogate::detail::raise_current_cuda_error("sequoia hierarchy", device_);
    }
  }

 private:
  /// `b` sized for `rows` rows of `width` values; a CUDA failure becomes the library's Error.
  float* rows_of(cu::DeviceBuffer<float>& b, std::int64_t rows, int width) {
    return surrogate::detail::on_device("sequoia", device_, [&] {
      return sized(b, static_cast<std::size_t>(rows) * static_cast<std::size_t>(width), device_);
    });
  }
  /// forward() (host rows) or forward_rows() (`device_rows`: features and a segmentation's `out` on the
  /// device).
  std::vector<float> run(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                         const float* sample_features, std::uint64_t geometry, bool device_rows, float* out);

  friend class DeviceExec;
  const Network::Impl* net_;
  Config cfg_;
  int device_;
  cu::Stream stream_;
  surrogate::device::WeightArena weights_;
  program::Layers<CudaOps> layers_;
  cu::MlpPrecision precision_ = cu::MlpPrecision::fp32;  // of the dense layers
  // The hierarchy's arrays, kept while the forwards name the same geometry (uploaded_: 0 when none is
  // valid), and the work arrays, grown to the largest seen.
  std::uint64_t uploaded_ = 0;
  std::vector<cu::DeviceBuffer<float>> pos_, arrays_, work_;
  std::vector<Lists> parents_, children_, siblings_, pool_;
  Lists conv_;
  cu::DeviceBuffer<float> pos1_, features_, classes_;
  cu::DeviceBuffer<float> in_rows_, out_rows_;  // forward_rows' arrays (input_rows, output_rows)
  surrogate::device::NearestLists nearest_;
  surrogate::device::VoxelHierarchies hierarchy_;
  cu::DeviceBuffer<std::int64_t> voxels_, batch_;
  cu::DeviceBuffer<double> scratch_;
  Lists samples_;                                       // the classification head's (Geometry)
  cu::DeviceBuffer<double> sample_counts_, part_sums_, all_sums_;
  surrogate::device::ComputeGraph graph_;  // DeviceExec::compute()'s
};

/// The work rows of a stage (program::Slot): arrays of the forward, rows of `width` values.
class DeviceWork {
 public:
  DeviceWork(std::vector<cu::DeviceBuffer<float>>& buffers, int device) : buffers_(&buffers), device_(device) {}
  DeviceRows rows(Slot slot, index_t rows, int width) const {
    float* data = sized((*buffers_)[static_cast<std::size_t>(slot)], static_cast<std::size_t>(rows * width), device_);
    return {data, width, rows, width, ops::Place::device};
  }
  /// The device layers write any row stride.
  DeviceRows dense_target(const CudaOps::Dense&, const DeviceRows& y) const { return y; }

 private:
  std::vector<cu::DeviceBuffer<float>>* buffers_;
  int device_;
};

/// program.hpp's Exec on a device: every tile program once over all rows; the share's moves between the
/// ranks' devices (a split share: collective, an error of one rank agreed before any move).
class DeviceExec {
 public:
  using Ops = CudaOps;
  /// `features`: host rows, or (`device_rows`) device rows; a segmentation head's rows go to `out` when
  /// set (device rows), else to the host.
  DeviceExec(CudaForward& f, const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
             const float* sample_features, std::uint64_t geometry, bool device_rows, float* out)
      : f_(f), comm_(comm), s_(s), h_(h), features_(features), sample_features_(sample_features), geometry_(geometry),
        device_rows_(device_rows), out_(out), ops_(f.weights_, f.stream_.get(), f.precision_), work_(f.work_, f.device_) {
    ops_.tree_scratch = &f.scratch_;
    ops_.scratch_device = f.device_;
    f.arrays_.resize(static_cast<std::size_t>(Array::count) * static_cast<std::size_t>(f.cfg_.levels()));
    f.work_.resize(static_cast<std::size_t>(Slot::count));
  }
  const Config& config() const { return f_.cfg_; }
  const program::Layers<CudaOps>& layers() const { return f_.layers_; }
  const Share& share() const { return s_; }
  const Hierarchy& hierarchy() const { return h_; }
  const program::Geometry& geometry() const { return g_; }
  Network::Trace* trace() const { return nullptr; }
  void phase(int) const {}
  void prepare();
  /// A whole share's network is device work alone: on a numbered geometry, one captured graph from its
  /// second forward on (device::ComputeGraph). A split share's moves between the ranks run directly.
  template <class F>
  void compute(F&& f) {
    if (s_.split || geometry_ == 0) {
      f_.graph_.reset();
      return f();
    }
    const auto key = [&] {
      surrogate::device::ComputeGraph::Key k = surrogate::device::ComputeGraph::key(
          {geometry_, static_cast<std::uintptr_t>(f_.precision_)},
          {g_.features.data, g_.classes.data, out_, f_.scratch_.data(), f_.part_sums_.data()});
      for (const auto* buffers : {&f_.arrays_, &f_.work_})
        for (const cu::DeviceBuffer<float>& b : *buffers) k.push_back(reinterpret_cast<std::uintptr_t>(b.data()));
      return k;
    };
    f_.graph_.run(f_.device_, f_.stream_.get(), key, f);
  }

  DeviceRows array(Array a, int level, index_t rows, int width) {
    if (a == Array::part && !s_.split) a = Array::x;  // one process: the owned voxels are level 1's rows
    const std::size_t i = static_cast<std::size_t>(a) * static_cast<std::size_t>(f_.cfg_.levels()) + static_cast<std::size_t>(level);
    float* data = sized(f_.arrays_[i], static_cast<std::size_t>(rows) * static_cast<std::size_t>(width), f_.device_);
    return {data, width, rows, width, ops::Place::device};
  }
  template <class F>
  void tiles(index_t n, index_t /*tile*/, bool /*parallel*/, F&& f, bool /*dynamic*/ = false) {
    if (n > 0) f(ops_, work_, index_t{0}, n);
  }
  template <class F>
  void stage(F&& work) {
    if (s_.split) collectively(comm_, work);
    else work();
  }
  void to_halo(const DeviceRows& rows) {
    const auto n0 = static_cast<index_t>(s_.points.size());
    if (s_.split) s_.to_halo.forward(rows.data, rows.ld, rows.row(n0), rows.ld, rows.width, place());
  }
  void voxels_to_all(const DeviceRows& part, const DeviceRows& all) {
    if (s_.split) s_.voxels_to_all.forward(part.data, part.ld, all.data, all.ld, part.width, place());
  }
  /// The classification head's double sums of `rows` owned voxels, and of every rank's voxels: moved as
  /// rows of 2 cols floats (the exchange moves bits, so the doubles arrive unchanged).
  double* sums(index_t rows, int cols) {
    return sized(f_.part_sums_, static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols), f_.device_);
  }
  const double* voxel_sums_to_all(const double* part, int cols) {
    if (!s_.split) return part;
    double* all = sized(f_.all_sums_, static_cast<std::size_t>(h_.nodes(1)) * static_cast<std::size_t>(cols), f_.device_);
    const auto* from = reinterpret_cast<const float*>(part);
    s_.voxels_to_all.forward(from, 2 * cols, reinterpret_cast<float*>(all), 2 * cols, 2 * cols, place());
    return all;
  }
  std::vector<float> host_values(const DeviceRows& r) const {
    std::vector<float> v(static_cast<std::size_t>(r.rows) * static_cast<std::size_t>(r.width));
    if (!v.empty()) {
      if (r.ld != r.width) throw Error(ErrorCode::internal, "sequoia (device): rows with padding to the host");
      cu::copy_to_host(v.data(), r.data, v.size() * sizeof(float), f_.stream_.get());
    }
    cu::synchronize(f_.stream_.get());
    return v;
  }
  std::vector<float> result(const DeviceRows& r) const {
    if (out_ == nullptr) return host_values(r);
    if (r.rows > 0) ops_.copy({r, nullptr, {out_, r.width, r.rows, r.width, ops::Place::device}});
    return {};
  }

 private:
  Place place() const { return Place{f_.device_, f_.stream_.get(), &comm_.device_transport(f_.device_)}; }

  CudaForward& f_;
  const Comm& comm_;
  const Share& s_;
  const Hierarchy& h_;
  const float* features_;
  const float* sample_features_;
  std::uint64_t geometry_;
  bool device_rows_;
  float* out_;
  CudaOps ops_;
  DeviceWork work_;
  program::Geometry g_;
};

/// The hierarchy on the device: positions (level 0: the points then the halo; level 1's queries: the owned
/// voxels), the share's key lists, the pooling lists (all kept while the forwards name the same geometry),
/// the features (and the segmentation head's inputs: every call).
void DeviceExec::prepare() {
  const Config& c = f_.cfg_;
  program::check_inputs(c, h_, sample_features_);
  const int L = c.levels(), device = f_.device_;
  const cudaStream_t st = f_.stream_.get();
  const bool seg = c.kind == Config::Kind::segmentation;
  const auto n0 = static_cast<index_t>(s_.points.size()), ne = n0 + static_cast<index_t>(s_.halo.size());
  const auto nv = static_cast<index_t>(s_.voxels.size());
  const auto level_count = static_cast<std::size_t>(L);
  const auto dev = [](const float* data, int width, index_t rows) {
    return ops::view(data, width, rows, width, ops::Place::device);
  };
  const bool kept = geometry_ != 0 && f_.uploaded_ == geometry_;
  f_.uploaded_ = 0;  // until this forward has succeeded
  f_.pos_.resize(level_count);
  for (auto* v : {&f_.parents_, &f_.children_, &f_.siblings_, &f_.pool_}) v->resize(level_count);
  if (!kept) {
    const program::HostGeometry hg = program::host_geometry(c, s_, h_);
    upload(f_.pos_[0], std::span<const float>(hg.pos0), device, st);
    upload(f_.pos1_, std::span<const float>(hg.pos1), device, st);
    upload(f_.voxels_, std::span<const index_t>(s_.voxels), device, st);
    for (int i = 1; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      upload(f_.pos_[si], std::span<const float>(h_.level_positions[si]), device, st);
    }
    for (int i = 0; i < L; ++i) {
      const auto si = static_cast<std::size_t>(i);
      if (i + 1 < L) {
        f_.parents_[si].upload_from(s_.parents[si], device, st);
        f_.siblings_[si].upload_from(s_.siblings[si], device, st);
        f_.pool_[si].upload_from(hg.pool[si], device, st);
      }
      if (i > 0) f_.children_[si].upload_from(s_.children[si], device, st);
    }
    if (!seg) {
      f_.conv_.upload_from(s_.pointconv, device, st);
      f_.samples_.upload_from(hg.samples, device, st);
      upload(f_.sample_counts_, std::span<const double>(hg.sample_counts), device, st);
    } else if (c.n_class > 0) {
      upload(f_.batch_, std::span<const std::int64_t>(hg.batch), device, st);
    }
  }
  g_.pos.push_back(dev(f_.pos_[0].data(), 3, ne));
  for (int i = 1; i < L; ++i) g_.pos.push_back(dev(f_.pos_[static_cast<std::size_t>(i)].data(), 3, h_.nodes(i)));
  g_.pos1 = dev(f_.pos1_.data(), 3, nv);
  g_.voxels = f_.voxels_.data();
  for (int i = 0; i < L; ++i) {
    const auto si = static_cast<std::size_t>(i);
    g_.parents.push_back(f_.parents_[si].rows());
    g_.children.push_back(f_.children_[si].rows());
    g_.siblings.push_back(f_.siblings_[si].rows());
    g_.pool.push_back(f_.pool_[si].rows());
  }
  if (device_rows_ && seg) {  // read where they are
    g_.features = dev(features_, c.c, n0);
  } else {  // (classification: room for the halo's rows)
    sized(f_.features_, static_cast<std::size_t>(ne * c.c), device);
    const auto bytes = static_cast<std::size_t>(n0 * c.c) * sizeof(float);
    if (n0 > 0 && device_rows_) cu::copy_on_device(f_.features_.data(), features_, bytes, st);
    else if (n0 > 0) cu::copy_to_device(f_.features_.data(), features_, bytes, st);
    g_.features = dev(f_.features_.data(), c.c, seg ? n0 : ne);
  }
  if (!seg) {
    g_.conv = f_.conv_.rows();
    g_.samples = f_.samples_.rows();
    g_.sample_counts = program::head_level(c) == 0 ? f_.sample_counts_.data() : nullptr;
  } else if (c.n_class > 0) {
    upload(f_.classes_, std::span<const float>(sample_features_, static_cast<std::size_t>(h_.samples() * c.n_class)), device, st);
    g_.batch = f_.batch_.data();
    g_.classes = dev(f_.classes_.data(), c.n_class, h_.samples());
  }
}

CudaForward::CudaForward(const Network& net, int device) : net_(&net.impl()), cfg_(net.config()), device_(device) {
  surrogate::detail::require_visible_device("sequoia", device);
  layers_ = program::convert<CudaOps>(net_->layers, Upload{{&weights_}});
  surrogate::detail::on_device("sequoia", device_, [&] {
    stream_ = cu::Stream(device_);
    weights_.upload(device_, stream_.get());
  });
}

std::vector<float> CudaForward::forward(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                        const float* sample_features, std::uint64_t geometry) {
  return run(comm, s, h, features, sample_features, geometry, false, nullptr);
}

std::vector<float> CudaForward::forward_rows(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                             const float* sample_features, std::uint64_t geometry, float* out) {
  return run(comm, s, h, features, sample_features, geometry, true, out);
}

std::vector<float> CudaForward::run(const Comm& comm, const Share& s, const Hierarchy& h, const float* features,
                                    const float* sample_features, std::uint64_t geometry, bool device_rows, float* out) {
  try {
    const cu::DeviceGuard guard(device_);
    DeviceExec exec(*this, comm, s, h, features, sample_features, geometry, device_rows, out);
    std::vector<float> result = program::forward(exec);
    uploaded_ = geometry;  // the arrays are complete: the next forward on this geometry keeps them
    return result;
  } catch (...) {
    uploaded_ = 0;
    graph_.reset();  // the arrays are uploaded again: nothing captured is kept
    surrogate::detail::raise_current_cuda_error("sequoia", device_);
  }
}

}  // namespace

std::unique_ptr<DeviceForward> make_cuda_forward(const Network& net, int device) {
  return std::make_unique<CudaForward>(net, device);
}

}  // namespace surrogate::sequoia::gpu
