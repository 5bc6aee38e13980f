// AttentionS2 (global attention on the sphere) on the CPU. The softmax over the keys is the shared
// streaming primitive kernels::CpuKernels::latent_encode (online softmax with double sums, no N x N
// score matrix): per (sample, head, block of queries) the queries play the role of the "latents". The
// quadrature term log w_lat(j) of the key grid is added to the logit through one extra column: the
// query gets a 1 there and the key its log weight, so each logit is s q.k + log w exactly as SDPA's
// additive float mask gives it; further columns (to the common width of keys and values) are zero.
#include "surrogate/sphere/attention.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere {

using kernels::AlignedBuffer;
using kernels::index_t;
using kernels::kPad;
using kernels::round_up;

namespace {

constexpr int kQueryBlock = 64;  // queries per task of the streamed softmax
constexpr int kRowBlock = 256;   // rows per task of the projections
constexpr int kMaxWidth = 64;    // head width the latent primitive supports (kernels kMaxHeadDim)

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, "AttentionS2: " + message); }

void check_size(const std::vector<float>& t, std::size_t expected, const char* name) {
  if (t.size() != expected)
    throw Error(ErrorCode::weights, std::string("AttentionS2: tensor ") + name + " has " + std::to_string(t.size()) +
                                        " values, expected " + std::to_string(expected));
}

void check_finite(const std::vector<float>& t, const char* name) {
  for (float v : t)
    if (!std::isfinite(v)) throw Error(ErrorCode::weights, std::string("AttentionS2: tensor ") + name + " has a non-finite value");
}

