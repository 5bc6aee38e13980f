// RealSHT / InverseRealSHT (surrogate/sphere/sht.hpp): float64 Legendre tables from our own recurrence,
// longitude transforms by a complex FFT over channel vectors in double (channel_fft.hpp), Legendre sums in
// double in a fixed order, rounded to float32 where torch-harmonics holds float32 tensors.
#include "surrogate/sphere/sht.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>

#include "channel_fft.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"

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

/// out[r * width + i] = sum_{s < terms} w0[r * row_step + s * term_step] * x[s * stride + i] for r < R, i < width,
/// in double, each sum in the order of s: the Legendre sums of both transforms (R latitudes or degrees at a
/// time share every load of x, kChunk channels at a time in registers; neither blocking changes any sum's
/// value, and without contraction (ISO C++ mode) the wide and the generic build give the same bits).
template <int R, std::size_t kChunk>
[[gnu::always_inline]] inline void weighted_sums_block(int terms, const float* w0, std::int64_t row_step,
                                                       std::int64_t term_step, const float* x, std::int64_t stride,
                                                       std::size_t width, double* out) {
  std::size_t i0 = 0;
  for (; i0 + kChunk <= width; i0 += kChunk) {
    double acc[R][kChunk] = {};
    for (int s = 0; s < terms; ++s) {
      const float* xs = x + s * stride + static_cast<std::int64_t>(i0);
      double xv[kChunk];
      for (std::size_t u = 0; u < kChunk; ++u) xv[u] = xs[u];
      for (int r = 0; r < R; ++r) {
        const double w = w0[r * row_step + s * term_step];
        for (std::size_t u = 0; u < kChunk; ++u) acc[r][u] += w * xv[u];
      }
    }
    for (int r = 0; r < R; ++r)
      for (std::size_t u = 0; u < kChunk; ++u) out[static_cast<std::size_t>(r) * width + i0 + u] = acc[r][u];
  }
  for (std::size_t i = i0; i < width; ++i)
    for (int r = 0; r < R; ++r) {
      double acc = 0.0;
      for (int s = 0; s < terms; ++s)
        acc += w0[r * row_step + s * term_step] * static_cast<double>(x[s * stride + static_cast<std::int64_t>(i)]);
      out[static_cast<std::size_t>(r) * width + i] = acc;
    }
}

#define SURROGATE_WEIGHTED_SUMS_BODY(chunk)                                                      \
  switch (rows) {                                                                                \
    case 4: weighted_sums_block<4, chunk>(terms, w0, row_step, term_step, x, stride, width, out); break; \
    case 3: weighted_sums_block<3, chunk>(terms, w0, row_step, term_step, x, stride, width, out); break; \
    case 2: weighted_sums_block<2, chunk>(terms, w0, row_step, term_step, x, stride, width, out); break; \
    default: weighted_sums_block<1, chunk>(terms, w0, row_step, term_step, x, stride, width, out); break; \
  }

#if defined(__x86_64__) || defined(__i386__)
#define SURROGATE_SHT_AVX2 1
/// weighted_sums_block for rows = 1 .. 4 on AVX2 (8 channels of 4 rows in 8 registers).
[[gnu::target("avx2")]] void weighted_sums_avx2(int rows, int terms, const float* w0, std::int64_t row_step,
                                                std::int64_t term_step, const float* x, std::int64_t stride,
                                                std::size_t width, double* out) {
  SURROGATE_WEIGHTED_SUMS_BODY(8)
}
#endif

/// The same for the baseline instruction set (4 channels of 4 rows in 8 SSE2 registers).
void weighted_sums_generic(int rows, int terms, const float* w0, std::int64_t row_step, std::int64_t term_step,
                           const float* x, std::int64_t stride, std::size_t width, double* out) {
  SURROGATE_WEIGHTED_SUMS_BODY(4)
}
#undef SURROGATE_WEIGHTED_SUMS_BODY

/// The variant of the instruction set the CPU kernels use (SURROGATE_CPU_ISA=generic selects the baseline).
using WeightedSums = void (*)(int, int, const float*, std::int64_t, std::int64_t, const float*, std::int64_t,
                              std::size_t, double*);
WeightedSums weighted_sums_for_cpu() {
#ifdef SURROGATE_SHT_AVX2
  if (kernels::cpu().isa != kernels::Isa::generic) return &weighted_sums_avx2;
#endif
  return &weighted_sums_generic;
}

