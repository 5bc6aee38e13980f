// The BSA forward on a CUDA device (bsa_device.hpp): the layers of bsa_model.cpp on device arrays, with
// the kernels of surrogate/kernels/cuda_point_layers.hpp (dense layers, row copies, row sums/products,
// block means), cuda_bsa_gate.hpp (ReLU, sigmoid, the gated sum), kernels::cuda::norm (RMSNorm) and the
// three attention branches of cuda_ball_attention.hpp (ball_attention: the local branch and "ball"
// attention; coarse_attention: the coarse branch and, with the tokens as queries and keys, "global"
// attention; selected_block_attention: the fine branch).
//
// What stays on the host: the ball tree and its rotation (built by the caller); what depends only on the
// geometry (positions in tree and rotated order, their offsets from their ball's centre with the CPU's
// mean_pool, the index arrays of the block compression), computed once per geometry and uploaded; and
// the top-S block selection: per sparse layer the compressed keys (and the compressed queries, or the
// token queries for token-level importance) are downloaded and detail::select_blocks, the CPU forward's
// own selection (same scores, same tie order), chooses the blocks, which are uploaded for the fine branch.
// So the selection is the CPU's function of the device's compressed blocks; those differ from the CPU's
// by float32 rounding (the norms sum in another order), so a near-tied selection can flip.
//
// The layers work on the rows of layout_ (bsa_cuda_forward.hpp): here the one-rank batch; the rank's
// slots of the distributed tree and what crosses ranks are in bsa_cuda_distributed.cpp.
//
// NOT YET RUN ON A GPU: compiled on a machine without a device; tests/gpu/test_gpu_bsa.cpp skips there,
// tests/gpu/test_bsa_device_emulated.cpp and test_bsa_device_mpi_emulated.cpp run this file's code on the CPU.
#include <cuda_runtime_api.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "../cuda_errors.hpp"
#include "bsa_branches.hpp"
#include "bsa_cuda_forward.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::bsa::detail {

using balltree::device::ball_relative;
using balltree::device::Dense;
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
  const int count = cu::device_count(&why);
  if (device < 0 || device >= count)
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
  auto add = [&](const float* values, std::size_t size) { return balltree::device::append(arena_, values, size); };
  auto add_dense = [&](const kernels::PackedLinear& layer) { return balltree::device::append_dense(arena_, layer); };
  embed_ = add_dense(Stages::embed_weights(net));
  for (const LayerWeights& lw : Stages::layer_weights(net)) {
    DeviceLayer L;
    L.norm1 = add(lw.norm1, static_cast<std::size_t>(D));
    L.norm2 = add(lw.norm2, static_cast<std::size_t>(D));
    L.qkv = add_dense(*lw.qkv);
    L.out_proj = add_dense(*lw.out_proj);
    L.w1 = add_dense(*lw.w1);
    L.w2 = add_dense(*lw.w2);
    L.w3 = add_dense(*lw.w3);
    if (cfg_.attention_type != AttentionType::global) {
      L.position_proj = add_dense(*lw.position_proj);
      L.sigma = add(lw.sigma->data(), lw.sigma->size());
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
      else L.static_gate = add(lw.static_gate->data(), lw.static_gate->size());
    }
    layers_.push_back(L);
  }
  try {
    cu::DeviceGuard guard(device_);
    stream_ = cu::Stream(device_);
    upload(weights_, arena_);
    stream_.synchronize();
  } catch (...) {
    raise_current();
  }
  arena_.clear();
  arena_.shrink_to_fit();
}

void BsaCudaForward::raise_current() const { surrogate::detail::raise_current_cuda_error("bsa", device_); }

void BsaCudaForward::dense(const Dense& l, const float* x, index_t ldx, float* y, index_t ldy, index_t rows,
                           Activation act, const float* add_rows, index_t ld_add) {
  balltree::device::dense(l, weights_.data(), x, ldx, y, ldy, rows, act, add_rows, ld_add, stream_.get());
}

void BsaCudaForward::copy(const float* src, index_t ld_src, const std::int64_t* src_index, float* dst, index_t ld_dst,
                          const std::int64_t* dst_index, index_t rows, int width) {
  balltree::device::copy_rows(src, ld_src, src_index, dst, ld_dst, dst_index, rows, width, stream_.get());
}

