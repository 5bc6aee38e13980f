// nonlinear_petsc: the discrete nonlinear problem F(u) = 0 on heat_petsc's distributed P1 mesh, and the
// SNES that solves it (see README.md "The discretisation").
//
//   F_i(u) = sum_T k(c_T, ubar_T) |T| grad u_T . grad phi_i                              (conduction)
//          + sum_{boundary edges e} |e| / 2 * flux(u_i)                                 (convection, radiation)
//          - b_i,   b_i = q(x_i) m_i + int_boundary g phi_i                                (load)
//
// with ubar_T the mean of u over the triangle's vertices (one-point quadrature at the centroid), m the
// lumped mass, the boundary terms lumped to the edge's ends (trapezoidal rule) and g an extra boundary
// load (zero in the physics; manufactured solutions use it). The Jacobian is exact for this F.
#pragma once

#include <petscsnes.h>

#include <functional>
#include <vector>

#include "heat_solver.hpp"
#include "nonlinear_problem.hpp"

namespace nonlinear_example {

struct Problem {
  const heat::Mesh* mesh = nullptr;
  Params params;
  Vec load = nullptr;          // b
  Vec mass = nullptr;          // lumped mass m (diagonal of the P1 mass matrix with row sums)
  Mat jacobian = nullptr;      // preallocated by DMCreateMatrix
  std::vector<double> local;   // scratch: u at the rank's local vertices (owned and ghost)
};

/// Collective. The vectors and the Jacobian's storage for `mesh`, and the load of `params` (its source).
PetscErrorCode ProblemCreate(const heat::Mesh& mesh, const Params& params, Problem* problem);
PetscErrorCode ProblemDestroy(Problem* problem);
/// Collective. A new case: the parameters and their load b = M q.
PetscErrorCode ProblemSetParams(Problem* problem, const Params& params);
/// Collective. A load of a given source q and extra boundary flux g (x, y, nx, ny): the manufactured
/// solutions of nonlinear_verify.
PetscErrorCode ProblemSetLoad(Problem* problem, const std::function<double(double, double)>& q,
                              const std::function<double(double, double, double, double)>& g);

/// SNES callbacks: F(u) and its Jacobian (ctx: the Problem).
PetscErrorCode FormFunction(SNES snes, Vec u, Vec f, void* ctx);
PetscErrorCode FormJacobian(SNES snes, Vec u, Mat jacobian, Mat preconditioner, void* ctx);

/// SNESSetLagPreconditioner's lag L rebuilds the preconditioner at a solve's Newton steps 0, L, 2L, ...;
/// beyond the iteration limit (200) it is built once per solve, at its first step, and kept.
constexpr PetscInt kLagOncePerSolve = 1000;
/// A run's defaults, which its options override: the line search, the preconditioner's lag (1: rebuilt
/// at every Newton step, PETSc's default) and GMRES's relative tolerance in each Newton step.
struct RunDefaults {
  SNESLineSearchType linesearch = nullptr;
  PetscInt lag_preconditioner = 1;
  PetscReal ksp_rtol = 1e-5;  // PETSc's default
};
/// Collective. A SNES for the problem: Newton (newtonls) with `defaults`' line search (nullptr: newtonls'
/// bt), GMRES with algebraic multigrid (GAMG), converged when ||F(u)||_2 <= atol (rtol and stol 0: both runs
/// of the example stop at the same residual whatever their start); options with `prefix` override
/// (-snes_*, -ksp_*, -pc_*) `defaults` and the rest.
PetscErrorCode CreateSNES(MPI_Comm comm, Problem& problem, const char* prefix, PetscReal atol, SNES* snes,
                          const RunDefaults& defaults = {});
/// Collective. CreateSNES for one run of a comparison: the run's defaults, then the common options
/// (-snes_*, -ksp_*, -pc_*), then the run's own (-<run_prefix>snes_*, ...), which override them for this
/// SNES alone.
PetscErrorCode CreateRunSNES(MPI_Comm comm, Problem& problem, const char* run_prefix, const RunDefaults& defaults, PetscReal atol,
                             SNES* snes);

/// Collective. ||F(u)||_2 (uses `work` for F).
PetscErrorCode ResidualNorm(Problem& problem, Vec u, Vec work, PetscReal* norm);
/// Collective. An estimate of ||J(u)^{-1}||_2 by inverse iteration (`iterations` GMRES + GAMG solves to
/// rtol 1e-8 from a fixed start): two states whose residuals are below atol differ by at most about
/// 2 atol ||J^{-1}||_2 (README.md "Both runs reach the same state").
PetscErrorCode EstimateInverseNorm(Problem& problem, Vec u, PetscInt iterations, PetscReal* norm);
/// Collective. Solves F(u) = 0 from the guess in u; an error unless the SNES converged. Returns the
/// Newton and the Krylov iterations.
PetscErrorCode SolveFrom(SNES snes, Vec u, PetscInt* newton_its, PetscInt* krylov_its);

}  // namespace nonlinear_example
