// Real spherical harmonic transforms on the latitude-longitude grids: torch-harmonics' RealSHT and
// InverseRealSHT (0.9.x, norm "ortho", Condon-Shortley phase) for float32 fields, on the CPU. The
// SphericalTransformer's decoder with upsample_sht = True is InverseRealSHT(image grid) after
// RealSHT(internal grid). Semantics, cost and tests: share/docs/sphere.md ("Spherical harmonic
// transforms"); specification: docs/reference-models.md §5.1 (truncation), §5.5 (decoder).
//
// Definitions (what the official modules compute for float32 input, every step):
//  * truncation: lmax = nlat (legendre-gauss), nlat - 1 (lobatto), (nlat + 1) / 2 (equiangular,
//    equiangular-trapezoidal); mmax = nlon / 2 + 1; then both are min(lmax, mmax) (triangular). Explicit
//    lmax / mmax replace the defaults before that minimum.
//  * Legendre table P[m][l][k] = orthonormal associated Legendre function with the (-1)^m phase at
//    x_k = cos(colatitude_k) (float64 recurrence, zero for l < m), so that Y_l^m = P[m][l] e^{i m lon} has
//    unit L2 norm on the sphere.
//  * forward: X_k(m) = (1/nlon) sum_j f(k, j) e^{-2 pi i m j / nlon} (rounded to float32; orders beyond
//    nlon / 2 are zero), then a(l, m) = sum_k X_k(m) W[m][l][k] with W = float32(P[m][l][k] * 2 pi w_k)
//    (w_k the grid's latitude weight), rounded to float32.
//  * inverse: G_k(m) = sum_l a(l, m) float32(P[m][l][k]) (rounded to float32), then
//    f(k, j) = Re G_k(0) + sum_{m >= 1} c_m (Re G_k(m) cos(2 pi m j / nlon) - Im G_k(m) sin(...)) with
//    c_m = 2, except c = 1 and the imaginary part ignored at the Nyquist order m = nlon / 2 (even nlon);
//    orders above nlon / 2 are ignored (torch.fft.irfft with n = nlon, "forward" normalisation).
// Here every sum runs in double in a fixed order and is rounded to float32 where the official module
// holds a float32 tensor, so the result is the official one to the official transform's own float32
// rounding, independent of the number of threads.
//
// Layouts: a field is channels last, f[((b * nlat + lat) * nlon + lon) * ld + c]. Coefficients are "split
// complex": for each (sample b, degree l, order m) `channels` real parts then `channels` imaginary parts,
// coeff[(((b * lmax + l) * mmax + m) * 2 + part) * channels + c].
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

namespace detail {
class ChannelFft;
}

/// (lmax, mmax) of a transform on an (nlat, nlon) grid, torch-harmonics' truncate_sht: the grid's default
/// where lmax / mmax is 0, then both min(lmax, mmax).
struct ShtSize {
  int lmax = 0, mmax = 0;
};
ShtSize sht_truncation(int nlat, int nlon, Grid grid, int lmax = 0, int mmax = 0);

/// Orthonormal associated Legendre functions with the Condon-Shortley phase at the points x (in [-1, 1]):
/// table[(m * lmax + l) * x.size() + k] for m < mmax, l < lmax (zero where l < m), float64.
std::vector<double> legendre_table(int lmax, int mmax, std::span<const double> x);

/// Forward real SHT of float32 fields on one grid (torch-harmonics' RealSHT).
class RealSHT {
 public:
  /// Error (invalid_argument) for nlat < 2 or nlon < 1 (Gauss-Legendre also nlat = 1) or negative lmax / mmax.
  RealSHT(int nlat, int nlon, Grid grid, int lmax = 0, int mmax = 0);

  int nlat() const noexcept { return nlat_; }
  int nlon() const noexcept { return nlon_; }
  int lmax() const noexcept { return size_.lmax; }
  int mmax() const noexcept { return size_.mmax; }
  Grid grid() const noexcept { return grid_; }

  /// Coefficients of `batch` fields of `channels` channels (`ld` >= channels floats per point; 0 = channels);
  /// out: batch * lmax * mmax * 2 * channels floats (split complex, see above). OpenMP inside.
  void forward(int batch, int channels, const float* in, float* out, std::int64_t ld = 0) const;