constexpr int kRowsPerSum = 4;

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
  fft_ = std::make_shared<const detail::ChannelFft>(nlon);
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
  // Two real channels per complex FFT: z = x_c + i x_{c+half}, then X_c[m] = (Z[m] + conj Z[-m]) / 2 and
  // X_{c+half}[m] = (Z[m] - conj Z[-m]) / 2i.
  const std::size_t half = (C + 1) / 2;
#pragma omp parallel
  {
    const std::size_t n = static_cast<std::size_t>(nlon_) * half;
    std::vector<double> re(n), im(n), work;
#pragma omp for schedule(static)
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = in + r * nlon_ * ld;
      for (int j = 0; j < nlon_; ++j) {
        const float* v = row + static_cast<std::int64_t>(j) * ld;
        double* zr = re.data() + static_cast<std::size_t>(j) * half;
        double* zi = im.data() + static_cast<std::size_t>(j) * half;
        for (std::size_t i = 0; i < half; ++i) {
          zr[i] = v[i];
          zi[i] = i + half < C ? static_cast<double>(v[i + half]) : 0.0;
        }
      }
      fft_->transform(re.data(), im.data(), static_cast<int>(half), -1, work);
      float* dst = fourier + r * width;
      for (int m = 0; m < size_.mmax; ++m) {
        float* out_re = dst + 2 * static_cast<std::int64_t>(m) * channels;
        float* out_im = out_re + channels;
        if (m >= modes_) {  // beyond the grid's Nyquist order: zero padding
          std::fill(out_re, out_re + 2 * channels, 0.0f);
          continue;
        }
        const bool real = m == 0 || 2 * m == nlon_;  // a real FFT's exact zeros
        const std::size_t mirror = static_cast<std::size_t>((nlon_ - m) % nlon_) * half;
        const double* pr = re.data() + static_cast<std::size_t>(m) * half;
        const double* pi = im.data() + static_cast<std::size_t>(m) * half;
        const double* qr = re.data() + mirror;
        const double* qi = im.data() + mirror;
        for (std::size_t i = 0; i < half; ++i) {
          out_re[i] = static_cast<float>(0.5 * (pr[i] + qr[i]) * scale);
          out_im[i] = real ? 0.0f : static_cast<float>(0.5 * (pi[i] - qi[i]) * scale);
          if (i + half < C) {
            out_re[i + half] = static_cast<float>(0.5 * (pi[i] + qi[i]) * scale);
            out_im[i + half] = real ? 0.0f : static_cast<float>(-0.5 * (pr[i] - qr[i]) * scale);
          }
        }
      }
    }
  }
}

void RealSHT::legendre(int batch, int channels, const float* fourier, float* out) const {
  check_batch("RealSHT::legendre", batch, channels, fourier, out, 0);
  order_sums(batch, channels, 0, size_.mmax, fourier, fourier_width(channels), out, false);
}

void RealSHT::legendre_orders(int batch, int channels, int m_begin, int m_end, const float* fourier, float* out) const {
  if (m_begin < 0 || m_end > size_.mmax || m_begin > m_end)
    invalid("RealSHT::legendre_orders: orders [" + std::to_string(m_begin) + ", " + std::to_string(m_end) +
            ") are not within the " + std::to_string(size_.mmax) + " orders");
  if (m_begin == m_end) return;
  check_batch("RealSHT::legendre_orders", batch, channels, fourier, out, 0);
  order_sums(batch, channels, m_begin, m_end, fourier, 2 * static_cast<std::int64_t>(m_end - m_begin) * channels, out,
             true);
}

