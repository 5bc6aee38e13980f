// The BSA forward on a CUDA device (device.hpp): the layers of network.cpp on device arrays (the layer
// helpers of device/layers.hpp, the gate kernels, the three ball-tree attention kernels and the top-S
// block selection); here the one-process batch, a plan's slots in distributed.cpp. What stays on the host
// and the arithmetic against the CPU: share/docs/balltree.md, "BSA on a CUDA device".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "../../balltree/cuda/geometry.hpp"
#include "../../cuda_errors.hpp"
#include "../branches.hpp"
#include "forward.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::bsa::detail {

using balltree::device::ball_relative;
using kernels::Activation;

namespace {

SparseShape sparse_shape(const Config& c) {
  SparseShape s;
  s.P = c.ball_size;
  s.C = c.compress_block_size;
  s.S = c.selected_blocks_number;
  s.G = c.group_selection_size;
  s.group_selection = c.use_group_selection;
  s.mask_own_ball = c.should_mask_blocks_in_ball;
  s.coarse_q_attn = c.use_coarse_q_attn;
  s.block_level = c.block_level_importance();
  return s;
}

}  // namespace

BsaCudaForward::BsaCudaForward(const Network& net, int device) : net_(&net), cfg_(net.config()), device_(device) {
  std::string why;
  const int count = device == cu::kEmulatedDevice ? 0 : cu::device_count(&why);
  if (device != cu::kEmulatedDevice && (device < 0 || device >= count))
    throw Error(ErrorCode::unsupported, "bsa: CUDA device " + std::to_string(device) + " requested, but " +
                                            (count == 0 ? "no CUDA device is visible (" + why + ")"
                                                        : std::to_string(count) + " device(s) are visible"));
  if (cfg_.dimensionality > cu::kMaxBallPositionDim)
    throw Error(ErrorCode::unsupported, "bsa: the CUDA forward takes positions of up to " +
                                            std::to_string(cu::kMaxBallPositionDim) + " coordinates, the model has " +
                                            std::to_string(cfg_.dimensionality));
  if (cfg_.head_dim() > cu::kMaxHeadDim)
    throw Error(ErrorCode::unsupported, "bsa: head width " + std::to_string(cfg_.head_dim()) +
                                            " exceeds the CUDA attention's " + std::to_string(cu::kMaxHeadDim));
  const int D = cfg_.c_hidden;
  const bool sparse = cfg_.attention_type == AttentionType::sparse;
  if (sparse && cfg_.selected_blocks_number > cu::kMaxSelectedBlocks)
    throw Error(ErrorCode::unsupported, "bsa: selected_blocks_number = " + std::to_string(cfg_.selected_blocks_number) +
                                            " exceeds the CUDA selection's " + std::to_string(cu::kMaxSelectedBlocks));
  const auto add = [&](const std::vector<float>& values) { return weights_.append(values); };
  const auto add_dense = [&](const kernels::PackedLinear& layer) { return weights_.append_dense(layer); };
  const float eps = std::numeric_limits<float>::epsilon();
  embed_ = add_dense(Stages::embed_weights(net));
  for (const LayerWeights& lw : Stages::layer_weights(net)) {
    DeviceLayer L;
    L.norm1 = weights_.append_norm({lw.norm1, static_cast<std::size_t>(D)}, {}, true, eps);
    L.norm2 = weights_.append_norm({lw.norm2, static_cast<std::size_t>(D)}, {}, true, eps);
    L.qkv = add_dense(*lw.qkv);
    L.out_proj = add_dense(*lw.out_proj);
    L.w1 = add_dense(*lw.w1);
    L.w2 = add_dense(*lw.w2);
    L.w3 = add_dense(*lw.w3);
    if (cfg_.attention_type != AttentionType::global) {
      L.position_proj = add_dense(*lw.position_proj);
      L.sigma = add(*lw.sigma);
    }
    if (sparse) {
      if (cfg_.use_compress_mlp)
        for (int i = 0; i < 2; ++i) {
          L.k_mlp[i] = add_dense(lw.k_mlp[i]);
          L.v_mlp[i] = add_dense(lw.v_mlp[i]);
          if (cfg_.block_level_importance()) L.q_mlp[i] = add_dense(lw.q_mlp[i]);
        }
      L.token_gate = lw.gate != nullptr;
      if (L.token_gate) L.gate = add_dense(*lw.gate);
      else L.static_gate = add(*lw.static_gate);
    }
    layers_.push_back(L);
  }
  try {
    cu::DeviceGuard guard(device_);
    stream_ = cu::Stream(device_);
    weights_.upload(device_, stream_.get());
  } catch (...) {
    raise_current();
  }
}

