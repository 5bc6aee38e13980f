// Shared checks and projection stages of AttentionS2 and NeighborhoodAttentionS2 (heads.hpp).
#include "heads.hpp"

#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>
#include <utility>

#include "workspace.hpp"
#include "surrogate/error.hpp"

namespace surrogate::sphere::detail {

using kernels::AlignedBuffer;
using kernels::index_t;
using kernels::kPad;
using kernels::round_up;

namespace {

constexpr int kRowBlock = 256;  // rows per task of the projections

void check_size(const char* op, const std::vector<float>& t, std::size_t expected, const char* name) {
  if (t.size() != expected)
    throw Error(ErrorCode::weights, std::string(op) + ": tensor " + name + " has " + std::to_string(t.size()) +
                                        " values, expected " + std::to_string(expected));
}

/// Rows [0, rows) of x (ld ldx) through a packed 1x1 convolution into y (ld ldy).
void linear_rows(const kernels::PackedLinear& layer, const float* x, index_t ldx, float* y, index_t ldy, index_t rows) {
  kernels::cpu().linear({.layer = &layer, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .rows = rows});
}

/// The rows of x (rows x cin, channels last) as the linear kernels read them: x itself when cin is a
/// multiple of kPad, else a zero-padded copy in `scratch`. Sets ld.
const float* padded_rows(const float* x, index_t rows, int cin, AlignedBuffer<float>& scratch, index_t& ld) {
  if (cin % kPad == 0) {
    ld = cin;
    return x;
  }
  ld = round_up(cin, kPad);
  scratch.resize(static_cast<std::size_t>(rows * ld));
  float* dst = scratch.data();
  const index_t ldd = ld;
#pragma omp parallel for schedule(static)
  for (index_t r = 0; r < rows; ++r) {
    std::copy(x + r * cin, x + (r + 1) * cin, dst + r * ldd);
    std::fill(dst + r * ldd + cin, dst + (r + 1) * ldd, 0.0f);
  }
  return dst;
}

/// RMSNorm over each head's `width` channels, in place: x * (1 / sqrt(mean(x^2) + eps)) * weight, eps =
/// FLT_EPSILON (torch.finfo(float32).eps, what F.rms_norm uses when eps is None).
void rms_norm_heads(float* row, int heads, int width, const std::vector<float>& weight) {
  for (int h = 0; h < heads; ++h) {
    float* x = row + h * width;
    double sq = 0.0;
    for (int e = 0; e < width; ++e) sq += static_cast<double>(x[e]) * x[e];
    const float inv = static_cast<float>(1.0 / std::sqrt(sq / width + static_cast<double>(FLT_EPSILON)));
    for (int e = 0; e < width; ++e) x[e] = x[e] * inv * weight[static_cast<std::size_t>(e)];
  }
}

}  // namespace

S2Heads::S2Heads(const char* op, int in_channels, int num_heads, int& k_channels, int& out_channels, bool bias,
                 bool use_qknorm, ScaleMode scale_mode, float scale, const AttentionS2Weights& w)
    : op_(op), in_channels_(in_channels), use_qknorm_(use_qknorm) {
  const auto invalid = [op](const std::string& message) {
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": " + message);
  };
  if (in_channels < 1) invalid("in_channels must be positive, got " + std::to_string(in_channels));
  if (num_heads < 1) invalid("num_heads must be positive, got " + std::to_string(num_heads));
  if (k_channels == 0) k_channels = in_channels;
  if (out_channels == 0) out_channels = in_channels;
  if (k_channels < 0) invalid("k_channels must be positive, got " + std::to_string(k_channels));
  if (out_channels < 0) invalid("out_channels must be positive, got " + std::to_string(out_channels));
  if (k_channels % num_heads)
    invalid("num_heads " + std::to_string(num_heads) + " does not divide k_channels " + std::to_string(k_channels));
  if (out_channels % num_heads)
    invalid("num_heads " + std::to_string(num_heads) + " does not divide out_channels " + std::to_string(out_channels));
  if (scale_mode != ScaleMode::standard && !std::isfinite(scale)) invalid("scale must be finite");
  heads = num_heads;
  ck = k_channels;
  cout = out_channels;
  ek = ck / heads;
  ev = cout / heads;
  width = std::max(ek, ev);
  if (width > kernels::kMaxAttentionHeadDim)
    throw Error(ErrorCode::unsupported, std::string(op) + ": head widths k_channels/num_heads = " + std::to_string(ek) +
                                            ", out_channels/num_heads = " + std::to_string(ev) +
                                            ": the CPU kernel supports both <= " +
                                            std::to_string(kernels::kMaxAttentionHeadDim));
  // 1 / sqrt(k_channels / num_heads) formed in double and used as a float (SDPA's default and
  // torch-harmonics' math.sqrt alike).
  s = scale_mode == ScaleMode::standard ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(ek))) : scale;

  const std::size_t cin = static_cast<std::size_t>(in_channels), ckz = static_cast<std::size_t>(ck),
                    co = static_cast<std::size_t>(cout);
  check_size(op, w.q_weights, ckz * cin, "q_weights");
  check_size(op, w.k_weights, ckz * cin, "k_weights");
  check_size(op, w.v_weights, co * cin, "v_weights");
  check_size(op, w.proj_weights, co * co, "proj_weights");
  if (bias) {
    check_size(op, w.q_bias, ckz, "q_bias");
    check_size(op, w.k_bias, ckz, "k_bias");
    check_size(op, w.v_bias, co, "v_bias");
    check_size(op, w.proj_bias, co, "proj_bias");
  } else {
    for (const auto* t : {&w.q_bias, &w.k_bias, &w.v_bias, &w.proj_bias})
      if (!t->empty()) invalid("bias=False but a bias tensor was given");
  }
  if (use_qknorm) {
    check_size(op, w.q_norm_weights, static_cast<std::size_t>(ek), "q_norm_weights");
    check_size(op, w.k_norm_weights, static_cast<std::size_t>(ek), "k_norm_weights");
  } else if (!w.q_norm_weights.empty() || !w.k_norm_weights.empty()) {
    invalid("use_qknorm=False but q_norm_weights / k_norm_weights were given");
  }
  for (const auto& [t, name] : {std::pair{&w.q_weights, "q_weights"}, {&w.k_weights, "k_weights"}, {&w.v_weights, "v_weights"},
                                {&w.proj_weights, "proj_weights"}, {&w.q_bias, "q_bias"}, {&w.k_bias, "k_bias"},
                                {&w.v_bias, "v_bias"}, {&w.proj_bias, "proj_bias"}, {&w.q_norm_weights, "q_norm_weights"},
                                {&w.k_norm_weights, "k_norm_weights"}})
    for (float v : *t)
      if (!std::isfinite(v)) throw Error(ErrorCode::weights, std::string(op) + ": tensor " + name + " has a non-finite value");

  const auto bias_of = [&](const std::vector<float>& b) { return bias ? b.data() : nullptr; };
  q_ = kernels::PackedLinear(w.q_weights.data(), bias_of(w.q_bias), ck, in_channels);
  k_ = kernels::PackedLinear(w.k_weights.data(), bias_of(w.k_bias), ck, in_channels);
  v_ = kernels::PackedLinear(w.v_weights.data(), bias_of(w.v_bias), cout, in_channels);
  proj_ = kernels::PackedLinear(w.proj_weights.data(), bias_of(w.proj_bias), cout, cout);
  // s = 2^k: s * fl(sum) = fl(s * sum) and every product and partial sum of the kernel's chain scales
  // exactly, so the scaled weights give the bits of scaling the result (normal floats assumed: weights
  // times s stay far from the subnormal range for |k| <= 8). With qk-norm the scale follows the norm.
  int exponent = 0;
  const float mantissa = std::frexp(s, &exponent);
  if (!use_qknorm && mantissa == 0.5f && exponent >= -7 && exponent <= 9) {
    std::vector<float> qw(w.q_weights), qb(bias ? w.q_bias : std::vector<float>());
    for (float& x : qw) x *= s;
    for (float& x : qb) x *= s;
    q_scaled_ = kernels::PackedLinear(qw.data(), bias ? qb.data() : nullptr, ck, in_channels);
    q_scale_folded_ = true;
  }
  if (use_qknorm) {
    for (float x : w.q_norm_weights) q_norm_.push_back(1.0f + x);
    for (float x : w.k_norm_weights) k_norm_.push_back(1.0f + x);
    q_norm_weights_ = w.q_norm_weights;
    k_norm_weights_ = w.k_norm_weights;
  }
}