// RMSNorm of the rows (eps = float epsilon, no bias), rows_ x c_hidden.
void BsaCudaForward::rms_norm(const float* x, float* y, const float* weight) {
  cu::NormArgs a;
  a.x = x;
  a.ldx = cfg_.c_hidden;
  a.y = y;
  a.ldy = cfg_.c_hidden;
  a.rows = rows_;
  a.dim = cfg_.c_hidden;
  a.weight = weight;
  a.bias = nullptr;
  a.eps = std::numeric_limits<float>::epsilon();
  a.rms = true;
  cu::norm(a, stream_.get());
}

void BsaCudaForward::map(cu::RowMap op, float* x, index_t ld, index_t rows, int width) {
  cu::RowMapArgs a;
  a.op = op;
  a.x = x;
  a.ld = ld;
  a.rows = rows;
  a.width = width;
  cu::row_map(a, stream_.get());
}

// x += y (rows_ x c_hidden).
void BsaCudaForward::add_rows(float* x, const float* y) {
  const int D = cfg_.c_hidden;
  cu::RowBinaryArgs sum;
  sum.op = cu::RowOp::add;
  sum.a = x;
  sum.lda = D;
  sum.b = y;
  sum.ldb = D;
  sum.y = x;
  sum.ldy = D;
  sum.rows = rows_;
  sum.width = D;
  cu::row_binary(sum, stream_.get());
}

void BsaCudaForward::set_rows(std::span<const float> pos, std::span<const float> pos_rot, index_t points) {
  const int d = cfg_.dimensionality, D = cfg_.c_hidden, H = cfg_.num_heads;
  const int ball = cfg_.attention_type == AttentionType::ball ? cfg_.attention_ball_size : cfg_.ball_size;
  const std::vector<float> tree_pos(pos.begin(), pos.end());
  upload(pos_, tree_pos);
  if (cfg_.attention_type != AttentionType::global) upload(rel_, ball_relative(tree_pos, d, ball));
  if (cfg_.should_rotate) {
    const std::vector<float> rotated(pos_rot.begin(), pos_rot.end());
    upload(pos_rot_, rotated);
    if (cfg_.attention_type != AttentionType::global) upload(rel_rot_, ball_relative(rotated, d, ball));
  }
  const auto R = static_cast<std::size_t>(rows_), Du = static_cast<std::size_t>(D);
  const auto hidden = static_cast<std::size_t>(layers_.empty() ? 1 : layers_.front().w1.out);
  for (cu::DeviceBuffer<float>* b : {&x_, &residual_, &h_, &o_}) b->resize(std::max<std::size_t>(1, R * Du), device_);
  if (cfg_.should_rotate) xr_.resize(std::max<std::size_t>(1, R * Du), device_);
  u_.resize(std::max<std::size_t>(1, R * 3 * Du), device_);
  a1_.resize(std::max<std::size_t>(1, R * hidden), device_);
  a2_.resize(a1_.size(), device_);
  if (cfg_.attention_type == AttentionType::sparse) {
    const int C = cfg_.compress_block_size;
    const index_t blocks = rows_ / C;
    for (cu::DeviceBuffer<float>* b : {&local_, &coarse_, &fine_}) b->resize(std::max<std::size_t>(1, R * Du), device_);
    const auto Bu = static_cast<std::size_t>(std::max<index_t>(1, blocks));
    kc_.resize(Bu * Du, device_);
    vc_.resize(Bu * Du, device_);
    if (cfg_.block_level_importance()) qc_.resize(Bu * Du, device_);
    if (cfg_.use_token_gated_attention) gates_.resize(std::max<std::size_t>(1, R * 3 * static_cast<std::size_t>(H)), device_);
    if (cfg_.use_compress_mlp) {
      // MLP input row (block b, head h) = the C tokens' head-h columns, token-major: row (b H + h) C + t
      // of E values, taken from token row b C + t at column h E (+ the offset of q, k or v): with u's rows
      // of 3 D = 3 H E values read as rows of E, that is row (b C + t) 3 H + h.
      std::vector<std::int64_t> index(static_cast<std::size_t>(blocks) * H * C);
      for (index_t b = 0; b < blocks; ++b)
        for (int h = 0; h < H; ++h)
          for (int t = 0; t < C; ++t)
            index[static_cast<std::size_t>((b * H + h) * C + t)] = (b * C + t) * 3 * H + h;
      upload(compress_index_, index);
      mlp_in_.resize(Bu * Du * static_cast<std::size_t>(C), device_);
      const int mlp_hidden = layers_.front().k_mlp[0].out;
      mlp_hidden_.resize(Bu * static_cast<std::size_t>(H) * static_cast<std::size_t>(mlp_hidden), device_);
    } else {
      std::vector<std::int64_t> start(static_cast<std::size_t>(blocks) + 1);
      for (index_t b = 0; b <= blocks; ++b) start[static_cast<std::size_t>(b)] = b * C;
      upload(block_start_, start);
    }
    // The selection of every segment, one after another.
    const SparseShape s = sparse_shape(cfg_);
    sel_offsets_.assign(1, 0);
    for (const RowLayout::Segment& g : layout_.segments)
      sel_offsets_.push_back(sel_offsets_.back() +
                             static_cast<std::size_t>(g.samples * H * s.selection_rows(g.length) * s.S));
    sel_host_.resize(sel_offsets_.back());
    sel_.resize(std::max<std::size_t>(1, sel_host_.size()), device_);
    kc_host_.resize(Bu * Du);
    q_host_.resize(s.block_level ? Bu * Du : std::max<std::size_t>(1, R) * Du);
  }
  features_.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points * cfg_.c_in)), device_);
  if (geometry_ == Geometry::batch) {
    e_.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points) * Du), device_);
    out_.resize(std::max<std::size_t>(1, static_cast<std::size_t>(points) * Du), device_);
  }
  points_ = points;
}

