// nonlinear_petsc: the parameters from the options database and the ranges of the parameter study.
#include "nonlinear_problem.hpp"

namespace nonlinear_example {

PetscErrorCode ParamsFromOptions(Params* p) {
  PetscFunctionBeginUser;
  PetscOptionsBegin(PETSC_COMM_WORLD, nullptr, "Nonlinear heat conduction", "nonlinear_petsc");
  PetscCall(PetscOptionsReal("-k_left", "Base conductivity for x < x_interface [W/(m K)]", nullptr, p->k_left, &p->k_left, nullptr));
  PetscCall(PetscOptionsReal("-k_right", "Base conductivity for x >= x_interface [W/(m K)]", nullptr, p->k_right, &p->k_right, nullptr));
  PetscCall(PetscOptionsReal("-x_interface", "Material interface x [m]", nullptr, p->x_interface, &p->x_interface, nullptr));
  PetscCall(PetscOptionsReal("-u_ref", "Conductivity k = k_base (1 + (u/u_ref)^3) (1 + (melt_factor - 1) m(u)) [K]", nullptr,
                             p->u_ref, &p->u_ref, nullptr));
  PetscCall(PetscOptionsReal("-melt_temperature", "Melted fraction m(u) = 1 / (1 + exp(-(u - melt_temperature) / melt_width)) [K]",
                             nullptr, p->melt_temperature, &p->melt_temperature, nullptr));
  PetscCall(PetscOptionsReal("-melt_width", "Width of the melting range [K]", nullptr, p->melt_width, &p->melt_width, nullptr));
  PetscCall(PetscOptionsReal("-melt_factor", "Conductivity of the (stirred) melt over the solid's, >= 1", nullptr, p->melt_factor,
                             &p->melt_factor, nullptr));
  PetscCall(PetscOptionsReal("-h", "Convective heat transfer coefficient [W/(m^2 K)]", nullptr, p->h, &p->h, nullptr));
  PetscCall(PetscOptionsReal("-emissivity", "Emissivity of the boundary (radiation to the ambient)", nullptr, p->emissivity,
                             &p->emissivity, nullptr));
  PetscCall(PetscOptionsReal("-u_ambient", "Ambient temperature [K]", nullptr, p->u_ambient, &p->u_ambient, nullptr));
  PetscCall(PetscOptionsReal("-source_power", "Heat source peak [W/m^3]", nullptr, p->power, &p->power, nullptr));
  PetscCall(PetscOptionsReal("-source_x", "Heat source centre x [m]", nullptr, p->source_x, &p->source_x, nullptr));
  PetscCall(PetscOptionsReal("-source_y", "Heat source centre y [m]", nullptr, p->source_y, &p->source_y, nullptr));
  PetscCall(PetscOptionsReal("-source_sigma", "Heat source width [m]", nullptr, p->source_sigma, &p->source_sigma, nullptr));
  PetscOptionsEnd();
  PetscCheck(p->k_left > 0 && p->k_right > 0 && p->u_ref > 0 && p->h >= 0 && p->emissivity >= 0 && p->emissivity <= 1 &&
                 p->u_ambient > 0 && p->power >= 0 && p->source_sigma > 0 && p->melt_width > 0 && p->melt_factor >= 1,
             PETSC_COMM_WORLD, PETSC_ERR_ARG_OUTOFRANGE,
             "need k_left, k_right, u_ref, u_ambient, source_sigma, melt_width > 0, h >= 0, 0 <= emissivity <= 1, source_power >= 0, "
             "melt_factor >= 1");
  PetscFunctionReturn(0);
}

Params RandomParams(std::mt19937_64& gen, const Params& base) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const auto uniform = [&](double a, double b) { return a + (b - a) * u01(gen); };
  Params p = base;
  p.k_left = std::exp(uniform(std::log(0.4), std::log(2.0)));
  p.k_right = std::exp(uniform(std::log(0.4), std::log(2.0)));
  p.u_ambient = uniform(280.0, 340.0);
  p.power = uniform(1.5e5, 6.0e5);
  p.source_x = uniform(0.2, 0.8);
  p.source_y = uniform(0.2, 0.8);
  p.source_sigma = uniform(0.04, 0.09);
  return p;
}

}  // namespace nonlinear_example
