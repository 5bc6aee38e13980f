// nonlinear_petsc: residual, Jacobian and SNES of the nonlinear heat conduction problem (nonlinear_solver.hpp).
#include "nonlinear_solver.hpp"

#include <cmath>

namespace nonlinear_example {

namespace {

// One triangle's geometry: the global rows and local indices of its vertices, its area and the gradients
// of its barycentric coordinates.
struct Triangle {
  PetscInt rows[3];
  std::size_t local[3];
  double area, gx[3], gy[3], cx, cy;
};

Triangle triangle_of(const heat::Mesh& mesh, std::size_t c) {
  Triangle t{};
  const double* p[3];
  for (std::size_t j = 0; j < 3; ++j) {
    t.local[j] = static_cast<std::size_t>(mesh.triangles[c + j]);
    t.rows[j] = mesh.global_row[t.local[j]];
    p[j] = &mesh.xy[2 * t.local[j]];
  }
  const double twice = (p[1][0] - p[0][0]) * (p[2][1] - p[0][1]) - (p[2][0] - p[0][0]) * (p[1][1] - p[0][1]);
  t.area = 0.5 * twice;  // counter-clockwise: positive
  t.gx[0] = (p[1][1] - p[2][1]) / twice, t.gx[1] = (p[2][1] - p[0][1]) / twice, t.gx[2] = (p[0][1] - p[1][1]) / twice;
  t.gy[0] = (p[2][0] - p[1][0]) / twice, t.gy[1] = (p[0][0] - p[2][0]) / twice, t.gy[2] = (p[1][0] - p[0][0]) / twice;
  t.cx = (p[0][0] + p[1][0] + p[2][0]) / 3;
  t.cy = (p[0][1] + p[1][1] + p[2][1]) / 3;
  return t;
}

PetscInt row_of(const heat::Mesh& mesh, PetscInt local_vertex) { return mesh.global_row[static_cast<std::size_t>(local_vertex)]; }

}  // namespace

PetscErrorCode ProblemCreate(const heat::Mesh& mesh, const Params& params, Problem* problem) {
  PetscFunctionBeginUser;
  problem->mesh = &mesh;
  PetscCall(heat::MeshCreateVec(mesh, &problem->load));
  PetscCall(VecDuplicate(problem->load, &problem->mass));
  PetscCall(DMCreateMatrix(mesh.dm, &problem->jacobian));
  PetscCall(VecSet(problem->mass, 0.0));
  for (std::size_t c = 0; c < mesh.triangles.size(); c += 3) {
    const Triangle t = triangle_of(mesh, c);
    const PetscScalar m[3] = {t.area / 3, t.area / 3, t.area / 3};
    PetscCall(VecSetValues(problem->mass, 3, t.rows, m, ADD_VALUES));
  }
  PetscCall(VecAssemblyBegin(problem->mass));
  PetscCall(VecAssemblyEnd(problem->mass));
  PetscCall(ProblemSetParams(problem, params));
  PetscFunctionReturn(0);
}

PetscErrorCode ProblemDestroy(Problem* problem) {
  PetscFunctionBeginUser;
  PetscCall(VecDestroy(&problem->load));
  PetscCall(VecDestroy(&problem->mass));
  PetscCall(MatDestroy(&problem->jacobian));
  PetscFunctionReturn(0);
}

PetscErrorCode ProblemSetParams(Problem* problem, const Params& params) {
  PetscFunctionBeginUser;
  problem->params = params;
  PetscCall(ProblemSetLoad(problem, [&](double x, double y) { return params.source(x, y); }, nullptr));
  PetscFunctionReturn(0);
}

PetscErrorCode ProblemSetLoad(Problem* problem, const std::function<double(double, double)>& q,
                              const std::function<double(double, double, double, double)>& g) {
  const heat::Mesh& mesh = *problem->mesh;
  PetscFunctionBeginUser;
  // b = M q (q at the vertices, lumped like the mass).
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return q(x, y); }, 0, problem->load));
  PetscCall(VecPointwiseMult(problem->load, problem->load, problem->mass));
  if (g) {  // + int_e g phi_i, two-point Gauss per edge
    const double s[2] = {0.5 - 0.5 / std::sqrt(3.0), 0.5 + 0.5 / std::sqrt(3.0)};
    for (const heat::Mesh::Edge& e : mesh.boundary) {
      const double* a = &mesh.xy[2 * static_cast<std::size_t>(e.a)];
      const double* c = &mesh.xy[2 * static_cast<std::size_t>(e.b)];
      PetscScalar ge[2] = {0, 0};
      for (double w : s) {
        const double value = g(a[0] + w * (c[0] - a[0]), a[1] + w * (c[1] - a[1]), e.nx, e.ny) * 0.5 * e.length;
        ge[0] += value * (1 - w);
        ge[1] += value * w;
      }
      const PetscInt rows[2] = {row_of(mesh, e.a), row_of(mesh, e.b)};
      PetscCall(VecSetValues(problem->load, 2, rows, ge, ADD_VALUES));
    }
    PetscCall(VecAssemblyBegin(problem->load));
    PetscCall(VecAssemblyEnd(problem->load));
  }
  PetscFunctionReturn(0);
}