void BsaCudaForward::set_geometry(const balltree::RotatedTrees& trees, std::span<const float> positions,
                                  index_t points) {
  const int d = cfg_.dimensionality;
  const balltree::Tree& tree = trees.tree;
  rows_ = tree.slots();
  std::vector<float> pos(static_cast<std::size_t>(rows_ * d)), pr(cfg_.should_rotate ? pos.size() : 0);
  for (index_t s = 0; s < rows_; ++s)
    std::copy_n(positions.data() + tree.index[static_cast<std::size_t>(s)] * d, d, pos.data() + s * d);
  if (cfg_.should_rotate) {
    const std::vector<std::int64_t>& rot = trees.rotated[1];
    for (std::size_t i = 0; i < rot.size(); ++i)
      std::copy_n(pos.begin() + rot[i] * d, d, pr.begin() + static_cast<std::ptrdiff_t>(i * d));
    upload(rot_, rot);
  }
  // One segment: every sample whole.
  layout_ = RowLayout{};
  layout_.rows = rows_;
  layout_.n = n_;
  layout_.samples = static_cast<std::int64_t>(tree.slot_offsets.size()) - 1;
  layout_.segments.push_back({0, static_cast<int>(layout_.samples), n_, 0, 0});
  upload(tree_index_, tree.index);
  upload(slot_, tree.slot_of_point());
  set_rows(pos, pr, points);
  geometry_index_ = tree.index;
}

// Compressed blocks of q, k or v (column 0, D or 2 D of u) into dst (blocks x D): the MLP on each
// (block, head) of C E values, token-major (Linear, ReLU, Linear: rows b H + h of E = block b's row of
// D), or the mean over the block (the CPU's sum from 0 in token order, divided by C).
void BsaCudaForward::compress(const Dense* mlp, int column, float* dst) {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim(), C = cfg_.compress_block_size;
  const index_t blocks = rows_ / C;
  if (!cfg_.use_compress_mlp) {
    cu::SegmentMeanArgs a;
    a.msg = u_.data() + column;
    a.ld_msg = 3 * D;
    a.start = block_start_.data();
    a.receivers = blocks;
    a.width = D;
    a.agg = dst;
    a.ld_agg = D;
    cu::segment_mean(a, stream_.get());
    return;
  }
  const index_t mlp_rows = blocks * H;
  copy(u_.data() + column, E, compress_index_.data(), mlp_in_.data(), E, nullptr, mlp_rows * C, E);
  dense(mlp[0], mlp_in_.data(), static_cast<index_t>(C) * E, mlp_hidden_.data(), mlp[0].out, mlp_rows);
  map(cu::RowMap::relu, mlp_hidden_.data(), mlp[0].out, mlp_rows, mlp[0].out);
  dense(mlp[1], mlp_hidden_.data(), mlp[0].out, dst, E, mlp_rows);
}