AttentionS2Weights S2Heads::weights() const {
  const auto bias_of = [](const kernels::PackedLinear& l) {
    return l.has_bias() ? std::vector<float>(l.bias(), l.bias() + l.out()) : std::vector<float>();
  };
  AttentionS2Weights w;
  w.q_weights = q_.weight();
  w.k_weights = k_.weight();
  w.v_weights = v_.weight();
  w.proj_weights = proj_.weight();
  w.q_bias = bias_of(q_);
  w.k_bias = bias_of(k_);
  w.v_bias = bias_of(v_);
  w.proj_bias = bias_of(proj_);
  w.q_norm_weights = q_norm_weights_;
  w.k_norm_weights = k_norm_weights_;
  return w;
}

void S2Heads::check_forward(int batch, const float*& query, const float*& key, const float*& value, const float* out,
                            bool same_grids) const {
  const auto invalid = [this](const std::string& message) {
    throw Error(ErrorCode::invalid_argument, std::string(op_) + ": " + message);
  };
  if (batch < 1) invalid("batch must be positive, got " + std::to_string(batch));
  if (!query) invalid("query is null");
  if (!out) invalid("out is null");
  if ((key == nullptr) != (value == nullptr)) invalid("key and value must both be given or both be null");
  if (!key && !same_grids) invalid("self-attention (key = value = query) needs in_shape == out_shape");
  if (!key) key = value = query;
}