/// Rows [r0, r1) of x (ld ldx) through a packed 1x1 convolution into y (ld ldy).
void linear_rows(const kernels::CpuKernels& k, const kernels::PackedLinear& layer, const float* x, index_t ldx, float* y,
                 index_t ldy, index_t rows) {
  kernels::LinearArgs a;
  a.layer = &layer;
  a.x = x;
  a.ldx = ldx;
  a.y = y;
  a.ldy = ldy;
  a.rows = rows;
  k.linear(a);
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

struct AttentionS2::Impl {
  AttentionS2Config cfg;
  int heads = 1, ck = 0, cout = 0, ek = 0, ev = 0, width = 0;  // width: common (augmented) head width
  float s = 1.0f;
  kernels::PackedLinear q, k, v, proj;
  std::vector<float> q_norm, k_norm;  // 1 + weights (float32, as torch forms them)
  std::vector<float> log_w;           // per input latitude
};

AttentionS2::AttentionS2(const AttentionS2Config& config, const AttentionS2Weights& w) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = config;
  AttentionS2Config& c = m.cfg;
  if (c.in_channels < 1) invalid("in_channels must be positive, got " + std::to_string(c.in_channels));
  if (c.num_heads < 1) invalid("num_heads must be positive, got " + std::to_string(c.num_heads));
  if (c.k_channels == 0) c.k_channels = c.in_channels;
  if (c.out_channels == 0) c.out_channels = c.in_channels;
  if (c.k_channels < 0) invalid("k_channels must be positive, got " + std::to_string(c.k_channels));
  if (c.out_channels < 0) invalid("out_channels must be positive, got " + std::to_string(c.out_channels));
  if (c.k_channels % c.num_heads)
    invalid("num_heads " + std::to_string(c.num_heads) + " does not divide k_channels " + std::to_string(c.k_channels));
  if (c.out_channels % c.num_heads)
    invalid("num_heads " + std::to_string(c.num_heads) + " does not divide out_channels " + std::to_string(c.out_channels));
  if (c.nlat_in < 2 || c.nlon_in < 1) invalid("in_shape must be at least (2, 1)");
  if (c.nlat_out < 1 || c.nlon_out < 1) invalid("out_shape must be at least (1, 1)");
  if (c.nlon_in % c.nlon_out)
    invalid("nlon_in (" + std::to_string(c.nlon_in) + ") must be an integer multiple of nlon_out (" +
            std::to_string(c.nlon_out) + ")");
  if (c.scale_mode != ScaleMode::standard && !std::isfinite(c.scale)) invalid("scale must be finite");
  m.heads = c.num_heads;
  m.ck = c.k_channels;
  m.cout = c.out_channels;
  m.ek = m.ck / m.heads;
  m.ev = m.cout / m.heads;
  m.width = std::max(m.ek + 1, m.ev);
  if (m.width > kMaxWidth)
    throw Error(ErrorCode::unsupported, "AttentionS2: head widths k_channels/num_heads = " + std::to_string(m.ek) +
                                            ", out_channels/num_heads = " + std::to_string(m.ev) +
                                            ": the CPU kernel supports k_channels/num_heads <= 63 and "
                                            "out_channels/num_heads <= 64");
  // SDPA's default scale is 1/sqrt(E) formed in double and used as a float.
  m.s = c.scale_mode == ScaleMode::standard ? static_cast<float>(1.0 / std::sqrt(static_cast<double>(m.ek))) : c.scale;

  const std::size_t cin = static_cast<std::size_t>(c.in_channels), ck = static_cast<std::size_t>(m.ck),
                    co = static_cast<std::size_t>(m.cout);
  check_size(w.q_weights, ck * cin, "q_weights");
  check_size(w.k_weights, ck * cin, "k_weights");
  check_size(w.v_weights, co * cin, "v_weights");
  check_size(w.proj_weights, co * co, "proj_weights");
  if (c.bias) {
    check_size(w.q_bias, ck, "q_bias");
    check_size(w.k_bias, ck, "k_bias");
    check_size(w.v_bias, co, "v_bias");
    check_size(w.proj_bias, co, "proj_bias");
  } else {
    for (const auto* t : {&w.q_bias, &w.k_bias, &w.v_bias, &w.proj_bias})
      if (!t->empty()) invalid("bias=False but a bias tensor was given");
  }
  if (c.use_qknorm) {
    check_size(w.q_norm_weights, static_cast<std::size_t>(m.ek), "q_norm_weights");
    check_size(w.k_norm_weights, static_cast<std::size_t>(m.ek), "k_norm_weights");
  } else if (!w.q_norm_weights.empty() || !w.k_norm_weights.empty()) {
    invalid("use_qknorm=False but q_norm_weights / k_norm_weights were given");
  }
  for (const auto& [t, name] : {std::pair{&w.q_weights, "q_weights"}, {&w.k_weights, "k_weights"}, {&w.v_weights, "v_weights"},
                                {&w.proj_weights, "proj_weights"}, {&w.q_bias, "q_bias"}, {&w.k_bias, "k_bias"},
                                {&w.v_bias, "v_bias"}, {&w.proj_bias, "proj_bias"}, {&w.q_norm_weights, "q_norm_weights"},
                                {&w.k_norm_weights, "k_norm_weights"}})
    check_finite(*t, name);

  auto bias = [&](const std::vector<float>& b) { return c.bias ? b.data() : nullptr; };
  m.q = kernels::PackedLinear(w.q_weights.data(), bias(w.q_bias), m.ck, c.in_channels);
  m.k = kernels::PackedLinear(w.k_weights.data(), bias(w.k_bias), m.ck, c.in_channels);
  m.v = kernels::PackedLinear(w.v_weights.data(), bias(w.v_bias), m.cout, c.in_channels);
  m.proj = kernels::PackedLinear(w.proj_weights.data(), bias(w.proj_bias), m.cout, m.cout);
  if (c.use_qknorm) {
    for (float x : w.q_norm_weights) m.q_norm.push_back(1.0f + x);
    for (float x : w.k_norm_weights) m.k_norm.push_back(1.0f + x);
  }
  for (float q : attention_latitude_weights(c.nlat_in, c.nlon_in, c.grid_in)) m.log_w.push_back(std::log(q));
}

