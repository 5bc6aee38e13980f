// RealSHT / InverseRealSHT (surrogate/sphere/sht.hpp): float64 Legendre tables from our own recurrence,
// longitude transforms as direct sums over a table of exact-at-the-quarters twiddles, every sum in double in
// a fixed order, rounded to float32 where torch-harmonics holds float32 tensors.
#include "surrogate/sphere/sht.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "surrogate/error.hpp"

namespace surrogate::sphere {
namespace {

[[noreturn]] void invalid(const std::string& message) { throw Error(ErrorCode::invalid_argument, message); }

void check_grid(const char* who, int nlat, int nlon, Grid grid, int lmax, int mmax) {
  const int min_lat = grid == Grid::legendre_gauss ? 1 : 2;
  if (nlat < min_lat || nlon < 1)
    invalid(std::string(who) + ": the grid (nlat " + std::to_string(nlat) + ", nlon " + std::to_string(nlon) +
            ") needs nlat >= " + std::to_string(min_lat) + " and nlon >= 1 for the " + to_string(grid) + " grid");
  if (lmax < 0 || mmax < 0)
    invalid(std::string(who) + ": lmax (" + std::to_string(lmax) + ") and mmax (" + std::to_string(mmax) +
            ") must not be negative (0 = the grid's default)");
}

void check_batch(const char* who, int batch, int channels, const void* in, const void* out, std::int64_t ld) {
  if (batch < 1 || channels < 1) invalid(std::string(who) + ": batch and channels must be positive");
  if (!in || !out) invalid(std::string(who) + ": null input or output");
  if (ld != 0 && ld < channels)
    invalid(std::string(who) + ": the row stride ld (" + std::to_string(ld) + ") is smaller than channels (" +
            std::to_string(channels) + ")");
}

/// cos / sin(2 pi q / n) for q = 0 .. n-1, exact at multiples of a quarter turn (so the imaginary parts
/// of the orders 0 and n/2 are exact zeros, as a real FFT gives them).
void twiddles(int n, std::vector<double>& cosines, std::vector<double>& sines) {
  cosines.resize(static_cast<std::size_t>(n));
  sines.resize(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    double c, s;
    if (4 * static_cast<std::int64_t>(q) % n == 0) {
      const int quarter = static_cast<int>(4 * static_cast<std::int64_t>(q) / n);
      c = quarter == 0 ? 1.0 : quarter == 2 ? -1.0 : 0.0;
      s = quarter == 1 ? 1.0 : quarter == 3 ? -1.0 : 0.0;
    } else {
      const double angle = 2.0 * std::numbers::pi * static_cast<double>(q) / static_cast<double>(n);
      c = std::cos(angle);
      s = std::sin(angle);
    }
    cosines[static_cast<std::size_t>(q)] = c;
    sines[static_cast<std::size_t>(q)] = s;
  }
}

/// x_k = cos(colatitude_k), north first (as torch-harmonics evaluates its tables).
std::vector<double> cos_colatitudes(int nlat, Grid grid) {
  std::vector<double> x = latitudes(nlat, grid).colatitude;
  for (double& v : x) v = std::cos(v);
  return x;
}

}  // namespace

ShtSize sht_truncation(int nlat, int nlon, Grid grid, int lmax, int mmax) {
  if (lmax == 0) {
    switch (grid) {
      case Grid::legendre_gauss: lmax = nlat; break;
      case Grid::lobatto: lmax = nlat - 1; break;
      case Grid::equiangular:
      case Grid::equiangular_trapezoidal: lmax = (nlat + 1) / 2; break;
    }
  }
  if (mmax == 0) mmax = nlon / 2 + 1;
  const int l = std::min(lmax, mmax);
  return {l, l};
}

std::vector<double> legendre_table(int lmax, int mmax, std::span<const double> x) {
  const std::size_t n = x.size();
  std::vector<double> table(static_cast<std::size_t>(std::max(lmax, 0)) * static_cast<std::size_t>(std::max(mmax, 0)) * n,
                            0.0);
  auto at = [&](int m, int l, std::size_t k) -> double& {
    return table[(static_cast<std::size_t>(m) * static_cast<std::size_t>(lmax) + static_cast<std::size_t>(l)) * n + k];
  };
  for (std::size_t k = 0; k < n; ++k) {
    const double xk = x[k];
    const double s = std::sqrt((1.0 - xk) * (1.0 + xk));
    double diagonal = 1.0 / std::sqrt(4.0 * std::numbers::pi);  // P_0^0
    for (int m = 0; m < mmax && m < lmax; ++m) {
      if (m > 0) diagonal *= -std::sqrt((2.0 * m + 1.0) / (2.0 * m)) * s;  // P_m^m, with the (-1)^m phase
      at(m, m, k) = diagonal;
      if (m + 1 >= lmax) continue;
      double previous = diagonal, current = std::sqrt(2.0 * m + 3.0) * xk * diagonal;  // P_{m+1}^m
      at(m, m + 1, k) = current;
      for (int l = m + 2; l < lmax; ++l) {
        const double ll = static_cast<double>(l) * l, mm = static_cast<double>(m) * m;
        const double l1 = static_cast<double>(l - 1) * (l - 1);
        const double a = std::sqrt((4.0 * ll - 1.0) / (ll - mm));
        const double b = std::sqrt((l1 - mm) / (4.0 * l1 - 1.0));
        const double next = a * (xk * current - b * previous);
        previous = current;
        current = next;
        at(m, l, k) = current;
      }
    }
  }
  return table;
}

// ---------------------------------------------------------------------------------------------------------
// RealSHT

RealSHT::RealSHT(int nlat, int nlon, Grid grid, int lmax, int mmax) : nlat_(nlat), nlon_(nlon), grid_(grid) {
  check_grid("RealSHT", nlat, nlon, grid, lmax, mmax);
  size_ = sht_truncation(nlat, nlon, grid, lmax, mmax);
  modes_ = std::min(size_.mmax, nlon / 2 + 1);
  twiddles(nlon, cos_, sin_);
  const Latitudes lat = latitudes(nlat, grid);
  const std::vector<double> table = legendre_table(size_.lmax, size_.mmax, cos_colatitudes(nlat, grid));
  weights_.resize(table.size());
  const double two_pi = 2.0 * std::numbers::pi;
  for (std::size_t i = 0; i < table.size(); ++i)
    weights_[i] = static_cast<float>(table[i] * (two_pi * lat.weight[i % static_cast<std::size_t>(nlat)]));
}

void RealSHT::fourier_rows(std::int64_t rows, int channels, const float* in, std::int64_t ld, float* fourier) const {
  if (rows < 0) invalid("RealSHT::fourier_rows: negative row count");
  if (rows == 0) return;
  check_batch("RealSHT::fourier_rows", 1, channels, in, fourier, ld);
  if (ld == 0) ld = channels;
  const std::int64_t width = fourier_width(channels);
  const std::size_t C = static_cast<std::size_t>(channels);
  const double scale = 1.0 / static_cast<double>(nlon_);
#pragma omp parallel
  {
    std::vector<double> re(C), im(C);
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = in + r * nlon_ * ld;
      float* dst = fourier + r * width;
      for (int m = 0; m < size_.mmax; ++m) {
        float* out_re = dst + 2 * static_cast<std::int64_t>(m) * channels;
        float* out_im = out_re + channels;
        if (m >= modes_) {  // beyond the grid's Nyquist order: zero padding
          std::fill(out_re, out_re + 2 * channels, 0.0f);
          continue;
        }
        std::fill(re.begin(), re.end(), 0.0);
        std::fill(im.begin(), im.end(), 0.0);
        for (int j = 0; j < nlon_; ++j) {
          const std::size_t q = static_cast<std::size_t>((static_cast<std::int64_t>(m) * j) % nlon_);
          const double c = cos_[q], s = sin_[q];
          const float* v = row + static_cast<std::int64_t>(j) * ld;
          for (std::size_t ch = 0; ch < C; ++ch) {
            re[ch] += c * v[ch];
            im[ch] -= s * v[ch];
          }
        }
        for (std::size_t ch = 0; ch < C; ++ch) {
          out_re[ch] = static_cast<float>(re[ch] * scale);
          out_im[ch] = static_cast<float>(im[ch] * scale);
        }
      }
    }
  }
}