index_t S2Heads::ld_out() const { return round_up(cout, kPad); }

void S2Heads::project(index_t rows_q, index_t rows_k, const float* query, const float* key, const float* value,
                      S2Workspace& ws) const {
  CommonWidthOperands& ops = ws.common;
  const int cin = in_channels_, H = heads, E = width;
  const index_t ld_in = round_up(cin, kPad), ld_k = round_up(ck, kPad), ld_v = ld_out();
  const index_t ld_common = round_up(static_cast<index_t>(H) * E, kPad);
  ops.ld_common = ld_common;

  // Inputs in padded rows (the same buffer where key / value are the query).
  AlignedBuffer<float>& xq = ws.pad_q;
  AlignedBuffer<float>& xk = ws.pad_k;
  AlignedBuffer<float>& xv = ws.pad_v;
  xq.resize(static_cast<std::size_t>(rows_q * ld_in));
  const bool separate_k = key != query, separate_v = value != key;
  if (separate_k) xk.resize(static_cast<std::size_t>(rows_k * ld_in));
  if (separate_v) xv.resize(static_cast<std::size_t>(rows_k * ld_in));
  const float* xk_data = separate_k ? xk.data() : xq.data();
  const float* xv_data = separate_v ? xv.data() : xk_data;
  const auto pad_rows = [&](const float* src, float* dst, index_t rows) {
#pragma omp parallel for schedule(static)
    for (index_t r = 0; r < rows; ++r) {
      std::copy(src + r * cin, src + (r + 1) * cin, dst + r * ld_in);
      std::fill(dst + r * ld_in + cin, dst + (r + 1) * ld_in, 0.0f);
    }
  };
  pad_rows(query, xq.data(), rows_q);
  if (separate_k) pad_rows(key, xk.data(), rows_k);
  if (separate_v) pad_rows(value, xv.data(), rows_k);

  AlignedBuffer<float>& qp = ws.proj_q;
  AlignedBuffer<float>& kp = ws.proj_k;
  AlignedBuffer<float>& vp = ws.proj_v;
  qp.resize(static_cast<std::size_t>(rows_q * ld_k));
  kp.resize(static_cast<std::size_t>(rows_k * ld_k));
  vp.resize(static_cast<std::size_t>(rows_k * ld_v));
  ops.q.resize(static_cast<std::size_t>(rows_q * ld_common));
  ops.k.resize(static_cast<std::size_t>(H) * static_cast<std::size_t>(rows_k * E));
  ops.v.resize(ops.k.size());

  // q: projection, qk-norm, scale (after the norm).
  const index_t blocks_q = (rows_q + kRowBlock - 1) / kRowBlock, blocks_k = (rows_k + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks_q; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_q - r0);
    linear_rows(q_, xq.data() + r0 * ld_in, ld_in, qp.data() + r0 * ld_k, ld_k, n);
    for (index_t r = r0; r < r0 + n; ++r) {
      float* row = qp.data() + r * ld_k;
      if (use_qknorm_) rms_norm_heads(row, H, ek, q_norm_);
      float* dst = ops.q.data() + r * ld_common;
      std::fill(dst, dst + ld_common, 0.0f);
      for (int h = 0; h < H; ++h)
        for (int e = 0; e < ek; ++e) dst[h * E + e] = row[h * ek + e] * s;
    }
  }
  // k, v: projections, qk-norm of k.
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks_k; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_k - r0);
    linear_rows(k_, xk_data + r0 * ld_in, ld_in, kp.data() + r0 * ld_k, ld_k, n);
    linear_rows(v_, xv_data + r0 * ld_in, ld_in, vp.data() + r0 * ld_v, ld_v, n);
    for (index_t r = r0; r < r0 + n; ++r) {
      float* krow = kp.data() + r * ld_k;
      if (use_qknorm_) rms_norm_heads(krow, H, ek, k_norm_);
      const float* vrow = vp.data() + r * ld_v;
      for (int h = 0; h < H; ++h) {
        float* kd = ops.k.data() + (h * rows_k + r) * E;
        float* vd = ops.v.data() + (h * rows_k + r) * E;
        for (int e = 0; e < ek; ++e) kd[e] = krow[h * ek + e];
        std::fill(kd + ek, kd + E, 0.0f);
        for (int e = 0; e < ev; ++e) vd[e] = vrow[h * ev + e];
        std::fill(vd + ev, vd + E, 0.0f);
      }
    }
  }
}

