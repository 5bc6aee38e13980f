// Latitude rules of the sphere grids (docs/reference-models.md §5.2), computed in float64 from closed
// forms and Newton iterations. Compiled without fused multiply-add so that the results do not depend on
// the instruction set.
#include "surrogate/sphere/quadrature.hpp"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "surrogate/error.hpp"

namespace surrogate::sphere {
namespace {

constexpr double kPi = std::numbers::pi;

void check_count(int n, int minimum, const char* what) {
  if (n < minimum)
    throw Error(ErrorCode::invalid_argument, std::string(what) + " must be at least " + std::to_string(minimum) +
                                                 ", got " + std::to_string(n));
}

/// Clenshaw-Curtis on n nodes: nodes cos of the equally spaced angles pi .. 0 (ascending x; the angles
/// are formed as a symmetric linspace: from pi for the first half, from 0 for the second), weights by
/// the closed form w_j = c_j / N (1 - sum_{k=1}^{N/2} b_k cos(2 pi k j / N) / (4 k^2 - 1)), N = n - 1.
Rule clenshaw_curtis(int n) {
  check_count(n, 2, "the number of Clenshaw-Curtis (equiangular) nodes");
  const int N = n - 1;
  Rule r;
  r.x.resize(static_cast<std::size_t>(n));
  r.w.resize(static_cast<std::size_t>(n));
  const double step = -kPi / N;
  for (int i = 0; i < n; ++i) {
    const double angle = i < n / 2 ? kPi + i * step : 0.0 - (N - i) * step;
    r.x[static_cast<std::size_t>(i)] = std::cos(angle);
  }
  for (int j = 0; j <= N; ++j) {
    double s = 0.0;
    for (int k = 1; 2 * k <= N; ++k) {
      const double b = 2 * k == N ? 1.0 : 2.0;
      // cos(2 pi k j / N) with the argument reduced exactly (k j mod N) for accuracy at large n.
      const long long kj = static_cast<long long>(k) * j % N;
      s += b * std::cos(2.0 * kPi * static_cast<double>(kj) / N) / (4.0 * k * k - 1.0);
    }
    const double c = (j == 0 || j == N) ? 1.0 : 2.0;
    r.w[static_cast<std::size_t>(j)] = c / N * (1.0 - s);
  }
  // The weights are symmetric (w_j = w_{N-j}); store them in the order of the ascending nodes.
  std::reverse(r.w.begin(), r.w.end());
  return r;
}

/// P_n(x) and P_n'(x) by the three-term recurrences (the derivative by
/// P_k' = k P_{k-1} + x P_{k-1}', which avoids the cancellation of (x^2 - 1) near the poles).
void legendre_eval(int n, double x, double& pn, double& dpn) {
  double p0 = 1.0, p1 = x, d1 = 1.0;
  for (int k = 2; k <= n; ++k) {
    const double p2 = ((2.0 * k - 1.0) * x * p1 - (k - 1.0) * p0) / k;
    const double d2 = k * p1 + x * d1;
    p0 = p1;
    p1 = p2;
    d1 = d2;
  }
  pn = p1;
  dpn = d1;
}

/// Gauss-Legendre: roots of P_n by Newton from the asymptotic guess cos(pi (i + 3/4) / (n + 1/2)),
/// symmetrised; weights 2 / ((1 - x)(1 + x) P_n'(x)^2) (1 - x and 1 + x are exact near the poles; this
/// form is also the least sensitive to the rounding of the node), symmetrised and scaled to sum 2.
Rule gauss_legendre(int n) {
  check_count(n, 1, "the number of Legendre-Gauss nodes");
  Rule r;
  r.x.resize(static_cast<std::size_t>(n));
  r.w.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    // Root i in descending order; stored at n-1-i so that x ascends.
    double x = std::cos(kPi * (i + 0.75) / (n + 0.5));
    for (int it = 0; it < 100; ++it) {
      double pn, dp;
      legendre_eval(n, x, pn, dp);
      const double dx = pn / dp;
      x -= dx;
      if (std::abs(dx) <= 1e-17 && it >= 2) break;
    }
    r.x[static_cast<std::size_t>(n - 1 - i)] = x;
  }
  std::vector<double> xs = r.x;
  for (int i = 0; i < n; ++i) r.x[static_cast<std::size_t>(i)] = 0.5 * (xs[static_cast<std::size_t>(i)] - xs[static_cast<std::size_t>(n - 1 - i)]);
  for (int i = 0; i < n; ++i) {
    double pn, dp;
    legendre_eval(n, r.x[static_cast<std::size_t>(i)], pn, dp);
    const double x = r.x[static_cast<std::size_t>(i)];
    r.w[static_cast<std::size_t>(i)] = 2.0 / ((1.0 - x) * (1.0 + x) * dp * dp);
  }
  std::vector<double> ws = r.w;
  double sum = 0.0;
  for (int i = 0; i < n; ++i) {
    r.w[static_cast<std::size_t>(i)] = 0.5 * (ws[static_cast<std::size_t>(i)] + ws[static_cast<std::size_t>(n - 1 - i)]);
    sum += r.w[static_cast<std::size_t>(i)];
  }
  for (double& w : r.w) w *= 2.0 / sum;
  return r;
}

/// Gauss-Legendre-Lobatto: the n nodes are +-1 and the roots of P_{n-1}'. Newton iteration for
/// (1 - x^2) P_{n-1}'(x) = 0 in the form x <- x - (x P_{n-1} - P_{n-2}) / (n P_{n-1}), started at the
/// Chebyshev-Lobatto points -cos(pi i / (n-1)) and stopped when no node moves by 1e-16 or more (at most
/// 100 steps); weights 2 / (n (n-1) P_{n-1}(x)^2) at the nodes of the last step's start.
Rule lobatto(int n) {
  check_count(n, 2, "the number of Lobatto nodes");
  Rule r;
  std::vector<double> x(static_cast<std::size_t>(n)), pn1(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) x[static_cast<std::size_t>(i)] = -std::cos(kPi * i / (n - 1));
  for (int it = 0; it < 100; ++it) {
    double moved = 0.0;
    for (int i = 0; i < n; ++i) {
      const double xi = x[static_cast<std::size_t>(i)];
      // P_{n-1}(xi) and P_{n-2}(xi)
      double p_prev = 1.0, p = xi;
      for (int k = 2; k < n; ++k) {
        const double next = ((2 * k - 1) * xi * p - (k - 1) * p_prev) / k;
        p_prev = p;
        p = next;
      }
      pn1[static_cast<std::size_t>(i)] = p;
      const double updated = xi - (xi * p - p_prev) / (n * p);
      moved = std::max(moved, std::abs(updated - xi));
      x[static_cast<std::size_t>(i)] = updated;
    }
    if (moved < 1e-16) break;
  }
  r.x = x;
  r.w.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const double p = pn1[static_cast<std::size_t>(i)];
    r.w[static_cast<std::size_t>(i)] = 2.0 / ((n * (n - 1)) * (p * p));
  }
  return r;
}