AttentionS2::~AttentionS2() = default;
AttentionS2::AttentionS2(AttentionS2&&) noexcept = default;
AttentionS2& AttentionS2::operator=(AttentionS2&&) noexcept = default;

const AttentionS2Config& AttentionS2::config() const noexcept { return impl_->cfg; }
float AttentionS2::scale() const noexcept { return impl_->s; }
const std::vector<float>& AttentionS2::log_quad_weights() const noexcept { return impl_->log_w; }

void AttentionS2::forward(int batch, const float* query, const float* key, const float* value, float* out) const {
  const Impl& m = *impl_;
  const AttentionS2Config& c = m.cfg;
  if (batch < 1) invalid("batch must be positive, got " + std::to_string(batch));
  if (!query) invalid("query is null");
  if (!out) invalid("out is null");
  if ((key == nullptr) != (value == nullptr)) invalid("key and value must both be given or both be null");
  if (!key && (c.nlat_in != c.nlat_out || c.nlon_in != c.nlon_out))
    invalid("self-attention (key = value = query) needs in_shape == out_shape");
  if (!key) key = value = query;
  const kernels::CpuKernels& kern = kernels::cpu();

  const index_t po = static_cast<index_t>(c.nlat_out) * c.nlon_out, pi = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  const index_t rows_q = batch * po, rows_k = batch * pi;
  const int cin = c.in_channels, H = m.heads, E = m.width, ek = m.ek, ev = m.ev;
  const index_t ld_in = round_up(cin, kPad), ld_k = round_up(m.ck, kPad), ld_v = round_up(m.cout, kPad);
  const index_t ld_aug = round_up(static_cast<index_t>(H) * E, kPad);

  // Inputs in padded rows; projections; the augmented per-head operands.
  AlignedBuffer<float> xq(static_cast<std::size_t>(rows_q * ld_in)), xk, xv;
  AlignedBuffer<float> qp(static_cast<std::size_t>(rows_q * ld_k)), kp(static_cast<std::size_t>(rows_k * ld_k)),
      vp(static_cast<std::size_t>(rows_k * ld_v));
  AlignedBuffer<float> qa(static_cast<std::size_t>(batch) * H * static_cast<std::size_t>(po) * E);  // [b][h][i][E]
  AlignedBuffer<float> ka(static_cast<std::size_t>(rows_k * ld_aug)), va(static_cast<std::size_t>(rows_k * ld_aug));
  AlignedBuffer<float> o(static_cast<std::size_t>(rows_q * ld_v)), y(static_cast<std::size_t>(rows_q * ld_v));
  const bool separate_k = key != query, separate_v = value != key;
  if (separate_k) xk.resize(static_cast<std::size_t>(rows_k * ld_in));
  if (separate_v) xv.resize(static_cast<std::size_t>(rows_k * ld_in));
  const float* xk_data = separate_k ? xk.data() : xq.data();
  const float* xv_data = separate_v ? xv.data() : xk_data;

  auto pad_rows = [&](const float* src, float* dst, index_t rows) {
#pragma omp parallel for schedule(static)
    for (index_t r = 0; r < rows; ++r) std::copy(src + r * cin, src + (r + 1) * cin, dst + r * ld_in);
  };
  pad_rows(query, xq.data(), rows_q);
  if (separate_k) pad_rows(key, xk.data(), rows_k);
  if (separate_v) pad_rows(value, xv.data(), rows_k);

  const index_t blocks_q = (rows_q + kRowBlock - 1) / kRowBlock, blocks_k = (rows_k + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks_q; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_q - r0);
    linear_rows(kern, m.q, xq.data() + r0 * ld_in, ld_in, qp.data() + r0 * ld_k, ld_k, n);
    for (index_t r = r0; r < r0 + n; ++r) {
      float* row = qp.data() + r * ld_k;
      if (c.use_qknorm) rms_norm_heads(row, H, ek, m.q_norm);
      const index_t b = r / po, i = r % po;
      for (int h = 0; h < H; ++h) {
        float* dst = qa.data() + ((b * H + h) * po + i) * E;
        for (int e = 0; e < ek; ++e) dst[e] = row[h * ek + e] * m.s;
        dst[ek] = 1.0f;
        for (int e = ek + 1; e < E; ++e) dst[e] = 0.0f;
      }
    }
  }
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks_k; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_k - r0);
    linear_rows(kern, m.k, xk_data + r0 * ld_in, ld_in, kp.data() + r0 * ld_k, ld_k, n);
    linear_rows(kern, m.v, xv_data + r0 * ld_in, ld_in, vp.data() + r0 * ld_v, ld_v, n);
    for (index_t r = r0; r < r0 + n; ++r) {
      float* krow = kp.data() + r * ld_k;
      if (c.use_qknorm) rms_norm_heads(krow, H, ek, m.k_norm);
      const float log_w = m.log_w[static_cast<std::size_t>((r % pi) / c.nlon_in)];
      const float* vrow = vp.data() + r * ld_v;
      for (int h = 0; h < H; ++h) {
        float* kd = ka.data() + r * ld_aug + h * E;
        float* vd = va.data() + r * ld_aug + h * E;
        for (int e = 0; e < E; ++e) {
          kd[e] = e < ek ? krow[h * ek + e] : (e == ek ? log_w : 0.0f);
          vd[e] = e < ev ? vrow[h * ev + e] : 0.0f;
        }
      }
    }
  }

  // The streamed softmax: one task per (sample, head, block of queries).
  const index_t qblocks = (po + kQueryBlock - 1) / kQueryBlock;
  const index_t tasks = static_cast<index_t>(batch) * H * qblocks;
