// The Erwin forward on a CUDA device (device.hpp): program.hpp's stages, the CPU forward's program, on
// device arrays through CudaOps (ops/cuda_ops.hpp: one launch per layer over all rows of a stage), on the
// rows of a DeviceLayout (layout.hpp: one process, or one rank of a plan); on a plan, launch errors are kept
// until the next collective point and agreed there (device/steps.hpp). What stays on the host, the
// arithmetic against the CPU and the exactness across ranks: share/docs/balltree.md, "Erwin on a CUDA
// device".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "../plan.hpp"
#include "forward.hpp"

namespace surrogate::erwin::detail::cuda_forward {

using ops::Rows;

/// The work rows of a stage: the geometry's arrays (sized for the whole layout), rows of `width` values.
class DeviceWork {
 public:
  explicit DeviceWork(Geometry& g) : g_(&g) {}
  Rows rows(program::Slot slot, index_t rows, int width) const {
    return {g_->work[static_cast<std::size_t>(slot)].data(), width, rows, width, ops::Place::device};
  }

 private:
  Geometry* g_;
};

/// program.hpp's Exec on a device: every tile program once over all rows, in one launch (errors kept as
/// pending); the rotated orders and the halo are the layout's movements (collective on a plan).
class DeviceExec {
 public:
  using Ops = CudaOps;
  explicit DeviceExec(ErwinCudaForward& f) : f_(f), ops_(f.device_ops()), work_(*f.g_) {}
  const Config& config() const { return f_.cfg_; }
  const program::Layers<CudaOps>& layers() const { return f_.layers_; }

  template <class F>
  void tiles(index_t n, index_t /*tile*/, F&& f) {
    f_.steps_.run([&] { f(ops_, work_, index_t{0}, n); });
  }
  template <class F>
  void chunks(std::span<const std::pair<index_t, index_t>> list, F&& f) {
    f_.steps_.run([&] {
      for (const auto& [r0, r1] : list) f(ops_, work_, r0, r1);
    });
  }

  program::LevelRows level(int i) const { return rows(i, false); }
  program::LevelRows rotated(int i) const { return rows(i, true); }
  void prepare_rotated(int /*level*/) const {}  // the rotated positions are part of the geometry
  /// The ball-relative positions of the geometry (uploaded once).
  Rows ball_relative(const DeviceWork&, const program::LevelRows& lv, int /*ball*/, index_t r0, index_t rows) const {
    return lv.rel.range(r0, rows);
  }
  void to_rotated(int i) {
    Level& lv = f_.g_->levels[static_cast<std::size_t>(i)];
    f_.move([&] { f_.g_->layout->to_rotated(lv.index, lv.x.data(), f_.g_->xr.data(), lv.width, f_.stream_); });
  }
  void from_rotated(int i) {
    Level& lv = f_.g_->levels[static_cast<std::size_t>(i)];
    f_.move([&] { f_.g_->layout->from_rotated(lv.index, f_.g_->xr.data(), lv.x.data(), lv.width, f_.stream_); });
  }

  /// The halo rows (remote sources) take their owners' current rows: collective when distributed.
  void refresh_halo() {
    const int D = f_.cfg_.c_hidden[0];
    f_.steps_.agree();
    f_.g_->layout->refresh_halo(f_.g_->h.data(), D, D, f_.stream_);
  }
  program::EdgeRows edges() const {
    Geometry& g = *f_.g_;
    const int D = f_.cfg_.c_hidden[0], d = f_.cfg_.dimensionality;
    const index_t n = g.layout->points(), n_all = n + g.layout->halo_rows();
    const index_t E = g.edge_start_host.empty() ? 0 : g.edge_start_host.back();
    const auto dev = ops::Place::device;
    return {{g.h.data(), D, n_all, D, dev},
            {g.agg.data(), D, n, D, dev},
            {g.edge_rel.data(), d, E, d, dev},
            g.edge_src.data(),
            g.edge_dst.data(),
            g.edge_start.data(),
            g.edge_start_host.data(),
            g.receiver_chunks,
            0};  // all messages of a chunk in one launch
  }

