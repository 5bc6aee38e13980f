// ChannelFft (channel_fft.hpp): recursive mixed-radix decimation in time. A transform of length n = p m
// transforms the p decimated subsequences (length m, stride p) into consecutive blocks, then combines
// them per output index k < m: t_q = w_n^{q k} Y_q[k], X[k + s m] = sum_q w_p^{q s} t_q.
#include "channel_fft.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace surrogate::sphere::detail {

ChannelFft::ChannelFft(int n) : n_(n) {
  int rest = n;
  for (int p : {4, 2, 3, 5}) {
    while (rest % p == 0) {
      radices_.push_back(p);
      rest /= p;
    }
  }
  for (int p = 7; rest > 1; p += 2) {
    while (rest % p == 0) {
      radices_.push_back(p);
      rest /= p;
    }
  }
  cos_.resize(static_cast<std::size_t>(n));
  sin_.resize(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) {
    const std::int64_t four_q = 4 * static_cast<std::int64_t>(q);
    if (four_q % n == 0) {
      const int quarter = static_cast<int>(four_q / n);
      cos_[static_cast<std::size_t>(q)] = quarter == 0 ? 1.0 : quarter == 2 ? -1.0 : 0.0;
      sin_[static_cast<std::size_t>(q)] = quarter == 1 ? 1.0 : quarter == 3 ? -1.0 : 0.0;
    } else {
      const double angle = 2.0 * std::numbers::pi * static_cast<double>(q) / static_cast<double>(n);
      cos_[static_cast<std::size_t>(q)] = std::cos(angle);
      sin_[static_cast<std::size_t>(q)] = std::sin(angle);
    }
  }
}

void ChannelFft::transform(double* re, double* im, int channels, int sign, std::vector<double>& work) const {
  const std::size_t block = static_cast<std::size_t>(n_) * static_cast<std::size_t>(channels);
  int widest = 1;
  for (int p : radices_) widest = std::max(widest, p);
  work.resize(2 * block + 2 * static_cast<std::size_t>(widest) * static_cast<std::size_t>(channels));
  double* out_re = work.data();
  double* out_im = out_re + block;
  run(n_, 1, re, im, out_re, out_im, channels, sign, 0, out_im + block);
  std::copy(out_re, out_re + block, re);
  std::copy(out_im, out_im + block, im);
}

