// heat_petsc: the problem's parameters from the options database and the pieces the modes share.
#include "heat_problem.hpp"

namespace heat_example {

PetscErrorCode ParamsFromOptions(Params* p) {
  PetscFunctionBeginUser;
  PetscOptionsBegin(PETSC_COMM_WORLD, nullptr, "Heat problem parameters", "heat_petsc");
  PetscCall(PetscOptionsReal("-kappa_left", "Diffusivity for x < x_interface [m^2/s]", nullptr, p->kappa_left, &p->kappa_left, nullptr));
  PetscCall(PetscOptionsReal("-kappa_right", "Diffusivity for x >= x_interface [m^2/s]", nullptr, p->kappa_right, &p->kappa_right, nullptr));
  PetscCall(PetscOptionsReal("-x_interface", "Material interface x [m]", nullptr, p->x_interface, &p->x_interface, nullptr));
  PetscCall(PetscOptionsReal("-beta", "Robin coefficient: -kappa du/dn = beta (u - u_ambient) [m/s]", nullptr, p->beta, &p->beta, nullptr));
  PetscCall(PetscOptionsReal("-u_ambient", "Ambient temperature [K]", nullptr, p->u_ambient, &p->u_ambient, nullptr));
  PetscCall(PetscOptionsReal("-source_amplitude", "Heat source peak [K/s]", nullptr, p->amplitude, &p->amplitude, nullptr));
  PetscCall(PetscOptionsReal("-source_sigma", "Heat source width [m]", nullptr, p->sigma, &p->sigma, nullptr));
  PetscCall(PetscOptionsReal("-source_cx", "Centre of the source's circular path, x [m]", nullptr, p->cx, &p->cx, nullptr));
  PetscCall(PetscOptionsReal("-source_cy", "Centre of the source's circular path, y [m]", nullptr, p->cy, &p->cy, nullptr));
  PetscCall(PetscOptionsReal("-source_radius", "Radius of the source's path [m]", nullptr, p->radius, &p->radius, nullptr));
  PetscCall(PetscOptionsReal("-source_omega", "Angular speed of the source [rad/s]", nullptr, p->omega, &p->omega, nullptr));
  PetscCall(PetscOptionsReal("-source_phase", "Initial angle of the source [rad]", nullptr, p->phase, &p->phase, nullptr));
  PetscCall(PetscOptionsReal("-source_switch", "Source on for [0,T), off for [T,2T), ... [s] (0: always on)", nullptr,
                             p->switch_period, &p->switch_period, nullptr));
  PetscCall(PetscOptionsReal("-u0_amplitude", "Initial bump height above ambient [K]", nullptr, p->u0_amplitude, &p->u0_amplitude, nullptr));
  PetscCall(PetscOptionsReal("-u0_x", "Initial bump centre x [m]", nullptr, p->u0_x, &p->u0_x, nullptr));
  PetscCall(PetscOptionsReal("-u0_y", "Initial bump centre y [m]", nullptr, p->u0_y, &p->u0_y, nullptr));
  PetscCall(PetscOptionsReal("-u0_sigma", "Initial bump width [m]", nullptr, p->u0_sigma, &p->u0_sigma, nullptr));
  PetscOptionsEnd();
  PetscCheck(p->kappa_left > 0 && p->kappa_right > 0 && p->beta >= 0 && p->sigma > 0, PETSC_COMM_WORLD,
             PETSC_ERR_ARG_OUTOFRANGE, "need kappa > 0, beta >= 0, sigma > 0");
  PetscFunctionReturn(0);
}

Params RandomParams(std::mt19937_64& gen, double beta, double u_ambient) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const auto uniform = [&](double a, double b) { return a + (b - a) * u01(gen); };
  Params p;
  p.kappa_left = std::exp(uniform(std::log(0.004), std::log(0.02)));
  p.kappa_right = std::exp(uniform(std::log(0.004), std::log(0.02)));
  p.x_interface = 0.5;
  p.beta = beta;
  p.u_ambient = u_ambient;
  p.amplitude = uniform(0.5, 2.0);
  p.sigma = uniform(0.04, 0.1);
  p.cx = uniform(0.35, 0.65);
  p.cy = uniform(0.35, 0.65);
  p.radius = uniform(0.0, 0.25);
  p.omega = uniform(-0.15, 0.15);
  p.phase = uniform(0.0, 2 * pi);
  p.switch_period = u01(gen) < 0.4 ? 0.0 : uniform(4.0, 16.0);
  p.u0_amplitude = uniform(0.0, 3.0);
  p.u0_x = uniform(0.2, 0.8);
  p.u0_y = uniform(0.2, 0.8);
  p.u0_sigma = uniform(0.05, 0.2);
  return p;
}

PetscErrorCode MeshOptionsFromOptions(MeshOptions* m) {
  PetscFunctionBeginUser;
  PetscOptionsBegin(PETSC_COMM_WORLD, nullptr, "Mesh", "heat_petsc");
  PetscCall(PetscOptionsInt("-nx", "Coarse cells in x (each cut into two triangles)", nullptr, m->nx, &m->nx, nullptr));
  PetscCall(PetscOptionsInt("-ny", "Coarse cells in y", nullptr, m->ny, &m->ny, nullptr));
  PetscCall(PetscOptionsInt("-refine", "Regular refinements after distribution", nullptr, m->refine, &m->refine, nullptr));
  PetscCall(PetscOptionsReal("-lx", "Domain length x [m]", nullptr, m->lx, &m->lx, nullptr));
  PetscCall(PetscOptionsReal("-ly", "Domain length y [m]", nullptr, m->ly, &m->ly, nullptr));
  PetscOptionsEnd();
  PetscFunctionReturn(0);
}

// rate = M^{-1} (b - A u): the residual of the step's system at the current state, per unit mass [K/s].
PetscErrorCode ComputeRate(const heat::Discretisation& disc, Vec b, Vec u, Vec rate) {
  PetscFunctionBeginUser;
  PetscCall(MatMult(disc.A, u, rate));
  PetscCall(VecAYPX(rate, -1.0, b));
  PetscCall(VecPointwiseDivide(rate, rate, disc.mass));
  PetscFunctionReturn(0);
}

PetscErrorCode Solve(KSP ksp, Vec b, Vec x, bool nonzero_guess, PetscInt* iterations) {
  KSPConvergedReason reason;
  PetscFunctionBeginUser;
  PetscCall(KSPSetInitialGuessNonzero(ksp, nonzero_guess ? PETSC_TRUE : PETSC_FALSE));
  PetscCall(KSPSolve(ksp, b, x));
  PetscCall(KSPGetConvergedReason(ksp, &reason));
  PetscCheck(reason > 0, PetscObjectComm(reinterpret_cast<PetscObject>(ksp)), PETSC_ERR_NOT_CONVERGED,
             "KSP did not converge: %s", KSPConvergedReasons[reason]);
  PetscCall(KSPGetIterationNumber(ksp, iterations));
  PetscFunctionReturn(0);
}


}  // namespace heat_example