// Sparse attention (BSA): local, coarse and fine branches into local_, coarse_, fine_, then the gate
// into o_. The coarse branch and the selection per segment, against all compressed blocks of the
// segment's samples (distributed: all-gathered); the fine branch of a whole sample reads its own rows,
// that of a part of a sample the selected blocks fetched from their owners. The selection on the host
// (see the file comment).
void BsaCudaForward::sparse_attention(const DeviceLayer& L, const float* pos, int threads) {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim(), d = cfg_.dimensionality;
  const int C = cfg_.compress_block_size;
  const float scale = 1.0f / std::sqrt(static_cast<float>(E));
  const index_t nb = n_ / C, blocks = rows_ / C;
  const SparseShape s = sparse_shape(cfg_);
  const std::vector<RowLayout::Segment>& segments = layout_.segments;

  on_device([&] {
    cu::BallAttentionArgs local;
    local.rows = rows_;
    local.ball = cfg_.ball_size;
    local.heads = H;
    local.E = E;
    local.q = u_.data();
    local.k = u_.data() + D;
    local.v = u_.data() + 2 * D;
    local.ld = 3 * D;
    local.scale = scale;
    local.sigma = w(L.sigma);
    local.positions = pos;
    local.ld_pos = d;
    local.dim = d;
    local.out = local_.data();
    local.ldo = D;
    cu::ball_attention(local, stream_.get());
    compress(L.k_mlp, D, kc_.data());
    compress(L.v_mlp, 2 * D, vc_.data());
    if (s.block_level) compress(L.q_mlp, 0, qc_.data());
  });
  // The compressed keys and values of every block of the segments' samples.
  const float *k_all = kc_.data(), *v_all = vc_.data();
  if (dist_ != nullptr) {
    gather_compressed(blocks);
    k_all = kc_all_.data();
    v_all = vc_all_.data();
  }

  on_device([&] {
    for (const RowLayout::Segment& g : segments) {
      cu::CoarseAttentionArgs coarse;
      coarse.samples = g.samples;
      coarse.heads = H;
      coarse.E = E;
      coarse.q = s.coarse_q_attn ? qc_.data() + g.begin / C * D : u_.data() + g.begin * 3 * D;
      coarse.ldq = s.coarse_q_attn ? D : 3 * D;
      coarse.queries = s.coarse_q_attn ? g.length / C : g.length;
      coarse.k = k_all + g.sample * nb * D;
      coarse.v = v_all + g.sample * nb * D;
      coarse.ldkv = D;
      coarse.keys = nb;
      coarse.scale = scale;
      coarse.out = coarse_.data() + g.begin * D;
      coarse.ldo = D;
      coarse.copies = s.coarse_q_attn ? C : 1;
      cu::coarse_attention(coarse, stream_.get());
    }
    // The selection on the host: the CPU's select_blocks on the device's compressed blocks, per segment
    // (the window's in-sample offset row0 places the own-ball mask), then the indices back up.
    if (dist_ == nullptr)
      cu::copy_to_host(kc_host_.data(), kc_.data(), static_cast<std::size_t>(blocks * D) * sizeof(float), stream_.get());
    if (s.block_level) {
      cu::copy_to_host(q_host_.data(), qc_.data(), static_cast<std::size_t>(blocks * D) * sizeof(float), stream_.get());
    } else {  // the token queries only (packed into o_, which the gate writes later), not all of q, k, v
      copy(u_.data(), 3 * D, nullptr, o_.data(), D, nullptr, rows_, D);
      cu::copy_to_host(q_host_.data(), o_.data(), static_cast<std::size_t>(rows_ * D) * sizeof(float), stream_.get());
    }
    stream_.synchronize();
    const float* kc = dist_ != nullptr ? kc_all_host_.data() : kc_host_.data();
    for (std::size_t i = 0; i < segments.size(); ++i) {
      const RowLayout::Segment& g = segments[i];
      Tokens t;
      t.q = s.block_level ? nullptr : q_host_.data() + g.begin * D;
      t.ld = D;
      t.samples = g.samples;
      t.n = g.length;
      t.heads = H;
      t.E = E;
      t.row0 = g.row0;
      Blocks b;
      b.q = s.block_level ? q_host_.data() + g.begin / C * D : nullptr;
      b.k = kc + g.sample * nb * D;
      b.ld = D;
      b.nb = nb;
      select_blocks(kernels::cpu(), t, b, s, sel_host_.data() + sel_offsets_[i], threads);
    }
    upload(sel_, sel_host_);
  });
  if (dist_ != nullptr && any_partial_) fetch_selected_blocks();

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
      fine.q = u_.data() + g.begin * 3 * D;
      fine.ld = 3 * D;
      fine.scale = scale;
      fine.C = C;
      fine.S = s.S;
      fine.tokens_per_row = static_cast<int>(g.length / sel_rows);
      fine.rows = sel_rows;
      fine.sel = sel_.data() + sel_offsets_[i];
      fine.out = fine_.data() + g.begin * D;
      fine.ldo = D;
      if (g.length == n_) {  // whole samples: their own rows
        fine.k = fine.q + D;
        fine.v = fine.q + 2 * D;
      } else {  // part of a sample: the fetched blocks
        fine.k = fetched_.data();
        fine.v = fetched_.data() + D;
        fine.ldkv = 2 * D;
        fine.first_row = first_row_.data() + partial++ * nb;
        fine.blocks = nb;
      }
      cu::selected_block_attention(fine, stream_.get());
    }

    cu::GatedSumArgs g;
    g.local = local_.data();
    g.coarse = coarse_.data();
    g.fine = fine_.data();
    g.ld = D;
    g.out = o_.data();
    g.ldo = D;
    g.rows = rows_;
    g.heads = H;
    g.E = E;
    if (L.token_gate) {
      g.gates = gates_.data();
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
  if (dist_ != nullptr && any_partial_) fetch_sample_rows();
  on_device([&] {
    index_t partial = 0;
    for (const RowLayout::Segment& g : layout_.segments) {
      cu::CoarseAttentionArgs a;
      a.samples = g.samples;
      a.heads = H;
      a.E = E;
      a.q = u_.data() + g.begin * 3 * D;
      a.ldq = 3 * D;
      a.queries = g.length;
      if (g.length == n_) {
        a.k = a.q + D;
        a.v = a.q + 2 * D;
        a.ldkv = 3 * D;
      } else {
        a.k = fetched_.data() + partial++ * n_ * 2 * D;
        a.v = a.k + D;
        a.ldkv = 2 * D;
      }
      a.keys = n_;
      a.scale = 1.0f / std::sqrt(static_cast<float>(E));
      a.out = o_.data() + g.begin * D;
      a.ldo = D;
      a.copies = 1;
      cu::coarse_attention(a, stream_.get());
    }
  });
}