#pragma omp parallel
  {
    std::vector<std::int32_t> ref_exp(kQueryBlock);
    std::vector<double> sum(kQueryBlock), weighted(static_cast<std::size_t>(kQueryBlock) * E);
#pragma omp for schedule(dynamic)
    for (index_t t = 0; t < tasks; ++t) {
      const index_t b = t / (H * qblocks), h = (t / qblocks) % H, q0 = (t % qblocks) * kQueryBlock;
      const int nq = static_cast<int>(std::min<index_t>(kQueryBlock, po - q0));
      std::fill(ref_exp.begin(), ref_exp.end(), kernels::kNoExponent);
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(weighted.begin(), weighted.end(), 0.0);
      kernels::LatentEncodeArgs a;
      a.q = qa.data() + ((b * H + h) * po + q0) * E;
      a.M = nq;
      a.E = E;
      a.k = ka.data() + b * pi * ld_aug + h * E;
      a.ldk = ld_aug;
      a.v = va.data() + b * pi * ld_aug + h * E;
      a.ldv = ld_aug;
      a.rows = pi;
      a.ref_exp = ref_exp.data();
      a.sum = sum.data();
      a.weighted = weighted.data();
      kern.latent_encode(a);
      for (int i = 0; i < nq; ++i) {
        float* dst = o.data() + (b * po + q0 + i) * ld_v + h * ev;
        const double inv = 1.0 / sum[static_cast<std::size_t>(i)];
        for (int e = 0; e < ev; ++e) dst[e] = static_cast<float>(weighted[static_cast<std::size_t>(i) * E + e] * inv);
      }
    }
  }

  // Output projection, then the caller's layout.
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks_q; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_q - r0);
    linear_rows(kern, m.proj, o.data() + r0 * ld_v, ld_v, y.data() + r0 * ld_v, ld_v, n);
    for (index_t r = r0; r < r0 + n; ++r) std::copy(y.data() + r * ld_v, y.data() + r * ld_v + m.cout, out + r * m.cout);
  }
}

}  // namespace surrogate::sphere
