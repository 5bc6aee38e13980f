// The SphericalTransformer's device forward in latitude bands (transformer.hpp, forward_bands): the CPU's
// SphericalTransformer::forward_bands stage by stage on each rank's device, every exchange an ExchangePlan
// device move of the plan's TransformerBands (Place: this rank's device and stream, the comm's
// DeviceTransport). share/docs/sphere.md, "CUDA forward of the SphericalTransformer", "Several ranks".
#include <cuda_runtime_api.h>

#include <algorithm>
#include <vector>

#include "../../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"
#include "transformer_cuda.hpp"

namespace surrogate::sphere {

namespace cu = kernels::cuda;

/// Device work between two exchanges: run on this rank's device, synchronized; a failure on any rank
/// becomes the same Error on every rank before the next exchange.
template <class F>
void SphereTransformerCuda::on_every_rank(const Comm& comm, F&& work) {
  collectively(comm, [&] {
    try {
      cu::DeviceGuard guard(device_);
      work(stream_.get());
      stream_.synchronize();
    } catch (...) {
      surrogate::detail::raise_current_cuda_error("sphere_transformer", device_);
    }
  });
}

/// y = norm_which(x) over this rank's band of the internal grid. Layer norm and none are row-local (norm()
/// on the band's rows). Instance norm: the band's per-row double sums (grid_row_sums) moved to every rank
/// with a band in grid layout (row_sums: a double is moved as two floats, bytes unchanged), then the
/// statistics computed from all rows by the one-rank forward's grid_norm_stats: the one-rank device bits.
void SphereTransformerCuda::band_norm(const Comm& comm, const TransformerBands::Exchanges& e, const Place& place,
                                      const Block& b, int which, const float* x, float* y) {
  const int batch = e.batch, lat_rows = e.i1 - e.i0;
  if (cfg_.normalization_layer != BlockNorm::instance_norm) {
    on_every_rank(comm, [&](cudaStream_t) {
      if (lat_rows > 0) norm(b, which, batch, lat_rows, x, y);
    });
    return;
  }
  cu::GridRowSumsArgs rs;
  rs.x = x;
  rs.ld = C_;
  rs.batch = batch;
  rs.lat_rows = lat_rows;
  rs.nlon = w_;
  rs.dim = C_;
  rs.part = part_band_.data();
  cu::GridNormStatsArgs st;
  st.part = part_.data();
  st.batch = batch;
  st.lat_rows = h_;
  st.dim = C_;
  st.points = static_cast<double>(h_) * w_;
  st.mean = mean_.data();
  const int floats = 2 * C_;  // one row of C doubles
  const auto move_sums = [&] {
    e.row_sums.forward(reinterpret_cast<const float*>(part_band_.data()), floats, reinterpret_cast<float*>(part_.data()),
                       floats, floats, place);
  };
  on_every_rank(comm, [&](cudaStream_t s) {
    if (lat_rows > 0) cu::grid_row_sums(rs, s);
  });
  move_sums();
  on_every_rank(comm, [&](cudaStream_t s) {
    if (lat_rows == 0) return;
    cu::grid_norm_stats(st, s);  // the means from every row
    rs.mean = mean_.data();
    cu::grid_row_sums(rs, s);
  });
  move_sums();
  on_every_rank(comm, [&](cudaStream_t s) {
    if (lat_rows == 0) return;
    const surrogate::device::Norm& n = b.norm[which];
    st.finish = true;
    st.eps = 1e-6;
    st.weight = weights_.data() + n.weight;
    st.bias = weights_.data() + n.bias;
    st.scale = scale_.data();
    st.shift = shift_.data();
    cu::grid_norm_stats(st, s);
    cu::ChannelAffineArgs af;
    af.x = x;
    af.ldx = C_;
    af.y = y;
    af.ldy = C_;
    af.rows = static_cast<index_t>(batch) * lat_rows * w_;
    af.rows_per_sample = static_cast<index_t>(lat_rows) * w_;
    af.dim = C_;
    af.scale = scale_.data();
    af.shift = shift_.data();
    cu::channel_affine(af, s);
  });
}

/// upsample_sht in latitude bands, the CPU path's split on the device kernels: the Fourier rows of the
/// rank's internal rows (x_); the rank's orders [m0, m1) of every latitude (sht_orders), their Legendre
/// analysis (the kernel's order range: each coefficient summed over the latitudes in the whole-grid
/// order); the coefficients of every order to each rank with decoder rows (sht_coefficients_device, the
/// kernels' [b][l][m] layout), which synthesises only those rows into band_up_. Every element is computed
/// by the same kernel code from the same values as in upsample_sht: the same bits for any number of ranks.
void SphereTransformerCuda::upsample_sht_bands(const Comm& comm, const TransformerBands::Exchanges& e,
                                               const Place& place) {
  ShtDecoder& d = *sht_;
  const int batch = e.batch, i0 = e.i0, i1 = e.i1, d0 = e.decoder_rows.first, d1 = e.decoder_rows.second;
  const int C2 = 2 * C_, orders_here = e.m1 - e.m0;
  const index_t own_rows = static_cast<index_t>(batch) * (i1 - i0);
  on_every_rank(comm, [&](cudaStream_t s) {
    if (own_rows == 0) return;
    cu::ShtFourierArgs fa;
    fa.x = x_.data();
    fa.ldx = C_;
    fa.y = d.fourier.data();
    fa.twiddle = d.twiddle_in.data();
    fa.rows = own_rows;
    fa.nlon = w_;
    fa.channels = C_;
    fa.mmax = d.mmax;
    fa.modes = d.modes_in;
    cu::sht_fourier_analysis(fa, s);
  });
  e.sht_orders.forward(d.fourier.data(), C2, d.orders.data(), C2, C2, place);
  on_every_rank(comm, [&](cudaStream_t s) {
    if (orders_here == 0) return;
    cu::ShtLegendreArgs la;
    la.table = d.analysis.data();
    la.x = d.orders.data();
    la.y = d.coeffs.data();
    la.batch = batch;
    la.nlat = h_;
    la.lmax = d.lmax;
    la.mmax = orders_here;
    la.m_first = e.m0;
    la.channels = C_;
    cu::sht_legendre_analysis(la, s);
  });
  e.sht_coefficients_device.forward(d.coeffs.data(), C2, d.all_coeffs.data(), C2, C2, place);
  on_every_rank(comm, [&](cudaStream_t s) {
    if (d0 >= d1) return;  // a rank without decoder rows received no coefficients
    cu::ShtLegendreArgs ls;
    ls.table = d.synthesis.data();
    ls.x = d.all_coeffs.data();
    ls.y = d.g.data();
    ls.batch = batch;
    ls.nlat = cfg_.nlat;
    ls.lmax = d.lmax;
    ls.mmax = d.mmax;
    ls.channels = C_;
    ls.modes = d.modes_out;
    ls.nyquist = d.nyquist;
    ls.lat_first = d0;
    ls.lat_rows = d1 - d0;
    cu::sht_legendre_synthesis(ls, s);
    cu::ShtFourierArgs fs;
    fs.x = d.g.data();
    fs.y = band_up_.data();
    fs.ldy = C_;
    fs.twiddle = d.twiddle_out.data();
    fs.rows = static_cast<index_t>(batch) * (d1 - d0);
    fs.nlon = cfg_.nlon;
    fs.channels = C_;
    fs.mmax = fs.modes = d.modes_out;
    cu::sht_fourier_synthesis(fs, s);
  });
}

void SphereTransformerCuda::forward_bands(const Comm& comm, const SpherePlan& plan, const float* in, index_t ld_in,
                                          float* out, index_t ld_out) {
  const TransformerBands::Exchanges& e = plan.transformer().exchanges();
  const int batch = e.batch, i0 = e.i0, i1 = e.i1, g0 = e.g0, g1 = e.g1, cin = cfg_.in_chans, cout = cfg_.out_chans;
  const index_t P_band = static_cast<index_t>(i1 - i0) * w_, rows = batch * P_band;
  const index_t n = plan.layout().local_points(), out_rows = static_cast<index_t>(batch) * (g1 - g0) * cfg_.nlon;
  const Place place{device_, stream_.get(), &comm.device_transport(device_)};
  std::vector<float> host(static_cast<std::size_t>(n) * static_cast<std::size_t>(std::max(cin, cout)));
  on_every_rank(comm, [&](cudaStream_t s) {  // this rank's input rows, dense, to the device
    ensure_buffers(batch);
    for (index_t r = 0; r < n; ++r) std::copy_n(in + r * ld_in, cin, host.data() + r * cin);
    pieces_in_.resize(std::max<std::size_t>(static_cast<std::size_t>(n * cin), 1), device_);
    pieces_out_.resize(std::max<std::size_t>(static_cast<std::size_t>(n * cout), 1), device_);
    cu::copy_to_device(pieces_in_.data(), host.data(), static_cast<std::size_t>(n * cin) * sizeof(float), s);
  });

  // Encoder: the image rows within its cutoff of this band; DISCO rows; the band's position embedding.
  e.encoder_input.forward(pieces_in_.data(), cin, in_.data(), cin, cin, place);
  on_every_rank(comm, [&](cudaStream_t s) {
    if (rows == 0) return;
    encoder_->forward_rows(batch, in_.data(), e.encoder_rows.first, e.encoder_rows.second, x_.data(), i0, i1, s);
    if (has_pos_)
      for (int b = 0; b < batch; ++b)
        add_rows(x_.data() + b * P_band * C_, pos_.data() + static_cast<index_t>(i0) * w_ * C_, P_band, C_, C_, s);
  });

  for (Block& b : blocks_) {
    band_norm(comm, e, place, b, 0, x_.data(), y_.data());
    // Keys and values: every row (global attention) or the neighbourhood halo, from their owners.
    e.key_value.forward(y_.data(), C_, kv_.data(), C_, C_, place);
    on_every_rank(comm, [&](cudaStream_t s) {
      if (rows == 0) return;
      if (b.global) b.global->forward_rows(batch, i0, i1, y_.data(), kv_.data(), kv_.data(), att_.data(), s);
      else b.neighborhood->forward_rows(batch, i0, i1, y_.data(), e.kv_rows.first, e.kv_rows.second, kv_.data(),
                                        kv_.data(), att_.data(), s);
      add_rows(x_.data(), att_.data(), rows, C_, C_, s);
    });
    band_norm(comm, e, place, b, 1, x_.data(), y_.data());
    on_every_rank(comm, [&](cudaStream_t s) {
      if (rows == 0) return;
      if (cfg_.use_mlp) mlp(b, rows, s);
      else add_rows(x_.data(), y_.data(), rows, C_, C_, s);
    });
  }

  // Decoder: the image rows [g0, g1) read the upsampled rows decoder_rows.
  const auto dec_rows = e.decoder_rows;
  const index_t dec_points = static_cast<index_t>(dec_rows.second - dec_rows.first) * cfg_.nlon;
  if (sht_) {
    upsample_sht_bands(comm, e, place);
  } else {
    // Bilinear: the internal rows of the interpolation stencils (pole rows: the first / last internal row)
    // resampled into the decoder's rows only (ResampleS2Device::forward_rows, bitwise the whole-grid rows).
    e.resample_input.forward(x_.data(), C_, y_.data(), C_, C_, place);
    on_every_rank(comm, [&](cudaStream_t s) {
      if (dec_points == 0) return;
      resample_->forward_rows(batch, C_, y_.data(), e.resample_rows.first, e.resample_rows.second, band_up_.data(),
                              dec_rows.first, dec_rows.second, s);
    });
  }
  on_every_rank(comm, [&](cudaStream_t s) {
    if (dec_points == 0) return;
    decoder_->forward_rows(batch, band_up_.data(), dec_rows.first, dec_rows.second, out_.data(), g0, g1, s);
  });
  if (cfg_.residual_prediction) {
    e.residual_input.forward(pieces_in_.data(), cin, in_.data(), cin, cin, place);
    on_every_rank(comm, [&](cudaStream_t s) {
      if (out_rows > 0) add_rows(out_.data(), in_.data(), out_rows, cout, cin, s);
    });
  }
  // The output band back to this rank's rows, then to the host.
  plan.outputs().forward(out_.data(), cout, pieces_out_.data(), cout, cout, place);
  on_every_rank(comm, [&](cudaStream_t s) {
    cu::copy_to_host(host.data(), pieces_out_.data(), static_cast<std::size_t>(n * cout) * sizeof(float), s);
    stream_.synchronize();
    for (index_t r = 0; r < n; ++r) std::copy_n(host.data() + r * cout, cout, out + r * ld_out);
  });
}

}  // namespace surrogate::sphere