void ChannelFft::run(int n, int stride, const double* in_re, const double* in_im, double* out_re, double* out_im,
                     int channels, int sign, std::size_t level, double* scratch) const {
  const std::size_t C = static_cast<std::size_t>(channels);
  if (n == 1) {
    std::copy(in_re, in_re + C, out_re);
    std::copy(in_im, in_im + C, out_im);
    return;
  }
  const int p = radices_[level], m = n / p;
  const std::size_t in_step = static_cast<std::size_t>(stride) * C;
  for (int q = 0; q < p; ++q)
    run(m, stride * p, in_re + static_cast<std::size_t>(q) * in_step, in_im + static_cast<std::size_t>(q) * in_step,
        out_re + static_cast<std::size_t>(q) * static_cast<std::size_t>(m) * C,
        out_im + static_cast<std::size_t>(q) * static_cast<std::size_t>(m) * C, channels, sign, level + 1, scratch);
  const std::size_t unit = static_cast<std::size_t>(n_ / n);  // w_n^e = table entry e * unit
  const std::size_t top = static_cast<std::size_t>(n_);
  double* t_re = scratch;
  double* t_im = scratch + static_cast<std::size_t>(p) * C;
  const double sgn = static_cast<double>(sign);
  const std::size_t mC = static_cast<std::size_t>(m) * C;
  if (p <= 5) {
    // Radix 2 to 5 written out (w_4 = sign i; radix 3 and 5 by the sums and differences of the conjugate
    // pairs): every input of the butterfly is read before any output is written, channel by channel, so no
    // scratch is needed.
    const double c3 = -0.5, s3 = sgn * 0.86602540378443864676;  // cos, sign sin (2 pi / 3)
    const double c51 = 0.30901699437494742410, c52 = -0.80901699437494742410;  // cos (2 pi / 5), cos (4 pi / 5)
    const double s51 = sgn * 0.95105651629515357212, s52 = sgn * 0.58778525229247312917;  // sign sin (...)
    for (int k = 0; k < m; ++k) {
      double wr[5] = {1.0, 1.0, 1.0, 1.0, 1.0}, wi[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
      for (int q = 1; q < p; ++q) {
        const std::size_t e = (static_cast<std::size_t>(q) * static_cast<std::size_t>(k) * unit) % top;
        wr[q] = cos_[e];
        wi[q] = sgn * sin_[e];
      }
      double* xr = out_re + static_cast<std::size_t>(k) * C;
      double* xi = out_im + static_cast<std::size_t>(k) * C;
      if (p == 2) {
        for (std::size_t c = 0; c < C; ++c) {
          const double ar = xr[c], ai = xi[c];
          const double br = xr[mC + c] * wr[1] - xi[mC + c] * wi[1], bi = xr[mC + c] * wi[1] + xi[mC + c] * wr[1];
          xr[c] = ar + br;
          xi[c] = ai + bi;
          xr[mC + c] = ar - br;
          xi[mC + c] = ai - bi;
        }
        continue;
      }
      if (p == 3) {
        for (std::size_t c = 0; c < C; ++c) {
          const double t0r = xr[c], t0i = xi[c];
          const double t1r = xr[mC + c] * wr[1] - xi[mC + c] * wi[1], t1i = xr[mC + c] * wi[1] + xi[mC + c] * wr[1];
          const double t2r = xr[2 * mC + c] * wr[2] - xi[2 * mC + c] * wi[2], t2i = xr[2 * mC + c] * wi[2] + xi[2 * mC + c] * wr[2];
          const double sr = t1r + t2r, si = t1i + t2i, dr = t1r - t2r, di = t1i - t2i;
          const double ar = t0r + c3 * sr, ai = t0i + c3 * si;  // t0 + cos(2 pi / 3) (t1 + t2)
          xr[c] = t0r + sr;
          xi[c] = t0i + si;
          xr[mC + c] = ar - s3 * di;  // + i sign sin(2 pi / 3) (t1 - t2)
          xi[mC + c] = ai + s3 * dr;
          xr[2 * mC + c] = ar + s3 * di;
          xi[2 * mC + c] = ai - s3 * dr;
        }
        continue;
      }
      if (p == 5) {
        for (std::size_t c = 0; c < C; ++c) {
          double tr[5], ti[5];
          tr[0] = xr[c];
          ti[0] = xi[c];
          for (int q = 1; q < 5; ++q) {
            const double yr = xr[static_cast<std::size_t>(q) * mC + c], yi = xi[static_cast<std::size_t>(q) * mC + c];
            tr[q] = yr * wr[q] - yi * wi[q];
            ti[q] = yr * wi[q] + yi * wr[q];
          }
          const double s1r = tr[1] + tr[4], s1i = ti[1] + ti[4], d1r = tr[1] - tr[4], d1i = ti[1] - ti[4];
          const double s2r = tr[2] + tr[3], s2i = ti[2] + ti[3], d2r = tr[2] - tr[3], d2i = ti[2] - ti[3];
          const double a1r = tr[0] + c51 * s1r + c52 * s2r, a1i = ti[0] + c51 * s1i + c52 * s2i;
          const double a2r = tr[0] + c52 * s1r + c51 * s2r, a2i = ti[0] + c52 * s1i + c51 * s2i;
          const double b1r = s51 * d1r + s52 * d2r, b1i = s51 * d1i + s52 * d2i;  // X1 = a1 + i b1, X4 = a1 - i b1
          const double b2r = s52 * d1r - s51 * d2r, b2i = s52 * d1i - s51 * d2i;  // X2 = a2 + i b2, X3 = a2 - i b2
          xr[c] = tr[0] + s1r + s2r;
          xi[c] = ti[0] + s1i + s2i;
          xr[mC + c] = a1r - b1i;
          xi[mC + c] = a1i + b1r;
          xr[4 * mC + c] = a1r + b1i;
          xi[4 * mC + c] = a1i - b1r;
          xr[2 * mC + c] = a2r - b2i;
          xi[2 * mC + c] = a2i + b2r;
          xr[3 * mC + c] = a2r + b2i;
          xi[3 * mC + c] = a2i - b2r;
        }
        continue;
      }
      for (std::size_t c = 0; c < C; ++c) {
        const double t0r = xr[c], t0i = xi[c];
        const double t1r = xr[mC + c] * wr[1] - xi[mC + c] * wi[1], t1i = xr[mC + c] * wi[1] + xi[mC + c] * wr[1];
        const double t2r = xr[2 * mC + c] * wr[2] - xi[2 * mC + c] * wi[2], t2i = xr[2 * mC + c] * wi[2] + xi[2 * mC + c] * wr[2];
        const double t3r = xr[3 * mC + c] * wr[3] - xi[3 * mC + c] * wi[3], t3i = xr[3 * mC + c] * wi[3] + xi[3 * mC + c] * wr[3];
        const double ar = t0r + t2r, ai = t0i + t2i, br = t0r - t2r, bi = t0i - t2i;
        const double cr = t1r + t3r, ci = t1i + t3i, dr = t1r - t3r, di = t1i - t3i;
        xr[c] = ar + cr;
        xi[c] = ai + ci;
        xr[2 * mC + c] = ar - cr;
        xi[2 * mC + c] = ai - ci;
        xr[mC + c] = br - sgn * di;
        xi[mC + c] = bi + sgn * dr;
        xr[3 * mC + c] = br + sgn * di;
        xi[3 * mC + c] = bi - sgn * dr;
      }
    }
    return;
  }
  for (int k = 0; k < m; ++k) {
    // t_q = w_n^{q k} Y_q[k]
    for (int q = 0; q < p; ++q) {
      const double* yr = out_re + (static_cast<std::size_t>(q) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k)) * C;
      const double* yi = out_im + (static_cast<std::size_t>(q) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k)) * C;
      double* tr = t_re + static_cast<std::size_t>(q) * C;
      double* ti = t_im + static_cast<std::size_t>(q) * C;
      const std::size_t e = (static_cast<std::size_t>(q) * static_cast<std::size_t>(k) * unit) % top;
      const double wr = cos_[e], wi = sgn * sin_[e];
      if (e == 0) {
        std::copy(yr, yr + C, tr);
        std::copy(yi, yi + C, ti);
      } else {
        for (std::size_t c = 0; c < C; ++c) {
          tr[c] = yr[c] * wr - yi[c] * wi;
          ti[c] = yr[c] * wi + yi[c] * wr;
        }
      }
    }
    // X[k + s m] = sum_q w_p^{q s} t_q
    for (int s = 0; s < p; ++s) {
      double* xr = out_re + (static_cast<std::size_t>(s) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k)) * C;
      double* xi = out_im + (static_cast<std::size_t>(s) * static_cast<std::size_t>(m) + static_cast<std::size_t>(k)) * C;
      std::copy(t_re, t_re + C, xr);
      std::copy(t_im, t_im + C, xi);
      for (int q = 1; q < p; ++q) {
        const std::size_t e = (static_cast<std::size_t>(q) * static_cast<std::size_t>(s) % static_cast<std::size_t>(p)) *
                              (top / static_cast<std::size_t>(p));
        const double wr = cos_[e], wi = sgn * sin_[e];
        const double* tr = t_re + static_cast<std::size_t>(q) * C;
        const double* ti = t_im + static_cast<std::size_t>(q) * C;
        for (std::size_t c = 0; c < C; ++c) {
          xr[c] += tr[c] * wr - ti[c] * wi;
          xi[c] += tr[c] * wi + ti[c] * wr;
        }
      }
    }
  }
}

}  // namespace surrogate::sphere::detail
