// NeighborhoodAttentionS2 (local attention on the sphere) on the CPU. Per output point, the projected
// keys and values of its neighbours (the CSR row of its output latitude, shifted by p*wo input
// longitudes) are gathered into one contiguous block and streamed through the shared online-softmax
// primitive kernels::CpuKernels::latent_encode with a single query (M = 1). The quadrature factor
// w_lat(j) of torch-harmonics' exp(q.k - max) * w_lat becomes an additive log w_lat in one extra key
// column (the query carries 1 there), as in AttentionS2; further columns up to the common head width of
// keys and values are zero.
#include "surrogate/sphere/neighborhood_attention.hpp"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere {

using kernels::AlignedBuffer;
using kernels::index_t;
using kernels::kPad;
using kernels::round_up;

namespace {

constexpr int kRowBlock = 256;  // rows per task of the projections
constexpr int kLonBlock = 16;   // output longitudes per task of the attention
constexpr int kMaxWidth = 64;   // head width the latent primitive supports (kernels kMaxHeadDim)

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, "NeighborhoodAttentionS2: " + message);
}

void check_size(const std::vector<float>& t, std::size_t expected, const char* name) {
  if (t.size() != expected)
    throw Error(ErrorCode::weights, std::string("NeighborhoodAttentionS2: tensor ") + name + " has " +
                                        std::to_string(t.size()) + " values, expected " + std::to_string(expected));
}

void check_finite(const std::vector<float>& t, const char* name) {
  for (float v : t)
    if (!std::isfinite(v))
      throw Error(ErrorCode::weights, std::string("NeighborhoodAttentionS2: tensor ") + name + " has a non-finite value");
}

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

/// RMSNorm over each head's `width` channels, in place, eps = FLT_EPSILON (F.rms_norm with eps=None).
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

struct NeighborhoodAttentionS2::Impl {
  NeighborhoodAttentionS2Config cfg;
  int heads = 1, ck = 0, cout = 0, ek = 0, ev = 0, width = 0;
  float s = 1.0f;
  kernels::PackedLinear q, k, v, proj;
  std::vector<float> q_norm, k_norm;
  std::vector<float> quad_w, log_w;  // per input latitude
  NeighborhoodCsr csr;
  index_t max_neighbors = 0;
};

NeighborhoodAttentionS2::NeighborhoodAttentionS2(const NeighborhoodAttentionS2Config& config,
                                                 const NeighborhoodAttentionS2Weights& w)
    : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.cfg = config;
  NeighborhoodAttentionS2Config& c = m.cfg;
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
  if (c.nlat_out < 2 || c.nlon_out < 1) invalid("out_shape must be at least (2, 1)");
  if (c.nlon_in % c.nlon_out) {
    if (c.nlon_out % c.nlon_in == 0)
      throw Error(ErrorCode::unsupported, "NeighborhoodAttentionS2: nlon_out (" + std::to_string(c.nlon_out) +
                                              ") a multiple of nlon_in (" + std::to_string(c.nlon_in) +
                                              ") is the upsampling (scatter) mode, which is not implemented");
    invalid("nlon_in (" + std::to_string(c.nlon_in) + ") must be an integer multiple of nlon_out (" +
            std::to_string(c.nlon_out) + ")");
  }
  if (c.scale_mode != ScaleMode::standard && !std::isfinite(c.scale)) invalid("scale must be finite");
  if (c.theta_cutoff == 0.0) c.theta_cutoff = default_theta_cutoff(c.nlat_out, c.grid_out);
  if (!(c.theta_cutoff > 0.0) || !std::isfinite(c.theta_cutoff))
    invalid("theta_cutoff must be positive and finite (0: the default), got " + std::to_string(c.theta_cutoff));
  m.heads = c.num_heads;
  m.ck = c.k_channels;
  m.cout = c.out_channels;
  m.ek = m.ck / m.heads;
  m.ev = m.cout / m.heads;
  m.width = std::max(m.ek + 1, m.ev);
  if (m.width > kMaxWidth)
    throw Error(ErrorCode::unsupported, "NeighborhoodAttentionS2: head widths k_channels/num_heads = " +
                                            std::to_string(m.ek) + ", out_channels/num_heads = " + std::to_string(m.ev) +
                                            ": the CPU kernel supports k_channels/num_heads <= 63 and "
                                            "out_channels/num_heads <= 64");
  // 1 / math.sqrt(k_channels // num_heads) in double, then multiplied into a float32 tensor as a float.
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
  // quad_weights = 2 pi w_lat.float32 / nlon_in: the same float32 arithmetic as AttentionS2's buffer.
  m.quad_w = attention_latitude_weights(c.nlat_in, c.nlon_in, c.grid_in);
  for (float q : m.quad_w) m.log_w.push_back(std::log(q));
  m.csr = neighborhood_csr(c.nlat_in, c.nlon_in, c.grid_in, c.nlat_out, c.nlon_out, c.grid_out, c.theta_cutoff);
  for (int t = 0; t < c.nlat_out; ++t)
    m.max_neighbors = std::max<index_t>(m.max_neighbors, m.csr.row_offsets[static_cast<std::size_t>(t) + 1] -
                                                             m.csr.row_offsets[static_cast<std::size_t>(t)]);
}

