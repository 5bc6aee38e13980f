// RealSHT / InverseRealSHT (surrogate/sphere/sht.hpp): the Legendre table against an independent closed
// form; single spherical harmonics through both transforms on every grid; round trips where the quadrature
// is exact; the official torch-harmonics 0.9.3 tables and transforms (tests/data/sphere/sht.h5, made by
// share/tools/golden/sphere_sht_golden.py); row ranges and thread counts bitwise; bad arguments.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

#include "h5_reader.hpp"
#include "sphere/sht/channel_fft.hpp"  // the library's internal FFT (libsurrogate/src)
#include "surrogate/error.hpp"
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/sphere/quadrature.hpp"
#include "surrogate/sphere/sht.hpp"

namespace sphere = surrogate::sphere;
using sphere::Grid;

namespace {

constexpr double kFloatUlp = 1.0 / (1 << 23);  // float32 epsilon

/// Orthonormal P_l^m(x) with the Condon-Shortley phase from the explicit polynomial of P_l differentiated m
/// times (long double; an evaluation independent of the library's recurrence, fine for l <= 12).
double legendre_closed_form(int l, int m, double x) {
  long double derivative = 0;
  for (int k = 0; 2 * k <= l; ++k) {
    const int n = l - 2 * k;  // x^n with coefficient (-1)^k C(l, k) C(2l - 2k, l) / 2^l
    if (n < m) continue;
    long double c = std::tgamma(static_cast<long double>(l + 1)) /
                    (std::tgamma(static_cast<long double>(k + 1)) * std::tgamma(static_cast<long double>(l - k + 1)));
    c *= std::tgamma(static_cast<long double>(2 * l - 2 * k + 1)) /
         (std::tgamma(static_cast<long double>(l + 1)) * std::tgamma(static_cast<long double>(l - 2 * k + 1)));
    c /= std::pow(2.0L, l);
    if (k % 2) c = -c;
    const long double falling = std::tgamma(static_cast<long double>(n + 1)) / std::tgamma(static_cast<long double>(n - m + 1));
    derivative += c * falling * std::pow(static_cast<long double>(x), n - m);
  }
  const long double s = std::pow(1.0L - static_cast<long double>(x) * x, m / 2.0L);
  const long double norm = std::sqrt((2.0L * l + 1) / (4.0L * std::numbers::pi_v<long double>) *
                                     std::tgamma(static_cast<long double>(l - m + 1)) /
                                     std::tgamma(static_cast<long double>(l + m + 1)));
  return static_cast<double>((m % 2 ? -1.0L : 1.0L) * norm * s * derivative);
}

std::vector<double> cos_colatitudes(int nlat, Grid grid) {
  std::vector<double> x = sphere::latitudes(nlat, grid).colatitude;
  for (double& v : x) v = std::cos(v);
  return x;
}

/// (B, C, nlat, nlon) -> channels last.
std::vector<float> to_rows(const std::vector<float>& x, std::size_t B, std::size_t C, std::size_t P) {
  std::vector<float> out(x.size());
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t p = 0; p < P; ++p) out[(b * P + p) * C + c] = x[(b * C + c) * P + p];
  return out;
}

/// Official (B, C, L, M) real and imaginary parts -> split complex [b][l][m][re, im][c].
template <class T>
std::vector<T> to_split(const std::vector<T>& re, const std::vector<T>& im, std::size_t B, std::size_t C, std::size_t L,
                        std::size_t M) {
  std::vector<T> out(2 * re.size());
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t c = 0; c < C; ++c)
      for (std::size_t l = 0; l < L; ++l)
        for (std::size_t m = 0; m < M; ++m) {
          const std::size_t src = ((b * C + c) * L + l) * M + m, dst = (((b * L + l) * M + m) * 2) * C + c;
          out[dst] = re[src];
          out[dst + C] = im[src];
        }
  return out;
}

struct Error {
  double err = 0, gap = 0, mag = 0;
};

/// max |ours - f64|, max |f32 - f64|, max |f64| over all entries.
template <class T>
Error compare(const std::vector<float>& ours, const std::vector<float>& f32, const std::vector<T>& f64) {
  Error e;
  for (std::size_t i = 0; i < ours.size(); ++i) {
    e.err = std::max(e.err, std::abs(ours[i] - static_cast<double>(f64[i])));
    e.gap = std::max(e.gap, std::abs(f32[i] - static_cast<double>(f64[i])));
    e.mag = std::max(e.mag, std::abs(static_cast<double>(f64[i])));
  }
  return e;
}

