// Shared by the emulated and the GPU tests of the DISCO and ResampleS2 device code: the test cases
// (small grids covering every grid type, the seam, the poles, groups, bias) and random inputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/kernels/cpu.hpp"  // index_t
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/resample.hpp"

namespace sphere_grid_ops_test {

namespace sp = surrogate::sphere;
using surrogate::kernels::index_t;

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

struct DiscoCase {
  std::string name;
  sp::DiscoConfig config;
  int batch;
};

inline sp::DiscoConfig disco_config(int cin, int cout, int nlat_in, int nlon_in, sp::Grid gin, int nlat_out, int nlon_out,
                             sp::Grid gout, std::vector<int> kernel_shape, sp::FilterBasis basis, int groups, bool bias,
                             double cutoff) {
  sp::DiscoConfig c;
  c.in_channels = cin;
  c.out_channels = cout;
  c.nlat_in = nlat_in;
  c.nlon_in = nlon_in;
  c.grid_in = gin;
  c.nlat_out = nlat_out;
  c.nlon_out = nlon_out;
  c.grid_out = gout;
  c.kernel_shape = std::move(kernel_shape);
  c.basis = basis;
  c.groups = groups;
  c.bias = bias;
  c.theta_cutoff = cutoff;
  return c;
}

inline std::vector<DiscoCase> disco_cases() {
  using G = sp::Grid;
  using B = sp::FilterBasis;
  const double pi = 3.14159265358979323846;
  return {
      // The SphericalTransformer's encoder shape (p = 2) with its cutoff (k0 + 1) f pi / (nlat - 1).
      {"encoder_17x32_eq_to_9x16_lg", disco_config(3, 8, 17, 32, G::equiangular, 9, 16, G::legendre_gauss, {5, 4},
                                                   B::piecewise_linear, 1, true, 6 * 0.5 * pi / 16), 2},
      // Same grid (p = 1), isotropic kernel, two groups, default cutoff.
      {"same_grid_lg_groups2", disco_config(4, 6, 9, 16, G::legendre_gauss, 9, 16, G::legendre_gauss, {3},
                                            B::piecewise_linear, 2, true, 0.0), 1},
      // Lobatto (poles on the grid) to equiangular-trapezoidal, p = 3, a cutoff reaching over the poles.
      {"lobatto_to_trapezoidal_p3", disco_config(5, 3, 10, 24, G::lobatto, 6, 8, G::equiangular_trapezoidal, {2, 2},
                                                 B::harmonic, 1, false, 0.9), 2},
      // Zernike basis, three groups, p = 3.
      // More than 64 outputs per group (several output tiles of the grouped linear layer), two groups.
      {"wide_outputs_groups2", disco_config(8, 130, 9, 16, G::legendre_gauss, 5, 8, G::equiangular, {3, 3},
                                            B::piecewise_linear, 2, true, 0.0), 1},
      {"eq_to_lobatto_zernike_groups3", disco_config(6, 9, 9, 18, G::equiangular, 5, 6, G::lobatto, {3},
                                                     B::zernike, 3, true, 0.8), 1},
  };
}

struct ResampleCase {
  std::string name;
  sp::ResampleConfig config;
  int batch, channels;
};

inline std::vector<ResampleCase> resample_cases() {
  using G = sp::Grid;
  using M = sp::ResampleMode;
  const auto cfg = [](int a, int b, G gi, int c, int d, G go, M m) {
    sp::ResampleConfig r;
    r.nlat_in = a;
    r.nlon_in = b;
    r.grid_in = gi;
    r.nlat_out = c;
    r.nlon_out = d;
    r.grid_out = go;
    r.mode = m;
    return r;
  };
  return {
      {"lg_8x16_to_eq_17x32_poles", cfg(8, 16, G::legendre_gauss, 17, 32, G::equiangular, M::bilinear), 2, 3},
      {"lg_8x16_to_eq_17x32_poles_spherical", cfg(8, 16, G::legendre_gauss, 17, 32, G::equiangular,
                                                  M::bilinear_spherical), 2, 3},
      {"eq_17x32_to_lg_9x16", cfg(17, 32, G::equiangular, 9, 16, G::legendre_gauss, M::bilinear), 2, 2},
      {"lobatto_6x12_to_trapezoidal_7x20_seam_spherical", cfg(6, 12, G::lobatto, 7, 20, G::equiangular_trapezoidal,
                                                              M::bilinear_spherical), 1, 4},
      {"trapezoidal_7x20_to_lg_5x12", cfg(7, 20, G::equiangular_trapezoidal, 5, 12, G::legendre_gauss, M::bilinear), 2,
       1},
      {"lg_5x10_to_lobatto_9x7_poles_seam", cfg(5, 10, G::legendre_gauss, 9, 7, G::lobatto, M::bilinear), 3, 2},
  };
}

/// Input x (batch * Pi x Cin, contiguous for the CPU) and the same rows padded to stride Cin + 3 with NaN
/// in the padding (never read).
struct Inputs {
  std::vector<float> x, x_padded;
  index_t ldx;
};
inline Inputs make_inputs(const sp::DiscoConfig& c, int batch, std::mt19937& rng) {
  Inputs in;
  const index_t pi = static_cast<index_t>(c.nlat_in) * c.nlon_in;
  in.x = random_vector(static_cast<std::size_t>(batch * pi * c.in_channels), rng, -1.0f, 1.0f);
  in.ldx = c.in_channels + 3;
  in.x_padded.assign(static_cast<std::size_t>(batch * pi * in.ldx), std::nanf(""));
  for (index_t r = 0; r < batch * pi; ++r)
    std::copy_n(in.x.begin() + r * c.in_channels, c.in_channels, in.x_padded.begin() + r * in.ldx);
  return in;
}

/// gamma_n = n u / (1 - n u), u = 2^-24: the bound of n float32 roundings in a sum of products.
inline double gamma(int n) {
  const double nu = n * 5.9604644775390625e-08;
  return nu / (1.0 - nu);
}

/// The DISCO contraction y (rows (b, t, wo), columns g*K*Cg + k*Cg + c, as kernels::cuda::disco_contraction
/// writes it) evaluated in float64 from the ORIGINAL table (entries in table order, psi rounded to float32),
/// with the sums of the absolute terms and the number of terms of each (t, k) group: a float32 evaluation
/// in any order is within gamma(n_z) sum |terms| (bound(i)).
struct ContractionReference {
  std::vector<double> y64, y_abs;
  std::vector<int> n_terms;  // per y element
  double bound(std::size_t i) const;
};
inline double ContractionReference::bound(std::size_t i) const { return gamma(n_terms[i]) * y_abs[i]; }

inline ContractionReference contraction_reference(const sp::DiscoConvS2& op, int batch, const std::vector<float>& x) {
  const sp::DiscoConfig& c = op.config();
  const sp::FilterTable& tab = op.table();
  const int K = op.kernel_size(), cg = c.in_channels / c.groups, p = c.nlon_in / c.nlon_out;
  const std::size_t width = static_cast<std::size_t>(K) * static_cast<std::size_t>(c.in_channels);
  const std::size_t po = static_cast<std::size_t>(c.nlat_out) * static_cast<std::size_t>(c.nlon_out);
  ContractionReference r;
  r.y64.assign(static_cast<std::size_t>(batch) * po * width, 0.0);
  r.y_abs.assign(r.y64.size(), 0.0);
  r.n_terms.assign(r.y64.size(), 0);
  std::vector<int> group_size(static_cast<std::size_t>(c.nlat_out) * static_cast<std::size_t>(K), 0);
  for (std::size_t e = 0; e < tab.val.size(); ++e) ++group_size[static_cast<std::size_t>(tab.row[e] * K + tab.ker[e])];
  for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
    for (std::size_t e = 0; e < tab.val.size(); ++e) {
      const auto k = static_cast<std::size_t>(tab.ker[e]), t = static_cast<std::size_t>(tab.row[e]);
      const auto hi = static_cast<std::size_t>(tab.col[e] / c.nlon_in);
      const auto wi = static_cast<std::size_t>(tab.col[e] % c.nlon_in);
      const double v = static_cast<float>(tab.val[e]);
      for (std::size_t wo = 0; wo < static_cast<std::size_t>(c.nlon_out); ++wo) {
        const std::size_t w = (wi + static_cast<std::size_t>(p) * wo) % static_cast<std::size_t>(c.nlon_in);
        const float* xr = x.data() + ((b * static_cast<std::size_t>(c.nlat_in) + hi) * static_cast<std::size_t>(c.nlon_in) + w) *
                                         static_cast<std::size_t>(c.in_channels);
        for (std::size_t ch = 0; ch < static_cast<std::size_t>(c.in_channels); ++ch) {
          const std::size_t g = ch / static_cast<std::size_t>(cg);
          const std::size_t at = (b * po + t * static_cast<std::size_t>(c.nlon_out) + wo) * width +
                                 g * static_cast<std::size_t>(K * cg) + k * static_cast<std::size_t>(cg) +
                                 ch % static_cast<std::size_t>(cg);
          r.y64[at] += v * xr[ch];
          r.y_abs[at] += std::fabs(v * xr[ch]);
          r.n_terms[at] = group_size[t * static_cast<std::size_t>(K) + k];
        }
      }
    }
  return r;
}

}  // namespace sphere_grid_ops_test