  /// The two steps of forward, for latitude bands. fourier_rows: the longitude transform of `rows` whole
  /// latitude rows (any rows, each nlon points of ld floats) into fourier_width(channels) floats per row
  /// ([m][re, im][c], rounded to float32). Row-local: the same bits whichever rank transforms a row.
  std::int64_t fourier_width(int channels) const { return 2 * static_cast<std::int64_t>(size_.mmax) * channels; }
  void fourier_rows(std::int64_t rows, int channels, const float* in, std::int64_t ld, float* fourier) const;
  /// legendre: the coefficients from the Fourier rows of every latitude of every sample
  /// (fourier[(b * nlat + lat) * fourier_width + ...]), summed over the latitudes in order.
  void legendre(int batch, int channels, const float* fourier, float* out) const;
  /// legendre for the orders [m_begin, m_end) only (latitude bands split the orders over the ranks): fourier
  /// holds those orders of every latitude, fourier[((b * nlat + lat) * (m_end - m_begin) + m - m_begin) * 2 *
  /// channels + ...]; out is order-major, out[(((b * (m_end - m_begin) + m - m_begin) * lmax + l) * 2 + part) *
  /// channels + c]. Every coefficient has the bits legendre() gives it.
  void legendre_orders(int batch, int channels, int m_begin, int m_end, const float* fourier, float* out) const;

  /// The float32 analysis weights W[(m * lmax + l) * nlat + k].
  const std::vector<float>& weights() const noexcept { return weights_; }

 private:
  int nlat_, nlon_;
  Grid grid_;
  ShtSize size_;
  void order_sums(int batch, int channels, int m_begin, int m_end, const float* fourier, std::int64_t row_width,
                  float* out, bool by_order) const;

  int modes_ = 0;                    // orders the longitude transform computes: min(mmax, nlon / 2 + 1)
  std::shared_ptr<const detail::ChannelFft> fft_;  // length nlon
  std::vector<float> weights_;
};

/// Inverse real SHT onto one grid (torch-harmonics' InverseRealSHT).
class InverseRealSHT {
 public:
  /// Error (invalid_argument) as RealSHT. The SphericalTransformer decoder passes the forward transform's
  /// lmax and mmax.
  InverseRealSHT(int nlat, int nlon, Grid grid, int lmax = 0, int mmax = 0);

  int nlat() const noexcept { return nlat_; }
  int nlon() const noexcept { return nlon_; }
  int lmax() const noexcept { return size_.lmax; }
  int mmax() const noexcept { return size_.mmax; }
  Grid grid() const noexcept { return grid_; }

  /// Fields (batch * nlat * nlon points, `ld` floats each, 0 = channels) from batch * lmax * mmax * 2 * channels
  /// coefficients. OpenMP inside.
  void forward(int batch, int channels, const float* coeffs, float* out, std::int64_t ld = 0) const;
  /// Only latitude rows [lat_begin, lat_end) of every sample: out holds those rows (sample-major, row-major).
  /// Bitwise the rows of forward(): every row is synthesised on its own.
  void forward_rows(int batch, int channels, const float* coeffs, float* out, int lat_begin, int lat_end,
                    std::int64_t ld = 0) const;
  /// forward_rows from order-major coefficients (legendre_orders' layout with all orders:
  /// coeffs[(((b * mmax + m) * lmax + l) * 2 + part) * channels + c]); the same bits.
  void forward_rows_by_order(int batch, int channels, const float* coeffs, float* out, int lat_begin, int lat_end,
                             std::int64_t ld = 0) const;

  /// The float32 synthesis table P[(m * lmax + l) * nlat + k].
  const std::vector<float>& table() const noexcept { return table_; }

 private:
  int nlat_, nlon_;
  Grid grid_;
  ShtSize size_;
  void synthesise(int batch, int channels, const float* coeffs, bool by_order, float* out, int lat_begin, int lat_end,
                  std::int64_t ld) const;

  int modes_ = 0;                    // orders the longitude synthesis uses: min(mmax, nlon / 2 + 1)
  std::shared_ptr<const detail::ChannelFft> fft_;  // length nlon
  std::vector<float> table_;
};

}  // namespace surrogate::sphere