std::vector<float> random_values(std::size_t n, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(gen);
  return v;
}

/// OpenMP limited to one thread while in scope.
struct OneThread {
  int saved = omp_get_max_threads();
  OneThread() { omp_set_num_threads(1); }
  ~OneThread() { omp_set_num_threads(saved); }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;
};

const Grid kGrids[] = {Grid::legendre_gauss, Grid::equiangular, Grid::lobatto, Grid::equiangular_trapezoidal};

}  // namespace

// The channel-vector FFT against a direct long-double DFT, both directions, for every length up to 40 (all
// radix mixes, primes) and a few zoo-like lengths; three channels. Tolerance: 1e-14 of the sum of |x|
// (double rounding through log n butterfly levels).
TEST(Sht, ChannelFftMatchesDirectSums) {
  std::vector<int> sizes;
  for (int n = 1; n <= 40; ++n) sizes.push_back(n);
  for (int n : {48, 64, 90, 97, 128, 360}) sizes.push_back(n);
  const int C = 3;
  std::vector<double> work;
  for (int n : sizes) {
    const sphere::detail::ChannelFft fft(n);
    const std::size_t N = static_cast<std::size_t>(n) * C;
    std::vector<long double> cos_q(static_cast<std::size_t>(n)), sin_q(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) {
      cos_q[static_cast<std::size_t>(q)] = std::cos(2.0L * std::numbers::pi_v<long double> * q / n);
      sin_q[static_cast<std::size_t>(q)] = std::sin(2.0L * std::numbers::pi_v<long double> * q / n);
    }
    const std::vector<float> r = random_values(2 * N, static_cast<unsigned>(n));
    for (int sign : {-1, 1}) {
      std::vector<double> re(r.begin(), r.begin() + static_cast<std::ptrdiff_t>(N)), im(r.begin() + static_cast<std::ptrdiff_t>(N), r.end());
      const std::vector<double> x_re = re, x_im = im;
      fft.transform(re.data(), im.data(), C, sign, work);
      for (int c = 0; c < C; ++c) {
        long double norm = 0;
        for (int j = 0; j < n; ++j) norm += std::abs(x_re[static_cast<std::size_t>(j * C + c)]) + std::abs(x_im[static_cast<std::size_t>(j * C + c)]);
        for (int k = 0; k < n; ++k) {
          long double sr = 0, si = 0;
          for (int j = 0; j < n; ++j) {
            const std::size_t q = static_cast<std::size_t>((static_cast<long long>(j) * k) % n);
            const long double cs = cos_q[q], sn = sign * sin_q[q];
            const long double xr = x_re[static_cast<std::size_t>(j * C + c)], xi = x_im[static_cast<std::size_t>(j * C + c)];
            sr += xr * cs - xi * sn;
            si += xr * sn + xi * cs;
          }
          const double tol = 1e-14 * static_cast<double>(norm);
          ASSERT_NEAR(re[static_cast<std::size_t>(k * C + c)], static_cast<double>(sr), tol) << "n " << n << " sign " << sign << " k " << k;
          ASSERT_NEAR(im[static_cast<std::size_t>(k * C + c)], static_cast<double>(si), tol) << "n " << n << " sign " << sign << " k " << k;
        }
      }
    }
  }
}

TEST(Sht, TruncationAsTorchHarmonics) {
  EXPECT_EQ(sphere::sht_truncation(128, 256, Grid::legendre_gauss).lmax, 128);
  EXPECT_EQ(sphere::sht_truncation(128, 256, Grid::lobatto).lmax, 127);
  EXPECT_EQ(sphere::sht_truncation(128, 256, Grid::equiangular).lmax, 64);
  EXPECT_EQ(sphere::sht_truncation(11, 16, Grid::equiangular_trapezoidal).lmax, 6);
  EXPECT_EQ(sphere::sht_truncation(9, 16, Grid::legendre_gauss).mmax, 9);  // min(9, 16/2 + 1)
  EXPECT_EQ(sphere::sht_truncation(6, 8, Grid::legendre_gauss).lmax, 5);   // min(6, 5)
  const auto explicit_size = sphere::sht_truncation(9, 16, Grid::legendre_gauss, 4, 7);
  EXPECT_EQ(explicit_size.lmax, 4);
  EXPECT_EQ(explicit_size.mmax, 4);
}

