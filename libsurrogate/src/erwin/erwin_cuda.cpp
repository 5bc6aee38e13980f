// The Erwin forward on a CUDA device (erwin_device.hpp): the stages of erwin_model.cpp on device arrays,
// with the kernels of surrogate/kernels/cuda_point_layers.hpp (dense layers, row copies, BatchNorm,
// message mean), kernels::cuda::norm (RMSNorm, LayerNorm) and kernels::cuda::ball_attention.
//
// Where the rows live and how they move between the stages is a DeviceLayout (erwin_cuda_layout.hpp):
// one process (gathers by the tree's index arrays), or one rank of the distributed plan (its block with a
// halo, its slots of the distributed tree, the halo refreshes, block <-> slots moves and rotated orders
// as the plan's exchanges staged through host memory). Every kernel computes each row, edge group and
// ball from that row's inputs alone, so a rank's rows are bitwise those of the one-process forward.
// Errors inside the launches are kept until the next collective point (every movement of a distributed
// layout, and the end), where they are agreed, so no rank waits on one that failed.
//
// What stays on the host: the ball tree and the rotated trees (built by the caller), and what depends
// only on the geometry, computed once per geometry with the CPU forward's own functions (so with its
// bits): the positions of every level in tree order (mean_pool of the children), the positions of every
// block's nodes relative to their ball's centre (rotated and not), the children's positions relative to
// their parent (pooling and unpooling), and the edges grouped by receiver in edge order with p_j - p_i.
// Those are uploaded once per geometry; the weights once per model (one arena, the CPU's packed W^T).
//
// Arithmetic: the dense layers, BatchNorm, copies and the message mean are the CPU's operations in the
// CPU's order (emulation-tested); the norms sum in another order (warp butterflies), GELU uses the
// device's erff (the CPU a fitted polynomial) and the attention is the shared online softmax, so the
// result agrees with the CPU forward within float32 rounding, not bitwise.
//
// NOT YET RUN ON A GPU: compiled on a machine without a device; tests/gpu/test_gpu_erwin.cpp skips there.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "erwin_cuda_forward.hpp"
#include "erwin_distributed.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::erwin::detail::cuda_forward {

Block ErwinCudaForward::add_block(const BlockWeights& b) {
  Block k;
  k.dim = b.dim;
  k.heads = b.heads;
  k.ball = b.ball;
  k.hidden = b.hidden;
  k.norm1 = add(b.norm1, static_cast<std::size_t>(b.dim));
  k.norm2 = add(b.norm2, static_cast<std::size_t>(b.dim));
  k.bias = !b.sigma->empty();
  if (k.bias) k.sigma = add(b.sigma->data(), b.sigma->size());
  k.qkv = add_dense(*b.qkv);
  k.proj = add_dense(*b.proj);
  k.pe = add_dense(*b.pe);
  k.w1 = add_dense(*b.w1);
  k.w2 = add_dense(*b.w2);
  k.w3 = add_dense(*b.w3);
  const int E = b.dim / b.heads;
  if (E > cu::kMaxHeadDim)
    throw Error(ErrorCode::unsupported, "erwin: head width " + std::to_string(E) + " exceeds the CUDA attention's " +
                                            std::to_string(cu::kMaxHeadDim));
  return k;
}

ErwinCudaForward::ErwinCudaForward(const Network& net, int device, index_t edge_chunk)
    : net_(&net), cfg_(net.config()), device_(device), edge_chunk_(std::max<index_t>(1, edge_chunk)) {
  std::string why;
  const int count = cu::device_count(&why);
  if (device < 0 || device >= count)
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
  embed_ = add_dense(*nw.embed);
  for (const StepWeights& s : nw.steps) {
    const auto D = static_cast<std::size_t>(cfg_.c_hidden[0]);
    steps_.push_back({add_dense(*s.message), add_dense(*s.update), add(s.message_w, D), add(s.message_b, D),
                      add(s.update_w, D), add(s.update_b, D)});
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
  for (const kernels::PackedLinear* p : nw.pool) pool_.push_back(add_dense(*p));
  for (const kernels::PackedLinear* p : nw.unpool) unpool_.push_back(add_dense(*p));
  for (const BatchNormWeights& b : nw.pool_bn) pool_bn_.push_back({add(b.alpha->data(), b.alpha->size()), add(b.beta->data(), b.beta->size())});
  for (const BatchNormWeights& b : nw.unpool_bn)
    unpool_bn_.push_back({add(b.alpha->data(), b.alpha->size()), add(b.beta->data(), b.beta->size())});
  cu::DeviceGuard guard(device_);
  stream_ = cu::Stream(device_);
  upload(weights_, arena_);
  stream_.synchronize();
  arena_ = {};
}

void ErwinCudaForward::dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                             Activation act, const float* add_rows, index_t ld_add) {
  balltree::device::dense(l, weights_.data(), x, ldx, y, ldy, rows, act, add_rows, ld_add, stream_.get());
}

