// The Erwin forward on a CUDA device (device.hpp): the stages of network.cpp on device arrays, one call
// per layer (device/layers.hpp) on the rows of a DeviceLayout (layout.hpp: one process, or one rank of a
// plan); launch errors are kept until the next collective point and agreed there. What stays on the host,
// the arithmetic against the CPU and the exactness across ranks: share/docs/balltree.md, "Erwin on a CUDA
// device".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "../plan.hpp"
#include "forward.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::erwin::detail::cuda_forward {

Block ErwinCudaForward::add_block(const BlockWeights& b) {
  Block k;
  k.dim = b.dim;
  k.heads = b.heads;
  k.ball = b.ball;
  k.hidden = b.hidden;
  const float eps = std::numeric_limits<float>::epsilon();
  const auto dim = static_cast<std::size_t>(b.dim);
  k.norm1 = weights_.append_norm({b.norm1, dim}, {}, true, eps);
  k.norm2 = weights_.append_norm({b.norm2, dim}, {}, true, eps);
  k.bias = !b.sigma->empty();
  if (k.bias) k.sigma = weights_.append(*b.sigma);
  k.qkv = weights_.append_dense(*b.qkv);
  k.proj = weights_.append_dense(*b.proj);
  k.pe = weights_.append_dense(*b.pe);
  k.w1 = weights_.append_dense(*b.w1);
  k.w2 = weights_.append_dense(*b.w2);
  k.w3 = weights_.append_dense(*b.w3);
  const int E = b.dim / b.heads;
  if (E > cu::kMaxHeadDim)
    throw Error(ErrorCode::unsupported, "erwin: head width " + std::to_string(E) + " exceeds the CUDA attention's " +
                                            std::to_string(cu::kMaxHeadDim));
  return k;
}

ErwinCudaForward::ErwinCudaForward(const Network& net, int device, index_t edge_chunk)
    : net_(&net), cfg_(net.config()), device_(device), edge_chunk_(std::max<index_t>(1, edge_chunk)) {
  std::string why;
  const int count = device == cu::kEmulatedDevice ? 0 : cu::device_count(&why);
  if (device != cu::kEmulatedDevice && (device < 0 || device >= count))
    throw Error(ErrorCode::unsupported, "erwin: CUDA device " + std::to_string(device) + " requested, but " +
                                            (count == 0 ? "no CUDA device is visible (" + why + ")"
                                                        : std::to_string(count) + " device(s) are visible"));
  if (cfg_.dimensionality > cu::kMaxBallPositionDim)
    throw Error(ErrorCode::unsupported, "erwin: the CUDA forward takes positions of up to " +
                                            std::to_string(cu::kMaxBallPositionDim) + " coordinates, the model has " +
                                            std::to_string(cfg_.dimensionality));
  for (std::size_t i = 0; i < cfg_.strides.size(); ++i)
    if (cfg_.strides[i] == 1 && cfg_.c_hidden[i] != cfg_.c_hidden[i + 1])
      throw Error(ErrorCode::unsupported, "erwin: stride 1 between levels of widths " + std::to_string(cfg_.c_hidden[i]) +
                                              " and " + std::to_string(cfg_.c_hidden[i + 1]) + " (not supported on CUDA)");
  const NetworkWeights nw = Stages::weights(net);
  embed_ = weights_.append_dense(*nw.embed);
  for (const StepWeights& s : nw.steps) {
    const auto D = static_cast<std::size_t>(cfg_.c_hidden[0]);
    Step step;
    step.message = weights_.append_dense(*s.message);
    step.update = weights_.append_dense(*s.update);
    step.message_norm = weights_.append_norm({s.message_w, D}, {s.message_b, D}, false, 1e-5f);
    step.update_norm = weights_.append_norm({s.update_w, D}, {s.update_b, D}, false, 1e-5f);
    steps_.push_back(step);
  }
  for (const auto& level : nw.encoder) {
    encoder_.emplace_back();
    for (const BlockWeights& b : level) encoder_.back().push_back(add_block(b));
  }
  for (const auto& level : nw.decoder) {
    decoder_.emplace_back();
    for (const BlockWeights& b : level) decoder_.back().push_back(add_block(b));
  }
  for (const BlockWeights& b : nw.bottleneck) bottleneck_.push_back(add_block(b));
  for (const kernels::PackedLinear* p : nw.pool) pool_.push_back(weights_.append_dense(*p));
  for (const kernels::PackedLinear* p : nw.unpool) unpool_.push_back(weights_.append_dense(*p));
  for (const BatchNormWeights& b : nw.pool_bn)
    pool_bn_.push_back({weights_.append(*b.alpha), weights_.append(*b.beta)});
  for (const BatchNormWeights& b : nw.unpool_bn)
    unpool_bn_.push_back({weights_.append(*b.alpha), weights_.append(*b.beta)});
  cu::DeviceGuard guard(device_);
  stream_ = cu::Stream(device_);
  weights_.upload(device_, stream_.get());
}

