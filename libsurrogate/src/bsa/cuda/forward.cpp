// The BSA forward on a CUDA device (device.hpp): program.hpp's stages, the CPU forward's program, on
// device arrays through CudaOps (ops/cuda_ops.hpp: one launch per layer or branch over all rows of a
// stage); here the weights, the one-process batch and the Exec, a plan's slots and what crosses ranks in
// distributed.cpp. What stays on the host and the arithmetic against the CPU: share/docs/balltree.md,
// "BSA on a CUDA device".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "../../balltree/cuda/geometry.hpp"
#include "../../cuda_errors.hpp"
#include "forward.hpp"
#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {

using balltree::device::ball_relative;
using ops::Rows;

BsaCudaForward::BsaCudaForward(const Network& net, int device)
    : net_(&net), cfg_(net.config()), device_(device), steps_("bsa", device) {
  surrogate::detail::require_visible_device("bsa", device);
  if (cfg_.dimensionality > cu::kMaxBallPositionDim)
    throw Error(ErrorCode::unsupported, "bsa: the CUDA forward takes positions of up to " +
                                            std::to_string(cu::kMaxBallPositionDim) + " coordinates, the model has " +
                                            std::to_string(cfg_.dimensionality));
  if (cfg_.head_dim() > cu::kMaxHeadDim)
    throw Error(ErrorCode::unsupported, "bsa: head width " + std::to_string(cfg_.head_dim()) +
                                            " exceeds the CUDA attention's " + std::to_string(cu::kMaxHeadDim));
  const bool sparse = cfg_.attention_type == AttentionType::sparse;
  if (sparse && cfg_.selected_blocks_number > cu::kMaxSelectedBlocks)
    throw Error(ErrorCode::unsupported, "bsa: selected_blocks_number = " + std::to_string(cfg_.selected_blocks_number) +
                                            " exceeds the CUDA selection's " + std::to_string(cu::kMaxSelectedBlocks));
  layers_ = program::convert<CudaOps>(Stages::program_layers(net), CudaOps::Upload{&weights_});
  if (cfg_.wrapper == Wrapper::shapenet_car)
    wrapper_ = std::make_unique<balltree::wrapper::Layers<CudaOps>>(
        balltree::wrapper::convert<CudaOps>(Stages::wrapper_layers(net), CudaOps::Upload{&weights_}));
  surrogate::detail::on_device("bsa", device_, [&] {
    stream_ = cu::Stream(device_);
    weights_.upload(device_, stream_.get());
  });
}