void BsaCudaForward::raise_current() const { surrogate::detail::raise_current_cuda_error("bsa", device_); }

void BsaCudaForward::dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                           Activation act, const float* residual, index_t ld_residual) {
  surrogate::device::dense(l, weights_.data(), x, ldx, y, ldy, rows, stream_.get(), act, residual, ld_residual);
}

void BsaCudaForward::copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
                          const std::int64_t* dst_index, index_t rows, int width) {
  surrogate::device::copy_rows(src, ld_src, src_index, dst, ld_dst, dst_index, rows, width, stream_.get());
}

// RMSNorm of the rows (eps = float epsilon, no bias), g_->rows x c_hidden.
void BsaCudaForward::rms_norm(const Norm& n, const float* x, float* y) {
  const int D = cfg_.c_hidden;
  surrogate::device::norm(n, weights_.data(), x, D, y, D, g_->rows, stream_.get());
}

void BsaCudaForward::map(cu::RowMap op, float* x, index_t ld, index_t rows, int width) {
  surrogate::device::map_rows(op, x, ld, rows, width, stream_.get());
}

void BsaCudaForward::set_rows(std::span<const float> pos, std::span<const float> pos_rot, index_t points) {
  const int d = cfg_.dimensionality, D = cfg_.c_hidden, H = cfg_.num_heads;
  const int ball = cfg_.attention_type == AttentionType::ball ? cfg_.attention_ball_size : cfg_.ball_size;
  const std::vector<float> tree_pos(pos.begin(), pos.end());
  upload(g_->pos, tree_pos);
  if (cfg_.attention_type != AttentionType::global) upload(g_->rel, ball_relative(tree_pos, d, ball));
  if (cfg_.should_rotate) {
    const std::vector<float> rotated(pos_rot.begin(), pos_rot.end());
    upload(g_->pos_rot, rotated);
    if (cfg_.attention_type != AttentionType::global) upload(g_->rel_rot, ball_relative(rotated, d, ball));
  }
  const auto R = static_cast<std::size_t>(g_->rows), Du = static_cast<std::size_t>(D);
  const auto hidden = static_cast<std::size_t>(layers_.empty() ? 1 : layers_.front().w1.out);
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
      const int mlp_hidden = layers_.front().k_mlp[0].out;
      g_->mlp_hidden.resize(Bu * static_cast<std::size_t>(H) * static_cast<std::size_t>(mlp_hidden), device_);
    } else {
      std::vector<std::int64_t> start(static_cast<std::size_t>(blocks) + 1);
      for (index_t b = 0; b <= blocks; ++b) start[static_cast<std::size_t>(b)] = b * C;
      upload(g_->block_start, start);
    }
    // The selection of every segment, one after another.
    const SparseShape s = sparse_shape(cfg_);
    g_->sel_offsets.assign(1, 0);
    for (const RowLayout::Segment& g : g_->layout.segments)
      g_->sel_offsets.push_back(g_->sel_offsets.back() +
                             static_cast<std::size_t>(g.samples * H * s.selection_rows(g.length) * s.S));
    g_->sel.resize(std::max<std::size_t>(1, g_->sel_offsets.back()), device_);
    if (g_->on_plan) g_->sel_host.resize(g_->sel_offsets.back());
  }
  g_->features.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points * cfg_.c_in)), device_);
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
  std::vector<float> pos(static_cast<std::size_t>(g_->rows * d)), pr(cfg_.should_rotate ? pos.size() : 0);
  for (index_t s = 0; s < g_->rows; ++s)
    std::copy_n(positions.data() + tree.index[static_cast<std::size_t>(s)] * d, d, pos.data() + s * d);
  if (cfg_.should_rotate) {
    const std::vector<std::int64_t>& rot = trees.rotated[1];
    for (std::size_t i = 0; i < rot.size(); ++i)
      std::copy_n(pos.begin() + rot[i] * d, d, pr.begin() + static_cast<std::ptrdiff_t>(i * d));
    upload(g_->rot, rot);
  }
  // One segment: every sample whole.
  g_->layout = RowLayout{};
  g_->layout.rows = g_->rows;
  g_->layout.n = g_->n;
  g_->layout.samples = static_cast<std::int64_t>(tree.slot_offsets.size()) - 1;
  g_->layout.segments.push_back({0, static_cast<int>(g_->layout.samples), g_->n, 0, 0});
  upload(g_->tree_index, tree.index);
  upload(g_->slot, tree.slot_of_point());
  set_rows(pos, pr, points);
}