void ErwinCudaForward::copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
                            const std::int64_t* dst_index, index_t rows, int width) {
  balltree::device::copy_rows(src, ld_src, src_index, dst, ld_dst, dst_index, rows, width, stream_.get());
}

void ErwinCudaForward::norm(const float* x, index_t ldx, float* y, index_t ldy, index_t rows, int dim,
                            const float* weight, const float* bias, float eps, bool rms) {
  cu::NormArgs a;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  a.dim = dim;
  a.weight = weight;
  a.bias = bias;
  a.eps = eps;
  a.rms = rms;
  cu::norm(a, stream_.get());
}

void ErwinCudaForward::agree_pending() {
  const Status local = std::move(pending_);
  pending_ = {};
  if (const Comm* comm = layout_ ? layout_->comm() : nullptr) comm->agree_or_throw(local);
  else if (!local.ok()) local.raise();
}

// Message passing (as Network::Impl::run_mpnn): per step, for chunks of receivers, the message rows
// [h_j | h_i | p_j - p_i] in receiver order, m = LayerNorm(GELU(W x + b)), the mean per receiver; then
// [h_i | mean_i] -> LayerNorm(W' x + b') added to h.
void ErwinCudaForward::message_passing() {
  const int D = cfg_.c_hidden[0], d = cfg_.dimensionality;
  const index_t ld_msg = 2 * D + d, ld_upd = 2 * D, n = layout_->points();
  for (const Step& step : steps_) {
    // The halo rows (remote sources) take their owners' current rows: collective when distributed.
    agree_pending();
    layout_->refresh_halo(h_.data(), D, D, stream_);
    launch([&] {
    for (const auto& [r0, r1] : receiver_chunks_) {
      const index_t e0 = edge_start_host_[static_cast<std::size_t>(r0)], e1 = edge_start_host_[static_cast<std::size_t>(r1)];
      const index_t m = e1 - e0;
      if (m > 0) {
        copy(h_.data(), D, edge_src_.data() + e0, msg_in_.data(), ld_msg, nullptr, m, D);
        copy(h_.data(), D, edge_dst_.data() + e0, msg_in_.data() + D, ld_msg, nullptr, m, D);
        copy(edge_rel_.data() + e0 * d, d, nullptr, msg_in_.data() + 2 * D, ld_msg, nullptr, m, d);
        dense(step.message, msg_in_.data(), ld_msg, msg_.data(), D, m, Activation::gelu_erf);
        norm(msg_.data(), D, msg_.data(), D, m, D, w(step.message_w), w(step.message_b), 1e-5f, false);
      }
      cu::SegmentMeanArgs a;
      a.msg = msg_.data();
      a.ld_msg = D;
      a.start = edge_start_.data() + r0;
      a.receivers = r1 - r0;
      a.width = D;
      a.agg = agg_.data() + r0 * D;
      a.ld_agg = D;
      cu::segment_mean(a, stream_.get());
    }
    copy(h_.data(), D, nullptr, upd_in_.data(), ld_upd, nullptr, n, D);
    copy(agg_.data(), D, nullptr, upd_in_.data() + D, ld_upd, nullptr, n, D);
    dense(step.update, upd_in_.data(), ld_upd, upd_.data(), D, n);
    norm(upd_.data(), D, upd_.data(), D, n, D, w(step.update_w), w(step.update_b), 1e-5f, false);
    cu::RowBinaryArgs sum;
    sum.op = cu::RowOp::add;
    sum.a = h_.data();
    sum.lda = D;
    sum.b = upd_.data();
    sum.ldb = D;
    sum.y = h_.data();
    sum.ldy = D;
    sum.rows = n;
    sum.width = D;
    cu::row_binary(sum, stream_.get());
    });
  }
}

