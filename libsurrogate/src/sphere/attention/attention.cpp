// AttentionS2 (global attention on the sphere) on the CPU (share/docs/sphere.md, "AttentionS2"): the
// shared streaming primitive kernels::CpuKernels::latent_encode (online softmax, float sums per chunk of
// keys added in double, no N x N matrix), the queries of a (sample, head, block) as its "latents", the
// quadrature term log w_lat(j) as its additive bias (one value per key): logits s q.k + log w, as SDPA's
// float mask gives them.
#include "surrogate/sphere/attention.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "surrogate/error.hpp"
#include "heads.hpp"
#include "workspace.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::sphere {

using kernels::AlignedBuffer;
using kernels::index_t;

namespace {

constexpr int kQueryBlock = 256;  // queries per task of the softmax

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, "AttentionS2: " + message); }

/// The grid checks, then the channel/head checks and weights shared with NeighborhoodAttentionS2.
detail::S2Heads make_heads(AttentionS2Config& c, const AttentionS2Weights& w) {
  if (c.nlat_in < 2 || c.nlon_in < 1) invalid("in_shape must be at least (2, 1)");
  if (c.nlat_out < 1 || c.nlon_out < 1) invalid("out_shape must be at least (1, 1)");
  if (c.nlon_in % c.nlon_out)
    invalid("nlon_in (" + std::to_string(c.nlon_in) + ") must be an integer multiple of nlon_out (" +
            std::to_string(c.nlon_out) + ")");
  return detail::S2Heads("AttentionS2", c.in_channels, c.num_heads, c.k_channels, c.out_channels, c.bias, c.use_qknorm,
                         c.scale_mode, c.scale, w);
}

}  // namespace

struct AttentionS2::Impl {
  Impl(const AttentionS2Config& config, const AttentionS2Weights& w) : cfg(config), h(make_heads(cfg, w)) {
    for (float q : attention_latitude_weights(cfg.nlat_in, cfg.nlon_in, cfg.grid_in)) log_w.push_back(std::log(q));
    for (float lw : log_w) log_w_keys.insert(log_w_keys.end(), static_cast<std::size_t>(cfg.nlon_in), lw);
  }
  AttentionS2Config cfg;
  detail::S2Heads h;
  std::vector<float> log_w;       // per input latitude
  std::vector<float> log_w_keys;  // per input point (the logits' bias)
  mutable std::shared_ptr<detail::S2WorkspacePool> workspaces = std::make_shared<detail::S2WorkspacePool>();
};

AttentionS2::AttentionS2(const AttentionS2Config& config, const AttentionS2Weights& w)
    : impl_(std::make_unique<Impl>(config, w)) {}

AttentionS2::~AttentionS2() = default;
AttentionS2::AttentionS2(AttentionS2&&) noexcept = default;
AttentionS2& AttentionS2::operator=(AttentionS2&&) noexcept = default;

const AttentionS2Config& AttentionS2::config() const noexcept { return impl_->cfg; }
float AttentionS2::scale() const noexcept { return impl_->h.s; }
void AttentionS2::release_workspace() const noexcept { impl_->workspaces->release(); }
std::size_t AttentionS2::workspace_bytes() const { return impl_->workspaces->idle_bytes(); }
void AttentionS2::share_workspace(const AttentionS2& other) const noexcept { impl_->workspaces = other.impl_->workspaces; }
const std::vector<float>& AttentionS2::log_quad_weights() const noexcept { return impl_->log_w; }
AttentionS2Weights AttentionS2::weights() const { return impl_->h.weights(); }

void AttentionS2::forward(int batch, const float* query, const float* key, const float* value, float* out) const {
  forward_rows(batch, 0, impl_->cfg.nlat_out, query, key, value, out);
}

void AttentionS2::forward_rows(int batch, int lat_begin, int lat_end, const float* query, const float* key,
                               const float* value, float* out) const {
  const Impl& m = *impl_;
  const AttentionS2Config& c = m.cfg;
  const detail::S2Heads& hd = m.h;
  if (lat_begin < 0 || lat_end > c.nlat_out || lat_begin > lat_end)
    invalid("output rows [" + std::to_string(lat_begin) + ", " + std::to_string(lat_end) + ") outside [0, nlat_out = " +
            std::to_string(c.nlat_out) + ")");
  if (lat_begin == lat_end) {
    if (batch < 1) invalid("batch must be positive, got " + std::to_string(batch));
    return;
  }
  if (!key && !(lat_begin == 0 && lat_end == c.nlat_out))
    invalid("forward_rows on a part of the grid needs the whole key and value grids");
  hd.check_forward(batch, query, key, value, out, c.nlat_in == c.nlat_out && c.nlon_in == c.nlon_out);
  const kernels::CpuKernels& kern = kernels::cpu();

  const index_t po = static_cast<index_t>(lat_end - lat_begin) * c.nlon_out,
                pi = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  const index_t rows_q = batch * po, rows_k = batch * pi;
  const int H = hd.heads, E = hd.width, ev = hd.ev;
  const detail::S2WorkspacePool::Lease ws = m.workspaces->acquire();
  hd.project(rows_q, rows_k, query, key, value, *ws);
  const detail::CommonWidthOperands& ops = ws->common;
  const index_t ld_common = ops.ld_common, ld_v = hd.ld_out();
  AlignedBuffer<float>& o = ws->attention;
  o.resize(static_cast<std::size_t>(rows_q * ld_v));
  std::fill(o.data(), o.data() + rows_q * ld_v, 0.0f);

  // The softmax over the whole key grid: one task per (sample, head, block of queries), on the latent
  // decode with the queries as its points (one per SIMD lane) and the head's keys and values as its
  // latents (head-major, CommonWidthOperands), the log quadrature weights as the latents' bias. Each
  // query's result is that of its lane alone: independent of the blocks, threads and ranks.
  const index_t qblocks = (po + kQueryBlock - 1) / kQueryBlock;
  const index_t tasks = static_cast<index_t>(batch) * H * qblocks;
#pragma omp parallel
  {
    AlignedBuffer<float> y(static_cast<std::size_t>(kQueryBlock) * E);
#pragma omp for schedule(dynamic)
    for (index_t t = 0; t < tasks; ++t) {
      const index_t b = t / (H * qblocks), h = (t / qblocks) % H, q0 = (t % qblocks) * kQueryBlock;
      const int nq = static_cast<int>(std::min<index_t>(kQueryBlock, po - q0));
      kernels::LatentDecodeArgs a;
      a.q = ops.k.data() + (h * rows_k + b * pi) * E;
      a.z = ops.v.data() + (h * rows_k + b * pi) * E;
      a.M = static_cast<int>(pi);
      a.E = E;
      a.latent_bias = m.log_w_keys.data();
      a.k = ops.q.data() + (b * po + q0) * ld_common + h * E;
      a.ldk = ld_common;
      a.rows = nq;
      a.y = y.data();
      a.ldy = E;
      kern.latent_decode(a);
      for (int i = 0; i < nq; ++i)
        std::copy_n(y.data() + static_cast<std::size_t>(i) * E, ev, o.data() + (b * po + q0 + i) * ld_v + h * ev);
    }
  }

  // Output projection, then the caller's layout.
  hd.output_projection(rows_q, o.data(), out, *ws);
}

}  // namespace surrogate::sphere
