// heat_verify: convergence tests of heat_petsc's solver with manufactured solutions (README.md, "The
// discretisation"): second order in space, first order in time, exact for a piecewise-linear steady state
// across the two materials.   mpirun -np 3 heat_verify
#include <petscdmplex.h>
#include <petscksp.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "heat_problem.hpp"

namespace heat_example {
namespace {

// ---------------------------------------------------------------------------------------------------
// Verify: manufactured solutions.
struct Exact {
  heat::PointFunction u, f;
  heat::BoundaryFunction g;
};

// kappa constant, Robin beta: u = (1 + t) sin(pi x) sin(pi y) + x y  (linear in t: backward Euler is exact
// in time, so the error is the spatial error). With decay = true: u = exp(-t) sin(pi x) sin(pi y) + x y
// (the temporal error dominates on a fine mesh).
Exact Manufactured(double kappa, double beta, bool decay) {
  const auto a = [decay](double t) { return decay ? std::exp(-t) : 1.0 + t; };
  const auto da = [decay](double t) { return decay ? -std::exp(-t) : 1.0; };
  Exact e;
  e.u = [a](double x, double y, double t) { return a(t) * std::sin(pi * x) * std::sin(pi * y) + x * y; };
  e.f = [=](double x, double y, double t) {
    return (da(t) + kappa * 2 * pi * pi * a(t)) * std::sin(pi * x) * std::sin(pi * y);
  };
  e.g = [=](double x, double y, double t, double nx, double ny) {
    const double ux = a(t) * pi * std::cos(pi * x) * std::sin(pi * y) + y;
    const double uy = a(t) * pi * std::sin(pi * x) * std::cos(pi * y) + x;
    return kappa * (ux * nx + uy * ny) + beta * e.u(x, y, t);
  };
  return e;
}

// Runs `steps` steps from the exact initial state; returns ||u_h - u(T)||_M / ||u(T)||_M.
PetscErrorCode RunExact(const heat::Mesh& mesh, const std::function<double(double, double)>& kappa, double beta, const Exact& e,
                        double dt, PetscInt steps, bool zero_guess, double* error, PetscInt* iterations) {
  heat::Discretisation disc;
  KSP ksp;
  Vec u, f, b, exact;
  PetscFunctionBeginUser;
  PetscCall(heat::DiscretisationCreate(mesh, kappa, beta, dt, &disc));
  PetscCall(heat::CreateKSP(PETSC_COMM_WORLD, disc, 1e-12, &ksp));
  PetscCall(heat::MeshCreateVec(mesh, &u));
  for (Vec* v : {&f, &b, &exact}) PetscCall(VecDuplicate(u, v));
  PetscCall(heat::MeshInterpolate(mesh, e.u, 0, u));
  *iterations = 0;
  for (PetscInt n = 0; n < steps; ++n) {
    const double t = static_cast<double>(n + 1) * dt;
    PetscInt its = 0;
    PetscCall(heat::MeshInterpolate(mesh, e.f, t, f));
    PetscCall(heat::AssembleRhs(mesh, disc, u, f, e.g, t, b));
    PetscCall(Solve(ksp, b, u, !zero_guess, &its));
    *iterations += its;
  }
  double err, ref;
  PetscCall(heat::MeshInterpolate(mesh, e.u, static_cast<double>(steps) * dt, exact));
  PetscCall(heat::MassNorm(disc, exact, &ref));
  PetscCall(VecAXPY(u, -1.0, exact));
  PetscCall(heat::MassNorm(disc, u, &err));
  *error = err / ref;
  for (Vec* v : {&u, &f, &b, &exact}) PetscCall(VecDestroy(v));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(heat::DiscretisationDestroy(&disc));
  PetscFunctionReturn(0);
}

PetscErrorCode Verify() {
  MPI_Comm comm = PETSC_COMM_WORLD;
  bool ok = true;
  PetscFunctionBeginUser;
  const double kappa = 0.05, beta = 0.5;
  const auto constant = [kappa](double, double) { return kappa; };

  // 1. Space: meshes 8 x 8 refined 0..3 times (h = 1/8 .. 1/64), dt 0.05, 4 steps, u linear in t.
  PetscCall(PetscPrintf(comm, "verify 1: spatial convergence, u = (1 + t) sin(pi x) sin(pi y) + x y, kappa %g, beta %g "
                              "(backward Euler exact in time)\n", kappa, beta));
  const Exact linear = Manufactured(kappa, beta, false);
  double previous = 0;
  for (PetscInt level = 0; level <= 3; ++level) {
    heat::Mesh mesh;
    double error = 0;
    PetscInt its = 0;
    PetscCall(heat::MeshCreate(comm, 8, 8, 1.0, 1.0, level, &mesh));
    const bool geometry = std::abs(mesh.area - 1.0) < 1e-12 && std::abs(mesh.boundary_length - 4.0) < 1e-12;
    ok = ok && geometry;
    PetscCall(RunExact(mesh, constant, beta, linear, 0.05, 4, false, &error, &its));
    const double rate = previous > 0 ? std::log2(previous / error) : 0;
    PetscCall(PetscPrintf(comm, "  h = 1/%-3d %6" PetscInt_FMT " vertices  area %.15g  boundary %.15g  L2 error %.3e  rate %s\n",
                          8 << level, mesh.global_vertices, mesh.area, mesh.boundary_length, error,
                          previous > 0 ? std::to_string(rate).substr(0, 4).c_str() : "-"));
    if (previous > 0 && rate < 1.8) ok = false;
    previous = error;
    PetscCall(heat::MeshDestroy(&mesh));
  }

  // 2. Time: mesh 1/128, dt 0.2, 0.1, 0.05 to T = 1, u decaying exponentially.
  PetscCall(PetscPrintf(comm, "verify 2: temporal convergence, u = exp(-t) sin(pi x) sin(pi y) + x y, h = 1/128, T = 1\n"));
  const Exact decay = Manufactured(kappa, beta, true);
  {
    heat::Mesh mesh;
    PetscCall(heat::MeshCreate(comm, 8, 8, 1.0, 1.0, 4, &mesh));
    previous = 0;
    for (PetscInt k = 0; k < 3; ++k) {
      const double dt = 0.2 / static_cast<double>(1 << k);
      double error = 0;
      PetscInt its = 0;
      PetscCall(RunExact(mesh, constant, beta, decay, dt, 5 << k, false, &error, &its));
      const double rate = previous > 0 ? std::log2(previous / error) : 0;
      PetscCall(PetscPrintf(comm, "  dt = %-5g  L2 error %.3e  rate %s\n", dt, error,
                            previous > 0 ? std::to_string(rate).substr(0, 4).c_str() : "-"));
      if (previous > 0 && (rate < 0.85 || rate > 1.2)) ok = false;
      previous = error;
    }
    PetscCall(heat::MeshDestroy(&mesh));
  }

  // 3. Piecewise kappa: a steady piecewise-linear solution with continuous flux across x = 1/2 is in the P1
  //    space, so the scheme reproduces it to rounding (checks the interface and the Robin terms).
  {
    const double k1 = 0.01, k2 = 0.03, a1 = 3.0, a2 = a1 * k1 / k2, c0 = 0.5, b2 = 0.2;
    const auto u_ex = [=](double x, double) { return x < 0.5 ? c0 + a1 * x : c0 + a1 * 0.5 + a2 * (x - 0.5); };
    Exact e;
    e.u = [=](double x, double y, double) { return u_ex(x, y); };
    e.f = [](double, double, double) { return 0.0; };
    e.g = [=](double x, double y, double, double nx, double) {
      const bool left = x < 0.5 || (x == 0.5 && nx < 0);
      return (left ? k1 * a1 : k2 * a2) * nx + b2 * u_ex(x, y);
    };
    heat::Mesh mesh;
    double error = 0;
    PetscInt its = 0;
    PetscCall(heat::MeshCreate(comm, 8, 8, 1.0, 1.0, 2, &mesh));
    PetscCall(RunExact(mesh, [=](double x, double) { return x < 0.5 ? k1 : k2; }, b2, e, 1.0, 3, true, &error, &its));
    PetscCall(PetscPrintf(comm, "verify 3: piecewise kappa %g | %g, steady piecewise-linear solution, solved from a zero "
                                "guess: L2 error %.3e (exact up to the KSP tolerance 1e-12)\n", k1, k2, error));
    if (error > 1e-9) ok = false;
    PetscCall(heat::MeshDestroy(&mesh));
  }
  PetscCheck(ok, comm, PETSC_ERR_NOT_CONVERGED, "verification failed (see above)");
  PetscCall(PetscPrintf(comm, "verify: passed (space order 2, time order 1, piecewise kappa exact)\n"));
  PetscFunctionReturn(0);
}

}  // namespace
}  // namespace heat_example

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, nullptr, "heat_petsc's solver against manufactured solutions.\n"));
  PetscCall(heat_example::Verify());
  PetscCall(PetscFinalize());
  return 0;
}