NeighborhoodAttentionS2::~NeighborhoodAttentionS2() = default;
NeighborhoodAttentionS2::NeighborhoodAttentionS2(NeighborhoodAttentionS2&&) noexcept = default;
NeighborhoodAttentionS2& NeighborhoodAttentionS2::operator=(NeighborhoodAttentionS2&&) noexcept = default;

const NeighborhoodAttentionS2Config& NeighborhoodAttentionS2::config() const noexcept { return impl_->cfg; }
float NeighborhoodAttentionS2::scale() const noexcept { return impl_->s; }
const NeighborhoodCsr& NeighborhoodAttentionS2::neighbors() const noexcept { return impl_->csr; }
const std::vector<float>& NeighborhoodAttentionS2::quad_weights() const noexcept { return impl_->quad_w; }

void NeighborhoodAttentionS2::forward(int batch, const float* query, const float* key, const float* value,
                                      float* out) const {
  const Impl& m = *impl_;
  const NeighborhoodAttentionS2Config& c = m.cfg;
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

  AlignedBuffer<float> xq(static_cast<std::size_t>(rows_q * ld_in)), xk, xv;
  AlignedBuffer<float> qp(static_cast<std::size_t>(rows_q * ld_k)), kp(static_cast<std::size_t>(rows_k * ld_k)),
      vp(static_cast<std::size_t>(rows_k * ld_v));
  AlignedBuffer<float> qa(static_cast<std::size_t>(rows_q * ld_aug));  // [b*po + i][h*E + e]
  AlignedBuffer<float> ka(static_cast<std::size_t>(rows_k * ld_aug)), va(static_cast<std::size_t>(rows_k * ld_aug));
  AlignedBuffer<float> o(static_cast<std::size_t>(rows_q * ld_v)), y(static_cast<std::size_t>(rows_q * ld_v));
  const bool separate_k = key != query, separate_v = value != key;
  if (separate_k) xk.resize(static_cast<std::size_t>(rows_k * ld_in));
  if (separate_v) xv.resize(static_cast<std::size_t>(rows_k * ld_in));
  const float* xk_data = separate_k ? xk.data() : xq.data();
  const float* xv_data = separate_v ? xv.data() : xk_data;

  auto pad_rows = [&](const float* src, float* dst, index_t rows) {
#pragma omp parallel for schedule(static)
    for (index_t r = 0; r < rows; ++r) {
      std::copy(src + r * cin, src + (r + 1) * cin, dst + r * ld_in);
      std::fill(dst + r * ld_in + cin, dst + (r + 1) * ld_in, 0.0f);
    }
  };
  pad_rows(query, xq.data(), rows_q);
  if (separate_k) pad_rows(key, xk.data(), rows_k);
  if (separate_v) pad_rows(value, xv.data(), rows_k);

  // Projections, qk-norm, scale (q only, after the norm), and the augmented per-head rows.
  const index_t blocks_q = (rows_q + kRowBlock - 1) / kRowBlock, blocks_k = (rows_k + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(dynamic)
  for (index_t t = 0; t < blocks_q; ++t) {
    const index_t r0 = t * kRowBlock, n = std::min<index_t>(kRowBlock, rows_q - r0);
    linear_rows(kern, m.q, xq.data() + r0 * ld_in, ld_in, qp.data() + r0 * ld_k, ld_k, n);
    for (index_t r = r0; r < r0 + n; ++r) {
      float* row = qp.data() + r * ld_k;
      if (c.use_qknorm) rms_norm_heads(row, H, ek, m.q_norm);
      float* dst = qa.data() + r * ld_aug;
      std::fill(dst, dst + ld_aug, 0.0f);
      for (int h = 0; h < H; ++h) {
        for (int e = 0; e < ek; ++e) dst[h * E + e] = row[h * ek + e] * m.s;
        dst[h * E + ek] = 1.0f;
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
      float* kd = ka.data() + r * ld_aug;
      float* vd = va.data() + r * ld_aug;
      std::fill(kd, kd + ld_aug, 0.0f);
      std::fill(vd, vd + ld_aug, 0.0f);
      for (int h = 0; h < H; ++h) {
        for (int e = 0; e < ek; ++e) kd[h * E + e] = krow[h * ek + e];
        kd[h * E + ek] = log_w;
        for (int e = 0; e < ev; ++e) vd[h * E + e] = vrow[h * ev + e];
      }
    }
  }

  // The streamed softmax over each output point's neighbours: one task per (sample, output latitude,
  // block of output longitudes); per point the neighbours' augmented rows are gathered contiguously.
  const index_t lon_blocks = (c.nlon_out + kLonBlock - 1) / kLonBlock;
  const index_t tasks = static_cast<index_t>(batch) * c.nlat_out * lon_blocks;
  const std::size_t gather = static_cast<std::size_t>(std::max<index_t>(m.max_neighbors, 1) * ld_aug);
#pragma omp parallel
  {
    AlignedBuffer<float> kg(gather), vg(gather);
    std::vector<double> weighted(static_cast<std::size_t>(E));
#pragma omp for schedule(dynamic)
    for (index_t t = 0; t < tasks; ++t) {
      const index_t b = t / (c.nlat_out * lon_blocks), lat = (t / lon_blocks) % c.nlat_out;
      const int wo0 = static_cast<int>((t % lon_blocks) * kLonBlock);
      const int wo1 = std::min(c.nlon_out, wo0 + kLonBlock);
      const index_t beg = m.csr.row_offsets[static_cast<std::size_t>(lat)];
      const index_t n = m.csr.row_offsets[static_cast<std::size_t>(lat) + 1] - beg;
      const float* kb = ka.data() + b * pi * ld_aug;
      const float* vb = va.data() + b * pi * ld_aug;
      for (int wo = wo0; wo < wo1; ++wo) {
        for (index_t j = 0; j < n; ++j) {
          const index_t col = m.csr.shifted(m.csr.columns[static_cast<std::size_t>(beg + j)], wo);
          std::memcpy(kg.data() + j * ld_aug, kb + col * ld_aug, static_cast<std::size_t>(ld_aug) * sizeof(float));
          std::memcpy(vg.data() + j * ld_aug, vb + col * ld_aug, static_cast<std::size_t>(ld_aug) * sizeof(float));
        }
        const index_t row = b * po + lat * c.nlon_out + wo;
        for (int h = 0; h < H; ++h) {
          std::int32_t ref_exp = kernels::kNoExponent;
          double sum = 0.0;
          std::fill(weighted.begin(), weighted.end(), 0.0);
          kernels::LatentEncodeArgs a;
          a.q = qa.data() + row * ld_aug + h * E;
          a.M = 1;
          a.E = E;
          a.k = kg.data() + h * E;
          a.ldk = ld_aug;
          a.v = vg.data() + h * E;
          a.ldv = ld_aug;
          a.rows = n;
          a.ref_exp = &ref_exp;
          a.sum = &sum;
          a.weighted = weighted.data();
          if (n > 0) kern.latent_encode(a);
          float* dst = o.data() + row * ld_v + h * ev;
          const double inv = 1.0 / sum;  // no neighbours: 0 * inf = NaN, as torch-harmonics' 0 / 0
          for (int e = 0; e < ev; ++e) dst[e] = static_cast<float>(weighted[static_cast<std::size_t>(e)] * inv);
        }
        std::fill(o.data() + row * ld_v + m.cout, o.data() + (row + 1) * ld_v, 0.0f);
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