void ErwinCudaForward::dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                             Activation act, const float* residual, index_t ld_residual) {
  surrogate::device::dense(l, weights_.data(), x, ldx, y, ldy, rows, stream_.get(), act, residual, ld_residual);
}

void ErwinCudaForward::copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
                            const std::int64_t* dst_index, index_t rows, int width) {
  surrogate::device::copy_rows(src, ld_src, src_index, dst, ld_dst, dst_index, rows, width, stream_.get());
}

void ErwinCudaForward::norm(const Norm& n, const float* x, index_t ldx, float* y, index_t ldy, index_t rows) {
  surrogate::device::norm(n, weights_.data(), x, ldx, y, ldy, rows, stream_.get());
}

void ErwinCudaForward::agree_pending() {
  const Status local = std::move(pending_);
  pending_ = {};
  if (const Comm* comm = g_ && g_->layout ? g_->layout->comm() : nullptr) comm->agree_or_throw(local);
  else if (!local.ok()) local.raise();
}

// Message passing (as Network::Impl::run_mpnn): per step, for chunks of receivers, the message rows
// [h_j | h_i | p_j - p_i] in receiver order, m = LayerNorm(GELU(W x + b)), the mean per receiver; then
// [h_i | mean_i] -> LayerNorm(W' x + b') added to h.
void ErwinCudaForward::message_passing() {
  const int D = cfg_.c_hidden[0], d = cfg_.dimensionality;
  const index_t ld_msg = 2 * D + d, ld_upd = 2 * D, n = g_->layout->points();
  for (const Step& step : steps_) {
    // The halo rows (remote sources) take their owners' current rows: collective when distributed.
    agree_pending();
    g_->layout->refresh_halo(g_->h.data(), D, D, stream_);
    launch([&] {
    for (const auto& [r0, r1] : g_->receiver_chunks) {
      const index_t e0 = g_->edge_start_host[static_cast<std::size_t>(r0)], e1 = g_->edge_start_host[static_cast<std::size_t>(r1)];
      const index_t m = e1 - e0;
      if (m > 0) {
        copy(g_->h.data(), D, g_->edge_src.data() + e0, g_->msg_in.data(), ld_msg, nullptr, m, D);
        copy(g_->h.data(), D, g_->edge_dst.data() + e0, g_->msg_in.data() + D, ld_msg, nullptr, m, D);
        copy(g_->edge_rel.data() + e0 * d, d, nullptr, g_->msg_in.data() + 2 * D, ld_msg, nullptr, m, d);
        dense(step.message, g_->msg_in.data(), ld_msg, g_->msg.data(), D, m, Activation::gelu_erf);
        norm(step.message_norm, g_->msg.data(), D, g_->msg.data(), D, m);
      }
      cu::SegmentMeanArgs a;
      a.msg = g_->msg.data();
      a.ld_msg = D;
      a.start = g_->edge_start.data() + r0;
      a.receivers = r1 - r0;
      a.width = D;
      a.agg = g_->agg.data() + r0 * D;
      a.ld_agg = D;
      cu::segment_mean(a, stream_.get());
    }
    copy(g_->h.data(), D, nullptr, g_->upd_in.data(), ld_upd, nullptr, n, D);
    copy(g_->agg.data(), D, nullptr, g_->upd_in.data() + D, ld_upd, nullptr, n, D);
    dense(step.update, g_->upd_in.data(), ld_upd, g_->upd.data(), D, n);
    norm(step.update_norm, g_->upd.data(), D, g_->upd.data(), D, n);
    surrogate::device::combine_rows(cu::RowOp::add, g_->h.data(), D, g_->upd.data(), D, g_->h.data(), D, n, D,
                                    stream_.get());
    });
  }
}