void BsaCudaForward::set_rows(index_t points) {
  const int d = cfg_.dimensionality, D = cfg_.c_hidden, H = cfg_.num_heads;
  const int ball = cfg_.attention_type == AttentionType::ball ? cfg_.attention_ball_size : cfg_.ball_size;
  // The positions relative to their ball's centre, on the device (balltree/cuda/geometry.hpp).
  const auto R = static_cast<std::size_t>(g_->rows), Du = static_cast<std::size_t>(D);
  if (cfg_.attention_type != AttentionType::global) {
    const auto relative = [&](const cu::DeviceBuffer<float>& rows, cu::DeviceBuffer<float>& rel) {
      rel.resize(std::max<std::size_t>(1, R * static_cast<std::size_t>(d)), device_);
      ball_relative(rows.data(), g_->rows, d, ball, rel.data(), g_->centres, device_, stream_.get());
    };
    relative(g_->pos, g_->rel);
    if (cfg_.should_rotate) relative(g_->pos_rot, g_->rel_rot);
  }
  const auto hidden = static_cast<std::size_t>(layers_.layers.empty() ? 1 : layers_.layers.front().block.w1.out);
  for (cu::DeviceBuffer<float>* b : {&g_->x, &g_->residual, &g_->h, &g_->o}) b->resize(std::max<std::size_t>(1, R * Du), device_);
  if (cfg_.should_rotate) g_->xr.resize(std::max<std::size_t>(1, R * Du), device_);
  g_->u.resize(std::max<std::size_t>(1, R * 3 * Du), device_);
  g_->a1.resize(std::max<std::size_t>(1, R * hidden), device_);
  g_->a2.resize(g_->a1.size(), device_);
  if (cfg_.attention_type == AttentionType::sparse) {
    const int C = cfg_.compress_block_size;
    const index_t blocks = g_->rows / C;
    for (cu::DeviceBuffer<float>* b : {&g_->local, &g_->coarse, &g_->fine}) b->resize(std::max<std::size_t>(1, R * Du), device_);
    const auto Bu = static_cast<std::size_t>(std::max<index_t>(1, blocks));
    g_->kc.resize(Bu * Du, device_);
    g_->vc.resize(Bu * Du, device_);
    if (cfg_.block_level_importance()) g_->qc.resize(Bu * Du, device_);
    if (cfg_.use_token_gated_attention) g_->gates.resize(std::max<std::size_t>(1, R * 3 * static_cast<std::size_t>(H)), device_);
    if (cfg_.use_compress_mlp) {
      // MLP input row (block b, head h) = the C tokens' head-h columns, token-major: row (b H + h) C + t
      // of E values, taken from token row b C + t at column h E (+ the offset of q, k or v): with u's rows
      // of 3 D = 3 H E values read as rows of E, that is row (b C + t) 3 H + h.
      std::vector<std::int64_t> index(static_cast<std::size_t>(blocks) * H * C);
      for (index_t b = 0; b < blocks; ++b)
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < C; ++t)
            index[static_cast<std::size_t>((b * H + h) * C + t)] = (b * C + t) * 3 * H + h;
      upload(g_->compress_index, index);
      g_->mlp_in.resize(Bu * Du * static_cast<std::size_t>(C), device_);
      const int mlp_hidden = layers_.layers.front().k_mlp[0].out;
      g_->mlp_hidden.resize(Bu * static_cast<std::size_t>(H) * static_cast<std::size_t>(mlp_hidden), device_);
    } else {
      std::vector<std::int64_t> start(static_cast<std::size_t>(blocks) + 1);
      for (index_t b = 0; b <= blocks; ++b) start[static_cast<std::size_t>(b)] = b * C;
      upload(g_->block_start, start);
    }
    // The selection of every segment, one after another.
    const ops::SparseShape s = program::sparse_shape(cfg_);
    g_->sel_offsets.assign(1, 0);
    for (const RowLayout::Segment& g : g_->layout.segments)
      g_->sel_offsets.push_back(g_->sel_offsets.back() +
                             static_cast<std::size_t>(g.samples * H * s.selection_rows(g.length) * s.S));
    g_->sel.resize(std::max<std::size_t>(1, g_->sel_offsets.back()), device_);
    if (g_->on_plan) g_->sel_host.resize(g_->sel_offsets.back());
  }
  g_->features.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points * cfg_.c_in)), device_);
  if (wrapper_) {  // pred_head's rows: the batch's points, or a plan's slots
    const auto head_rows = static_cast<std::size_t>(std::max<index_t>({1, points, g_->rows}));
    g_->head_hidden.resize(head_rows * Du, device_);
    g_->values.resize(head_rows, device_);
  }
  if (!g_->on_plan) {
    g_->e.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points) * Du), device_);
    g_->out.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points) * Du), device_);
  }
  g_->points = points;
}

void BsaCudaForward::set_batch_geometry(const balltree::RotatedTrees& trees, std::span<const float> positions,
                                  index_t points) {
  const int d = cfg_.dimensionality;
  const balltree::Tree& tree = trees.tree;
  g_->rows = tree.slots();
  // One segment: every sample whole.
  g_->layout = RowLayout{};
  g_->layout.rows = g_->rows;
  g_->layout.n = g_->n;
  g_->layout.samples = static_cast<std::int64_t>(tree.slot_offsets.size()) - 1;
  g_->layout.segments.push_back({0, static_cast<int>(g_->layout.samples), g_->n, 0, 0});
  upload(g_->tree_index, tree.index);
  upload(g_->slot, tree.slot_of_point());
  // The points' positions go up once (point order: the wrapper's Fourier features read them); the slots'
  // positions are gathered from them on the device, and the rotated order from those.
  upload(g_->positions, positions);
  const auto rows_d = std::max<std::size_t>(1, static_cast<std::size_t>(g_->rows) * static_cast<std::size_t>(d));
  g_->pos.resize(rows_d, device_);
  surrogate::device::copy_rows(g_->positions.data(), d, g_->tree_index.data(), g_->pos.data(), d, nullptr, g_->rows, d,
                               stream_.get());
  if (cfg_.should_rotate) {
    upload(g_->rot, trees.rotated[1]);
    g_->pos_rot.resize(rows_d, device_);
    surrogate::device::copy_rows(g_->pos.data(), d, g_->rot.data(), g_->pos_rot.data(), d, nullptr, g_->rows, d,
                                 stream_.get());
  }
  set_rows(points);
  if (wrapper_) wrapper_features(g_->positions.data(), points);  // fixed by the points: once per geometry
}