TEST(Sht, LegendreTableMatchesClosedForm) {
  const std::vector<double> x = {-1.0, -0.93, -0.5, -0.1, 0.0, 0.27, 0.61, 0.99, 1.0};
  const int L = 11;
  const auto table = sphere::legendre_table(L, L, x);
  double worst = 0;
  for (int m = 0; m < L; ++m)
    for (int l = 0; l < L; ++l)
      for (std::size_t k = 0; k < x.size(); ++k) {
        const double ours = table[(static_cast<std::size_t>(m) * L + static_cast<std::size_t>(l)) * x.size() + k];
        const double ref = l < m ? 0.0 : legendre_closed_form(l, m, x[k]);
        worst = std::max(worst, std::abs(ours - ref));
        ASSERT_NEAR(ours, ref, 1e-12 * (1.0 + std::abs(ref))) << "l " << l << " m " << m << " x " << x[k];
      }
  std::printf("  Legendre table vs closed form (l, m < 11): max abs difference %.3g\n", worst);
}

// A single harmonic P_l^m(cos t) cos(m lon) (and sin) sampled on the grid has the coefficients 1 (m = 0) or
// 1/2 (resp. -i/2) at (l, m) and zero elsewhere, wherever the rule integrates degree 2 (lmax - 1) exactly
// (not on the trapezoidal grid); the inverse transform of those coefficients is the harmonic on any grid.
TEST(Sht, SingleHarmonicsOnEveryGrid) {
  const OneThread one_thread;  // some thousand tiny transforms: thread start-up would dominate
  for (Grid grid : kGrids) {
    const int nlat = grid == Grid::legendre_gauss ? 8 : 15, nlon = 22;
    const sphere::RealSHT sht(nlat, nlon, grid);
    const sphere::InverseRealSHT isht(nlat, nlon, grid, sht.lmax(), sht.mmax());
    const int L = sht.lmax(), M = sht.mmax();
    const std::vector<double> x = cos_colatitudes(nlat, grid);
    const bool exact = grid != Grid::equiangular_trapezoidal;
    for (int l = 0; l < L; ++l)
      for (int m = 0; m <= l; ++m)
        for (int part = 0; part < (m == 0 ? 1 : 2); ++part) {
          std::vector<float> field(static_cast<std::size_t>(nlat * nlon));
          for (int k = 0; k < nlat; ++k) {
            const double p = legendre_closed_form(l, m, x[static_cast<std::size_t>(k)]);
            for (int j = 0; j < nlon; ++j) {
              const double lon = 2.0 * std::numbers::pi * j / nlon;
              field[static_cast<std::size_t>(k * nlon + j)] = static_cast<float>(p * (part == 0 ? std::cos(m * lon) : std::sin(m * lon)));
            }
          }
          // The Nyquist order m = nlon/2 (lobatto here: lmax = mmax = nlon/2 + 1): cos(m lon) = (-1)^j is its
          // own real Fourier mode (coefficient 1, counted once by the inverse), sin(m lon) vanishes on the grid.
          const bool nyquist = 2 * m == nlon;
          std::vector<float> expected(static_cast<std::size_t>(L * M * 2), 0.0f);
          if (!(nyquist && part == 1))
            expected[static_cast<std::size_t>((l * M + m) * 2 + part)] =
                part == 0 ? (m == 0 || nyquist ? 1.0f : 0.5f) : -0.5f;
          if (exact) {
            std::vector<float> coeffs(expected.size());
            sht.forward(1, 1, field.data(), coeffs.data());
            for (std::size_t i = 0; i < coeffs.size(); ++i)
              ASSERT_NEAR(coeffs[i], expected[i], 1e-6)
                  << sphere::to_string(grid) << " l " << l << " m " << m << " part " << part << " entry " << i;
          }
          std::vector<float> back(field.size());
          isht.forward(1, 1, expected.data(), back.data());
          for (std::size_t i = 0; i < back.size(); ++i)
            ASSERT_NEAR(back[i], field[i], 2e-6) << sphere::to_string(grid) << " l " << l << " m " << m << " point " << i;
        }
  }
}

