// nonlinear_verify: the nonlinear solver against a manufactured solution. With
//   u_e = 350 + 300 sin(pi x) sin(pi y) + 100 x y   [K]
// the source q = -div(k(u_e) grad u_e) and the boundary load g = flux(u_e) + k(u_e) du_e/dn are computed
// from u_e, so the discrete solution must converge to u_e at second order in h (P1, lumped source and
// boundary terms, one-point quadrature of k). Newton from the ambient state, on meshes of 8 x 8 squares
// refined 0 ... 3 times.   mpirun -np 3 nonlinear_verify
#include <petscsnes.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "nonlinear_solver.hpp"

namespace nonlinear_example {
namespace {

constexpr double pi = 3.14159265358979323846;

struct Exact {
  double u(double x, double y) const { return 350 + 300 * std::sin(pi * x) * std::sin(pi * y) + 100 * x * y; }
  double ux(double x, double y) const { return 300 * pi * std::cos(pi * x) * std::sin(pi * y) + 100 * y; }
  double uy(double x, double y) const { return 300 * pi * std::sin(pi * x) * std::cos(pi * y) + 100 * x; }
  double laplacian(double x, double y) const { return -2 * pi * pi * 300 * std::sin(pi * x) * std::sin(pi * y); }
};

PetscErrorCode Verify(MPI_Comm comm, bool* passed) {
  Params p;  // the defaults, one material (k_left = k_right) so that u_e is smooth across x = 1/2
  p.k_right = p.k_left;
  const Exact e;
  const double k0 = p.k_left;
  const auto q = [&](double x, double y) {
    const double u = e.u(x, y), gx = e.ux(x, y), gy = e.uy(x, y);
    return -k0 * (p.k_factor(u) * e.laplacian(x, y) + p.k_factor_du(u) * (gx * gx + gy * gy));
  };
  const auto g = [&](double x, double y, double nx, double ny) {
    const double u = e.u(x, y);
    return p.boundary_flux(u) + k0 * p.k_factor(u) * (e.ux(x, y) * nx + e.uy(x, y) * ny);
  };
  std::vector<double> errors;
  PetscFunctionBeginUser;
  char line[256];  // std::snprintf for %g (PETSc's printf writes "1." for 1.0)
  std::snprintf(line, sizeof(line), "verify: manufactured solution u = 350 + 300 sin(pi x) sin(pi y) + 100 x y, k = %g (1 + (u/%g)^3) "
                "(1 + %g m(u)) melting at %g K over %g K, h %g, emissivity %g, ambient %g K\n", k0, p.u_ref, p.melt_factor - 1,
                p.melt_temperature, p.melt_width, p.h, p.emissivity, p.u_ambient);
  PetscCall(PetscPrintf(comm, "%s", line));
  for (PetscInt refine = 0; refine <= 3; ++refine) {
    heat::Mesh mesh;
    Problem problem;
    SNES snes;
    Vec u, d;
    PetscInt newton = 0, krylov = 0;
    PetscCall(heat::MeshCreate(comm, 8, 8, 1.0, 1.0, refine, &mesh));
    PetscCall(ProblemCreate(mesh, p, &problem));
    PetscCall(ProblemSetLoad(&problem, q, g));
    PetscCall(CreateSNES(comm, problem, "verify_", 1e-9, &snes, {SNESLINESEARCHL2}));
    PetscCall(heat::MeshCreateVec(mesh, &u));
    PetscCall(VecDuplicate(u, &d));
    PetscCall(VecSet(u, p.u_ambient));
    PetscCall(SolveFrom(snes, u, &newton, &krylov));
    // The discrete L2 error with the lumped mass, relative to u_e's.
    Vec w;
    PetscScalar exact_sq, error_sq;
    PetscCall(VecDuplicate(u, &w));
    PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return e.u(x, y); }, 0, d));
    PetscCall(VecPointwiseMult(w, d, d));
    PetscCall(VecDot(w, problem.mass, &exact_sq));
    PetscCall(VecAXPY(d, -1.0, u));
    PetscCall(VecPointwiseMult(w, d, d));
    PetscCall(VecDot(w, problem.mass, &error_sq));
    errors.push_back(std::sqrt(error_sq / exact_sq));
    const std::size_t k = errors.size() - 1;
    std::snprintf(line, sizeof(line), "  h = 1/%-4d %6lld vertices  Newton %2lld (GMRES %4lld)  L2 error %.3e  rate %s\n", 8 << refine,
                  static_cast<long long>(mesh.global_vertices), static_cast<long long>(newton), static_cast<long long>(krylov),
                  errors[k], k == 0 ? "-" : std::to_string(std::log2(errors[k - 1] / errors[k])).substr(0, 4).c_str());
    PetscCall(PetscPrintf(comm, "%s", line));
    for (Vec* v : {&u, &d, &w}) PetscCall(VecDestroy(v));
    PetscCall(SNESDestroy(&snes));
    PetscCall(ProblemDestroy(&problem));
    PetscCall(heat::MeshDestroy(&mesh));
  }
  // Second order: the last two rates above 1.8.
  const std::size_t n = errors.size();
  *passed = std::log2(errors[n - 3] / errors[n - 2]) > 1.8 && std::log2(errors[n - 2] / errors[n - 1]) > 1.8;
  PetscFunctionReturn(0);
}

}  // namespace
}  // namespace nonlinear_example

int main(int argc, char** argv) {
  bool passed = false;
  PetscCall(PetscInitialize(&argc, &argv, nullptr, "The nonlinear solver of nonlinear_petsc against a manufactured solution.\n"));
  PetscCall(nonlinear_example::Verify(PETSC_COMM_WORLD, &passed));
  PetscCall(PetscPrintf(PETSC_COMM_WORLD, "verify: %s (second order in h)\n", passed ? "passed" : "FAILED"));
  PetscCall(PetscFinalize());
  return passed ? 0 : 1;
}
