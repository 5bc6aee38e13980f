// heat_petsc: the problem's parameters and pieces shared by the example's programs (heat_petsc, heat_generate,
// heat_verify, heat_check). See README.md.
#pragma once

#include <petscksp.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "heat_solver.hpp"

namespace heat_example {

constexpr double pi = 3.14159265358979323846;

// ---------------------------------------------------------------------------------------------------
// Physical parameters of one run: diffusivity kappa [m^2/s], piecewise constant on both sides of
// x = x_interface; Robin condition -kappa du/dn = beta (u - u_ambient); a Gaussian heat source
// f = A exp(-|x - c(t)|^2 / (2 sigma^2)) [K/s] whose centre c(t) moves on a circle and that is switched
// on during [0, T), off during [T, 2T), ... (T = switch_period, 0: always on); an initial Gaussian bump.
struct Params {
  double kappa_left = 0.006, kappa_right = 0.015, x_interface = 0.5;
  double beta = 0.01, u_ambient = 0.0;
  double amplitude = 1.5, sigma = 0.06;
  double cx = 0.5, cy = 0.5, radius = 0.2, omega = 0.1, phase = 0.0, switch_period = 12.0;
  double u0_amplitude = 2.0, u0_x = 0.3, u0_y = 0.7, u0_sigma = 0.1;

  double kappa(double x, double) const { return x < x_interface ? kappa_left : kappa_right; }
  bool source_on(double t) const {
    if (switch_period <= 0) return true;
    return static_cast<long>(std::floor(t / switch_period + 1e-9)) % 2 == 0;
  }
  double source(double x, double y, double t) const {
    if (!source_on(t)) return 0.0;
    const double sx = cx + radius * std::cos(omega * t + phase), sy = cy + radius * std::sin(omega * t + phase);
    return amplitude * std::exp(-((x - sx) * (x - sx) + (y - sy) * (y - sy)) / (2 * sigma * sigma));
  }
  double initial(double x, double y) const {
    return u_ambient + u0_amplitude * std::exp(-((x - u0_x) * (x - u0_x) + (y - u0_y) * (y - u0_y)) / (2 * u0_sigma * u0_sigma));
  }
  // The values in the order of names() (the training data's /params).
  std::vector<double> values() const {
    return {kappa_left, kappa_right, x_interface, beta, u_ambient, amplitude, sigma, cx, cy, radius, omega, phase,
            switch_period, u0_amplitude, u0_x, u0_y, u0_sigma};
  }
  static std::vector<std::string> names() {
    return {"kappa_left", "kappa_right", "x_interface", "beta", "u_ambient", "amplitude", "sigma", "cx", "cy", "radius",
            "omega", "phase", "switch_period", "u0_amplitude", "u0_x", "u0_y", "u0_sigma"};
  }
};

// Reads the physical parameters from the options database (-kappa_left ...), defaults as initialised.
PetscErrorCode ParamsFromOptions(Params* p);
// Random parameters for training trajectories (the ranges of share/models/heat/README.md); beta and
// u_ambient are given.
Params RandomParams(std::mt19937_64& gen, double beta, double u_ambient);

// ---------------------------------------------------------------------------------------------------
struct MeshOptions {
  PetscInt nx = 16, ny = 16, refine = 2;
  double lx = 1.0, ly = 1.0;
};

PetscErrorCode MeshOptionsFromOptions(MeshOptions* m);

// rate = M^{-1} (b - A u): the residual of the step's system at the current state, per unit mass [K/s].
PetscErrorCode ComputeRate(const heat::Discretisation& disc, Vec b, Vec u, Vec rate);

// KSPSolve from a zero (nonzero_guess false) or the given initial guess in x; an error unless it converged.
PetscErrorCode Solve(KSP ksp, Vec b, Vec x, bool nonzero_guess, PetscInt* iterations);

}  // namespace heat_example
