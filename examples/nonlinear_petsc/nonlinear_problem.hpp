// nonlinear_petsc: the physics of one case of the parameter study, shared by the example's programs
// (nonlinear_petsc, nonlinear_generate, nonlinear_verify). See README.md for the equations.
//
//   -div(k(x, u) grad u) = q(x)                                         in [0, lx] x [0, ly]
//   -k(x, u) du/dn = h (u - u_ambient) + emissivity sigma_SB (u^4 - u_ambient^4)   on the boundary
//
//   k(x, u) = k_base(x) (1 + (u / u_ref)^3) (1 + (melt_factor - 1) m(u))
//
// conduction plus radiation through a semi-transparent solid (the Rosseland form), times the melt's
// enhancement: m(u) = 1 / (1 + exp(-(u - melt_temperature) / melt_width)) is the melted fraction, and the
// stirred melt conducts melt_factor times better (the effective conductivity of a convecting melt pool).
// k_base = k_left for x < x_interface, k_right beyond; q a Gaussian source.
#pragma once

#include <petscsys.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

namespace nonlinear_example {

constexpr double stefan_boltzmann = 5.670374419e-8;  // W / (m^2 K^4)

struct Params {
  double k_left = 1.0, k_right = 0.5, x_interface = 0.5;  // W / (m K)
  double u_ref = 500.0;                                    // K
  double melt_temperature = 650.0, melt_width = 10.0, melt_factor = 3.0;  // K, K, - (1: no melting)
  double h = 10.0, emissivity = 0.8, u_ambient = 300.0;    // W / (m^2 K), -, K
  double power = 3.0e5, source_x = 0.35, source_y = 0.6, source_sigma = 0.06;  // W / m^3, m, m, m

  double k_base(double x, double) const { return x < x_interface ? k_left : k_right; }
  double source(double x, double y) const {
    const double dx = x - source_x, dy = y - source_y;
    return power * std::exp(-(dx * dx + dy * dy) / (2 * source_sigma * source_sigma));
  }
  // The conductivity's factor (1 + (u / u_ref)^3) (1 + (melt_factor - 1) m(u)) and its derivative in u,
  // m(u) = 1 / (1 + exp(-(u - melt_temperature) / melt_width)) the melted fraction.
  double melted(double u) const { return 1 / (1 + std::exp(-(u - melt_temperature) / melt_width)); }
  double k_factor(double u) const {
    const double s = u / u_ref;
    return (1 + s * s * s) * (1 + (melt_factor - 1) * melted(u));
  }
  double k_factor_du(double u) const {
    const double s = u / u_ref, m = melted(u);
    return 3 * s * s / u_ref * (1 + (melt_factor - 1) * m) + (1 + s * s * s) * (melt_factor - 1) * m * (1 - m) / melt_width;
  }
  // The boundary's outgoing flux for a surface temperature u and its derivative in u.
  double boundary_flux(double u) const {
    return h * (u - u_ambient) + emissivity * stefan_boltzmann * (u * u * u * u - std::pow(u_ambient, 4));
  }
  double boundary_flux_du(double u) const { return h + 4 * emissivity * stefan_boltzmann * u * u * u; }

  // The values in the order of names() (the training data's /params).
  std::vector<double> values() const {
    return {k_left, k_right, x_interface, u_ref, h, emissivity, u_ambient, power, source_x, source_y, source_sigma,
            melt_temperature, melt_width, melt_factor};
  }
  static std::vector<std::string> names() {
    return {"k_left", "k_right", "x_interface", "u_ref", "h", "emissivity", "u_ambient", "power", "source_x", "source_y",
            "source_sigma", "melt_temperature", "melt_width", "melt_factor"};
  }
};

// Reads the parameters from the options database (-k_left ...), defaults as initialised; checks them.
PetscErrorCode ParamsFromOptions(Params* p);

// The ranges of the parameter study (README.md "The parameter study"): source position, strength and
// width, ambient temperature, the two materials' conductivities. u_ref, h, emissivity, x_interface and
// the melting are kept from `base`.
Params RandomParams(std::mt19937_64& gen, const Params& base);

}  // namespace nonlinear_example