PetscErrorCode FormFunction(SNES, Vec u, Vec f, void* ctx) {
  Problem& problem = *static_cast<Problem*>(ctx);
  const heat::Mesh& mesh = *problem.mesh;
  const Params& p = problem.params;
  PetscFunctionBeginUser;
  PetscCall(heat::MeshLocalValues(mesh, u, &problem.local));
  const std::vector<double>& ul = problem.local;
  PetscCall(VecSet(f, 0.0));
  for (std::size_t c = 0; c < mesh.triangles.size(); c += 3) {
    const Triangle t = triangle_of(mesh, c);
    const double u0 = ul[t.local[0]], u1 = ul[t.local[1]], u2 = ul[t.local[2]];
    const double dux = u0 * t.gx[0] + u1 * t.gx[1] + u2 * t.gx[2], duy = u0 * t.gy[0] + u1 * t.gy[1] + u2 * t.gy[2];
    const double k = p.k_base(t.cx, t.cy) * p.k_factor((u0 + u1 + u2) / 3);
    PetscScalar fe[3];
    for (int i = 0; i < 3; ++i) fe[i] = k * t.area * (dux * t.gx[i] + duy * t.gy[i]);
    PetscCall(VecSetValues(f, 3, t.rows, fe, ADD_VALUES));
  }
  for (const heat::Mesh::Edge& e : mesh.boundary) {
    const PetscInt rows[2] = {row_of(mesh, e.a), row_of(mesh, e.b)};
    const PetscScalar fe[2] = {0.5 * e.length * p.boundary_flux(ul[static_cast<std::size_t>(e.a)]),
                               0.5 * e.length * p.boundary_flux(ul[static_cast<std::size_t>(e.b)])};
    PetscCall(VecSetValues(f, 2, rows, fe, ADD_VALUES));
  }
  PetscCall(VecAssemblyBegin(f));
  PetscCall(VecAssemblyEnd(f));
  PetscCall(VecAXPY(f, -1.0, problem.load));
  PetscFunctionReturn(0);
}

PetscErrorCode FormJacobian(SNES, Vec u, Mat jacobian, Mat preconditioner, void* ctx) {
  Problem& problem = *static_cast<Problem*>(ctx);
  const heat::Mesh& mesh = *problem.mesh;
  const Params& p = problem.params;
  PetscFunctionBeginUser;
  PetscCall(heat::MeshLocalValues(mesh, u, &problem.local));
  const std::vector<double>& ul = problem.local;
  PetscCall(MatZeroEntries(preconditioner));
  for (std::size_t c = 0; c < mesh.triangles.size(); c += 3) {
    const Triangle t = triangle_of(mesh, c);
    const double u0 = ul[t.local[0]], u1 = ul[t.local[1]], u2 = ul[t.local[2]];
    const double dux = u0 * t.gx[0] + u1 * t.gx[1] + u2 * t.gx[2], duy = u0 * t.gy[0] + u1 * t.gy[1] + u2 * t.gy[2];
    const double ubar = (u0 + u1 + u2) / 3, kb = p.k_base(t.cx, t.cy);
    const double k = kb * p.k_factor(ubar), dk = kb * p.k_factor_du(ubar) / 3;  // d k / d u_j
    PetscScalar je[9];
    for (int i = 0; i < 3; ++i) {
      const double flux_i = dux * t.gx[i] + duy * t.gy[i];
      for (int j = 0; j < 3; ++j) je[3 * i + j] = t.area * (k * (t.gx[i] * t.gx[j] + t.gy[i] * t.gy[j]) + dk * flux_i);
    }
    PetscCall(MatSetValues(preconditioner, 3, t.rows, 3, t.rows, je, ADD_VALUES));
  }
  for (const heat::Mesh::Edge& e : mesh.boundary)
    for (PetscInt v : {e.a, e.b}) {
      const PetscInt row = row_of(mesh, v);
      const PetscScalar value = 0.5 * e.length * p.boundary_flux_du(ul[static_cast<std::size_t>(v)]);
      PetscCall(MatSetValues(preconditioner, 1, &row, 1, &row, &value, ADD_VALUES));
    }
  PetscCall(MatAssemblyBegin(preconditioner, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(preconditioner, MAT_FINAL_ASSEMBLY));
  if (jacobian != preconditioner) {
    PetscCall(MatAssemblyBegin(jacobian, MAT_FINAL_ASSEMBLY));
    PetscCall(MatAssemblyEnd(jacobian, MAT_FINAL_ASSEMBLY));
  }
  PetscFunctionReturn(0);
}

PetscErrorCode CreateSNES(MPI_Comm comm, Problem& problem, const char* prefix, PetscReal atol, SNES* snes,
                          const RunDefaults& defaults) {
  KSP ksp;
  PC pc;
  Vec f;
  PetscFunctionBeginUser;
  PetscCall(SNESCreate(comm, snes));
  PetscCall(SNESSetOptionsPrefix(*snes, prefix));
  PetscCall(VecDuplicate(problem.load, &f));
  PetscCall(SNESSetFunction(*snes, f, FormFunction, &problem));
  PetscCall(VecDestroy(&f));  // the SNES holds a reference
  PetscCall(SNESSetJacobian(*snes, problem.jacobian, problem.jacobian, FormJacobian, &problem));
  PetscCall(SNESSetType(*snes, SNESNEWTONLS));
  PetscCall(SNESSetTolerances(*snes, atol, 0.0, 0.0, 200, 100000));  // a few cases creep at the melting front
  PetscCall(SNESGetKSP(*snes, &ksp));
  PetscCall(KSPSetType(ksp, KSPGMRES));
  PetscCall(KSPSetTolerances(ksp, defaults.ksp_rtol, PETSC_DEFAULT, PETSC_DEFAULT, PETSC_DEFAULT));
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCSetType(pc, PCGAMG));
  PetscCall(SNESSetLagPreconditioner(*snes, defaults.lag_preconditioner));
  if (defaults.linesearch) {
    SNESLineSearch ls;
    PetscCall(SNESGetLineSearch(*snes, &ls));
    PetscCall(SNESLineSearchSetType(ls, defaults.linesearch));
  }
  PetscCall(SNESSetFromOptions(*snes));
  PetscFunctionReturn(0);
}