// One layer (as Network::Impl::run_layer): x += out_proj(attention(RMSNorm1(x) [+ position_proj(rel)])),
// x += w3(silu(w1 h) * w2 h) with h = RMSNorm2(x).
void BsaCudaForward::run_layer(const DeviceLayer& L, float* x, const float* pos, const float* rel, int threads) {
  const int D = cfg_.c_hidden, H = cfg_.num_heads, E = cfg_.head_dim(), d = cfg_.dimensionality;
  on_device([&] {
    rms_norm(x, h_.data(), w(L.norm1));
    if (cfg_.attention_type != AttentionType::global)
      dense(L.position_proj, rel, d, h_.data(), D, rows_, Activation::none, h_.data(), D);
    dense(L.qkv, h_.data(), D, u_.data(), 3 * D, rows_);
    if (cfg_.attention_type == AttentionType::sparse && L.token_gate) {
      dense(L.gate, h_.data(), D, gates_.data(), 3 * H, rows_);
      map(cu::RowMap::sigmoid, gates_.data(), 3 * H, rows_, 3 * H);
    }
  });
  if (cfg_.attention_type == AttentionType::sparse) {
    sparse_attention(L, pos, threads);
  } else if (cfg_.attention_type == AttentionType::ball) {
    on_device([&] {
      cu::BallAttentionArgs a;
      a.rows = rows_;
      a.ball = cfg_.attention_ball_size;
      a.heads = H;
      a.E = E;
      a.q = u_.data();
      a.k = u_.data() + D;
      a.v = u_.data() + 2 * D;
      a.ld = 3 * D;
      a.scale = 1.0f / std::sqrt(static_cast<float>(E));
      a.sigma = w(L.sigma);
      a.positions = pos;
      a.ld_pos = d;
      a.dim = d;
      a.out = o_.data();
      a.ldo = D;
      cu::ball_attention(a, stream_.get());
    });
  } else {
    global_attention();
  }
  on_device([&] {
    dense(L.out_proj, o_.data(), D, x, D, rows_, Activation::none, x, D);
    rms_norm(x, h_.data(), w(L.norm2));
    const int hidden = L.w1.out;
    dense(L.w1, h_.data(), D, a1_.data(), hidden, rows_, Activation::silu);
    dense(L.w2, h_.data(), D, a2_.data(), hidden, rows_);
    cu::RowBinaryArgs gate;
    gate.op = cu::RowOp::multiply;
    gate.a = a1_.data();
    gate.lda = hidden;
    gate.b = a2_.data();
    gate.ldb = hidden;
    gate.y = a1_.data();
    gate.ldy = hidden;
    gate.rows = rows_;
    gate.width = hidden;
    cu::row_binary(gate, stream_.get());
    dense(L.w3, a1_.data(), hidden, x, D, rows_, Activation::none, x, D);
  });
}