void BsaCudaForward::wrapper_features(const float* positions, index_t rows) {
  const int d = cfg_.dimensionality, cin = cfg_.c_in;
  const auto dev = ops::Place::device;
  steps_.run([&] {
    CudaOps ops = device_ops();
    balltree::wrapper::features(ops, *wrapper_, ops::view(positions, d, rows, d, dev),
                                {g_->features.data(), cin, rows, cin, dev});
  });
}

void BsaCudaForward::wrapper_head(const float* y, index_t rows) {
  const int D = cfg_.c_hidden;
  const auto dev = ops::Place::device;
  steps_.run([&] {
    CudaOps ops = device_ops();
    balltree::wrapper::head(ops, *wrapper_, ops::view(y, D, rows, D, dev), {g_->head_hidden.data(), D, rows, D, dev},
                            {g_->values.data(), 1, rows, 1, dev});
  });
}

/// The work rows of a stage on the device: the geometry's SwiGLU arrays (the ball-relative positions are
/// part of the geometry).
class DeviceWork {
 public:
  explicit DeviceWork(Geometry& g) : g_(&g) {}
  Rows rows(program::Slot slot, index_t rows, int width) const {
    float* data = slot == program::Slot::a1 ? g_->a1.data() : g_->a2.data();
    return {data, width, rows, width, ops::Place::device};
  }

 private:
  Geometry* g_;
};

/// program.hpp's Exec on a device: every tile program and branch once over all rows (device::Steps: in one
/// process a failure is thrown at once, on a plan kept until the next collective); the rotated order, the
/// compressed blocks, the selected blocks and the samples' rows are the plan's exchanges on a plan
/// (distributed.cpp), a permutation or nothing in one process.
class DeviceExec {
 public:
  using Ops = CudaOps;
  explicit DeviceExec(BsaCudaForward& f) : f_(f), ops_(f.device_ops()), work_(*f.g_) {}
  const Config& config() const { return f_.cfg_; }
  const program::Layers<CudaOps>& layers() const { return f_.layers_; }
  const RowLayout& layout() const { return f_.g_->layout; }

  template <class F>
  void tiles(index_t n, index_t /*tile*/, F&& f) {
    f_.steps_.run([&] { f(ops_, work_, index_t{0}, n); });
  }
  template <class F>
  void whole(F&& f) {
    f_.steps_.run([&] { f(ops_); });
  }