// Compressed blocks of q, k or v (column 0, D or 2 D of u) into dst (blocks x D): the MLP on each
// (block, head) of C E values, token-major (Linear, ReLU, Linear: rows b H + h of E = block b's row of
// D), or the mean over the block (the CPU's sum from 0 in token order, divided by C).
void BsaCudaForward::compress(const Dense* mlp, int column, float* dst) {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim(), C = cfg_.compress_block_size;
  const index_t blocks = g_->rows / C;
  if (!cfg_.use_compress_mlp) {
    cu::SegmentMeanArgs a;
    a.msg = g_->u.data() + column;
    a.ld_msg = 3 * D;
    a.start = g_->block_start.data();
    a.receivers = blocks;
    a.width = D;
    a.agg = dst;
    a.ld_agg = D;
    cu::segment_mean(a, stream_.get());
    return;
  }
  const index_t mlp_rows = blocks * H;
  copy(g_->u.data() + column, E, g_->compress_index.data(), g_->mlp_in.data(), E, nullptr, mlp_rows * C, E);
  dense(mlp[0], g_->mlp_in.data(), static_cast<index_t>(C) * E, g_->mlp_hidden.data(), mlp[0].out, mlp_rows);
  map(cu::RowMap::relu, g_->mlp_hidden.data(), mlp[0].out, mlp_rows, mlp[0].out);
  dense(mlp[1], g_->mlp_hidden.data(), mlp[0].out, dst, E, mlp_rows);
}

