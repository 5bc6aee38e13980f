// SphereCudaOps' spherical members (ops.hpp): the launches of the device forward's stages and the upload
// of the CPU network's operators.
#include "ops.hpp"

#include <cmath>
#include <numbers>
#include <span>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"

namespace surrogate::sphere {

namespace cu = kernels::cuda;

void SphereCudaOps::position(const program::PositionArgs<Vector>& a) const {
  const float* pos = a.pos != nullptr ? values(*a.pos) : nullptr;
  if (pos == nullptr) {
    if (a.enc.data != a.x.data) copy({a.enc, nullptr, a.x});
    return;
  }
  for (index_t r = 0; r < a.x.rows;) {  // the rows of one sample at a time
    const index_t p = (a.row0 + r) % a.points, count = std::min(a.points - p, a.x.rows - r);
    surrogate::device::combine_rows(cu::RowOp::add, a.enc.row(r), a.enc.ld, pos + (a.first_point + p) * a.pos_ld,
                                    a.pos_ld, a.x.row(r), a.x.ld, count, a.x.width, stream());
    r += count;
  }
}

void SphereCudaOps::grid_row_sums(const program::RowSumsArgs& a) const {
  cu::GridRowSumsArgs rs;
  rs.x = a.x.data;
  rs.ld = a.x.ld;
  rs.batch = a.batch;
  rs.lat_rows = a.lat_rows;
  rs.nlon = a.nlon;
  rs.dim = a.x.width;
  rs.mean = a.mean;
  rs.part = a.part;
  cu::grid_row_sums(rs, stream());
}

void SphereCudaOps::grid_norm_stats(const program::NormStatsArgs<Norm>& a) const {
  cu::GridNormStatsArgs st;
  st.part = a.all;
  st.batch = a.batch;
  st.lat_rows = a.nlat;
  st.dim = a.C;
  st.points = a.points;
  st.mean = a.mean;
  if (a.finish) {
    st.finish = true;
    st.eps = 1e-6;
    st.weight = weights() + a.norm->weight;
    st.bias = weights() + a.norm->bias;
    st.scale = a.scale;
    st.shift = a.shift;
  }
  cu::grid_norm_stats(st, stream());
}

void SphereCudaOps::channel_affine(const program::AffineArgs& a) const {
  if (a.row0 % a.points != 0)
    throw Error(ErrorCode::internal, "sphere_transformer: channel_affine on a device takes whole samples");
  const index_t first = a.row0 / a.points * a.x.width;
  cu::ChannelAffineArgs af;
  af.x = a.x.data;
  af.ldx = a.x.ld;
  af.y = a.y.data;
  af.ldy = a.y.ld;
  af.rows = a.x.rows;
  af.rows_per_sample = a.points;
  af.dim = a.x.width;
  af.scale = a.scale + first;
  af.shift = a.shift + first;
  cu::channel_affine(af, stream());
}

void SphereCudaOps::relu(const ops::Rows& h) const { cu::relu_rows(h.data, h.ld, h.rows, h.width, stream()); }

void SphereCudaOps::sht_fourier(const program::ShtFourierArgs<Sht>& a) const {
  cu::ShtFourierArgs fa;
  fa.x = a.x.data;
  fa.ldx = a.x.ld;
  fa.y = a.fourier;
  fa.twiddle = a.op->twiddle_in.data();
  fa.rows = static_cast<index_t>(a.batch) * a.lat_rows;
  fa.nlon = a.op->nlon_in;
  fa.channels = a.x.width;
  fa.mmax = a.op->mmax_;
  fa.modes = a.op->modes_in;
  cu::sht_fourier_analysis(fa, stream());
}

void SphereCudaOps::sht_legendre(const program::ShtLegendreArgs<Sht>& a) const {
  cu::ShtLegendreArgs la;
  la.table = a.op->analysis.data();
  la.x = a.orders;
  la.y = a.coeffs;
  la.batch = a.batch;
  la.nlat = a.op->nlat_in;
  la.lmax = a.op->lmax_;
  la.mmax = a.m1 - a.m0;
  la.m_first = a.m0;
  la.channels = a.C;
  cu::sht_legendre_analysis(la, stream());
}

void SphereCudaOps::sht_synthesis(const program::ShtSynthesisArgs<Sht>& a) const {
  const Sht& d = *a.op;
  const int C = a.out.width;
  d.g.resize(static_cast<std::size_t>(a.batch) * static_cast<std::size_t>(d.nlat_out) *
                 static_cast<std::size_t>(d.modes_out) * 2 * static_cast<std::size_t>(C),
             d.device);
  cu::ShtLegendreArgs ls;
  ls.table = d.synthesis.data();
  ls.x = a.coeffs;
  ls.y = d.g.data();
  ls.batch = a.batch;
  ls.nlat = d.nlat_out;
  ls.lmax = d.lmax_;
  ls.mmax = d.mmax_;
  ls.channels = C;
  ls.modes = d.modes_out;
  ls.nyquist = d.nyquist;
  ls.lat_first = a.lat0;
  ls.lat_rows = a.lat1 - a.lat0;
  cu::sht_legendre_synthesis(ls, stream());
  cu::ShtFourierArgs fs;
  fs.x = d.g.data();
  fs.y = a.out.data;
  fs.ldy = a.out.ld;
  fs.twiddle = d.twiddle_out.data();
  fs.rows = static_cast<index_t>(a.batch) * (a.lat1 - a.lat0);
  fs.nlon = d.nlon_out;
  fs.channels = C;
  fs.mmax = fs.modes = d.modes_out;
  cu::sht_fourier_synthesis(fs, stream());
}

std::unique_ptr<SphereCudaOps::Sht> SphereCudaOps::Upload::sht(const HostSht& op) const {
  auto d = std::make_unique<Sht>();
  d->device = device;
  d->nlat_in = op.analysis.nlat();
  d->nlon_in = op.analysis.nlon();
  d->nlat_out = op.synthesis.nlat();
  d->nlon_out = op.synthesis.nlon();
  d->lmax_ = op.lmax();
  d->mmax_ = op.mmax();
  d->modes_in = std::min(d->mmax_, d->nlon_in / 2 + 1);
  d->modes_out = std::min(d->mmax_, d->nlon_out / 2 + 1);
  d->nyquist = d->nlon_out % 2 == 0 && d->nlon_out / 2 < d->modes_out ? d->nlon_out / 2 : -1;
  surrogate::device::upload(d->analysis, std::span<const float>(op.analysis.weights()), device, stream);
  surrogate::device::upload(d->synthesis, std::span<const float>(op.synthesis.table()), device, stream);
  for (auto [n, dst] : {std::pair{d->nlon_in, &d->twiddle_in}, std::pair{d->nlon_out, &d->twiddle_out}}) {
    std::vector<double> tw(2 * static_cast<std::size_t>(n));  // cos, sin(2 pi t / n), t < n
    for (int t = 0; t < n; ++t) {
      const double angle = 2.0 * std::numbers::pi * t / n;
      tw[2 * static_cast<std::size_t>(t)] = std::cos(angle);
      tw[2 * static_cast<std::size_t>(t) + 1] = std::sin(angle);
    }
    surrogate::device::upload(*dst, std::span<const double>(tw), device, stream);
    cu::synchronize(stream);  // the upload reads `tw`
  }
  return d;
}

std::unique_ptr<SphereCudaOps::Attention> SphereCudaOps::Upload::attention(const HostAttention& op) const {
  auto a = std::make_unique<Attention>();
  if (const auto* g = std::get_if<AttentionS2>(&op.op)) a->global.emplace(*g, device);
  else a->neighborhood.emplace(std::get<NeighborhoodAttentionS2>(op.op), device);
  return a;
}

}  // namespace surrogate::sphere
