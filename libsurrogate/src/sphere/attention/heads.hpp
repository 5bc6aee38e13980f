// The part AttentionS2 and NeighborhoodAttentionS2 share (internal): the checks of the channel/head
// configuration and of the state_dict, the packed 1x1 convolutions, and the forward's projection stages.
// AttentionS2 feeds the shared online softmax (kernels::CpuKernels::latent_encode) with per-head rows of
// common width E = max(ek, ev): q scaled by s (after the optional RMS qk-norm), k and v zero-padded.
#pragma once

#include <functional>
#include <vector>

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/sphere/attention.hpp"

namespace surrogate::sphere::detail {

/// The projected operands of one forward, rows b*P + p. q: rows_q x ld_common, head h in columns
/// [h*E, (h+1)*E). k, v head-major: head h's rows_k rows of E floats from h * rows_k * E, so that a task,
/// which streams one head's keys and values, reads them contiguous (and from L2 across its head's tasks).
struct CommonWidthOperands {
  kernels::index_t ld_common = 0;
  kernels::AlignedBuffer<float> q, k, v;
};

/// The projected operands of NeighborhoodAttentionS2 (no extra column): q (scaled by s after the
/// qk-norm) and k rows x ld_k with head h in columns [h*ek, (h+1)*ek), v rows x ld_v with head h in
/// [h*ev, (h+1)*ev). Buffers grow only, so a caller may keep one per thread across forwards.
struct PlainOperands {
  kernels::index_t ld_k = 0, ld_v = 0;
  kernels::AlignedBuffer<float> q, k, v;
};

struct S2Workspace;  // workspace.hpp: the buffers below are taken from it

class S2Heads {
 public:
  /// Checks the channel/head options (filling k_channels / out_channels = 0 with in_channels) and every
  /// weight tensor; `op` names the operator in the messages. Throws Error(invalid_argument | weights |
  /// unsupported).
  S2Heads(const char* op, int in_channels, int num_heads, int& k_channels, int& out_channels, bool bias,
          bool use_qknorm, ScaleMode scale_mode, float scale, const AttentionS2Weights& weights);

  int heads = 1, ck = 0, cout = 0, ek = 0, ev = 0, width = 0;  // width: the common head width E = max(ek, ev)
  float s = 1.0f;                                               // scale of q

  /// The checks of forward()'s arguments shared by both operators; fills key = value = query for
  /// self-attention (which needs equal grids).
  void check_forward(int batch, const float*& query, const float*& key, const float*& value, const float* out,
                     bool same_grids) const;

  /// q/k/v projections, qk-norm and the rows of common width, into ws.common (scratch: ws.pad_*,
  /// ws.proj_*). query: rows_q x in_channels, key/value: rows_k x in_channels (channels last).
  void project(kernels::index_t rows_q, kernels::index_t rows_k, const float* query, const float* key,
               const float* value, S2Workspace& ws) const;

  /// Receives projected key/value rows [r0, r0 + n) (k with qk-norm; ld_k, ld_v as PlainOperands),
  /// called from OpenMP threads for disjoint row blocks.
  using KeyValueSink = std::function<void(kernels::index_t r0, kernels::index_t n, const float* k, const float* v)>;

  /// q/k/v projections, qk-norm, scale of q, without the log-weight column (NeighborhoodAttentionS2), into
  /// ws.plain (scratch: ws.pad_*). With a sink, k and v go to it block by block (while in cache) and
  /// ws.plain.k / ws.plain.v are not written.
  void project_plain(kernels::index_t rows_q, kernels::index_t rows_k, const float* query, const float* key,
                     const float* value, S2Workspace& ws, const KeyValueSink* sink = nullptr) const;

  /// out (rows x cout, channels last) = proj(o), o: rows x round_up(cout, kPad) (scratch: ws.projected).
  void output_projection(kernels::index_t rows, const float* o, float* out, S2Workspace& ws) const;

  /// Leading dimension of the attention results o given to output_projection.
  kernels::index_t ld_out() const;

  int in_channels() const { return in_channels_; }

  /// The weights as the constructor took them, read back from the packed layers (exact copies).
  AttentionS2Weights weights() const;

 private:
  const char* op_;
  int in_channels_ = 0;
  bool use_qknorm_ = false;
  kernels::PackedLinear q_, k_, v_, proj_;
  // project_plain's q projection with s folded into the weights and bias, used when that gives the same
  // bits as scaling the projection (s a power of two, no qk-norm); empty otherwise.
  kernels::PackedLinear q_scaled_;
  bool q_scale_folded_ = false;
  std::vector<float> q_norm_, k_norm_;  // 1 + weights (float32, as torch forms them)
  std::vector<float> q_norm_weights_, k_norm_weights_;  // the weights themselves (weights())
};

}  // namespace surrogate::sphere::detail