// Sparse attention (BSA): local, coarse and fine branches into g_->local, g_->coarse, g_->fine, then the gate
// into g_->o. The coarse branch and the selection per segment, against all compressed blocks of the
// segment's samples (on a plan: all-gathered); the fine branch of a whole sample reads its own rows,
// that of a part of a sample the selected blocks fetched from their owners.
void BsaCudaForward::sparse_attention(const DeviceLayer& L, const float* pos) {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim(), d = cfg_.dimensionality;
  const int C = cfg_.compress_block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(E));
  const index_t nb = g_->n / C;
  const SparseShape s = sparse_shape(cfg_);
  const std::vector<RowLayout::Segment>& segments = g_->layout.segments;

  on_device([&] {
    cu::BallAttentionLaunch local;
    local.rows = g_->rows;
    local.ball = cfg_.ball_size;
    local.heads = H;
    local.E = E;
    local.q = g_->u.data();
    local.k = g_->u.data() + D;
    local.v = g_->u.data() + 2 * D;
    local.ld = 3 * D;
    local.scale = scale;
    local.sigma = w(L.sigma);
    local.positions = pos;
    local.ld_pos = d;
    local.dim = d;
    local.out = g_->local.data();
    local.ldo = D;
    cu::ball_attention(local, stream_.get());
    compress(L.k_mlp, D, g_->kc.data());
    compress(L.v_mlp, 2 * D, g_->vc.data());
    if (s.block_level) compress(L.q_mlp, 0, g_->qc.data());
  });
  // The compressed keys and values of every block of the segments' samples.
  const float *k_all = g_->kc.data(), *v_all = g_->vc.data();
  if (plan_ != nullptr) {
    gather_compressed();
    k_all = g_->kc_all.data();
    v_all = g_->vc_all.data();
  }

  // The coarse branch and the selection, per segment (the window's in-sample offset row0 places the
  // own-ball mask); in one pass when the coarse queries are the selection's.
  on_device([&] {
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const RowLayout::Segment& g = segments[i];
      cu::CoarseAttentionArgs coarse;
      coarse.samples = g.samples;
      coarse.heads = H;
      coarse.E = E;
      coarse.q = s.coarse_q_attn ? g_->qc.data() + g.begin / C * D : g_->u.data() + g.begin * 3 * D;
      coarse.ldq = s.coarse_q_attn ? D : 3 * D;
      coarse.queries = s.coarse_q_attn ? g.length / C : g.length;
      coarse.k = k_all + g.sample * nb * D;
      coarse.v = v_all + g.sample * nb * D;
      coarse.ldkv = D;
      coarse.keys = nb;
      coarse.scale = scale;
      coarse.out = g_->coarse.data() + g.begin * D;
      coarse.ldo = D;
      coarse.copies = s.coarse_q_attn ? C : 1;
      cu::BlockSelectionArgs sel;
      sel.samples = g.samples;
      sel.heads = H;
      sel.E = E;
      sel.q = s.block_level ? g_->qc.data() + g.begin / C * D : g_->u.data() + g.begin * 3 * D;
      sel.ldq = s.block_level ? D : 3 * D;
      sel.group = s.block_level ? 1 : s.tokens_per_row();
      sel.rows = s.selection_rows(g.length);
      sel.k = k_all + g.sample * nb * D;
      sel.ldk = D;
      sel.blocks = nb;
      sel.scale = scale;
      sel.S = s.S;
      if (s.mask_own_ball) {
        sel.ball_tokens = s.P;
        sel.ball_blocks = s.P / C;
      }
      sel.row_tokens = s.block_level ? C : s.tokens_per_row();
      sel.row0 = s.selection_rows(g.row0);
      sel.sel = g_->sel.data() + g_->sel_offsets[i];
      if (s.coarse_q_attn && s.S <= cu::kMaxOnePassSelectedBlocks) {
        cu::coarse_attention_and_select(coarse, sel, stream_.get());
      } else {
        cu::coarse_attention(coarse, stream_.get());
        cu::select_blocks(sel, stream_.get());
      }
    }
    // The blocks to fetch are chosen on the host.
    if (plan_ != nullptr && g_->any_partial) {
      cu::copy_to_host(g_->sel_host.data(), g_->sel.data(), g_->sel_host.size() * sizeof(std::int32_t), stream_.get());
      stream_.synchronize();
    }
  });
  if (plan_ != nullptr && g_->any_partial) fetch_selected_blocks();

  on_device([&] {
    std::size_t partial = 0;
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const RowLayout::Segment& g = segments[i];
      const index_t sel_rows = s.selection_rows(g.length);
      cu::SelectedBlockAttentionArgs fine;
      fine.samples = g.samples;
      fine.n = g.length;
      fine.heads = H;
      fine.E = E;
      fine.q = g_->u.data() + g.begin * 3 * D;
      fine.ld = 3 * D;
      fine.scale = scale;
      fine.C = C;
      fine.S = s.S;
      fine.tokens_per_row = static_cast<int>(g.length / sel_rows);
      fine.rows = sel_rows;
      fine.sel = g_->sel.data() + g_->sel_offsets[i];
      fine.out = g_->fine.data() + g.begin * D;
      fine.ldo = D;
      if (g.length == g_->n) {  // whole samples: their own rows
        fine.k = fine.q + D;
        fine.v = fine.q + 2 * D;
      } else {  // part of a sample: the fetched blocks
        fine.k = g_->fetched.data();
        fine.v = g_->fetched.data() + D;
        fine.ldkv = 2 * D;
        fine.first_row = g_->first_row.data() + partial++ * nb;
        fine.blocks = nb;
      }
      cu::selected_block_attention(fine, stream_.get());
    }

    cu::GatedSumArgs g;
    g.local = g_->local.data();
    g.coarse = g_->coarse.data();
    g.fine = g_->fine.data();
    g.ld = D;
    g.out = g_->o.data();
    g.ldo = D;
    g.rows = g_->rows;
    g.heads = H;
    g.E = E;
    if (L.token_gate) {
      g.gates = g_->gates.data();
      g.ld_gates = 3 * H;
    } else {
      g.static_gates = w(L.static_gate);
    }
    cu::gated_sum(g, stream_.get());
  });
}