// One transformer block (as Network::Impl::run_block) on `rows` nodes whose balls are consecutive:
// x += proj(BMSA(RMSNorm1(x) + pe(rel))), x += w3(silu(w1 h) * w2 h) with h = RMSNorm2(x).
void ErwinCudaForward::run_block(const Block& b, float* x, index_t rows, const float* pos, const float* rel) {
  const int D = b.dim, d = cfg_.dimensionality, E = D / b.heads;
  norm(b.norm1, x, D, g_->hb.data(), D, rows);
  dense(b.pe, rel, d, g_->hb.data(), D, rows, Activation::none, g_->hb.data(), D);
  dense(b.qkv, g_->hb.data(), D, g_->u.data(), 3 * D, rows);
  cu::BallAttentionLaunch a;
  a.rows = rows;
  a.ball = b.ball;
  a.heads = b.heads;
  a.E = E;
  a.q = g_->u.data();
  a.k = g_->u.data() + D;
  a.v = g_->u.data() + 2 * D;
  a.ld = 3 * D;
  a.scale = 1.0f / std::sqrt(static_cast<float>(E));
  a.sigma = b.bias ? w(b.sigma) : nullptr;
  a.positions = pos;
  a.ld_pos = d;
  a.dim = d;
  a.out = g_->att.data();
  a.ldo = D;
  cu::ball_attention(a, stream_.get());
  dense(b.proj, g_->att.data(), D, x, D, rows, Activation::none, x, D);
  norm(b.norm2, x, D, g_->hb.data(), D, rows);
  dense(b.w1, g_->hb.data(), D, g_->a1.data(), b.hidden, rows, Activation::silu);
  dense(b.w2, g_->hb.data(), D, g_->a2.data(), b.hidden, rows);
  surrogate::device::combine_rows(cu::RowOp::multiply, g_->a1.data(), b.hidden, g_->a2.data(), b.hidden, g_->a1.data(),
                                  b.hidden, rows, b.hidden, stream_.get());
  dense(b.w3, g_->a1.data(), b.hidden, x, D, rows, Activation::none, x, D);
}

// The blocks of a level (as Network::Impl::run_blocks): odd blocks of a rotated model see the nodes in
// the rotated tree's order (gathered into g_->xr, scattered back).
void ErwinCudaForward::run_blocks(const std::vector<Block>& blocks, Level& level) {
  const int D = level.width;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    if (!(cfg_.rotate > 0 && j % 2 == 1)) {
      launch([&] { run_block(blocks[j], level.x.data(), level.nodes, level.pos.data(), level.rel.data()); });
      continue;
    }
    move([&] { g_->layout->to_rotated(level.index, level.x.data(), g_->xr.data(), D, stream_); });
    launch([&] { run_block(blocks[j], g_->xr.data(), level.nodes, level.pos_rot.data(), level.rel_rot.data()); });
    move([&] { g_->layout->from_rotated(level.index, g_->xr.data(), level.x.data(), D, stream_); });
  }
}

