// The float64 reference of NeighborhoodAttentionS2 (both modes) shared by its tests: docs/reference-models.md
// §5.4 evaluated point by point, each output point's neighbourhood found by brute force over the whole
// input grid (no neighbour list of the library involved).
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <vector>

#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace sphere_test {

namespace sphere = surrogate::sphere;

/// Great-circle distance between grid points (colatitude t1, longitude 2 pi w1 / n1) and (t2, 2 pi w2 /
/// n2), in long double from unit vectors: atan2 of |cross| and dot, accurate for small and large angles.
inline long double great_circle(double t1, int w1, int n1, double t2, int w2, int n2) {
  const long double pi_l = 3.141592653589793238462643383279503L;
  const long double l1 = 2 * pi_l * w1 / n1, l2 = 2 * pi_l * w2 / n2;
  const long double s1 = std::sin(static_cast<long double>(t1)), s2 = std::sin(static_cast<long double>(t2));
  const long double ax = s1 * std::cos(l1), ay = s1 * std::sin(l1), az = std::cos(static_cast<long double>(t1));
  const long double bx = s2 * std::cos(l2), by = s2 * std::sin(l2), bz = std::cos(static_cast<long double>(t2));
  const long double cx = ay * bz - az * by, cy = az * bx - ax * bz, cz = ax * by - ay * bx;
  return std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), ax * bx + ay * by + az * bz);
}