  program::LayerRows rows(bool rotated) const {
    Geometry& g = *f_.g_;
    const Config& c = f_.cfg_;
    const int D = c.c_hidden, H = c.num_heads, d = c.dimensionality;
    const index_t n = g.rows, blocks = c.attention_type == AttentionType::sparse ? n / c.compress_block_size : 0;
    const auto dev = ops::Place::device;
    auto rows_of = [&](cu::DeviceBuffer<float>& b, index_t count, int width) {
      return Rows{b.data(), width, count, width, dev};
    };
    program::LayerRows r;
    r.x = rows_of(rotated ? g.xr : g.x, n, D);
    r.pos = rows_of(rotated ? g.pos_rot : g.pos, n, d);
    if (c.attention_type != AttentionType::global) r.rel = rows_of(rotated ? g.rel_rot : g.rel, n, d);
    r.h = rows_of(g.h, n, D);
    r.u = rows_of(g.u, n, 3 * D);
    r.o = rows_of(g.o, n, D);
    if (c.attention_type == AttentionType::sparse) {
      if (c.use_token_gated_attention) r.gates = rows_of(g.gates, n, 3 * H);
      r.local = rows_of(g.local, n, D);
      r.coarse = rows_of(g.coarse, n, D);
      r.fine = rows_of(g.fine, n, D);
      r.kc = rows_of(g.kc, blocks, D);
      r.vc = rows_of(g.vc, blocks, D);
      if (c.block_level_importance()) r.qc = rows_of(g.qc, blocks, D);
      r.compress_gather = g.compress_index.data();
      r.block_start = g.block_start.data();
      r.mlp_in = {g.mlp_in.data(), 0, 0, 0, dev};  // (CudaOps::compress sets their shape)
      r.mlp_hidden = {g.mlp_hidden.data(), 0, 0, 0, dev};
    }
    return r;
  }
  Rows residual() const {
    const int D = f_.cfg_.c_hidden;
    return {f_.g_->residual.data(), D, f_.g_->rows, D, ops::Place::device};
  }
  /// The ball-relative positions of the geometry (uploaded once).
  Rows ball_relative(const DeviceWork&, const program::LayerRows& r, int /*ball*/, index_t r0, index_t rows) const {
    return r.rel.range(r0, rows);
  }
  /// The rotated tree's order: a permutation in one process, the plan's rotation exchange on a plan.
  void to_rotated() {
    Geometry& g = *f_.g_;
    const int D = f_.cfg_.c_hidden;
    if (f_.plan_ != nullptr) {
      f_.steps_.agree();
      f_.plan_->rotation().forward(g.x.data(), D, g.xr.data(), D, D, f_.place());
      return;
    }
    whole([&](CudaOps& ops) { ops.copy({rows(false).x, g.rot.data(), rows(true).x}); });
  }
  void from_rotated() {
    Geometry& g = *f_.g_;
    const int D = f_.cfg_.c_hidden;
    if (f_.plan_ != nullptr) {
      f_.steps_.agree();
      f_.plan_->rotation().backward(g.xr.data(), D, g.x.data(), D, D, f_.place());
      return;
    }
    whole([&](CudaOps& ops) { ops.copy({rows(true).x, nullptr, rows(false).x, g.rot.data()}); });
  }
  /// On a plan: every rank's compressed blocks, all-gathered.
  program::CompressedBlocks compressed(const program::LayerRows& r) {
    if (f_.plan_ == nullptr) return {r.kc, r.vc};
    f_.gather_compressed();
    Geometry& g = *f_.g_;
    const int D = f_.cfg_.c_hidden;
    const index_t all = g.layout.samples * (g.n / f_.cfg_.compress_block_size);
    return {{g.kc_all.data(), D, all, D, ops::Place::device}, {g.vc_all.data(), D, all, D, ops::Place::device}};
  }
  std::int32_t* selection(std::size_t i) const { return f_.g_->sel.data() + f_.g_->sel_offsets[i]; }
  /// On a plan where some rank holds part of a sample: the selection to the host, the selected blocks'
  /// token keys and values fetched (fetch_selected_blocks).
  program::SelectedKeys fetch_selected(const program::LayerRows&) {
    Geometry& g = *f_.g_;
    if (f_.plan_ == nullptr || !g.any_partial) return {};
    f_.steps_.run([&] {
      cu::copy_to_host(g.sel_host.data(), g.sel.data(), g.sel_host.size() * sizeof(std::int32_t), f_.stream_.get());
      f_.stream_.synchronize();
    });
    f_.fetch_selected_blocks();
    const int D = f_.cfg_.c_hidden;
    const auto rows = static_cast<index_t>(g.fetched.size()) / (2 * D);
    const Rows fetched{g.fetched.data(), 2 * D, rows, 2 * D, ops::Place::device};
    return {fetched.columns(0, D), fetched.columns(D, D), g.first_row.data()};
  }
  /// Global attention on a plan where some rank holds part of a sample: the samples' [k | v] rows.
  Rows fetch_samples(const program::LayerRows&) {
    Geometry& g = *f_.g_;
    if (f_.plan_ == nullptr || !g.any_partial) return {};
    f_.fetch_sample_rows();
    const int D = f_.cfg_.c_hidden;
    return {g.fetched.data(), 2 * D, g.layout.partial_samples() * g.n, 2 * D, ops::Place::device};
  }

 private:
  BsaCudaForward& f_;
  CudaOps ops_;
  DeviceWork work_;
};

void BsaCudaForward::run(const Rows& features, const Rows& h, const std::int64_t* to_tree) {
  DeviceExec exec(*this);
  balltree::program::embed(exec, features, h);
  if (to_tree != nullptr) exec.whole([&](CudaOps& ops) { ops.copy({h, to_tree, exec.rows(false).x}); });
  program::layers(exec);
}

void BsaCudaForward::compute_batch() {
  const int cin = cfg_.c_in, D = cfg_.c_hidden;
  const index_t points = g_->points;
  const auto dev = ops::Place::device;
  // The geometry's arrays are sized once, at its upload; only the features may grow (forward_rows).
  const auto key = [&] {
    return surrogate::device::ComputeGraph::key({g_->serial(), static_cast<std::uintptr_t>(precision_)},
                                                {g_->features.data()});
  };
  graph_.run(device_, stream_.get(), key, [&] {
    run({g_->features.data(), cin, points, cin, dev}, {g_->e.data(), D, points, D, dev}, g_->tree_index.data());
    device_ops().copy({{g_->x.data(), D, g_->rows, D, dev}, g_->slot.data(), {g_->out.data(), D, points, D, dev}});
    if (wrapper_) wrapper_head(g_->out.data(), points);
  });
}