// The U-Net (as Stages::levels): encoder blocks and pooling (the encoder's node array of each level stays
// as the decoder's skip), the bottleneck, then unpooling into the skip with BatchNorm and the decoder blocks.
void ErwinCudaForward::levels() {
  const int L = cfg_.levels(), d = cfg_.dimensionality;
  for (int i = 0; i + 1 < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = g_->levels[iu];
    Level& next = g_->levels[iu + 1];
    run_blocks(encoder_[iu], lv);
    const int s = cfg_.strides[iu], Din = lv.width, Dout = next.width;
    if (s == 1) {
      launch([&] { copy(lv.x.data(), Din, nullptr, next.x.data(), Dout, nullptr, lv.nodes, Din); });
      continue;
    }
    // [x of the s children | their positions relative to the parent] -> Linear -> BatchNorm.
    const index_t np = next.nodes, ld_in = static_cast<index_t>(s) * (Din + d);
    launch([&] {
    for (int j = 0; j < s; ++j)
      copy(lv.x.data() + static_cast<index_t>(j) * Din, static_cast<index_t>(s) * Din, nullptr,
           g_->join.data() + static_cast<index_t>(j) * Din, ld_in, nullptr, np, Din);
    copy(lv.child_rel.data(), static_cast<index_t>(s) * d, nullptr, g_->join.data() + static_cast<index_t>(s) * Din, ld_in,
         nullptr, np, s * d);
    dense(pool_[iu], g_->join.data(), ld_in, next.x.data(), Dout, np);
    cu::BatchNormArgs bn;
    bn.x = next.x.data();
    bn.ld = Dout;
    bn.rows = np;
    bn.dim = Dout;
    bn.alpha = w(pool_bn_[iu].alpha);
    bn.beta = w(pool_bn_[iu].beta);
    cu::batch_norm(bn, stream_.get());
    });
  }
  run_blocks(bottleneck_, g_->levels.back());
  for (int i = L - 2; i >= 0; --i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = g_->levels[iu];
    const Level& parent = g_->levels[iu + 1];
    const int s = cfg_.strides[iu], Din = parent.width, Dout = lv.width;
    // [x of the parent | its children's positions relative to it] -> Linear (s x Dout per parent), added
    // to the skip's children, then BatchNorm.
    const index_t np = parent.nodes, ld_in = Din + static_cast<index_t>(s) * d;
    launch([&] {
    copy(parent.x.data(), Din, nullptr, g_->join.data(), ld_in, nullptr, np, Din);
    copy(lv.child_rel.data(), static_cast<index_t>(s) * d, nullptr, g_->join.data() + Din, ld_in, nullptr, np, s * d);
    dense(unpool_[iu], g_->join.data(), ld_in, g_->z.data(), static_cast<index_t>(s) * Dout, np);
    cu::BatchNormArgs bn;
    bn.x = lv.x.data();
    bn.ld = Dout;
    bn.rows = lv.nodes;
    bn.dim = Dout;
    bn.alpha = w(unpool_bn_[iu].alpha);
    bn.beta = w(unpool_bn_[iu].beta);
    bn.add = g_->z.data();  // child (p s + j) <- z[p][j Dout ..]: rows of Dout
    bn.ld_add = Dout;
    cu::batch_norm(bn, stream_.get());
    });
    run_blocks(decoder_[iu], lv);
  }
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
  if (static_cast<index_t>(features.size()) != n * cfg_.c_in)
    throw Error(ErrorCode::input, "erwin: features has " + std::to_string(features.size()) + " values, expected " +
                                      std::to_string(n) + " points x c_in " + std::to_string(cfg_.c_in));
  Stages::check_features(*net_, features, 0);
  geometry_ms_ = 0.0;
  return run(*geometry, features);
}

