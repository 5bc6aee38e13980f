// NeighborhoodAttentionS2 (local attention on the sphere) on the CPU. Per output point, the projected
// keys and values of its neighbours (the CSR row of its output latitude, shifted by p*wo input
// longitudes) are gathered into one contiguous block and streamed through the shared online-softmax
// primitive kernels::CpuKernels::latent_encode with a single query (M = 1). The quadrature factor
// w_lat(j) of torch-harmonics' exp(q.k - max) * w_lat becomes an additive log w_lat in one extra key
// column (the query carries 1 there), as in AttentionS2; further columns up to the common head width of
// keys and values are zero.
#include "surrogate/sphere/neighborhood_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "surrogate/error.hpp"
#include "s2_heads.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere {

using kernels::AlignedBuffer;
using kernels::index_t;

namespace {

constexpr int kLonBlock = 16;  // output longitudes per task of the attention

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, "NeighborhoodAttentionS2: " + message);
}

/// The grid and cutoff checks (filling the default cutoff), then the channel/head checks and weights
/// shared with AttentionS2.
detail::S2Heads make_heads(NeighborhoodAttentionS2Config& c, const NeighborhoodAttentionS2Weights& w) {
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
  if (c.theta_cutoff == 0.0) c.theta_cutoff = default_theta_cutoff(c.nlat_out, c.grid_out);
  if (!(c.theta_cutoff > 0.0) || !std::isfinite(c.theta_cutoff))
    invalid("theta_cutoff must be positive and finite (0: the default), got " + std::to_string(c.theta_cutoff));
  // The scale multiplies q after the projection and the qk-norm in every mode (v0.9.1+ placement).
  return detail::S2Heads("NeighborhoodAttentionS2", c.in_channels, c.num_heads, c.k_channels, c.out_channels, c.bias,
                         c.use_qknorm, c.scale_mode, c.scale, w);
}

}  // namespace

struct NeighborhoodAttentionS2::Impl {
  Impl(const NeighborhoodAttentionS2Config& config, const NeighborhoodAttentionS2Weights& w)
      : cfg(config), h(make_heads(cfg, w)) {
    // quad_weights = 2 pi w_lat.float32 / nlon_in: the same float32 arithmetic as AttentionS2's buffer.
    quad_w = attention_latitude_weights(cfg.nlat_in, cfg.nlon_in, cfg.grid_in);
    for (float q : quad_w) log_w.push_back(std::log(q));
    csr = neighborhood_csr(cfg.nlat_in, cfg.nlon_in, cfg.grid_in, cfg.nlat_out, cfg.nlon_out, cfg.grid_out,
                           cfg.theta_cutoff);
    for (int t = 0; t < cfg.nlat_out; ++t)
      max_neighbors = std::max<index_t>(max_neighbors, csr.row_offsets[static_cast<std::size_t>(t) + 1] -
                                                           csr.row_offsets[static_cast<std::size_t>(t)]);
  }
  NeighborhoodAttentionS2Config cfg;
  detail::S2Heads h;
  std::vector<float> quad_w, log_w;  // per input latitude
  NeighborhoodCsr csr;
  index_t max_neighbors = 0;
};

NeighborhoodAttentionS2::NeighborhoodAttentionS2(const NeighborhoodAttentionS2Config& config,
                                                 const NeighborhoodAttentionS2Weights& w)
    : impl_(std::make_unique<Impl>(config, w)) {}

NeighborhoodAttentionS2::~NeighborhoodAttentionS2() = default;
NeighborhoodAttentionS2::NeighborhoodAttentionS2(NeighborhoodAttentionS2&&) noexcept = default;
NeighborhoodAttentionS2& NeighborhoodAttentionS2::operator=(NeighborhoodAttentionS2&&) noexcept = default;

const NeighborhoodAttentionS2Config& NeighborhoodAttentionS2::config() const noexcept { return impl_->cfg; }
float NeighborhoodAttentionS2::scale() const noexcept { return impl_->h.s; }
const NeighborhoodCsr& NeighborhoodAttentionS2::neighbors() const noexcept { return impl_->csr; }
const std::vector<float>& NeighborhoodAttentionS2::quad_weights() const noexcept { return impl_->quad_w; }

void NeighborhoodAttentionS2::forward(int batch, const float* query, const float* key, const float* value,
                                      float* out) const {
  forward_rows(batch, 0, impl_->cfg.nlat_out, query, 0, impl_->cfg.nlat_in, key, value, out);
}

std::pair<int, int> NeighborhoodAttentionS2::input_rows(int lat_begin, int lat_end) const {
  const Impl& m = *impl_;
  const int nlon_in = m.cfg.nlon_in;
  int first = m.cfg.nlat_in, last = -1;
  lat_begin = std::max(lat_begin, 0);
  lat_end = std::min(lat_end, m.cfg.nlat_out);
  // Shifting by longitudes keeps the latitude of a column: the unshifted lists decide.
  for (int t = lat_begin; t < lat_end; ++t)
    for (index_t j = m.csr.row_offsets[static_cast<std::size_t>(t)]; j < m.csr.row_offsets[static_cast<std::size_t>(t) + 1];
         ++j) {
      const int hi = static_cast<int>(m.csr.columns[static_cast<std::size_t>(j)] / nlon_in);
      first = std::min(first, hi);
      last = std::max(last, hi);
    }
  return last < 0 ? std::pair{lat_begin, lat_begin} : std::pair{first, last + 1};
}

