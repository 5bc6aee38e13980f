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

#include "erwin_cuda_layout.hpp"
#include "erwin_device.hpp"
#include "erwin_distributed.hpp"
#include "erwin_stages.hpp"
#include "../balltree/point_device.hpp"
#include "../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate::erwin::detail {
namespace {

namespace cu = kernels::cuda;
using kernels::Activation;

/// Call inside a catch block: CUDA runtime errors and rejected launches become Error naming the device.
[[noreturn]] void raise_current(int device) { surrogate::detail::raise_current_cuda_error("erwin", device); }

using balltree::device::Dense;
using balltree::device::ball_relative;
struct Block {
  int dim = 0, heads = 0, ball = 0, hidden = 0;
  std::size_t norm1 = 0, norm2 = 0, sigma = 0;
  bool bias = false;  // distance bias (sigma)
  Dense qkv, proj, pe, w1, w2, w3;
};
struct Step {
  Dense message, update;
  std::size_t message_w = 0, message_b = 0, update_w = 0, update_b = 0;
};
struct Norm {  // folded eval BatchNorm
  std::size_t alpha = 0, beta = 0;
};

/// The geometry of one level: positions (level order) and ball-relative positions, the same for the
/// rotated order, and the children's positions relative to their parent (transition to the next level).
struct Level {
  int index = 0;
  index_t nodes = 0;
  int width = 0;  // c_hidden of the level = row stride of its node array
  cu::DeviceBuffer<float> pos, rel, pos_rot, rel_rot, child_rel;
  cu::DeviceBuffer<float> x;  // the node array (nodes x width); the encoder's output is the decoder's skip
};

class ErwinCudaForward final : public ErwinDeviceForward {
 public:
  ErwinCudaForward(const Network& net, int device, index_t edge_chunk);
  int device() const override { return device_; }
  std::vector<float> forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                             std::span<const float> positions, const balltree::Batch& batch,
                             std::span<const std::int64_t> edge_index, bool same_geometry) override;
  std::vector<float> forward(const DistributedPlan& plan, std::span<const float> block_features,
                             bool same_geometry) override;
  double last_forward_ms() const override { return forward_ms_; }
  double last_geometry_ms() const override { return geometry_ms_; }

 private:
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, std::span<const T> src) {
    balltree::device::upload(dst, src, device_, stream_.get());
  }
  template <class T>
  void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src) {
    upload(dst, std::span<const T>(src));
  }
  std::size_t add(const float* values, std::size_t count) { return balltree::device::append(arena_, values, count); }
  Dense add_dense(const kernels::PackedLinear& layer) { return balltree::device::append_dense(arena_, layer); }
  Block add_block(const BlockWeights& b);
  const float* w(std::size_t offset) const { return weights_.data() + offset; }

  /// Runs `work` (launches) unless an earlier one failed; a failure is kept as pending_ (an Error).
  template <class F>
  void launch(F&& work);
  /// A movement of the layout: after the pending error is agreed; collective when distributed, else a launch.
  template <class F>
  void move(F&& movement);
  /// The pending error agreed over the layout's ranks (or raised, in one process): call before every
  /// collective movement and at the end.
  void agree_pending();
  /// The whole forward on the current layout: features (points x c_in, host) -> points x c_hidden[0].
  std::vector<float> run(std::span<const float> features, const void* geometry_source, bool same_geometry,
                         const std::function<std::unique_ptr<DeviceLayout>()>& make_layout);
  void set_geometry();
  void dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
             Activation act = Activation::none, const float* add = nullptr, index_t ld_add = 0);
  void copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
            const std::int64_t* dst_index, index_t rows, int width);
  void norm(const float* x, index_t ldx, float* y, index_t ldy, index_t rows, int dim, const float* weight,
            const float* bias, float eps, bool rms);
  void message_passing();
  void run_block(const Block& b, float* x, index_t rows, const float* pos, const float* rel);
  void run_blocks(const std::vector<Block>& blocks, Level& level);
  void levels();

  const Network* net_;
  Config cfg_;
  int device_ = -1;
  index_t edge_chunk_;  // messages per chunk of receivers (bounds msg_in_ and msg_)
  cu::Stream stream_;
  std::vector<float> arena_;  // host image of the weights (kept only until the upload)
  cu::DeviceBuffer<float> weights_;
  Dense embed_;
  std::vector<Step> steps_;
  std::vector<std::vector<Block>> encoder_, decoder_;
  std::vector<Block> bottleneck_;
  std::vector<Dense> pool_, unpool_;
  std::vector<Norm> pool_bn_, unpool_bn_;

  // Geometry (set_geometry).
  std::unique_ptr<DeviceLayout> layout_;
  const void* geometry_source_ = nullptr;  // the trees or the plan the layout was made of
  Status pending_;                         // a failed launch, not yet agreed
  std::vector<Level> levels_;
  cu::DeviceBuffer<std::int64_t> edge_src_, edge_dst_, edge_start_;  // edges grouped by receiver
  cu::DeviceBuffer<float> edge_rel_;                                 // p_src - p_dst, in that order
  std::vector<std::pair<index_t, index_t>> receiver_chunks_;          // [r0, r1) with few enough edges
  std::vector<std::int64_t> edge_start_host_;  // the same on the host
  // Work arrays (sized by set_geometry).
  cu::DeviceBuffer<float> features_, h_, msg_in_, msg_, agg_, upd_in_, upd_, out_;
  cu::DeviceBuffer<float> xr_, hb_, att_, u_, a1_, a2_, join_, z_;
  double forward_ms_ = 0.0, geometry_ms_ = 0.0;
};

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