std::vector<float> ErwinCudaForward::forward(ErwinPlan& plan, std::span<const float> block_features) {
  if (static_cast<index_t>(block_features.size()) != plan.block_rows() * cfg_.c_in)
    throw Error(ErrorCode::internal, "erwin (plan, device): block features of the wrong size");
  collectively(plan.comm(), [&] { Stages::check_features(*net_, block_features, plan.block_begin()); });
  // The plan's geometry on this device: uploaded by the first forward there, kept in the plan.
  std::unique_ptr<balltree::DeviceGeometry>& kept = plan.device_geometry();
  geometry_ms_ = 0.0;
  if (!kept || kept->device() != device_) {
    kept.reset();
    auto geometry = std::make_unique<Geometry>(device_);
    geometry->layout = plan_layout(*net_, plan);
    upload_layout(*geometry);  // collective, errors agreed
    kept = std::move(geometry);
  }
  try {
    return run(static_cast<Geometry&>(*kept), block_features);
  } catch (...) {
    kept.reset();  // a failed forward may leave the work arrays half written: the next one uploads again
    throw;
  }
}

void ErwinCudaForward::upload_layout(Geometry& geometry) {
  g_ = &geometry;
  pending_ = {};
  try {
    // The guard and the events are made inside launch(): a failure there is agreed like any other (on a
    // plan no rank may leave before the next collective).
    std::optional<cu::DeviceGuard> guard;
    std::optional<cu::Event> g0, g1;
    launch([&] {
      guard.emplace(device_);
      g0.emplace(device_);
      g1.emplace(device_);
      g0->record(stream_.get());
    });
    set_geometry(geometry);  // agrees its errors
    launch([&] {
      g1->record(stream_.get());
      stream_.synchronize();
      geometry_ms_ = g1->elapsed_ms_since(*g0);
    });
    agree_pending();
    g_ = nullptr;
  } catch (...) {
    g_ = nullptr;
    pending_ = {};
    raise_current(device_);
  }
}

std::vector<float> ErwinCudaForward::run(Geometry& geometry, std::span<const float> features) {
  const int D0 = cfg_.c_hidden[0];
  g_ = &geometry;
  pending_ = {};
  try {
    std::optional<cu::DeviceGuard> guard;
    std::optional<cu::Event> t0, t1;
    launch([&] { guard.emplace(device_); });
    const index_t n = g_->layout->points();
    std::vector<float> result(static_cast<std::size_t>(n * D0));
    launch([&] {
      t0.emplace(device_);
      t1.emplace(device_);
      t0->record(stream_.get());
      upload(g_->features, features);
      dense(embed_, g_->features.data(), cfg_.c_in, g_->h.data(), D0, n);
    });
    if (cfg_.mp_steps > 0) message_passing();
    Level& level0 = g_->levels.front();
    move([&] { g_->layout->to_slots(g_->h.data(), D0, level0.x.data(), D0, D0, stream_); });
    levels();
    move([&] { g_->layout->to_points(level0.x.data(), D0, g_->out.data(), D0, D0, stream_); });
    launch([&] {
      cu::copy_to_host(result.data(), g_->out.data(), result.size() * sizeof(float), stream_.get());
      t1->record(stream_.get());
      stream_.synchronize();
      forward_ms_ = t1->elapsed_ms_since(*t0);
    });
    agree_pending();
    g_ = nullptr;
    return result;
  } catch (...) {
    g_ = nullptr;
    pending_ = {};
    raise_current(device_);
  }
}

}  // namespace surrogate::erwin::detail::cuda_forward

namespace surrogate::erwin::detail {

std::unique_ptr<ErwinDeviceForward> make_erwin_cuda_forward(const Network& net, int device, index_t edge_chunk) {
  try {
    return std::make_unique<cuda_forward::ErwinCudaForward>(net, device, edge_chunk);
  } catch (...) {
    cuda_forward::raise_current(device);
  }
}

}  // namespace surrogate::erwin::detail