void BsaCudaForward::layers(int threads) {
  const int D = cfg_.c_hidden;
  on_device([&] { copy(x_.data(), D, nullptr, residual_.data(), D, nullptr, rows_, D); });
  for (int l = 0; l < cfg_.depth; ++l) {
    const DeviceLayer& L = layers_[static_cast<std::size_t>(l)];
    if (cfg_.should_rotate && l % 2 == 1) {
      // The rotated tree's order: a permutation on one rank, the rotation's exchange plan distributed.
      if (dist_ != nullptr) {
        agree();
        rotation_->forward(x_.data(), D, xr_.data(), D, D, stream_);
      }
      else on_device([&] { copy(x_.data(), D, rot_.data(), xr_.data(), D, nullptr, rows_, D); });
      run_layer(L, xr_.data(), pos_rot_.data(), rel_rot_.data(), threads);
      if (dist_ != nullptr) {
        agree();
        rotation_->backward(xr_.data(), D, x_.data(), D, D, stream_);
      }
      else on_device([&] { copy(xr_.data(), D, nullptr, x_.data(), D, rot_.data(), rows_, D); });
    } else {
      run_layer(L, x_.data(), pos_.data(), rel_.data(), threads);
    }
    if ((l + 1) % cfg_.block_size == 0 || l + 1 == cfg_.depth) {  // the long residual
      on_device([&] {
        add_rows(x_.data(), residual_.data());
        copy(x_.data(), D, nullptr, residual_.data(), D, nullptr, rows_, D);
      });
    }
  }
}

std::vector<float> BsaCudaForward::forward(const balltree::RotatedTrees& trees, std::span<const float> features,
                                           std::span<const float> positions, const balltree::Batch& batch,
                                           bool same_geometry, int threads) {
  const int D = cfg_.c_hidden;
  if (threads <= 0) threads = omp_get_max_threads();
  const index_t points = batch.points();
  const index_t n = Stages::check_inputs(*net_, trees, features, positions, batch);
  const balltree::Tree& tree = trees.tree;
  std::vector<float> result(static_cast<std::size_t>(points * D));
  dist_ = nullptr;
  try {
    cu::DeviceGuard guard(device_);
    geometry_ms_ = 0.0;
    if (!same_geometry || geometry_ != Geometry::batch || points_ != points || geometry_index_ != tree.index) {
      cu::Event g0(device_), g1(device_);
      g0.record(stream_.get());
      n_ = n;
      geometry_ = Geometry::batch;  // (set_rows then sizes the one-rank arrays; reset if anything fails)
      set_geometry(trees, positions, points);
      g1.record(stream_.get());
      stream_.synchronize();  // the host arrays of set_geometry are released on return
      geometry_ms_ = g1.elapsed_ms_since(g0);
    }
    cu::Event t0(device_), t1(device_);
    t0.record(stream_.get());
    upload(features_, features);
    dense(embed_, features_.data(), cfg_.c_in, e_.data(), D, points);
    copy(e_.data(), D, tree_index_.data(), x_.data(), D, nullptr, rows_, D);
    layers(threads);
    copy(x_.data(), D, slot_.data(), out_.data(), D, nullptr, points, D);
    cu::copy_to_host(result.data(), out_.data(), result.size() * sizeof(float), stream_.get());
    t1.record(stream_.get());
    stream_.synchronize();
    forward_ms_ = t1.elapsed_ms_since(t0);
  } catch (...) {
    geometry_ = Geometry::none;
    raise_current();
  }
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