void S2Heads::project_plain(index_t rows_q, index_t rows_k, const float* query, const float* key, const float* value,
                            S2Workspace& ws, const KeyValueSink* sink) const {
  PlainOperands& ops = ws.plain;
  const int cin = in_channels_;
  const index_t ld_k = round_up(ck, kPad), ld_v = ld_out();
  ops.ld_k = ld_k;
  ops.ld_v = ld_v;
  // Inputs as the kernels read them (copies only when in_channels is not a multiple of kPad).
  index_t ld_q_in = 0, ld_k_in = 0, ld_v_in = 0;
  const float* xq = padded_rows(query, rows_q, cin, ws.pad_q, ld_q_in);
  const float* xk = key == query ? (ld_k_in = ld_q_in, xq) : padded_rows(key, rows_k, cin, ws.pad_k, ld_k_in);
  const float* xv = value == key ? (ld_v_in = ld_k_in, xk) : padded_rows(value, rows_k, cin, ws.pad_v, ld_v_in);
  ops.q.resize(static_cast<std::size_t>(rows_q * ld_k));
  if (!sink) {
    ops.k.resize(static_cast<std::size_t>(rows_k * ld_k));
    ops.v.resize(static_cast<std::size_t>(rows_k * ld_v));
  }

  const index_t blocks_q = (rows_q + kRowBlock - 1) / kRowBlock, blocks_k = (rows_k + kRowBlock - 1) / kRowBlock;
  // The sink's row blocks, two per thread, kept in the workspace (no allocation per call).
  if (sink) {
    ws.sink_blocks.resize(2 * static_cast<std::size_t>(omp_get_max_threads()));
    for (std::size_t i = 0; i < ws.sink_blocks.size(); i += 2) {
      ws.sink_blocks[i].resize(static_cast<std::size_t>(kRowBlock * ld_k));
      ws.sink_blocks[i + 1].resize(static_cast<std::size_t>(kRowBlock * ld_v));
    }
  }
#pragma omp parallel
  {
    // q: projection, qk-norm, then the scale (float32, after the norm).
#pragma omp for schedule(dynamic) nowait
    for (index_t t = 0; t < blocks_q; ++t) {
      const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_q - r0);
      if (q_scale_folded_) {
        linear_rows(q_scaled_, xq + r0 * ld_q_in, ld_q_in, ops.q.data() + r0 * ld_k, ld_k, n);
        continue;
      }
      linear_rows(q_, xq + r0 * ld_q_in, ld_q_in, ops.q.data() + r0 * ld_k, ld_k, n);
      for (index_t r = r0; r < r0 + n; ++r) {
        float* row = ops.q.data() + r * ld_k;
        if (use_qknorm_) rms_norm_heads(row, heads, ek, q_norm_);
        for (int c = 0; c < ck; ++c) row[c] *= s;
      }
    }
    // k (qk-norm) and v: into ops, or into a block buffer handed to the sink.
    const std::size_t own = 2 * static_cast<std::size_t>(omp_get_thread_num());
#pragma omp for schedule(dynamic)
    for (index_t t = 0; t < blocks_k; ++t) {
      const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_k - r0);
      float* kd = sink ? ws.sink_blocks[own].data() : ops.k.data() + r0 * ld_k;
      float* vd = sink ? ws.sink_blocks[own + 1].data() : ops.v.data() + r0 * ld_v;
      linear_rows(k_, xk + r0 * ld_k_in, ld_k_in, kd, ld_k, n);
      linear_rows(v_, xv + r0 * ld_v_in, ld_v_in, vd, ld_v, n);
      if (use_qknorm_)
        for (index_t r = 0; r < n; ++r) rms_norm_heads(kd + r * ld_k, heads, ek, k_norm_);
      if (sink) (*sink)(r0, n, kd, vd);
    }
  }
}

void S2Heads::output_projection(index_t rows, const float* o, float* out, S2Workspace& ws) const {
  const index_t ld_v = ld_out(), blocks = (rows + kRowBlock - 1) / kRowBlock;
  // The kernel writes whole padded rows: straight into `out` when cout is a multiple of kPad.
  const bool direct = cout % kPad == 0;
  if (!direct) ws.projected.resize(static_cast<std::size_t>(rows * ld_v));
  float* const y = ws.projected.data();
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows - r0);
    if (direct) {
      linear_rows(proj_, o + r0 * ld_v, ld_v, out + r0 * cout, cout, n);
      continue;
    }
    linear_rows(proj_, o + r0 * ld_v, ld_v, y + r0 * ld_v, ld_v, n);
    for (index_t r = r0; r < r0 + n; ++r) std::copy(y + r * ld_v, y + r * ld_v + cout, out + r * cout);
  }
}

}  // namespace surrogate::sphere::detail
