// NeighborhoodAttentionS2 (local attention on the sphere) on the CPU: the projections shared with
// AttentionS2 (heads.hpp), then the quadrature-weighted softmax over each output point's neighbours (the
// CSR row of its output latitude, shifted by p*wo input longitudes) in neighborhood_rows.cpp, on the
// ring-attention kernel (consecutive output longitudes as SIMD lanes), then the output projection.
#include "surrogate/sphere/neighborhood_attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "surrogate/error.hpp"
#include "neighborhood_rows.hpp"
#include "neighborhood_upsample.hpp"
#include "heads.hpp"
#include "workspace.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere {

using kernels::index_t;

namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::invalid_argument, "NeighborhoodAttentionS2: " + message);
}

/// The grid and cutoff checks (filling the default cutoff), then the channel/head checks and weights
/// shared with AttentionS2.
detail::S2Heads make_heads(NeighborhoodAttentionS2Config& c, const NeighborhoodAttentionS2Weights& w) {
  if (c.nlat_in < 2 || c.nlon_in < 1) invalid("in_shape must be at least (2, 1)");
  if (c.nlat_out < 2 || c.nlon_out < 1) invalid("out_shape must be at least (2, 1)");
  if (c.nlon_in % c.nlon_out && c.nlon_out % c.nlon_in)
    invalid("nlon_in (" + std::to_string(c.nlon_in) + ") and nlon_out (" + std::to_string(c.nlon_out) +
            "): one must be an integer multiple of the other");
  // The default cutoff: the coarser grid's, the output grid in the gather mode, the input grid when upsampling.
  if (c.theta_cutoff == 0.0)
    c.theta_cutoff = c.nlon_in % c.nlon_out ? default_theta_cutoff(c.nlat_in, c.grid_in)
                                            : default_theta_cutoff(c.nlat_out, c.grid_out);
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
    upsample = cfg.nlon_in % cfg.nlon_out != 0;  // (make_heads checked the shapes)
    // quad_weights = 2 pi w_lat.float32 / nlon_in: the same float32 arithmetic as AttentionS2's buffer.
    quad_w = attention_latitude_weights(cfg.nlat_in, cfg.nlon_in, cfg.grid_in);
    if (upsample) {  // the scatter lists (the official buffers), regrouped per output point for the forward
      csr = neighborhood_csr_scatter(cfg.nlat_in, cfg.nlon_in, cfg.grid_in, cfg.nlat_out, cfg.nlon_out, cfg.grid_out,
                                     cfg.theta_cutoff);
      up = detail::upsample_lists(csr);
      return;
    }
    csr = neighborhood_csr(cfg.nlat_in, cfg.nlon_in, cfg.grid_in, cfg.nlat_out, cfg.nlon_out, cfg.grid_out,
                           cfg.theta_cutoff);
  }
  NeighborhoodAttentionS2Config cfg;
  bool upsample = false;     // nlon_out a multiple of nlon_in, not the reverse
  detail::UpsampleLists up;  // upsampling mode only
  detail::S2Heads h;
  std::vector<float> quad_w;  // per input latitude
  NeighborhoodCsr csr;
  mutable std::shared_ptr<detail::S2WorkspacePool> workspaces = std::make_shared<detail::S2WorkspacePool>();
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
NeighborhoodAttentionS2Weights NeighborhoodAttentionS2::weights() const { return impl_->h.weights(); }
void NeighborhoodAttentionS2::release_workspace() const noexcept { impl_->workspaces->release(); }
std::size_t NeighborhoodAttentionS2::workspace_bytes() const { return impl_->workspaces->idle_bytes(); }
void NeighborhoodAttentionS2::share_workspace(const NeighborhoodAttentionS2& other) const noexcept {
  impl_->workspaces = other.impl_->workspaces;
}

void NeighborhoodAttentionS2::forward(int batch, const float* query, const float* key, const float* value,
                                      float* out) const {
  forward_rows(batch, 0, impl_->cfg.nlat_out, query, 0, impl_->cfg.nlat_in, key, value, out);
}

std::pair<int, int> NeighborhoodAttentionS2::input_rows(int lat_begin, int lat_end) const {
  const Impl& m = *impl_;
  if (m.upsample) return detail::upsample_input_rows(m.up, lat_begin, lat_end);
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
  // Projections, the softmax over each output point's neighbours (quadrature-weighted) and the output
  // projection, band by band.
  const detail::S2WorkspacePool::Lease ws = m.workspaces->acquire();
  if (m.upsample) {
    detail::upsample_attention_rows(m.up, m.quad_w, hd, batch, lat_begin, lat_end, in_begin, in_end, query, key, value,
                                    out, *ws);
    return;
  }
  detail::neighborhood_attention_rows(m.csr, m.quad_w, hd, batch, lat_begin, lat_end, in_begin, in_end, query, key,
                                      value, out, *ws);
}

}  // namespace surrogate::sphere