void RealSHT::order_sums(int batch, int channels, int m_begin, int m_end, const float* fourier, std::int64_t row_width,
                         float* out, bool by_order) const {
  const int L = size_.lmax, M = size_.mmax, orders = m_end - m_begin;
  const std::size_t C2 = 2 * static_cast<std::size_t>(channels);
  // a(l, m) of sample b: [b][l][m] (by_order false) or [b][m - m_begin][l] (true), 2C floats each
  auto coefficient = [&](int b, int l, int m) {
    const std::int64_t index = by_order ? (static_cast<std::int64_t>(b) * orders + (m - m_begin)) * L + l
                                        : (static_cast<std::int64_t>(b) * L + l) * M + m;
    return out + index * static_cast<std::int64_t>(C2);
  };
  const int tasks = batch * orders;
  const WeightedSums weighted_sums = weighted_sums_for_cpu();
#pragma omp parallel
  {
    std::vector<double> acc(static_cast<std::size_t>(kRowsPerSum) * C2);
    std::vector<float> slice(static_cast<std::size_t>(nlat_) * C2);  // order m of every latitude, contiguous
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; ++t) {
      const int b = t / orders, m = m_begin + t % orders;
      for (int l = 0; l < m; ++l) {  // P_l^m = 0
        float* dst = coefficient(b, l, m);
        std::fill(dst, dst + C2, 0.0f);
      }
      for (int k = 0; k < nlat_; ++k) {
        const float* src = fourier + (static_cast<std::int64_t>(b) * nlat_ + k) * row_width +
                           static_cast<std::int64_t>(m - m_begin) * static_cast<std::int64_t>(C2);
        std::copy(src, src + C2, slice.data() + static_cast<std::size_t>(k) * C2);
      }
      for (int l0 = m; l0 < L; l0 += kRowsPerSum) {
        const int n = std::min(kRowsPerSum, L - l0);
        weighted_sums(n, nlat_, weights_.data() + (static_cast<std::size_t>(m) * L + static_cast<std::size_t>(l0)) * nlat_,
                      nlat_, 1, slice.data(), static_cast<std::int64_t>(C2), C2, acc.data());
        for (int r = 0; r < n; ++r) {
          float* dst = coefficient(b, l0 + r, m);
          for (std::size_t i = 0; i < C2; ++i) dst[i] = static_cast<float>(acc[static_cast<std::size_t>(r) * C2 + i]);
        }
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
  fft_ = std::make_shared<const detail::ChannelFft>(nlon);
  const std::vector<double> table = legendre_table(size_.lmax, size_.mmax, cos_colatitudes(nlat, grid));
  table_.assign(table.begin(), table.end());  // rounded to float32 as the module's buffer is for float32 input
}

void InverseRealSHT::forward_rows(int batch, int channels, const float* coeffs, float* out, int lat_begin, int lat_end,
                                  std::int64_t ld) const {
  synthesise(batch, channels, coeffs, false, out, lat_begin, lat_end, ld);
}

void InverseRealSHT::forward_rows_by_order(int batch, int channels, const float* coeffs, float* out, int lat_begin,
                                           int lat_end, std::int64_t ld) const {
  synthesise(batch, channels, coeffs, true, out, lat_begin, lat_end, ld);
}

void InverseRealSHT::synthesise(int batch, int channels, const float* coeffs, bool by_order, float* out, int lat_begin,
                                int lat_end, std::int64_t ld) const {
  check_batch("InverseRealSHT::forward_rows", batch, channels, coeffs, out, ld);
  if (lat_begin < 0 || lat_end > nlat_ || lat_begin > lat_end)
    invalid("InverseRealSHT::forward_rows: rows [" + std::to_string(lat_begin) + ", " + std::to_string(lat_end) +
            ") are not within the " + std::to_string(nlat_) + " latitudes");
  if (ld == 0) ld = channels;
  const int L = size_.lmax, M = size_.mmax, rows = lat_end - lat_begin;
  if (rows == 0) return;
  const std::size_t C = static_cast<std::size_t>(channels), C2 = 2 * C;
  const std::size_t modes = static_cast<std::size_t>(modes_), nrows = static_cast<std::size_t>(rows);
  const bool nyquist = nlon_ % 2 == 0 && nlon_ / 2 < modes_;  // order nlon/2 present: real, counted once
  const WeightedSums weighted_sums = weighted_sums_for_cpu();

  // 1. Legendre synthesis, order by order (one order's coefficients stay in cache while every latitude of
  //    the range is summed): g[((b * rows + r) * modes + m) * 2C ...] rounded to float32 (the module's
  //    float32 tensor), the imaginary parts of the orders 0 and nlon/2 dropped (a real signal's).
  std::vector<float> g(static_cast<std::size_t>(batch) * nrows * modes * C2);
  const int tasks = batch * modes_;
#pragma omp parallel
  {
    std::vector<float> by_degree(static_cast<std::size_t>(L) * C2);  // a(l, m) for l = m .. L-1, contiguous
    std::vector<double> sums(static_cast<std::size_t>(kRowsPerSum) * C2);
#pragma omp for schedule(dynamic, 1)
    for (int t = 0; t < tasks; ++t) {
      const int b = t / modes_, m = t % modes_;
      for (int l = m; l < L; ++l) {
        const std::int64_t index = by_order ? (static_cast<std::int64_t>(b) * M + m) * L + l
                                            : (static_cast<std::int64_t>(b) * L + l) * M + m;
        const float* src = coeffs + index * static_cast<std::int64_t>(C2);
        std::copy(src, src + C2, by_degree.data() + static_cast<std::size_t>(l - m) * C2);
      }
      const bool real_only = m == 0 || (nyquist && m == nlon_ / 2);
      for (int k0 = lat_begin; k0 < lat_end; k0 += kRowsPerSum) {
        const int nk = std::min(kRowsPerSum, lat_end - k0);
        weighted_sums(nk, L - m,
                      table_.data() + (static_cast<std::size_t>(m) * L + static_cast<std::size_t>(m)) * nlat_ + static_cast<std::size_t>(k0),
                      1, nlat_, by_degree.data(), static_cast<std::int64_t>(C2), C2, sums.data());
        for (int r = 0; r < nk; ++r) {
          const double* sr = sums.data() + static_cast<std::size_t>(r) * C2;
          float* gm = g.data() + ((static_cast<std::size_t>(b) * nrows + static_cast<std::size_t>(k0 + r - lat_begin)) * modes +
                                  static_cast<std::size_t>(m)) * C2;
          for (std::size_t i = 0; i < C; ++i) gm[i] = static_cast<float>(sr[i]);
          for (std::size_t i = C; i < C2; ++i) gm[i] = real_only ? 0.0f : static_cast<float>(sr[i]);
        }
      }
    }
  }

  // 2. Longitudes, row by row: two channels per complex FFT, channel c in the real part and channel c + half
  //    in the imaginary part of one Hermitian-completed spectrum each, so that the inverse transform of
  //    z[m] = H_c[m] + i H_{c+half}[m] (H[m] = G[m], H[nlon - m] = conj G[m], the orders 0 and nlon/2 once)
  //    is f_c + i f_{c+half}.
  const std::size_t half = (C + 1) / 2;
  const int row_tasks = batch * rows;
#pragma omp parallel
  {
    const std::size_t n = static_cast<std::size_t>(nlon_) * half;
    std::vector<double> z_re(n), z_im(n), work;
#pragma omp for schedule(static)
    for (int t = 0; t < row_tasks; ++t) {
      std::fill(z_re.begin(), z_re.end(), 0.0);
      std::fill(z_im.begin(), z_im.end(), 0.0);
      for (int m = 0; m < modes_; ++m) {
        const float* gm = g.data() + (static_cast<std::size_t>(t) * modes + static_cast<std::size_t>(m)) * C2;
        double* zr = z_re.data() + static_cast<std::size_t>(m) * half;
        double* zi = z_im.data() + static_cast<std::size_t>(m) * half;
        const bool paired = m != 0 && 2 * m != nlon_;
        double* wr = z_re.data() + static_cast<std::size_t>((nlon_ - m) % nlon_) * half;
        double* wi = z_im.data() + static_cast<std::size_t>((nlon_ - m) % nlon_) * half;
        for (std::size_t i = 0; i < half; ++i) {
          const double ar = gm[i], ai = gm[C + i];
          const bool has_b = i + half < C;
          const double br = has_b ? gm[i + half] : 0.0, bi = has_b ? gm[C + i + half] : 0.0;
          zr[i] = ar - bi;
          zi[i] = ai + br;
          if (paired) {
            wr[i] = ar + bi;
            wi[i] = br - ai;
          }
        }
      }
      fft_->transform(z_re.data(), z_im.data(), static_cast<int>(half), +1, work);
      float* row = out + static_cast<std::int64_t>(t) * nlon_ * ld;
      for (int j = 0; j < nlon_; ++j) {
        float* dst = row + static_cast<std::int64_t>(j) * ld;
        const double* fr = z_re.data() + static_cast<std::size_t>(j) * half;
        const double* fi = z_im.data() + static_cast<std::size_t>(j) * half;
        for (std::size_t i = 0; i < half; ++i) dst[i] = static_cast<float>(fr[i]);
        for (std::size_t i = half; i < C; ++i) dst[i] = static_cast<float>(fi[i - half]);
      }
    }
  }
}

void InverseRealSHT::forward(int batch, int channels, const float* coeffs, float* out, std::int64_t ld) const {
  forward_rows(batch, channels, coeffs, out, 0, nlat_, ld);
}

}  // namespace surrogate::sphere