void RealSHT::legendre(int batch, int channels, const float* fourier, float* out) const {
  check_batch("RealSHT::legendre", batch, channels, fourier, out, 0);
  const int L = size_.lmax, M = size_.mmax;
  const std::int64_t width = fourier_width(channels);
  const std::size_t C2 = 2 * static_cast<std::size_t>(channels);
  const int tasks = batch * M;
#pragma omp parallel
  {
    std::vector<double> acc(C2);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; ++t) {
      const int b = t / M, m = t % M;
      for (int l = 0; l < L; ++l) {
        float* dst = out + ((static_cast<std::int64_t>(b) * L + l) * M + m) * static_cast<std::int64_t>(C2);
        if (l < m) {  // P_l^m = 0
          std::fill(dst, dst + C2, 0.0f);
          continue;
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        const float* wt = weights_.data() + (static_cast<std::size_t>(m) * L + static_cast<std::size_t>(l)) * nlat_;
        for (int k = 0; k < nlat_; ++k) {
          const double wk = wt[k];
          const float* src = fourier + (static_cast<std::int64_t>(b) * nlat_ + k) * width + 2 * static_cast<std::int64_t>(m) * channels;
          for (std::size_t i = 0; i < C2; ++i) acc[i] += wk * src[i];
        }
        for (std::size_t i = 0; i < C2; ++i) dst[i] = static_cast<float>(acc[i]);
      }
    }
  }
}