/// Trapezoid rule on n nodes equally spaced in x: x_i = -1 + i 2/(n-1) (the last exactly 1), weights
/// 2/(n-1) with half weight at both ends.
Rule trapezoidal(int n) {
  check_count(n, 2, "the number of equiangular-trapezoidal nodes");
  Rule r;
  r.x.resize(static_cast<std::size_t>(n));
  r.w.assign(static_cast<std::size_t>(n), 2.0 / (n - 1));
  const double step = 2.0 / (n - 1);
  for (int i = 0; i < n; ++i) r.x[static_cast<std::size_t>(i)] = i * step + -1.0;
  r.x.back() = 1.0;
  r.w.front() *= 0.5;
  r.w.back() *= 0.5;
  return r;
}

}  // namespace

const char* to_string(Grid grid) noexcept {
  switch (grid) {
    case Grid::equiangular: return "equiangular";
    case Grid::legendre_gauss: return "legendre-gauss";
    case Grid::lobatto: return "lobatto";
    case Grid::equiangular_trapezoidal: return "equiangular-trapezoidal";
  }
  return "?";
}

Grid parse_grid(std::string_view name, std::string_view argument) {
  for (Grid g : {Grid::equiangular, Grid::legendre_gauss, Grid::lobatto, Grid::equiangular_trapezoidal})
    if (name == to_string(g)) return g;
  throw Error(ErrorCode::invalid_argument,
              std::string(argument) + ": unknown grid '" + std::string(name) +
                  "' (expected equiangular, legendre-gauss, lobatto or equiangular-trapezoidal)");
}

Rule quadrature_rule(Grid grid, int n) {
  switch (grid) {
    case Grid::equiangular: return clenshaw_curtis(n);
    case Grid::legendre_gauss: return gauss_legendre(n);
    case Grid::lobatto: return lobatto(n);
    case Grid::equiangular_trapezoidal: return trapezoidal(n);
  }
  throw Error(ErrorCode::invalid_argument, "grid: invalid value");
}

Latitudes latitudes(int nlat, Grid grid) {
  const Rule r = quadrature_rule(grid, nlat);
  Latitudes lat;
  lat.colatitude.assign(r.x.rbegin(), r.x.rend());
  for (double& c : lat.colatitude) c = std::acos(c);
  lat.weight.assign(r.w.rbegin(), r.w.rend());
  return lat;
}

std::vector<double> longitudes(int nlon) {
  check_count(nlon, 1, "nlon");
  // A linspace over [0, 2 pi] with nlon + 1 points, the last dropped (first half from 0, second half
  // from 2 pi, as torch.linspace forms it).
  std::vector<double> lon(static_cast<std::size_t>(nlon));
  const int steps = nlon + 1;
  const double step = 2.0 * kPi / nlon;
  for (int i = 0; i < nlon; ++i)
    lon[static_cast<std::size_t>(i)] = i < steps / 2 ? i * step : 2.0 * kPi - (steps - 1 - i) * step;
  return lon;
}

std::vector<double> point_weights(int nlat, int nlon, Grid grid) {
  check_count(nlon, 1, "nlon");
  const Latitudes lat = latitudes(nlat, grid);
  std::vector<double> q(static_cast<std::size_t>(nlat) * static_cast<std::size_t>(nlon));
  for (int t = 0; t < nlat; ++t)
    for (int w = 0; w < nlon; ++w)
      q[static_cast<std::size_t>(t) * static_cast<std::size_t>(nlon) + static_cast<std::size_t>(w)] =
          2.0 * kPi * lat.weight[static_cast<std::size_t>(t)] / nlon;
  return q;
}

std::vector<float> attention_latitude_weights(int nlat, int nlon, Grid grid) {
  check_count(nlon, 1, "nlon");
  const Latitudes lat = latitudes(nlat, grid);
  std::vector<float> q(static_cast<std::size_t>(nlat));
  const float two_pi = static_cast<float>(2.0 * kPi);
  for (int t = 0; t < nlat; ++t) {
    const float w = static_cast<float>(lat.weight[static_cast<std::size_t>(t)]);
    const float product = two_pi * w;  // rounded to float before the division, as in float32 tensors
    q[static_cast<std::size_t>(t)] = product / static_cast<float>(nlon);
  }
  return q;
}

}  // namespace surrogate::sphere
