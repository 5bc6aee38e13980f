// The family of bodies of examples/sequoia_shapes and its closed form (README.md, "The problem"): an
// ellipsoid with one Gaussian bump, spiral surface points with normals and area weights, a pressure-like
// field cp(n·d) and the drag area D = -∮ cp (n·d) dA. The same formulas as share/training/sequoia_shapes_train.py.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace sequoia_shapes {

constexpr double bump_width = 0.3;
constexpr std::int64_t reference_points = 8192;  // the spiral quadrature of the exact D

struct Shape {
  std::array<double, 3> axes{0.7, 0.4, 0.3};      // semi-axes a, b, c
  double bump = 0.0;                              // height h of the bump term
  std::array<double, 3> bump_dir{1.0, 0.0, 0.0};  // unit direction of its centre
  double attack_deg = 0.0;                        // stream direction (cos α, 0, sin α)

  std::array<double, 3> stream() const {
    const double a = attack_deg * std::numbers::pi / 180.0;
    return {std::cos(a), 0.0, std::sin(a)};
  }
};

/// A surface point: position, unit normal, area weight (Σ w f ≈ ∮ f dA over the spiral's points).
struct SurfacePoint {
  std::array<double, 3> x, n;
  double w;
};

/// Shape number `index` of the family for `seed`: the training script's ranges, drawn with splitmix64.
inline Shape make_shape(std::uint64_t seed, std::uint64_t index) {
  std::uint64_t state = seed * 0x9E3779B97F4A7C15ull + index * 0xD1B54A32D192ED03ull + 1;
  auto uniform = [&state](double lo, double hi) {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return lo + (hi - lo) * static_cast<double>(z >> 11) * 0x1.0p-53;
  };
  Shape s;
  s.axes = {uniform(0.45, 0.9), uniform(0.25, 0.55), uniform(0.2, 0.5)};
  s.bump = uniform(0.0, 0.35);
  const double u = uniform(-1.0, 1.0), phi = uniform(0.0, 2.0 * std::numbers::pi), r = std::sqrt(1.0 - u * u);
  s.bump_dir = {u, r * std::cos(phi), r * std::sin(phi)};
  s.attack_deg = uniform(-20.0, 20.0);
  return s;
}

/// Point i of n: the Fibonacci spiral direction ω (ω_x = 1 - 2(i+½)/n, azimuth i · golden angle) projected
/// radially onto F(x) = q(x) - 1 - h exp(-|x - x_b|²/W²) = 0 by 64 bisections of [0, 2].
inline SurfacePoint surface_point(const Shape& s, std::int64_t i, std::int64_t n) {
  const double golden = std::numbers::pi * (3.0 - std::sqrt(5.0));
  const double u = 1.0 - 2.0 * (static_cast<double>(i) + 0.5) / static_cast<double>(n);
  const double r = std::sqrt(std::max(0.0, 1.0 - u * u)), phi = static_cast<double>(i) * golden;
  const std::array<double, 3> om{u, r * std::cos(phi), r * std::sin(phi)};
  std::array<double, 3> inv2{}, xb{};
  double qb = 0.0;
  for (int k = 0; k < 3; ++k) {
    inv2[k] = 1.0 / (s.axes[k] * s.axes[k]);
    qb += s.bump_dir[k] * s.bump_dir[k] * inv2[k];
  }
  for (int k = 0; k < 3; ++k) xb[k] = s.bump_dir[k] / std::sqrt(qb);
  const double w2 = bump_width * bump_width;
  auto gauss = [&](const std::array<double, 3>& x) {
    double d2 = 0.0;
    for (int k = 0; k < 3; ++k) d2 += (x[k] - xb[k]) * (x[k] - xb[k]);
    return std::exp(-d2 / w2);
  };
  auto field = [&](double t) {
    const std::array<double, 3> x{t * om[0], t * om[1], t * om[2]};
    double q = 0.0;
    for (int k = 0; k < 3; ++k) q += x[k] * x[k] * inv2[k];
    return q - 1.0 - s.bump * gauss(x);
  };
  double lo = 0.0, hi = 2.0;
  for (int it = 0; it < 64; ++it) {
    const double mid = 0.5 * (lo + hi);
    (field(mid) < 0.0 ? lo : hi) = mid;
  }
  const double t = 0.5 * (lo + hi);
  SurfacePoint p;
  p.x = {t * om[0], t * om[1], t * om[2]};
  const double e = gauss(p.x);
  double norm = 0.0, cosine = 0.0;
  for (int k = 0; k < 3; ++k) {
    p.n[k] = 2.0 * p.x[k] * inv2[k] + 2.0 * s.bump / w2 * e * (p.x[k] - xb[k]);
    norm += p.n[k] * p.n[k];
  }
  norm = std::sqrt(norm);
  for (int k = 0; k < 3; ++k) {
    p.n[k] /= norm;
    cosine += p.n[k] * om[k];
  }
  p.w = 4.0 * std::numbers::pi / static_cast<double>(n) * t * t / cosine;
  return p;
}

/// cp from s = n·d: -5/4 + 9/4 s² windward (s < 0), -5/4 + 0.85 s² leeward.
inline double pressure(const std::array<double, 3>& n, const std::array<double, 3>& d) {
  const double s = n[0] * d[0] + n[1] * d[1] + n[2] * d[2];
  return s < 0.0 ? -1.25 + 2.25 * s * s : -1.25 + 0.85 * s * s;
}

/// -Σ w cp (n·d) over the n-point spiral of the shape (with `cp` the exact field): the drag area, m².
inline double drag_area(const Shape& s, std::int64_t n = reference_points) {
  const std::array<double, 3> d = s.stream();
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    const SurfacePoint p = surface_point(s, i, n);
    sum -= p.w * pressure(p.n, d) * (p.n[0] * d[0] + p.n[1] * d[1] + p.n[2] * d[2]);
  }
  return sum;
}

}  // namespace sequoia_shapes