/// §5.4 in float64, one output point at a time, with the neighbourhood found by brute force: every input
/// point whose great-circle distance (long double, from unit vectors) is <= (1 + 1e-3) theta_cutoff.
/// Pairs within 1e-9 of that radius would be undecidable between the two computations; the test asserts
/// there are none (`ambiguous`).
inline std::vector<double> naive(const sphere::NeighborhoodAttentionS2Config& c, const sphere::AttentionS2Weights& w, float s,
                          int batch, const std::vector<float>& xq, const std::vector<float>& xk,
                          const std::vector<float>& xv, int& ambiguous) {
  const int cin = c.in_channels, ck = c.k_channels, co = c.out_channels, H = c.num_heads, ek = ck / H, ev = co / H;
  const int po = c.nlat_out * c.nlon_out, pi = c.nlat_in * c.nlon_in;
  auto conv = [&](const std::vector<float>& x, int rows, const std::vector<float>& W, const std::vector<float>& b, int out) {
    std::vector<double> y(static_cast<std::size_t>(rows) * out);
    for (int r = 0; r < rows; ++r)
      for (int o = 0; o < out; ++o) {
        double acc = c.bias ? b[static_cast<std::size_t>(o)] : 0.0;
        for (int i = 0; i < cin; ++i)
          acc += static_cast<double>(W[static_cast<std::size_t>(o * cin + i)]) * x[static_cast<std::size_t>(r * cin + i)];
        y[static_cast<std::size_t>(r * out + o)] = acc;
      }
    return y;
  };
  auto norm = [&](std::vector<double>& x, int rows, const std::vector<float>& g) {
    if (!c.use_qknorm) return;
    for (int r = 0; r < rows; ++r)
      for (int h = 0; h < H; ++h) {
        double* v = x.data() + static_cast<std::size_t>(r) * ck + h * ek;
        double sq = 0;
        for (int e = 0; e < ek; ++e) sq += v[e] * v[e];
        const double inv = 1 / std::sqrt(sq / ek + 1.1920928955078125e-07);
        for (int e = 0; e < ek; ++e) v[e] *= inv * (1.0 + g[static_cast<std::size_t>(e)]);
      }
  };
  std::vector<double> q = conv(xq, batch * po, w.q_weights, w.q_bias, ck);
  std::vector<double> k = conv(xk, batch * pi, w.k_weights, w.k_bias, ck);
  const std::vector<double> v = conv(xv, batch * pi, w.v_weights, w.v_bias, co);
  norm(q, batch * po, w.q_norm_weights);
  norm(k, batch * pi, w.k_norm_weights);
  const sphere::Latitudes lin = sphere::latitudes(c.nlat_in, c.grid_in), lout = sphere::latitudes(c.nlat_out, c.grid_out);
  const long double pi_l = 3.141592653589793238462643383279503L;
  auto unit = [&](double theta, int w_idx, int nlon) {
    const long double lam = 2 * pi_l * w_idx / nlon;
    return std::array<long double, 3>{std::sin(static_cast<long double>(theta)) * std::cos(lam),
                                      std::sin(static_cast<long double>(theta)) * std::sin(lam),
                                      std::cos(static_cast<long double>(theta))};
  };
  const long double radius = (1.0L + 1e-3L) * static_cast<long double>(c.theta_cutoff);
  std::vector<double> o(static_cast<std::size_t>(batch * po * co));
  ambiguous = 0;
  for (int to = 0; to < c.nlat_out; ++to)
    for (int wo = 0; wo < c.nlon_out; ++wo) {
      const auto a = unit(lout.colatitude[static_cast<std::size_t>(to)], wo, c.nlon_out);
      std::vector<int> nb;
      for (int ti = 0; ti < c.nlat_in; ++ti)
        for (int wi = 0; wi < c.nlon_in; ++wi) {
          const auto b = unit(lin.colatitude[static_cast<std::size_t>(ti)], wi, c.nlon_in);
          const long double cx = a[1] * b[2] - a[2] * b[1], cy = a[2] * b[0] - a[0] * b[2], cz = a[0] * b[1] - a[1] * b[0];
          const long double d = std::atan2(std::sqrt(cx * cx + cy * cy + cz * cz), a[0] * b[0] + a[1] * b[1] + a[2] * b[2]);
          if (std::abs(d - radius) < 1e-9L) ++ambiguous;
          if (d <= radius) nb.push_back(ti * c.nlon_in + wi);
        }
      for (int bt = 0; bt < batch; ++bt) {
        const std::size_t row = static_cast<std::size_t>(bt * po + to * c.nlon_out + wo);
        for (int h = 0; h < H; ++h) {
          std::vector<double> logit(nb.size());
          double mx = -1e300;
          for (std::size_t j = 0; j < nb.size(); ++j) {
            const std::size_t kr = static_cast<std::size_t>(bt * pi + nb[j]);
            double l = 0;
            for (int e = 0; e < ek; ++e) l += q[row * static_cast<std::size_t>(ck) + static_cast<std::size_t>(h * ek + e)] *
                                               k[kr * static_cast<std::size_t>(ck) + static_cast<std::size_t>(h * ek + e)];
            logit[j] = static_cast<double>(s) * l;
            mx = std::max(mx, logit[j]);
          }
          double sum = 0;
          std::vector<double> acc(static_cast<std::size_t>(ev), 0.0);
          for (std::size_t j = 0; j < nb.size(); ++j) {
            const double wq = 2 * M_PI * lin.weight[static_cast<std::size_t>(nb[j] / c.nlon_in)] / c.nlon_in;
            const double p = std::exp(logit[j] - mx) * wq;
            sum += p;
            const std::size_t kr = static_cast<std::size_t>(bt * pi + nb[j]);
            for (int e = 0; e < ev; ++e) acc[static_cast<std::size_t>(e)] += p * v[kr * static_cast<std::size_t>(co) + static_cast<std::size_t>(h * ev + e)];
          }
          for (int e = 0; e < ev; ++e) o[row * static_cast<std::size_t>(co) + static_cast<std::size_t>(h * ev + e)] = acc[static_cast<std::size_t>(e)] / sum;
        }
      }
    }
  std::vector<double> y(o.size());
  for (std::size_t r = 0; r < static_cast<std::size_t>(batch * po); ++r)
    for (int oc = 0; oc < co; ++oc) {
      double acc = c.bias ? w.proj_bias[static_cast<std::size_t>(oc)] : 0.0;
      for (int i = 0; i < co; ++i)
        acc += static_cast<double>(w.proj_weights[static_cast<std::size_t>(oc * co + i)]) * o[r * static_cast<std::size_t>(co) + static_cast<std::size_t>(i)];
      y[r * static_cast<std::size_t>(co) + static_cast<std::size_t>(oc)] = acc;
    }
  return y;
}

}  // namespace sphere_test