// One transformer block (as Network::Impl::run_block) on `rows` nodes whose balls are consecutive:
// x += proj(BMSA(RMSNorm1(x) + pe(rel))), x += w3(silu(w1 h) * w2 h) with h = RMSNorm2(x).
void ErwinCudaForward::run_block(const Block& b, float* x, index_t rows, const float* pos, const float* rel) {
  const int D = b.dim, d = cfg_.dimensionality, E = D / b.heads;
  const float eps = std::numeric_limits<float>::epsilon();
  norm(x, D, hb_.data(), D, rows, D, w(b.norm1), nullptr, eps, true);
  dense(b.pe, rel, d, hb_.data(), D, rows, Activation::none, hb_.data(), D);
  dense(b.qkv, hb_.data(), D, u_.data(), 3 * D, rows);
  cu::BallAttentionArgs a;
  a.rows = rows;
  a.ball = b.ball;
  a.heads = b.heads;
  a.E = E;
  a.q = u_.data();
  a.k = u_.data() + D;
  a.v = u_.data() + 2 * D;
  a.ld = 3 * D;
  a.scale = 1.0f / std::sqrt(static_cast<float>(E));
  a.sigma = b.bias ? w(b.sigma) : nullptr;
  a.positions = pos;
  a.ld_pos = d;
  a.dim = d;
  a.out = att_.data();
  a.ldo = D;
  cu::ball_attention(a, stream_.get());
  dense(b.proj, att_.data(), D, x, D, rows, Activation::none, x, D);
  norm(x, D, hb_.data(), D, rows, D, w(b.norm2), nullptr, eps, true);
  dense(b.w1, hb_.data(), D, a1_.data(), b.hidden, rows, Activation::silu);
  dense(b.w2, hb_.data(), D, a2_.data(), b.hidden, rows);
  cu::RowBinaryArgs gate;
  gate.op = cu::RowOp::multiply;
  gate.a = a1_.data();
  gate.lda = b.hidden;
  gate.b = a2_.data();
  gate.ldb = b.hidden;
  gate.y = a1_.data();
  gate.ldy = b.hidden;
  gate.rows = rows;
  gate.width = b.hidden;
  cu::row_binary(gate, stream_.get());
  dense(b.w3, a1_.data(), b.hidden, x, D, rows, Activation::none, x, D);
}

// The blocks of a level (as Network::Impl::run_blocks): odd blocks of a rotated model see the nodes in
// the rotated tree's order (gathered into xr_, scattered back).
void ErwinCudaForward::run_blocks(const std::vector<Block>& blocks, Level& level) {
  const int D = level.width;
  for (std::size_t j = 0; j < blocks.size(); ++j) {
    if (!(cfg_.rotate > 0 && j % 2 == 1)) {
      launch([&] { run_block(blocks[j], level.x.data(), level.nodes, level.pos.data(), level.rel.data()); });
      continue;
    }
    move([&] { layout_->to_rotated(level.index, level.x.data(), xr_.data(), D, stream_); });
    launch([&] { run_block(blocks[j], xr_.data(), level.nodes, level.pos_rot.data(), level.rel_rot.data()); });
    move([&] { layout_->from_rotated(level.index, xr_.data(), level.x.data(), D, stream_); });
  }
}

// The U-Net (as Stages::levels): encoder blocks and pooling (the encoder's node array of each level stays
// as the decoder's skip), the bottleneck, then unpooling into the skip with BatchNorm and the decoder blocks.
void ErwinCudaForward::levels() {
  const int L = cfg_.levels(), d = cfg_.dimensionality;
  for (int i = 0; i + 1 < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = levels_[iu];
    Level& next = levels_[iu + 1];
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
           join_.data() + static_cast<index_t>(j) * Din, ld_in, nullptr, np, Din);
    copy(lv.child_rel.data(), static_cast<index_t>(s) * d, nullptr, join_.data() + static_cast<index_t>(s) * Din, ld_in,
         nullptr, np, s * d);
    dense(pool_[iu], join_.data(), ld_in, next.x.data(), Dout, np);
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
  run_blocks(bottleneck_, levels_.back());
  for (int i = L - 2; i >= 0; --i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = levels_[iu];
    const Level& parent = levels_[iu + 1];
    const int s = cfg_.strides[iu], Din = parent.width, Dout = lv.width;
    // [x of the parent | its children's positions relative to it] -> Linear (s x Dout per parent), added
    // to the skip's children, then BatchNorm.
    const index_t np = parent.nodes, ld_in = Din + static_cast<index_t>(s) * d;
    launch([&] {
    copy(parent.x.data(), Din, nullptr, join_.data(), ld_in, nullptr, np, Din);
    copy(lv.child_rel.data(), static_cast<index_t>(s) * d, nullptr, join_.data() + Din, ld_in, nullptr, np, s * d);
    dense(unpool_[iu], join_.data(), ld_in, z_.data(), static_cast<index_t>(s) * Dout, np);
    cu::BatchNormArgs bn;
    bn.x = lv.x.data();
    bn.ld = Dout;
    bn.rows = lv.nodes;
    bn.dim = Dout;
    bn.alpha = w(unpool_bn_[iu].alpha);
    bn.beta = w(unpool_bn_[iu].beta);
    bn.add = z_.data();  // child (p s + j) <- z[p][j Dout ..]: rows of Dout
    bn.ld_add = Dout;
    cu::batch_norm(bn, stream_.get());
    });
    run_blocks(decoder_[iu], lv);
  }
}