template <class F>
void ErwinCudaForward::launch(F&& work) {
  if (!pending_.ok()) return;
  try {
    work();
  } catch (...) {
    try {
      raise_current(device_);
    } catch (...) {
      pending_ = Status::from_current_exception();
    }
  }
}

template <class F>
void ErwinCudaForward::move(F&& movement) {
  agree_pending();
  if (layout_->comm()) movement();  // DeviceExchange: its own errors agreed
  else launch(movement);
}

void ErwinCudaForward::agree_pending() {
  const Status local = std::move(pending_);
  pending_ = {};
  if (const Comm* comm = layout_ ? layout_->comm() : nullptr) comm->agree_or_throw(local);
  else if (!local.ok()) local.raise();
}

// The geometry of the current layout on the device: the positions of every level (level 0 the slots,
// then the children's means), ball-relative positions (tree and rotated order), the children's positions
// relative to their parent, the edges grouped by receiver, the layout's index arrays or exchange lists,
// and the work arrays. Host arithmetic is the CPU forward's (mean_pool, ball_relative); the rotated
// positions come from the layout (a collective exchange when distributed).
void ErwinCudaForward::set_geometry() {
  const DeviceLayout& layout = *layout_;
  const int d = cfg_.dimensionality, L = cfg_.levels();
  const std::span<const index_t> nodes = layout.level_nodes();
  const bool rotate = cfg_.rotate > 0;
  const index_t n = layout.points(), n_all = layout.points() + layout.halo_rows();
  launch([&] { layout_->upload(device_, stream_); });

  levels_.clear();
  levels_.resize(static_cast<std::size_t>(L));
  std::vector<float> pos(layout.slot_positions().begin(), layout.slot_positions().end());
  std::size_t scratch_ld = 1, scratch_u = 1, scratch_h = 1, scratch_join = 1, scratch_z = 1;
  for (int i = 0; i < L; ++i) {
    const auto iu = static_cast<std::size_t>(i);
    Level& lv = levels_[iu];
    lv.index = i;
    lv.nodes = nodes[iu];
    lv.width = cfg_.c_hidden[iu];
    const int ball = cfg_.ball_sizes[iu];
    std::vector<float> rotated_pos;
    if (rotate) rotated_pos = layout.rotated_rows(i, pos, d);  // collective when distributed
    launch([&] {
      upload(lv.pos, pos);
      upload(lv.rel, ball_relative(pos, d, ball));
      if (rotate) {
        upload(lv.pos_rot, rotated_pos);
        upload(lv.rel_rot, ball_relative(rotated_pos, d, ball));
      }
      lv.x.resize(static_cast<std::size_t>(std::max<index_t>(1, lv.nodes * lv.width)), device_);
    });
    const auto rows = static_cast<std::size_t>(lv.nodes);
    const auto D = static_cast<std::size_t>(lv.width);
    scratch_u = std::max(scratch_u, rows * 3 * D);
    scratch_h = std::max(scratch_h, rows * D * static_cast<std::size_t>(cfg_.mlp_ratio));
    scratch_ld = std::max(scratch_ld, rows * D);
    if (i + 1 == L) break;
    // The next level's positions and the children's positions relative to their parent (pooling and
    // unpooling use the same differences: child - mean of the stride group).
    const int s = cfg_.strides[iu];
    std::vector<float> parent = s == 1 ? pos : balltree::mean_pool(pos, d, s);
    std::vector<float> child_rel(pos.size());
    for (std::size_t c = 0; c < pos.size() / static_cast<std::size_t>(d); ++c)
      for (int e = 0; e < d; ++e)
        child_rel[c * d + e] = pos[c * d + e] - parent[(c / static_cast<std::size_t>(s)) * d + e];
    launch([&] { upload(lv.child_rel, child_rel); });
    const auto np = static_cast<std::size_t>(nodes[iu + 1]), Dn = static_cast<std::size_t>(cfg_.c_hidden[iu + 1]);
    const auto su = static_cast<std::size_t>(s), du = static_cast<std::size_t>(d);
    scratch_join = std::max({scratch_join, np * su * (D + du), np * (Dn + su * du)});
    scratch_z = std::max(scratch_z, np * su * D);
    pos = std::move(parent);
  }

  // Edges grouped by receiver, each group in edge order (as run_mpnn), and p_src - p_dst per edge.
  const auto D0 = static_cast<std::size_t>(cfg_.c_hidden[0]);
  const auto nu = static_cast<std::size_t>(n);
  receiver_chunks_.clear();
  std::vector<std::int64_t> start(nu + 1, 0), src_sorted, dst_sorted;
  std::vector<float> rel;
  std::size_t most = 1;
  if (cfg_.mp_steps > 0) {
    const std::span<const std::int64_t> edge_index = layout.edges();
    const std::span<const float> positions = layout.edge_positions();
    std::size_t E = edge_index.size() / 2;
    const std::int64_t* src = edge_index.data();
    const std::int64_t* dst = edge_index.data() + E;
    for (std::size_t e = 0; e < E; ++e)
      if (src[e] < 0 || src[e] >= n_all || dst[e] < 0 || dst[e] >= n) {  // the layouts check: a bug, agreed below
        if (pending_.ok()) pending_ = {ErrorCode::internal, "erwin: local edge " + std::to_string(e) + " out of range"};
        E = 0;
      }
    std::vector<std::int64_t> fill(nu);
    src_sorted.resize(E);
    dst_sorted.resize(E);
    for (std::size_t e = 0; e < E; ++e) ++start[static_cast<std::size_t>(dst[e]) + 1];
    for (std::size_t i = 0; i < nu; ++i) start[i + 1] += start[i];
    std::copy(start.begin(), start.end() - 1, fill.begin());
    rel.resize(E * static_cast<std::size_t>(d));
    for (std::size_t e = 0; e < E; ++e) {
      const auto q = static_cast<std::size_t>(fill[static_cast<std::size_t>(dst[e])]++);
      src_sorted[q] = src[e];
      dst_sorted[q] = dst[e];
      for (int c = 0; c < d; ++c) rel[q * d + c] = positions[static_cast<std::size_t>(src[e] * d + c)] - positions[static_cast<std::size_t>(dst[e] * d + c)];
    }
    for (index_t r0 = 0; r0 < n;) {
      index_t r1 = r0 + 1;
      while (r1 < n && start[static_cast<std::size_t>(r1) + 1] - start[static_cast<std::size_t>(r0)] <= edge_chunk_) ++r1;
      receiver_chunks_.emplace_back(r0, r1);
      most = std::max<std::size_t>(most, static_cast<std::size_t>(start[static_cast<std::size_t>(r1)] - start[static_cast<std::size_t>(r0)]));
      r0 = r1;
    }
    edge_start_host_ = start;
  }
  launch([&] {
    for (cu::DeviceBuffer<float>* b : {&xr_, &hb_, &att_}) b->resize(scratch_ld, device_);
    u_.resize(scratch_u, device_);
    a1_.resize(scratch_h, device_);
    a2_.resize(scratch_h, device_);
    join_.resize(scratch_join, device_);
    z_.resize(scratch_z, device_);
    if (cfg_.mp_steps > 0) {
      upload(edge_src_, src_sorted);
      upload(edge_dst_, dst_sorted);
      upload(edge_start_, start);
      upload(edge_rel_, rel);
      msg_in_.resize(most * (2 * D0 + static_cast<std::size_t>(d)), device_);
      msg_.resize(most * D0, device_);
      agg_.resize(std::max<std::size_t>(1, nu * D0), device_);
      upd_in_.resize(std::max<std::size_t>(1, nu * 2 * D0), device_);
      upd_.resize(std::max<std::size_t>(1, nu * D0), device_);
    }
    h_.resize(std::max<std::size_t>(1, static_cast<std::size_t>(n_all) * D0), device_);
    out_.resize(std::max<std::size_t>(1, nu * D0), device_);
    features_.resize(std::max<std::size_t>(1, nu * static_cast<std::size_t>(cfg_.c_in)), device_);
    stream_.synchronize();  // the host arrays above are released on return
  });
  agree_pending();
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

}  // namespace

std::unique_ptr<ErwinDeviceForward> make_erwin_cuda_forward(const Network& net, int device, index_t edge_chunk) {
  try {
    return std::make_unique<ErwinCudaForward>(net, device, edge_chunk);
  } catch (...) {
    raise_current(device);
  }
}

}  // namespace surrogate::erwin::detail
