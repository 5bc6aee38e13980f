// Sphere grids and quadrature: closed-form values, sums, exactness on polynomials (spherical harmonics)
// up to each rule's degree, and agreement with torch-harmonics' own functions (tests/data/sphere,
// made by share/tools/golden/sphere_golden.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "h5_reader.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace sphere = surrogate::sphere;
using sphere::Grid;

namespace {

constexpr double kPi = std::numbers::pi;
const Grid kGrids[] = {Grid::equiangular, Grid::legendre_gauss, Grid::lobatto, Grid::equiangular_trapezoidal};

std::string data_file(const char* name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/" + name; }

void expect_rule(Grid grid, const std::vector<double>& x, const std::vector<double>& w) {
  const sphere::Rule r = sphere::quadrature_rule(grid, static_cast<int>(x.size()));
  ASSERT_EQ(r.x.size(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(r.x[i], x[i], 1e-15) << sphere::to_string(grid) << " node " << i;
    EXPECT_NEAR(r.w[i], w[i], 1e-15) << sphere::to_string(grid) << " weight " << i;
  }
}

/// Integral of x^a y^b z^c over the unit sphere: 2 G(A) G(B) G(C) / G(A + B + C), A = (a+1)/2, ...,
/// when a, b, c are all even; 0 otherwise.
double monomial_integral(int a, int b, int c) {
  if (a % 2 || b % 2 || c % 2) return 0.0;
  const double A = (a + 1) / 2.0, B = (b + 1) / 2.0, C = (c + 1) / 2.0;
  return 2.0 * std::exp(std::lgamma(A) + std::lgamma(B) + std::lgamma(C) - std::lgamma(A + B + C));
}

/// Highest degree of polynomials in cos(colatitude) that the n-node rule integrates exactly.
int exact_degree(Grid grid, int n) {
  switch (grid) {
    case Grid::equiangular: return n % 2 ? n : n - 1;
    case Grid::legendre_gauss: return 2 * n - 1;
    case Grid::lobatto: return 2 * n - 3;
    case Grid::equiangular_trapezoidal: return 1;
  }
  return 0;
}

}  // namespace

TEST(SphereQuadrature, ClosedFormValues) {
  expect_rule(Grid::equiangular, {-1, 1}, {1, 1});
  expect_rule(Grid::equiangular, {-1, 0, 1}, {1.0 / 3, 4.0 / 3, 1.0 / 3});
  const double h = std::sqrt(0.5);
  expect_rule(Grid::equiangular, {-1, -h, 0, h, 1}, {1.0 / 15, 8.0 / 15, 12.0 / 15, 8.0 / 15, 1.0 / 15});
  const double g2 = 1 / std::sqrt(3.0), g3 = std::sqrt(0.6);
  expect_rule(Grid::legendre_gauss, {0}, {2});
  expect_rule(Grid::legendre_gauss, {-g2, g2}, {1, 1});
  expect_rule(Grid::legendre_gauss, {-g3, 0, g3}, {5.0 / 9, 8.0 / 9, 5.0 / 9});
  expect_rule(Grid::lobatto, {-1, 1}, {1, 1});
  expect_rule(Grid::lobatto, {-1, 0, 1}, {1.0 / 3, 4.0 / 3, 1.0 / 3});
  const double l4 = 1 / std::sqrt(5.0);
  expect_rule(Grid::lobatto, {-1, -l4, l4, 1}, {1.0 / 6, 5.0 / 6, 5.0 / 6, 1.0 / 6});
  expect_rule(Grid::equiangular_trapezoidal, {-1, 0, 1}, {0.5, 1, 0.5});
  expect_rule(Grid::equiangular_trapezoidal, {-1, -0.5, 0, 0.5, 1}, {0.25, 0.5, 0.5, 0.5, 0.25});
}

TEST(SphereQuadrature, LatitudesAndLongitudes) {
  // Equiangular colatitudes are pi i / (n-1), north pole first; longitudes 2 pi w / nlon.
  const sphere::Latitudes lat = sphere::latitudes(7, Grid::equiangular);
  for (int i = 0; i < 7; ++i) EXPECT_NEAR(lat.colatitude[static_cast<std::size_t>(i)], kPi * i / 6, 1e-15);
  EXPECT_EQ(lat.colatitude.front(), 0.0);
  EXPECT_DOUBLE_EQ(lat.colatitude.back(), kPi);
  const std::vector<double> lon = sphere::longitudes(12);
  for (int w = 0; w < 12; ++w) EXPECT_NEAR(lon[static_cast<std::size_t>(w)], 2 * kPi * w / 12, 1e-15);
  for (Grid g : kGrids)
    for (int n : {2, 3, 8, 33}) {
      const sphere::Latitudes l = sphere::latitudes(n, g);
      EXPECT_TRUE(std::is_sorted(l.colatitude.begin(), l.colatitude.end())) << sphere::to_string(g) << " " << n;
      EXPECT_GE(l.colatitude.front(), 0.0);
      EXPECT_LE(l.colatitude.back(), kPi);
    }
}

TEST(SphereQuadrature, PointWeightsSumTo4Pi) {
  for (Grid g : kGrids)
    for (int nlat : {2, 3, 4, 9, 16, 65, 181, 361, 721})
      for (int nlon : {1, 8, 2 * nlat}) {
        const std::vector<double> q = sphere::point_weights(nlat, nlon, g);
        ASSERT_EQ(q.size(), static_cast<std::size_t>(nlat) * static_cast<std::size_t>(nlon));
        double sum = 0, carry = 0;  // compensated (Neumaier) sum: a million terms
        for (double v : q) {
          EXPECT_GT(v, 0.0);
          const double t = sum + v;
          carry += std::abs(sum) >= std::abs(v) ? (sum - t) + v : (v - t) + sum;
          sum = t;
        }
        EXPECT_NEAR(sum + carry, 4 * kPi, 4 * kPi * 1e-14) << sphere::to_string(g) << " " << nlat << "x" << nlon;
      }
}

// Polynomials x^a y^b z^c restricted to the sphere span the spherical harmonics of degree <= a+b+c.
// The grid integrates them exactly when the degree in z = cos(colatitude) (a+b+c for even a+b) is within
// the rule's degree and a+b < nlon (trigonometric exactness of the uniform longitude rule).
TEST(SphereQuadrature, ExactOnSphericalHarmonics) {
  for (Grid g : kGrids)
    for (int nlat : {2, 3, 4, 5, 8, 9, 16, 17}) {
      const int degree = exact_degree(g, nlat);
      const int nlon = 2 * degree + 2;
      const sphere::Latitudes lat = sphere::latitudes(nlat, g);
      const std::vector<double> lon = sphere::longitudes(nlon);
      const std::vector<double> q = sphere::point_weights(nlat, nlon, g);
      int checked = 0;
      for (int a = 0; a <= degree; ++a)
        for (int b = 0; a + b <= degree; ++b)
          for (int c = 0; a + b + c <= degree; ++c) {
            double sum = 0;
            for (int t = 0; t < nlat; ++t) {
              const double th = lat.colatitude[static_cast<std::size_t>(t)];
              for (int w = 0; w < nlon; ++w) {
                const double ph = lon[static_cast<std::size_t>(w)];
                const double x = std::sin(th) * std::cos(ph), y = std::sin(th) * std::sin(ph), z = std::cos(th);
                sum += q[static_cast<std::size_t>(t * nlon + w)] * std::pow(x, a) * std::pow(y, b) * std::pow(z, c);
              }
            }
            EXPECT_NEAR(sum, monomial_integral(a, b, c), 1e-12)
                << sphere::to_string(g) << " nlat " << nlat << ": x^" << a << " y^" << b << " z^" << c;
            ++checked;
          }
      EXPECT_GT(checked, 0);
    }
  // Beyond the degree the rules are not exact: z^(n+1) on the n-node Clenshaw-Curtis grid (n even), and
  // z^2 on the trapezoid rule.
  const std::vector<double> q = sphere::point_weights(4, 1, Grid::equiangular);
  const sphere::Latitudes lat = sphere::latitudes(4, Grid::equiangular);
  double sum = 0;
  for (int t = 0; t < 4; ++t) sum += q[static_cast<std::size_t>(t)] * std::pow(std::cos(lat.colatitude[static_cast<std::size_t>(t)]), 4);
  EXPECT_GT(std::abs(sum - monomial_integral(0, 0, 4)), 1e-3);
  const sphere::Latitudes tl = sphere::latitudes(5, Grid::equiangular_trapezoidal);
  const std::vector<double> tq = sphere::point_weights(5, 1, Grid::equiangular_trapezoidal);
  sum = 0;
  for (int t = 0; t < 5; ++t) sum += tq[static_cast<std::size_t>(t)] * std::pow(std::cos(tl.colatitude[static_cast<std::size_t>(t)]), 2);
  EXPECT_GT(std::abs(sum - monomial_integral(0, 0, 2)), 1e-3);
}

// Against 40-digit values (mpmath: Newton on P_n, w = 2 / ((1 - x^2) P_n'(x)^2)): the polar weight of the
// 129-node rule, the most sensitive one, to 1e-12 relative (numpy.leggauss: 1.3e-11).
TEST(SphereQuadrature, GaussLegendreAccuracy) {
  const sphere::Rule r = sphere::quadrature_rule(Grid::legendre_gauss, 129);
  EXPECT_NEAR(r.x.back(), 0.9998275818477487191077441, 2e-16);
  EXPECT_NEAR(r.w.back(), 0.0004424679418293929692366801, 0.0004424679418293929692366801 * 1e-12);
  EXPECT_NEAR(r.w.front(), 0.0004424679418293929692366801, 0.0004424679418293929692366801 * 1e-12);
}

TEST(SphereQuadrature, Names) {
  for (Grid g : kGrids) EXPECT_EQ(sphere::parse_grid(sphere::to_string(g)), g);
  try {
    sphere::parse_grid("equidistant", "grid_in");
    FAIL() << "no exception";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("grid_in"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("equidistant"), std::string::npos) << e.what();
  }
  EXPECT_THROW(sphere::quadrature_rule(Grid::equiangular, 1), surrogate::Error);
  EXPECT_THROW(sphere::quadrature_rule(Grid::lobatto, 1), surrogate::Error);
  EXPECT_THROW(sphere::quadrature_rule(Grid::legendre_gauss, 0), surrogate::Error);
  EXPECT_THROW(sphere::longitudes(0), surrogate::Error);
}

// torch-harmonics' own functions: the 1-D rules (clenshaw_curtiss_weights, legendre_gauss_weights,
// lobatto_weights, trapezoidal_weights), precompute_latitudes / precompute_longitudes and the float32
// log quadrature weights of AttentionS2.
TEST(SphereQuadrature, MatchesTorchHarmonics) {
  sphere_test::H5Reader f(data_file("quadrature.h5"));
  int cases = 0;
  for (Grid g : kGrids) {
    const std::string grid = sphere::to_string(g);
    for (const std::string& size : f.children("/" + grid)) {
      const std::string base = "/" + grid + "/" + size;
      const std::vector<double> rx = f.doubles(base + "/rule_x"), rw = f.doubles(base + "/rule_w");
      const int n = static_cast<int>(rx.size());
      const sphere::Rule r = sphere::quadrature_rule(g, n);
      double max_x = 0, max_w = 0;
      for (int i = 0; i < n; ++i) {
        max_x = std::max(max_x, std::abs(r.x[static_cast<std::size_t>(i)] - rx[static_cast<std::size_t>(i)]));
        max_w = std::max(max_w, std::abs(r.w[static_cast<std::size_t>(i)] - rw[static_cast<std::size_t>(i)]));
      }
      EXPECT_LE(max_x, 1e-15) << base;
      // numpy.leggauss (torch-harmonics' Gauss-Legendre) is itself off by up to 6e-15 at n = 129 (see
      // GaussLegendreAccuracy); every other rule agrees to 1e-15.
      const double tol_w = g == Grid::legendre_gauss ? 1e-14 : 1e-15;
      EXPECT_LE(max_w, tol_w) << base;
      // Colatitudes: arccos amplifies the node's rounding near the poles (1/sin); allow for it.
      const std::vector<double> colat = f.doubles(base + "/colatitude"), weight = f.doubles(base + "/weight");
      const sphere::Latitudes lat = sphere::latitudes(n, g);
      for (int i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const double s = std::max(std::sin(colat[k]), 1e-8);
        EXPECT_NEAR(lat.colatitude[k], colat[k], 1e-15 + 2e-16 / s) << base << " colatitude " << i;
        EXPECT_NEAR(lat.weight[k], weight[k], tol_w) << base << " weight " << i;
      }
      // The attention layer's float32 buffer: log((float)(2 pi) * (float)w / nlon), equal to the last bit
      // of the float weight (the logarithm itself may differ by one rounding).
      const int nlon = static_cast<int>(f.number(base, "nlon"));
      const std::vector<float> logq = f.floats(base + "/log_quad_weights");
      const std::vector<float> qa = sphere::attention_latitude_weights(n, nlon, g);
      for (int i = 0; i < n; ++i) {
        const auto k = static_cast<std::size_t>(i);
        const float mine = std::log(qa[k]);
        EXPECT_LE(std::abs(mine - logq[k]), 2 * std::numeric_limits<float>::epsilon() * std::max(1.0f, std::abs(logq[k])))
            << base << " log weight " << i;
      }
      ++cases;
    }
  }
  EXPECT_GE(cases, 40);
  for (const std::string& size : f.children("/longitudes")) {
    const std::vector<double> ref = f.doubles("/longitudes/" + size);
    const std::vector<double> lon = sphere::longitudes(static_cast<int>(ref.size()));
    for (std::size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(lon[i], ref[i], 1e-15) << size << " " << i;
  }
}