// Global attention: every token attends to all n tokens of its sample (streamed), from the sample's own
// rows when the segment holds it whole, else from its K/V rows fetched from their owners.
void BsaCudaForward::global_attention() {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim();
  if (plan_ != nullptr && g_->any_partial) fetch_sample_rows();
  on_device([&] {
    index_t partial = 0;
    for (const RowLayout::Segment& g : g_->layout.segments) {
      cu::CoarseAttentionArgs a;
      a.samples = g.samples;
      a.heads = H;
      a.E = E;
      a.q = g_->u.data() + g.begin * 3 * D;
      a.ldq = 3 * D;
      a.queries = g.length;
      if (g.length == g_->n) {
        a.k = a.q + D;
        a.v = a.q + 2 * D;
        a.ldkv = 3 * D;
      } else {
        a.k = g_->fetched.data() + partial++ * g_->n * 2 * D;
        a.v = a.k + D;
        a.ldkv = 2 * D;
      }
      a.keys = g_->n;
      a.scale = 1.0f / std::sqrt(static_cast<float>(E));
      a.out = g_->o.data() + g.begin * D;
      a.ldo = D;
      a.copies = 1;
      cu::coarse_attention(a, stream_.get());
    }
  });
}

// One layer (as Network::Impl::run_layer): x += out_proj(attention(RMSNorm1(x) [+ position_proj(rel)])),
// x += w3(silu(w1 h) * w2 h) with h = RMSNorm2(x).
void BsaCudaForward::run_layer(const DeviceLayer& L, float* x, const float* pos, const float* rel) {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim(), d = cfg_.dimensionality;
  on_device([&] {
    rms_norm(L.norm1, x, g_->h.data());
    if (cfg_.attention_type != AttentionType::global)
      dense(L.position_proj, rel, d, g_->h.data(), D, g_->rows, Activation::none, g_->h.data(), D);
    dense(L.qkv, g_->h.data(), D, g_->u.data(), 3 * D, g_->rows);
    if (cfg_.attention_type == AttentionType::sparse && L.token_gate) {
      dense(L.gate, g_->h.data(), D, g_->gates.data(), 3 * H, g_->rows);
      map(cu::RowMap::sigmoid, g_->gates.data(), 3 * H, g_->rows, 3 * H);
    }
  });
  if (cfg_.attention_type == AttentionType::sparse) {
    sparse_attention(L, pos);
  } else if (cfg_.attention_type == AttentionType::ball) {
    on_device([&] {
      cu::BallAttentionLaunch a;
      a.rows = g_->rows;
      a.ball = cfg_.attention_ball_size;
      a.heads = H;
      a.E = E;
      a.q = g_->u.data();
      a.k = g_->u.data() + D;
      a.v = g_->u.data() + 2 * D;
      a.ld = 3 * D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(E));
      a.sigma = w(L.sigma);
      a.positions = pos;
      a.ld_pos = d;
      a.dim = d;
      a.out = g_->o.data();
      a.ldo = D;
      cu::ball_attention(a, stream_.get());
    });
  } else {
    global_attention();
  }
  on_device([&] {
    dense(L.out_proj, g_->o.data(), D, x, D, g_->rows, Activation::none, x, D);
    rms_norm(L.norm2, x, g_->h.data());
    const int hidden = L.w1.out;
    dense(L.w1, g_->h.data(), D, g_->a1.data(), hidden, g_->rows, Activation::silu);
    dense(L.w2, g_->h.data(), D, g_->a2.data(), hidden, g_->rows);
    surrogate::device::combine_rows(cu::RowOp::multiply, g_->a1.data(), hidden, g_->a2.data(), hidden, g_->a1.data(),
                                    hidden, g_->rows, hidden, stream_.get());
    dense(L.w3, g_->a1.data(), hidden, x, D, g_->rows, Activation::none, x, D);
  });
}