void RealSHT::forward(int batch, int channels, const float* in, float* out, std::int64_t ld) const {
  check_batch("RealSHT::forward", batch, channels, in, out, ld);
  std::vector<float> fourier(static_cast<std::size_t>(static_cast<std::int64_t>(batch) * nlat_ * fourier_width(channels)));
  fourier_rows(static_cast<std::int64_t>(batch) * nlat_, channels, in, ld == 0 ? channels : ld, fourier.data());
  legendre(batch, channels, fourier.data(), out);
}

// ---------------------------------------------------------------------------------------------------------
// InverseRealSHT

InverseRealSHT::InverseRealSHT(int nlat, int nlon, Grid grid, int lmax, int mmax) : nlat_(nlat), nlon_(nlon), grid_(grid) {
  check_grid("InverseRealSHT", nlat, nlon, grid, lmax, mmax);
  size_ = sht_truncation(nlat, nlon, grid, lmax, mmax);
  modes_ = std::min(size_.mmax, nlon / 2 + 1);
  twiddles(nlon, cos_, sin_);
  const std::vector<double> table = legendre_table(size_.lmax, size_.mmax, cos_colatitudes(nlat, grid));
  table_.assign(table.begin(), table.end());  // rounded to float32 as the module's buffer is for float32 input
}

void InverseRealSHT::forward_rows(int batch, int channels, const float* coeffs, float* out, int lat_begin, int lat_end,
                                  std::int64_t ld) const {
  check_batch("InverseRealSHT::forward_rows", batch, channels, coeffs, out, ld);
  if (lat_begin < 0 || lat_end > nlat_ || lat_begin > lat_end)
    invalid("InverseRealSHT::forward_rows: rows [" + std::to_string(lat_begin) + ", " + std::to_string(lat_end) +
            ") are not within the " + std::to_string(nlat_) + " latitudes");
  if (ld == 0) ld = channels;
  const int L = size_.lmax, M = size_.mmax, rows = lat_end - lat_begin;
  const std::size_t C = static_cast<std::size_t>(channels), C2 = 2 * C;
  const bool nyquist = nlon_ % 2 == 0 && nlon_ / 2 < modes_;  // order nlon/2 present: real, counted once
  const int tasks = batch * rows;
#pragma omp parallel
  {
    std::vector<double> g(static_cast<std::size_t>(modes_) * C2), acc(C);
#pragma omp for schedule(static)
    for (int t = 0; t < tasks; ++t) {
      const int b = t / rows, k = lat_begin + t % rows;
      // Legendre synthesis of this latitude, rounded to float32 (the module's float32 tensor), with the
      // factor of the Hermitian completion folded in: 1 for the orders 0 and nlon/2 (imaginary part
      // dropped), 2 for the others.
      for (int m = 0; m < modes_; ++m) {
        double* gm = g.data() + static_cast<std::size_t>(m) * C2;
        std::fill(gm, gm + C2, 0.0);
        for (int l = m; l < L; ++l) {
          const double p = table_[(static_cast<std::size_t>(m) * L + static_cast<std::size_t>(l)) * nlat_ + static_cast<std::size_t>(k)];
          const float* a = coeffs + ((static_cast<std::int64_t>(b) * L + l) * M + m) * static_cast<std::int64_t>(C2);
          for (std::size_t i = 0; i < C2; ++i) gm[i] += p * a[i];
        }
        const bool real_only = m == 0 || (nyquist && m == nlon_ / 2);
        const double factor = real_only ? 1.0 : 2.0;
        for (std::size_t i = 0; i < C; ++i) gm[i] = factor * static_cast<float>(gm[i]);
        for (std::size_t i = C; i < C2; ++i) gm[i] = real_only ? 0.0 : factor * static_cast<float>(gm[i]);
      }
      float* row = out + (static_cast<std::int64_t>(t)) * nlon_ * ld;
      for (int j = 0; j < nlon_; ++j) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int m = 0; m < modes_; ++m) {
          const std::size_t q = static_cast<std::size_t>((static_cast<std::int64_t>(m) * j) % nlon_);
          const double c = cos_[q], s = sin_[q];
          const double* gm = g.data() + static_cast<std::size_t>(m) * C2;
          for (std::size_t i = 0; i < C; ++i) acc[i] += c * gm[i] - s * gm[C + i];
        }
        float* dst = row + static_cast<std::int64_t>(j) * ld;
        for (std::size_t i = 0; i < C; ++i) dst[i] = static_cast<float>(acc[i]);
      }
    }
  }
}

void InverseRealSHT::forward(int batch, int channels, const float* coeffs, float* out, std::int64_t ld) const {
  forward_rows(batch, channels, coeffs, out, 0, nlat_, ld);
}

}  // namespace surrogate::sphere