PetscErrorCode CreateRunSNES(MPI_Comm comm, Problem& problem, const char* run_prefix, const RunDefaults& defaults, PetscReal atol,
                             SNES* snes) {
  PetscFunctionBeginUser;
  // The run's defaults as what the common options (-snes_linesearch_type ...) start from, then the run's
  // own options on top: SNESSetFromOptions keeps what they do not name.
  PetscCall(CreateSNES(comm, problem, nullptr, atol, snes, defaults));
  PetscCall(SNESSetOptionsPrefix(*snes, run_prefix));
  PetscCall(SNESSetFromOptions(*snes));
  PetscFunctionReturn(0);
}

PetscErrorCode ResidualNorm(Problem& problem, Vec u, Vec work, PetscReal* norm) {
  PetscFunctionBeginUser;
  PetscCall(FormFunction(nullptr, u, work, &problem));
  PetscCall(VecNorm(work, NORM_2, norm));
  PetscFunctionReturn(0);
}

PetscErrorCode EstimateInverseNorm(Problem& problem, Vec u, PetscInt iterations, PetscReal* norm) {
  KSP ksp;
  PC pc;
  Vec v, w;
  PetscReal length = 0;
  PetscFunctionBeginUser;
  PetscCall(FormJacobian(nullptr, u, problem.jacobian, problem.jacobian, &problem));
  PetscCall(KSPCreate(PetscObjectComm(reinterpret_cast<PetscObject>(u)), &ksp));
  PetscCall(KSPSetOperators(ksp, problem.jacobian, problem.jacobian));
  PetscCall(KSPSetType(ksp, KSPGMRES));
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCSetType(pc, PCGAMG));
  PetscCall(KSPSetTolerances(ksp, 1e-8, PETSC_DEFAULT, PETSC_DEFAULT, 1000));
  PetscCall(VecDuplicate(u, &v));
  PetscCall(VecDuplicate(u, &w));
  PetscCall(VecSet(v, 1.0));  // a smooth start: the smallest eigenvalue's mode is smooth
  PetscCall(VecNormalize(v, nullptr));
  *norm = 0;
  for (PetscInt k = 0; k < iterations; ++k) {
    PetscCall(KSPSolve(ksp, v, w));
    PetscCall(VecNorm(w, NORM_2, &length));
    *norm = length;
    PetscCall(VecAXPBY(v, 1.0 / length, 0.0, w));
  }
  PetscCall(VecDestroy(&v));
  PetscCall(VecDestroy(&w));
  PetscCall(KSPDestroy(&ksp));
  PetscFunctionReturn(0);
}

PetscErrorCode SolveFrom(SNES snes, Vec u, PetscInt* newton_its, PetscInt* krylov_its) {
  SNESConvergedReason reason;
  PetscFunctionBeginUser;
  PetscCall(SNESSolve(snes, nullptr, u));
  PetscCall(SNESGetConvergedReason(snes, &reason));
  PetscCheck(reason > 0, PetscObjectComm(reinterpret_cast<PetscObject>(snes)), PETSC_ERR_NOT_CONVERGED,
             "SNES did not converge: %s (see -snes_converged_reason, -snes_monitor)", SNESConvergedReasons[reason]);
  PetscCall(SNESGetIterationNumber(snes, newton_its));
  PetscCall(SNESGetLinearSolveIterations(snes, krylov_its));
  PetscFunctionReturn(0);
}

}  // namespace nonlinear_example