void BsaCudaForward::layers() {
  const int D = cfg_.c_hidden;
  on_device([&] { copy(g_->x.data(), D, nullptr, g_->residual.data(), D, nullptr, g_->rows, D); });
  for (int l = 0; l < cfg_.depth; ++l) {
    const DeviceLayer& L = layers_[static_cast<std::size_t>(l)];
    if (cfg_.should_rotate && l % 2 == 1) {
      // The rotated tree's order: a permutation in one process, the plan's rotation exchange on a plan.
      if (plan_ != nullptr) {
        agree();
        plan_->rotation().forward(g_->x.data(), D, g_->xr.data(), D, D, place());
      } else {
        on_device([&] { copy(g_->x.data(), D, g_->rot.data(), g_->xr.data(), D, nullptr, g_->rows, D); });
      }
      run_layer(L, g_->xr.data(), g_->pos_rot.data(), g_->rel_rot.data());
      if (plan_ != nullptr) {
        agree();
        plan_->rotation().backward(g_->xr.data(), D, g_->x.data(), D, D, place());
      } else {
        on_device([&] { copy(g_->xr.data(), D, nullptr, g_->x.data(), D, g_->rot.data(), g_->rows, D); });
      }
    } else {
      run_layer(L, g_->x.data(), g_->pos.data(), g_->rel.data());
    }
    if ((l + 1) % cfg_.block_size == 0 || l + 1 == cfg_.depth) {  // the long residual
      on_device([&] {
        surrogate::device::combine_rows(cu::RowOp::add, g_->x.data(), D, g_->residual.data(), D, g_->x.data(), D, g_->rows,
                                        D, stream_.get());
        copy(g_->x.data(), D, nullptr, g_->residual.data(), D, nullptr, g_->rows, D);
      });
    }
  }
}

std::unique_ptr<balltree::DeviceGeometry> BsaCudaForward::upload_geometry(const balltree::RotatedTrees& trees,
                                                                          std::span<const float> positions,
                                                                          const balltree::Batch& batch) {
  const index_t points = batch.points();
  const index_t n = Stages::check_geometry(*net_, trees, positions, batch);
  auto geometry = std::make_unique<Geometry>(device_);
  g_ = geometry.get();
  plan_ = nullptr;
  try {
    cu::DeviceGuard guard(device_);
    cu::Event g0(device_), g1(device_);
    g0.record(stream_.get());
    g_->n = n;
    set_batch_geometry(trees, positions, points);
    g1.record(stream_.get());
    stream_.synchronize();  // the host arrays of set_batch_geometry are released on return
    geometry_ms_ = g1.elapsed_ms_since(g0);
  } catch (...) {
    g_ = nullptr;
    raise_current();
  }
  g_ = nullptr;
  return geometry;
}

std::vector<float> BsaCudaForward::forward(balltree::DeviceGeometry& uploaded, std::span<const float> features) {
  auto* geometry = dynamic_cast<Geometry*>(&uploaded);
  if (geometry == nullptr || geometry->device() != device_ || geometry->on_plan)
    throw Error(ErrorCode::invalid_argument, "bsa: the geometry was not uploaded by this device forward");
  const int D = cfg_.c_hidden;
  const index_t points = geometry->points;
  if (static_cast<index_t>(features.size()) != points * cfg_.c_in)
    throw Error(ErrorCode::input, "bsa: features has " + std::to_string(features.size()) + " values, expected " +
                                      std::to_string(points) + " points x c_in " + std::to_string(cfg_.c_in));
  Stages::check_features(*net_, features, 0);
  std::vector<float> result(static_cast<std::size_t>(points * D));
  geometry_ms_ = 0.0;
  g_ = geometry;
  plan_ = nullptr;
  try {
    cu::DeviceGuard guard(device_);
    cu::Event t0(device_), t1(device_);
    t0.record(stream_.get());
    upload(g_->features, features);
    dense(embed_, g_->features.data(), cfg_.c_in, g_->e.data(), D, points);
    copy(g_->e.data(), D, g_->tree_index.data(), g_->x.data(), D, nullptr, g_->rows, D);
    layers();
    copy(g_->x.data(), D, g_->slot.data(), g_->out.data(), D, nullptr, points, D);
    cu::copy_to_host(result.data(), g_->out.data(), result.size() * sizeof(float), stream_.get());
    t1.record(stream_.get());
    stream_.synchronize();
    forward_ms_ = t1.elapsed_ms_since(t0);
  } catch (...) {
    g_ = nullptr;
    raise_current();
  }
  g_ = nullptr;
  return result;
}

std::unique_ptr<BsaDeviceForward> make_bsa_cuda_forward(const Network& net, int device) {
  try {
    return std::make_unique<BsaCudaForward>(net, device);
  } catch (...) {
    surrogate::detail::raise_current_cuda_error("bsa", device);
  }
}

}  // namespace surrogate::bsa::detail