std::unique_ptr<balltree::DeviceGeometry> BsaCudaForward::upload_geometry(const balltree::RotatedTrees& trees,
                                                                          std::span<const float> positions,
                                                                          const balltree::Batch& batch) {
  const index_t points = batch.points();
  const index_t n = Stages::check_geometry(*net_, trees, positions, batch);
  auto geometry = std::make_unique<Geometry>(device_);
  g_ = geometry.get();
  plan_ = nullptr;
  steps_.begin(nullptr);
  try {
    g_->n = n;
    // (timed waits for the device: the host arrays of set_batch_geometry are released on return)
    geometry_ms_ = steps_.timed(stream_.get(), true,
                                [&] { steps_.run([&] { set_batch_geometry(trees, positions, points); }); });
  } catch (...) {
    g_ = nullptr;
    surrogate::detail::raise_current_cuda_error("bsa", device_);
  }
  g_ = nullptr;
  return geometry;
}

std::vector<float> BsaCudaForward::forward(balltree::DeviceGeometry& uploaded, std::span<const float> features) {
  auto* geometry = dynamic_cast<Geometry*>(&uploaded);
  if (geometry == nullptr || geometry->device() != device_ || geometry->on_plan)
    throw Error(ErrorCode::invalid_argument, "bsa: the geometry was not uploaded by this device forward");
  const index_t points = geometry->points;
  if (static_cast<index_t>(features.size()) != (wrapper_ ? 0 : points * cfg_.c_in))
    throw Error(ErrorCode::input, "bsa: features has " + std::to_string(features.size()) + " values, expected " +
                                      (wrapper_ ? std::string("none (the ShapeNet-Car wrapper computes them)")
                                                : std::to_string(points) + " points x c_in " + std::to_string(cfg_.c_in)));
  if (!wrapper_) Stages::check_features(*net_, features, 0);
  std::vector<float> result(static_cast<std::size_t>(points * out_width()));
  geometry_ms_ = 0.0;
  g_ = geometry;
  plan_ = nullptr;
  steps_.begin(nullptr);
  try {
    forward_ms_ = steps_.timed(stream_.get(), true, [&] {
      steps_.run([&] {
        if (!wrapper_) upload(g_->features, features);
        compute_batch();
        cu::copy_to_host(result.data(), wrapper_ ? g_->values.data() : g_->out.data(), result.size() * sizeof(float),
                         stream_.get());
      });
    });
  } catch (...) {
    g_ = nullptr;
    surrogate::detail::raise_current_cuda_error("bsa", device_);
  }
  g_ = nullptr;
  return result;
}

void BsaCudaForward::forward_rows(BsaPlan& plan, balltree::DeviceGeometry* batch, const float* rows, index_t ld,
                                  float* out, index_t ld_out) {
  if (batch == nullptr) return forward_plan_rows(plan, rows, ld, out, ld_out);
  auto* geometry = dynamic_cast<Geometry*>(batch);
  if (geometry == nullptr || geometry->device() != device_ || geometry->on_plan)
    throw Error(ErrorCode::invalid_argument, "bsa: the geometry was not uploaded by this device forward");
  const int cin = cfg_.c_in, width = out_width();
  const index_t points = geometry->points;
  g_ = geometry;
  plan_ = nullptr;
  steps_.begin(nullptr);
  try {
    cu::DeviceGuard guard(device_);
    const Place place{device_, stream_.get(), &plan.comm().device_transport(device_)};
    if (!wrapper_) {  // (the wrapper's features come from the geometry's positions)
      g_->features.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points * cin)), device_);
      plan.to_block(rows, ld, g_->features.data(), cin, cin, place);  // the batch in canonical order
    }
    compute_batch();
    plan.to_solver(wrapper_ ? g_->values.data() : g_->out.data(), width, out, ld_out, width, place);
    forward_ms_ = 0.0;
  } catch (...) {
    g_ = nullptr;
    surrogate::detail::raise_current_cuda_error("bsa", device_);
  }
  g_ = nullptr;
}

std::unique_ptr<BsaDeviceForward> make_bsa_cuda_forward(const Network& net, int device) {
  try {
    return std::make_unique<BsaCudaForward>(net, device);
  } catch (...) {
    surrogate::detail::raise_current_cuda_error("bsa", device);
  }
}

}  // namespace surrogate::bsa::detail