void NeighborhoodAttentionS2::forward_rows(int batch, int lat_begin, int lat_end, const float* query, int in_begin,
                                           int in_end, const float* key, const float* value, float* out) const {
  const Impl& m = *impl_;
  const NeighborhoodAttentionS2Config& c = m.cfg;
  const detail::S2Heads& hd = m.h;
  if (lat_begin < 0 || lat_end > c.nlat_out || lat_begin > lat_end)
    invalid("output rows [" + std::to_string(lat_begin) + ", " + std::to_string(lat_end) + ") outside [0, nlat_out = " +
            std::to_string(c.nlat_out) + ")");
  if (lat_begin == lat_end) {
    if (batch < 1) invalid("batch must be positive, got " + std::to_string(batch));
    return;
  }
  if (!key && !(lat_begin == 0 && lat_end == c.nlat_out && in_begin == 0 && in_end == c.nlat_in))
    invalid("forward_rows on a part of the grid needs key and value");
  const auto needed = input_rows(lat_begin, lat_end);
  if (needed.first < needed.second && (needed.first < in_begin || needed.second > in_end))
    invalid("output rows [" + std::to_string(lat_begin) + ", " + std::to_string(lat_end) + ") reach input rows [" +
            std::to_string(needed.first) + ", " + std::to_string(needed.second) + "), the given key/value hold [" +
            std::to_string(in_begin) + ", " + std::to_string(in_end) + ")");
  hd.check_forward(batch, query, key, value, out, c.nlat_in == c.nlat_out && c.nlon_in == c.nlon_out);
  const kernels::CpuKernels& kern = kernels::cpu();

  // Band sizes: po output points and pi input points per sample; key row r of a sample is input point
  // r + in_offset of the grid.
  const index_t po = static_cast<index_t>(lat_end - lat_begin) * c.nlon_out,
                pi = static_cast<index_t>(in_end - in_begin) * c.nlon_in,
                in_offset = static_cast<index_t>(in_begin) * c.nlon_in;
  const index_t rows_q = batch * po, rows_k = batch * pi;
  const int H = hd.heads, E = hd.width, ev = hd.ev;
  detail::AugmentedOperands ops;
  const std::vector<float> log_w(m.log_w.begin() + in_begin, m.log_w.begin() + in_end);
  hd.project(rows_q, rows_k, pi, c.nlon_in, log_w, query, key, value, ops);
  const index_t ld_aug = ops.ld_aug, ld_v = hd.ld_out();
  AlignedBuffer<float> o(static_cast<std::size_t>(rows_q * ld_v));

  // The streamed softmax over each output point's neighbours: one task per (sample, output latitude,
  // block of output longitudes); per point the neighbours' augmented rows are gathered contiguously.
  const index_t lon_blocks = (c.nlon_out + kLonBlock - 1) / kLonBlock;
  const index_t nlat_band = lat_end - lat_begin;
  const index_t tasks = static_cast<index_t>(batch) * nlat_band * lon_blocks;
  const std::size_t gather = static_cast<std::size_t>(std::max<index_t>(m.max_neighbors, 1) * ld_aug);
#pragma omp parallel
  {
    AlignedBuffer<float> kg(gather), vg(gather);
    std::vector<double> weighted(static_cast<std::size_t>(E));
#pragma omp for schedule(dynamic)
    for (index_t t = 0; t < tasks; ++t) {
      const index_t b = t / (nlat_band * lon_blocks), lat = lat_begin + (t / lon_blocks) % nlat_band;
      const int wo0 = static_cast<int>((t % lon_blocks) * kLonBlock);
      const int wo1 = std::min(c.nlon_out, wo0 + kLonBlock);
      const index_t beg = m.csr.row_offsets[static_cast<std::size_t>(lat)];
      const index_t n = m.csr.row_offsets[static_cast<std::size_t>(lat) + 1] - beg;
      const float* kb = ops.k.data() + b * pi * ld_aug;  // grid point col at (col - in_offset) * ld_aug
      const float* vb = ops.v.data() + b * pi * ld_aug;
      for (int wo = wo0; wo < wo1; ++wo) {
        for (index_t j = 0; j < n; ++j) {
          const index_t col = m.csr.shifted(m.csr.columns[static_cast<std::size_t>(beg + j)], wo) - in_offset;
          std::memcpy(kg.data() + j * ld_aug, kb + col * ld_aug, static_cast<std::size_t>(ld_aug) * sizeof(float));
          std::memcpy(vg.data() + j * ld_aug, vb + col * ld_aug, static_cast<std::size_t>(ld_aug) * sizeof(float));
        }
        const index_t row = b * po + (lat - lat_begin) * c.nlon_out + wo;
        for (int h = 0; h < H; ++h) {
          std::int32_t ref_exp = kernels::kNoExponent;
          double sum = 0.0;
          std::fill(weighted.begin(), weighted.end(), 0.0);
          kernels::LatentEncodeArgs a;
          a.q = ops.q.data() + row * ld_aug + h * E;
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
        std::fill(o.data() + row * ld_v + hd.cout, o.data() + (row + 1) * ld_v, 0.0f);
      }
    }
  }

  // Output projection, then the caller's layout.
  hd.output_projection(rows_q, o.data(), out);
}

}  // namespace surrogate::sphere