// Random band-limited coefficients (zero where l < m, real at m = 0) synthesised on a grid and analysed
// again come back to float32 rounding on the grids whose rule is exact to degree 2 (lmax - 1).
TEST(Sht, RoundTripOfBandLimitedFields) {
  for (Grid grid : {Grid::legendre_gauss, Grid::equiangular, Grid::lobatto}) {
    const int nlat = 13, nlon = 26, B = 2, C = 5;
    const sphere::RealSHT sht(nlat, nlon, grid);
    const sphere::InverseRealSHT isht(nlat, nlon, grid, sht.lmax(), sht.mmax());
    const int L = sht.lmax(), M = sht.mmax();
    std::vector<float> coeffs = random_values(static_cast<std::size_t>(B * L * M * 2 * C), 11);
    for (int b = 0; b < B; ++b)
      for (int l = 0; l < L; ++l)
        for (int m = 0; m < M; ++m)
          for (int part = 0; part < 2; ++part)
            for (int c = 0; c < C; ++c)
              if (l < m || (m == 0 && part == 1))
                coeffs[static_cast<std::size_t>((((b * L + l) * M + m) * 2 + part) * C + c)] = 0.0f;
    std::vector<float> field(static_cast<std::size_t>(B * nlat * nlon * C)), back(coeffs.size());
    isht.forward(B, C, coeffs.data(), field.data());
    sht.forward(B, C, field.data(), back.data());
    double worst = 0;
    for (std::size_t i = 0; i < coeffs.size(); ++i) worst = std::max(worst, static_cast<double>(std::abs(back[i] - coeffs[i])));
    EXPECT_LT(worst, 64 * kFloatUlp * 4) << sphere::to_string(grid);  // |coefficients| <= 4, a few roundings each
  }
}

// The official tables (float64) and transforms (float32 modules, float64 references) of sht.h5. Tables:
// 1e-13 absolute (values <= ~2; two float64 recurrences). Transforms: the official float32 result is
// `gap` away from the float64 one (its own float32 rounding); ours (double sums, float32 roundings where the
// module holds float32 tensors) must be within 2 gap + 4 ulps of the magnitude of the float64 result.
TEST(Sht, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/sht.h5");
  const auto cases = f.children("/");
  ASSERT_GE(cases.size(), 9u);
  for (const std::string& name : cases) {
    const std::string g = "/" + name;
    const int hi = static_cast<int>(f.number(g, "nlat_in")), wi = static_cast<int>(f.number(g, "nlon_in"));
    const int ho = static_cast<int>(f.number(g, "nlat_out")), wo = static_cast<int>(f.number(g, "nlon_out"));
    const Grid gi = sphere::parse_grid(f.text(g, "grid_in")), go = sphere::parse_grid(f.text(g, "grid_out"));
    const sphere::RealSHT sht(hi, wi, gi);
    const sphere::InverseRealSHT isht(ho, wo, go, sht.lmax(), sht.mmax());
    const std::size_t L = static_cast<std::size_t>(sht.lmax()), M = static_cast<std::size_t>(sht.mmax());
    ASSERT_EQ(sht.lmax(), static_cast<int>(f.number(g, "lmax"))) << name;
    ASSERT_EQ(sht.mmax(), static_cast<int>(f.number(g, "mmax"))) << name;

    // Tables: ours in float64 against the module buffers.
    const auto weights = f.doubles(g + "/forward_weights");  // (M, L, hi)
    const auto lat = sphere::latitudes(hi, gi);
    const auto table_in = sphere::legendre_table(sht.lmax(), sht.mmax(), cos_colatitudes(hi, gi));
    for (std::size_t i = 0; i < weights.size(); ++i)
      ASSERT_NEAR(table_in[i] * (2.0 * std::numbers::pi * lat.weight[i % static_cast<std::size_t>(hi)]), weights[i], 1e-13)
          << name << " forward weight " << i;
    const auto pct = f.doubles(g + "/inverse_pct");  // (M, ho, L)
    const auto table_out = sphere::legendre_table(sht.lmax(), sht.mmax(), cos_colatitudes(ho, go));
    for (std::size_t m = 0; m < M; ++m)
      for (std::size_t k = 0; k < static_cast<std::size_t>(ho); ++k)
        for (std::size_t l = 0; l < L; ++l)
          ASSERT_NEAR(table_out[(m * L + l) * static_cast<std::size_t>(ho) + k], pct[(m * static_cast<std::size_t>(ho) + k) * L + l], 1e-13)
              << name << " inverse table m " << m << " k " << k << " l " << l;

    std::vector<std::size_t> shape;
    const auto input = f.floats(g + "/input", &shape);
    const std::size_t B = shape[0], C = shape[1];
    const auto x = to_rows(input, B, C, static_cast<std::size_t>(hi * wi));
    const int b = static_cast<int>(B), c = static_cast<int>(C);

    std::vector<float> coeffs(B * L * M * 2 * C);
    sht.forward(b, c, x.data(), coeffs.data());
    const auto c32 = to_split(f.floats(g + "/coeffs_re"), f.floats(g + "/coeffs_im"), B, C, L, M);
    const auto c64 = to_split(f.doubles(g + "/coeffs64_re"), f.doubles(g + "/coeffs64_im"), B, C, L, M);
    const Error ec = compare(coeffs, c32, c64);
    EXPECT_LE(ec.err, 2 * ec.gap + 4 * kFloatUlp * ec.mag) << name << " coefficients";

    std::vector<float> out(B * static_cast<std::size_t>(ho * wo) * C);
    isht.forward(b, c, coeffs.data(), out.data());
    const std::size_t Po = static_cast<std::size_t>(ho * wo);
    const Error eo = compare(out, to_rows(f.floats(g + "/output"), B, C, Po), to_rows(f.floats(g + "/output_f64"), B, C, Po));
    EXPECT_LE(eo.err, 2 * eo.gap + 4 * kFloatUlp * eo.mag) << name << " upsampled";

    const auto given = to_split(f.floats(g + "/given_re"), f.floats(g + "/given_im"), B, C, L, M);
    std::vector<float> synthesis(out.size());
    isht.forward(b, c, given.data(), synthesis.data());
    const Error es = compare(synthesis, to_rows(f.floats(g + "/synthesis"), B, C, Po),
                             to_rows(f.floats(g + "/synthesis_f64"), B, C, Po));
    EXPECT_LE(es.err, 2 * es.gap + 4 * kFloatUlp * es.mag) << name << " synthesis";
    std::printf("  %-42s L %2zu  coeffs |ours-f64| %.2g (official f32 %.2g)  upsampled %.2g (%.2g)  synthesis %.2g (%.2g)\n",
                name.c_str(), L, ec.err, ec.gap, eo.err, eo.gap, es.err, es.gap);
  }
}

