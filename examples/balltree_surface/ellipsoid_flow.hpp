// Potential flow past an ellipsoid: the surface points of the example and the closed-form pressure
// coefficient (the same problem as share/training/balltree_surface_train.py, which trained the model).
//
// Surface x²/a² + y²/b² + z²/c² = 1; point i of N comes from a Fibonacci spiral on the unit sphere
// (u_x = 1 - 2 (i + 1/2) / N, azimuth i · golden angle) mapped to (a u_x, b u_y, c u_z), so a range of
// indices is a band of the body along x. Uniform stream of unit speed in direction
// (cos α cos β, cos α sin β, sin α). For a stream along axis k the surface potential is
// U_k x_k · 2 / (2 - α_k) with α_k = abc ∫₀^∞ ds / ((a_k² + s) Δ(s)) (Lamb, Hydrodynamics §114), so the
// surface velocity is the tangential part of w = (K_x U_x, K_y U_y, K_z U_z), K_k = 2 / (2 - α_k), and
// Cp = 1 - |u_t|² = 1 - |w|² + (w · n)².
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <numbers>

namespace balltree_surface {

struct Ellipsoid {
  std::array<double, 3> axes{2.0, 0.8, 0.6};  // semi-axes a, b, c (m): 4 m long, 1.6 m wide, 1.2 m high
  double attack_deg = 6.0, slip_deg = 10.0;   // flow direction

  /// Carlson's R_D(x, y, z) = 3/2 ∫₀^∞ dt / ((t+z)^{3/2} √(t+x) √(t+y)) by the duplication theorem: each
  /// step moves the three arguments four times closer together; after 40 steps they agree to rounding
  /// and R_D of equal arguments μ is μ^{-3/2}.
  static double carlson_rd(double x, double y, double z) {
    double total = 0.0, factor = 1.0;
    for (int step = 0; step < 40; ++step) {
      const double sx = std::sqrt(x), sy = std::sqrt(y), sz = std::sqrt(z);
      const double lambda = sx * sy + sx * sz + sy * sz;
      total += factor / (sz * (z + lambda));
      factor *= 0.25;
      x = (x + lambda) / 4.0;
      y = (y + lambda) / 4.0;
      z = (z + lambda) / 4.0;
    }
    const double mean = (x + y + 3.0 * z) / 5.0;
    return 3.0 * total + factor / (mean * std::sqrt(mean));
  }

  /// α_k = (2/3) abc R_D(a_i², a_j², a_k²); the three sum to 2.
  std::array<double, 3> shape_factors() const {
    std::array<double, 3> alpha{};
    const double abc = axes[0] * axes[1] * axes[2];
    for (int k = 0; k < 3; ++k) {
      const double ai = axes[static_cast<std::size_t>((k + 1) % 3)], aj = axes[static_cast<std::size_t>((k + 2) % 3)];
      const double ak = axes[static_cast<std::size_t>(k)];
      alpha[static_cast<std::size_t>(k)] = 2.0 / 3.0 * abc * carlson_rd(ai * ai, aj * aj, ak * ak);
    }
    return alpha;
  }

  /// α_k by the midpoint rule after s = t²/(1-t)² (an independent check of shape_factors()).
  double shape_factor_quadrature(int k, int steps = 200000) const {
    const double a2[3] = {axes[0] * axes[0], axes[1] * axes[1], axes[2] * axes[2]};
    double sum = 0.0;
    for (int j = 0; j < steps; ++j) {
      const double t = (j + 0.5) / steps, s = t * t / ((1 - t) * (1 - t)), ds = 2 * t / ((1 - t) * (1 - t) * (1 - t));
      sum += ds / ((a2[k] + s) * std::sqrt((a2[0] + s) * (a2[1] + s) * (a2[2] + s)));
    }
    return axes[0] * axes[1] * axes[2] * sum / steps;
  }

  /// w = (K_k U_k): the surface velocity is its tangential part.
  std::array<double, 3> surface_velocity_vector() const {
    const double al = attack_deg * std::numbers::pi / 180.0, be = slip_deg * std::numbers::pi / 180.0;
    const std::array<double, 3> u{std::cos(al) * std::cos(be), std::cos(al) * std::sin(be), std::sin(al)};
    const std::array<double, 3> alpha = shape_factors();
    std::array<double, 3> w{};
    for (std::size_t k = 0; k < 3; ++k) w[k] = 2.0 / (2.0 - alpha[k]) * u[k];
    return w;
  }

  /// Point i of n (position and outward unit normal).
  void point(std::int64_t i, std::int64_t n, double* position, double* normal) const {
    const double golden_angle = std::numbers::pi * (3.0 - std::sqrt(5.0));
    const double di = static_cast<double>(i);
    const double ux = 1.0 - 2.0 * (di + 0.5) / static_cast<double>(n);
    const double r = std::sqrt(std::max(0.0, 1.0 - ux * ux));
    const double phi = di * golden_angle;
    position[0] = axes[0] * ux;
    position[1] = axes[1] * r * std::cos(phi);
    position[2] = axes[2] * r * std::sin(phi);
    double length = 0.0;
    for (std::size_t k = 0; k < 3; ++k) {
      normal[k] = position[k] / (axes[k] * axes[k]);
      length += normal[k] * normal[k];
    }
    length = std::sqrt(length);
    for (std::size_t k = 0; k < 3; ++k) normal[k] /= length;
  }

  /// Cp at a point with unit normal n, given w = surface_velocity_vector().
  static double pressure_coefficient(const std::array<double, 3>& w, const double* normal) {
    const double ww = w[0] * w[0] + w[1] * w[1] + w[2] * w[2];
    const double wn = w[0] * normal[0] + w[1] * normal[1] + w[2] * normal[2];
    return 1.0 - ww + wn * wn;
  }
};

}  // namespace balltree_surface