 private:
  program::LevelRows rows(int i, bool rotated) const {
    Geometry& g = *f_.g_;
    Level& lv = g.levels[static_cast<std::size_t>(i)];
    const int d = f_.cfg_.dimensionality;
    const auto dev = ops::Place::device;
    program::LevelRows r;
    r.x = {rotated ? g.xr.data() : lv.x.data(), lv.width, lv.nodes, lv.width, dev};
    r.pos = {rotated ? lv.pos_rot.data() : lv.pos.data(), d, lv.nodes, d, dev};
    r.rel = {rotated ? lv.rel_rot.data() : lv.rel.data(), d, lv.nodes, d, dev};
    if (static_cast<std::size_t>(i) + 1 < g.levels.size()) {
      const int s = f_.cfg_.strides[static_cast<std::size_t>(i)];
      r.child_rel = {lv.child_rel.data(), s * d, lv.nodes / s, s * d, dev};
    }
    return r;
  }

  ErwinCudaForward& f_;
  CudaOps ops_;
  DeviceWork work_;
};

ErwinCudaForward::ErwinCudaForward(const Network& net, int device, index_t edge_chunk,
                                   const balltree::wrapper::Layers<ops::HostOps>* wrapper)
    : net_(&net), cfg_(net.config()), device_(device), edge_chunk_(std::max<index_t>(1, edge_chunk)),
      steps_("erwin", device) {
  surrogate::detail::require_visible_device("erwin", device);
  if (cfg_.dimensionality > cu::kMaxBallPositionDim)
    throw Error(ErrorCode::unsupported, "erwin: the CUDA forward takes positions of up to " +
                                            std::to_string(cu::kMaxBallPositionDim) + " coordinates, the model has " +
                                            std::to_string(cfg_.dimensionality));
  for (std::size_t i = 0; i < cfg_.strides.size(); ++i)
    if (cfg_.strides[i] == 1 && cfg_.c_hidden[i] != cfg_.c_hidden[i + 1])
      throw Error(ErrorCode::unsupported, "erwin: stride 1 between levels of widths " + std::to_string(cfg_.c_hidden[i]) +
                                              " and " + std::to_string(cfg_.c_hidden[i + 1]) + " (not supported on CUDA)");
  const program::Layers<ops::HostOps>& host = Stages::layers(net);
  auto check_heads = [](const std::vector<program::Block<ops::HostOps>>& blocks) {
    for (const auto& b : blocks)
      if (b.dim / b.heads > cu::kMaxHeadDim)
        throw Error(ErrorCode::unsupported, "erwin: head width " + std::to_string(b.dim / b.heads) +
                                                " exceeds the CUDA attention's " + std::to_string(cu::kMaxHeadDim));
  };
  for (const auto& level : host.encoder) check_heads(level);
  check_heads(host.bottleneck);
  for (const auto& level : host.decoder) check_heads(level);
  layers_ = program::convert<CudaOps>(host, CudaOps::Upload{&weights_});
  if (wrapper != nullptr)
    wrapper_ = std::make_unique<balltree::wrapper::Layers<CudaOps>>(
        balltree::wrapper::convert<CudaOps>(*wrapper, CudaOps::Upload{&weights_}));
  cu::DeviceGuard guard(device_);
  stream_ = cu::Stream(device_);
  weights_.upload(device_, stream_.get());
}

std::unique_ptr<balltree::DeviceGeometry> ErwinCudaForward::upload_geometry(const balltree::RotatedTrees& trees,
                                                                            std::span<const float> positions,
                                                                            const balltree::Batch& batch,
                                                                            std::span<const std::int64_t> edge_index) {
  const int d = cfg_.dimensionality;
  const index_t n = batch.points();
  if (n < 1) throw Error(ErrorCode::input, "erwin: no points");
  if (static_cast<index_t>(positions.size()) != n * d)
    throw Error(ErrorCode::input, "erwin: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(n) + " points x " + std::to_string(d));
  auto geometry = std::make_unique<Geometry>(device_);
  geometry->layout = single_process_layout(*net_, trees, positions, n, edge_index);
  upload_layout(*geometry);
  return geometry;
}

std::vector<float> ErwinCudaForward::forward(balltree::DeviceGeometry& uploaded, std::span<const float> features) {
  auto* geometry = dynamic_cast<Geometry*>(&uploaded);
  if (geometry == nullptr || geometry->device() != device_ || !geometry->layout)
    throw Error(ErrorCode::invalid_argument, "erwin: the geometry was not uploaded by this device forward");
  const index_t n = geometry->layout->points();
  if (static_cast<index_t>(features.size()) != (wrapper_ ? 0 : n * cfg_.c_in))
    throw Error(ErrorCode::input, "erwin: features has " + std::to_string(features.size()) + " values, expected " +
                                      (wrapper_ ? std::string("none (the ShapeNet-Car wrapper computes them)")
                                                : std::to_string(n) + " points x c_in " + std::to_string(cfg_.c_in)));
  if (!wrapper_) Stages::check_features(*net_, features, 0);
  geometry_ms_ = 0.0;
  return run(*geometry, features, nullptr);
}

std::vector<float> ErwinCudaForward::forward(ErwinPlan& plan, std::span<const float> block_features) {
  if (static_cast<index_t>(block_features.size()) != (wrapper_ ? 0 : plan.block_rows() * cfg_.c_in))
    throw Error(ErrorCode::internal, "erwin (plan, device): block features of the wrong size");
  if (!wrapper_) collectively(plan.comm(), [&] { Stages::check_features(*net_, block_features, plan.block_begin()); });
  Geometry& geometry = plan_geometry(plan);
  try {
    return run(geometry, block_features, &plan.traffic());
  } catch (...) {
    // A failed forward may leave the work arrays half written: the next one uploads again.
    plan.device_geometry().reset();
    throw;
  }
}

void ErwinCudaForward::forward_rows(ErwinPlan& plan, const float* rows, index_t ld, float* out, index_t ld_out) {
  Geometry& geometry = plan_geometry(plan);
  const int width = out_width();
  const Place place{device_, stream_.get(), &plan.comm().device_transport(device_)};
  try {
    run(
        geometry,
        [&] {
          if (!wrapper_) move([&] { plan.to_block(rows, ld, g_->features.data(), cfg_.c_in, cfg_.c_in, place); });
        },
        [&] { move([&] { plan.to_solver(result_rows(), width, out, ld_out, width, place); }); }, false, &plan.traffic());
    forward_ms_ = 0.0;
  } catch (...) {
    plan.device_geometry().reset();
    throw;
  }
}

Geometry& ErwinCudaForward::plan_geometry(ErwinPlan& plan) {
  std::unique_ptr<balltree::DeviceGeometry>& kept = plan.device_geometry();
  geometry_ms_ = 0.0;
  if (!kept || kept->device() != device_) {
    kept.reset();
    auto geometry = std::make_unique<Geometry>(device_);
    geometry->layout = plan_layout(*net_, plan);
    upload_layout(*geometry);  // collective, errors agreed
    kept = std::move(geometry);
  }
  return static_cast<Geometry&>(*kept);
}

void ErwinCudaForward::upload_layout(Geometry& geometry) {
  g_ = &geometry;
  steps_.begin(geometry.layout->comm());
  try {
    geometry_ms_ = steps_.timed(stream_.get(), true, [&] { set_geometry(geometry); });  // (agrees its errors)
    steps_.agree();
    g_ = nullptr;
  } catch (...) {
    g_ = nullptr;
    raise_current(device_);
  }
}

std::vector<float> ErwinCudaForward::run(Geometry& geometry, std::span<const float> features, Traffic* traffic) {
  std::vector<float> result(static_cast<std::size_t>(geometry.layout->points() * out_width()));
  run(
      geometry,
      [&] {
        if (!wrapper_) steps_.run([&] { upload(g_->features, features); });
      },
      [&] {
        steps_.run([&] { cu::copy_to_host(result.data(), result_rows(), result.size() * sizeof(float), stream_.get()); });
      },
      true, traffic);
  return result;
}

void ErwinCudaForward::compute_direct() {
  const int D0 = cfg_.c_hidden[0];
  const index_t n = g_->layout->points();
  const auto dev = ops::Place::device;
  DeviceExec exec(*this);  // (with the wrapper, the features were computed with the geometry)
  program::embed(exec, {g_->features.data(), cfg_.c_in, n, cfg_.c_in, dev}, {g_->h.data(), D0, n, D0, dev});
  if (cfg_.mp_steps > 0) program::message_passing(exec);
  Level& level0 = g_->levels.front();
  move([&] { g_->layout->to_slots(g_->h.data(), D0, level0.x.data(), D0, D0, stream_); });
  program::levels(exec);
  move([&] { g_->layout->to_points(level0.x.data(), D0, g_->out.data(), D0, D0, stream_); });
  if (wrapper_)  // pred_head: one value a point
    steps_.run([&] {
      CudaOps ops = device_ops();
      balltree::wrapper::head(ops, *wrapper_, {g_->out.data(), D0, n, D0, dev}, {g_->head_hidden.data(), D0, n, D0, dev},
                              {g_->values.data(), 1, n, 1, dev});
    });
}

void ErwinCudaForward::compute(Traffic* traffic) {
  // Across ranks the moves exchange messages between the steps: launched one by one.
  const Comm* comm = g_->layout->comm();
  if (comm && comm->size() > 1) {
    graph_.reset();
    return compute_direct();
  }
  // One rank agrees with itself: a failure is thrown where it happens (and ends a capture), not kept.
  steps_.agree();
  steps_.begin(nullptr);
  try {
    // Every array the kernels touch belongs to the geometry (sized once, at its upload) or to the weights;
    // the one-rank moves of a plan are device copies whose lists it uploaded on the first forward.
    steps_.run([&] {
      const auto key = [&] {
        return surrogate::device::ComputeGraph::key({g_->serial(), static_cast<std::uintptr_t>(precision_)});
      };
      graph_.run(device_, stream_.get(), key, [&] { compute_direct(); }, traffic);
    });
  } catch (...) {
    steps_.begin(comm);
    throw;
  }
  steps_.begin(comm);
}

template <class Load, class Store>
void ErwinCudaForward::run(Geometry& geometry, Load&& load, Store&& store, bool timed, Traffic* traffic) {
  g_ = &geometry;
  steps_.begin(geometry.layout->comm());
  try {
    const double ms = steps_.timed(stream_.get(), timed, [&] {
      load();
      compute(traffic);
      store();
    });
    if (timed) forward_ms_ = ms;
    steps_.agree();
    g_ = nullptr;
  } catch (...) {
    g_ = nullptr;
    raise_current(device_);
  }
}

}  // namespace surrogate::erwin::detail::cuda_forward

namespace surrogate::erwin::detail {

std::unique_ptr<ErwinDeviceForward> make_erwin_cuda_forward(const Network& net, int device, index_t edge_chunk,
                                                            const balltree::wrapper::Layers<ops::HostOps>* wrapper) {
  try {
    return std::make_unique<cuda_forward::ErwinCudaForward>(net, device, edge_chunk, wrapper);
  } catch (...) {
    cuda_forward::raise_current(device);
  }
}

}  // namespace surrogate::erwin::detail