// Row ranges give the rows of the whole synthesis, and the Fourier rows + Legendre sums the whole analysis;
// 1 and 3 threads the same bits; the baseline and the AVX2 Legendre sums the same bits (no contraction).
TEST(Sht, RowRangesAndThreadsAreBitwise) {
  const int hi = 9, wi = 16, ho = 17, wo = 32, B = 2, C = 7, ld = 9;
  const sphere::RealSHT sht(hi, wi, Grid::legendre_gauss);
  const sphere::InverseRealSHT isht(ho, wo, Grid::equiangular, sht.lmax(), sht.mmax());
  const std::vector<float> x = random_values(static_cast<std::size_t>(B * hi * wi * ld), 5);
  const std::size_t ncoef = static_cast<std::size_t>(B * sht.lmax() * sht.mmax() * 2 * C);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    std::vector<float> coeffs(ncoef), out(static_cast<std::size_t>(B * ho * wo * C));
    sht.forward(B, C, x.data(), coeffs.data(), ld);
    isht.forward(B, C, coeffs.data(), out.data());
    omp_set_num_threads(saved);
    return std::make_pair(coeffs, out);
  };
  const auto one = run(1), three = run(3);
  EXPECT_EQ(one.first, three.first);
  EXPECT_EQ(one.second, three.second);
  namespace kernels = surrogate::kernels;
  kernels::replace_cpu_kernels(kernels::cpu(kernels::Isa::generic));
  const auto generic = run(2);
  kernels::replace_cpu_kernels(nullptr);
  EXPECT_EQ(generic.first, one.first) << "baseline vs " << kernels::to_string(kernels::cpu().isa);
  EXPECT_EQ(generic.second, one.second) << "baseline vs " << kernels::to_string(kernels::cpu().isa);
  // Analysis from Fourier rows computed in two separate pieces.
  std::vector<float> fourier(static_cast<std::size_t>(B * hi * sht.fourier_width(C)));
  const std::int64_t split = 5;
  sht.fourier_rows(split, C, x.data(), ld, fourier.data());
  sht.fourier_rows(B * hi - split, C, x.data() + split * wi * ld, ld, fourier.data() + split * sht.fourier_width(C));
  std::vector<float> coeffs(ncoef);
  sht.legendre(B, C, fourier.data(), coeffs.data());
  EXPECT_EQ(coeffs, one.first);
  // The orders in three pieces (as three ranks sum them), order-major, then the synthesis from that layout.
  const int L = sht.lmax(), M = sht.mmax();
  const std::size_t C2 = 2 * static_cast<std::size_t>(C);
  std::vector<float> by_order(ncoef);
  for (const auto& [m0, m1] : {std::pair{0, 2}, std::pair{2, 2}, std::pair{2, 7}, std::pair{7, M}}) {
    std::vector<float> piece_in, piece_out(static_cast<std::size_t>(B * (m1 - m0) * L) * C2);
    for (int row = 0; row < B * hi; ++row) {
      const auto first = fourier.begin() + static_cast<std::ptrdiff_t>(row * sht.fourier_width(C) + m0 * static_cast<int>(C2));
      piece_in.insert(piece_in.end(), first, first + static_cast<std::ptrdiff_t>((m1 - m0) * static_cast<int>(C2)));
    }
    sht.legendre_orders(B, C, m0, m1, piece_in.data(), piece_out.data());
    for (int b = 0; b < B; ++b)
      std::copy(piece_out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(b * (m1 - m0) * L) * C2),
                piece_out.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>((b + 1) * (m1 - m0) * L) * C2),
                by_order.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>((b * M + m0) * L) * C2));
  }
  for (int b = 0; b < B; ++b)
    for (int l = 0; l < L; ++l)
      for (int m = 0; m < M; ++m)
        for (std::size_t i = 0; i < C2; ++i)
          ASSERT_EQ(by_order[static_cast<std::size_t>((b * M + m) * L + l) * C2 + i], one.first[static_cast<std::size_t>((b * L + l) * M + m) * C2 + i])
              << "b " << b << " l " << l << " m " << m;
  std::vector<float> from_orders(one.second.size());
  isht.forward_rows_by_order(B, C, by_order.data(), from_orders.data(), 0, ho);
  EXPECT_EQ(from_orders, one.second);
  for (int r0 = 0; r0 < ho; r0 += 3) {
    const int r1 = std::min(ho, r0 + (r0 % 2 ? 1 : 4));
    std::vector<float> rows(static_cast<std::size_t>(B * (r1 - r0) * wo * C));
    isht.forward_rows(B, C, one.first.data(), rows.data(), r0, r1);
    for (int b = 0; b < B; ++b) {
      const auto first = one.second.begin() + static_cast<std::ptrdiff_t>((b * ho + r0) * wo * C);
      const std::vector<float> expected(first, first + static_cast<std::ptrdiff_t>((r1 - r0) * wo * C));
      const std::vector<float> got(rows.begin() + static_cast<std::ptrdiff_t>(b * (r1 - r0) * wo * C),
                                   rows.begin() + static_cast<std::ptrdiff_t>((b + 1) * (r1 - r0) * wo * C));
      EXPECT_EQ(got, expected) << "rows [" << r0 << ", " << r1 << ") sample " << b;
    }
  }
}

TEST(Sht, BadArguments) {
  EXPECT_THROW(sphere::RealSHT(1, 16, Grid::equiangular), surrogate::Error);
  EXPECT_THROW(sphere::InverseRealSHT(8, 0, Grid::legendre_gauss), surrogate::Error);
  EXPECT_THROW(sphere::RealSHT(8, 16, Grid::legendre_gauss, -1), surrogate::Error);
  const sphere::RealSHT sht(8, 16, Grid::legendre_gauss);
  const sphere::InverseRealSHT isht(8, 16, Grid::legendre_gauss);
  std::vector<float> x(8 * 16 * 2), c(static_cast<std::size_t>(sht.lmax() * sht.mmax() * 2 * 2));
  EXPECT_THROW(sht.forward(0, 2, x.data(), c.data()), surrogate::Error);
  EXPECT_THROW(sht.forward(1, 2, nullptr, c.data()), surrogate::Error);
  EXPECT_THROW(sht.forward(1, 2, x.data(), c.data(), 1), surrogate::Error);
  try {
    isht.forward_rows(1, 2, c.data(), x.data(), 3, 9);
    FAIL() << "no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("[3, 9)"), std::string::npos) << e.what();
  }
}