std::vector<float> ErwinCudaForward::forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                             std::span<const float> positions, const balltree::Batch& batch,
                                             std::span<const std::int64_t> edge_index, bool same_geometry) {
  const int d = cfg_.dimensionality;
  const index_t n = batch.points();
  if (n < 1) throw Error(ErrorCode::input, "erwin: no points");
  if (static_cast<index_t>(features.size()) != n * cfg_.c_in)
    throw Error(ErrorCode::input, "erwin: features has " + std::to_string(features.size()) + " values, expected " +
                                      std::to_string(n) + " points x c_in " + std::to_string(cfg_.c_in));
  if (static_cast<index_t>(positions.size()) != n * d)
    throw Error(ErrorCode::input, "erwin: positions has " + std::to_string(positions.size()) + " values, expected " +
                                      std::to_string(n) + " points x " + std::to_string(d));
  Stages::check_features(*net_, features, 0);
  const bool same = same_geometry && layout_ && layout_->points() == n;
  return run(features, &trees, same, [&] { return single_process_layout(*net_, trees, positions, n, edge_index); });
}

std::vector<float> ErwinCudaForward::forward(const DistributedPlan& plan, std::span<const float> block_features,
                                             bool same_geometry) {
  if (static_cast<index_t>(block_features.size()) != plan.block_rows() * cfg_.c_in)
    throw Error(ErrorCode::internal, "erwin (distributed, device): block features of the wrong size");
  collectively(plan.comm(), [&] { Stages::check_features(*net_, block_features, plan.block_begin()); });
  return run(block_features, &plan, same_geometry, [&] { return distributed_layout(*net_, plan); });
}

std::vector<float> ErwinCudaForward::run(std::span<const float> features, const void* geometry_source, bool same_geometry,
                                         const std::function<std::unique_ptr<DeviceLayout>()>& make_layout) {
  const int D0 = cfg_.c_hidden[0];
  pending_ = {};
  try {
    // The guard and the events are made inside launch(): a failure there is agreed like any other (in
    // the distributed forward no rank may leave before the next collective).
    std::optional<cu::DeviceGuard> guard;
    std::optional<cu::Event> g0, g1, t0, t1;
    launch([&] { guard.emplace(device_); });
    geometry_ms_ = 0.0;
    if (!same_geometry || !layout_ || geometry_source_ != geometry_source) {
      layout_.reset();
      geometry_source_ = nullptr;
      launch([&] {
        g0.emplace(device_);
        g1.emplace(device_);
        g0->record(stream_.get());
      });
      layout_ = make_layout();
      set_geometry();  // agrees its errors
      launch([&] {
        g1->record(stream_.get());
        stream_.synchronize();
        geometry_ms_ = g1->elapsed_ms_since(*g0);
      });
      geometry_source_ = geometry_source;
    }
    const index_t n = layout_->points();
    std::vector<float> result(static_cast<std::size_t>(n * D0));
    launch([&] {
      t0.emplace(device_);
      t1.emplace(device_);
      t0->record(stream_.get());
      upload(features_, features);
      dense(embed_, features_.data(), cfg_.c_in, h_.data(), D0, n);
    });
    if (cfg_.mp_steps > 0) message_passing();
    Level& level0 = levels_.front();
    move([&] { layout_->to_slots(h_.data(), D0, level0.x.data(), D0, D0, stream_); });
    levels();
    move([&] { layout_->to_points(level0.x.data(), D0, out_.data(), D0, D0, stream_); });
    launch([&] {
      cu::copy_to_host(result.data(), out_.data(), result.size() * sizeof(float), stream_.get());
      t1->record(stream_.get());
      stream_.synchronize();
      forward_ms_ = t1->elapsed_ms_since(*t0);
    });
    agree_pending();
    return result;
  } catch (...) {
    layout_.reset();  // the geometry is rebuilt by the next call
    geometry_source_ = nullptr;
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
