// heat_petsc: transient heat conduction (PETSc DMPlex, P1, backward Euler, KSP CG) where a FLARE surrogate
// takes every time step whose prediction passes the physics check ||b - A u_pred|| / ||b|| <= rtol and the
// solver takes the others, warm-started from the prediction; the solver alone runs alongside. README.md.
//   mpirun -np 2 heat_petsc -surrogate_model share/models/heat/model.h5 -surrogate_accept_rtol 1e-2
// Options: heat_petsc -help (the physics: heat_problem.hpp; the discretisation: heat_solver.hpp).
#include <petscksp.h>
#include <petsctime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <utility>
#include <vector>

#include "heat_model.hpp"
#include "heat_problem.hpp"
#include "surrogate/petsc.h"
#include "surrogate/vtk.hpp"

static const char help[] =
    "Transient heat conduction (P1 FEM on DMPlex, backward Euler, KSP CG+Jacobi). A FLARE surrogate predicts each\n"
    "step; the prediction is accepted when ||b - A u_pred|| / ||b|| <= -surrogate_accept_rtol, else the solver\n"
    "solves from it. The solver alone runs alongside for the comparison of time and state.\n\n";

using namespace heat_example;

// Wall time of a collective phase, started together on every rank.
static PetscLogDouble Now(MPI_Comm comm) {
  PetscLogDouble t = 0;
  MPI_Barrier(comm);
  PetscTime(&t);
  return t;
}

int main(int argc, char** argv) {
  // 1. PETSc (which initialises MPI) and the problem's options.
  PetscCall(PetscInitialize(&argc, &argv, nullptr, help));
  MPI_Comm comm = PETSC_COMM_WORLD;
  PetscMPIInt ranks;
  PetscCallMPI(MPI_Comm_size(comm, &ranks));
  Params p;
  MeshOptions mo;
  PetscInt steps = 40, vtk_every = 1;
  PetscReal dt = 1.0, rtol = 1e-8, solver_rtol = PETSC_DEFAULT;
  PetscCall(ParamsFromOptions(&p));
  PetscCall(MeshOptionsFromOptions(&mo));
  PetscOptionsBegin(comm, nullptr, "Time stepping", "heat_petsc");
  PetscCall(PetscOptionsInt("-steps", "Time steps", nullptr, steps, &steps, nullptr));
  PetscCall(PetscOptionsReal("-dt", "Time step [s] (the heat model was trained at 1 s)", nullptr, dt, &dt, nullptr));
  PetscCall(PetscOptionsReal("-rtol", "KSP relative tolerance (default for -ksp_rtol)", nullptr, rtol, &rtol, nullptr));
  PetscCall(PetscOptionsReal("-solver_rtol", "KSP relative tolerance of the solver alone (default: -rtol)", nullptr, solver_rtol,
                             &solver_rtol, nullptr));
  PetscCall(PetscOptionsInt("-vtk_every", "VTK output every n steps (with -surrogate_vtk)", nullptr, vtk_every, &vtk_every, nullptr));
  PetscOptionsEnd();

  // 2. The mesh, the operator A = M/dt + K + B of backward Euler and a KSP for each run (CG + Jacobi;
  //    -ksp_* options override).
  heat::Mesh mesh;
  heat::Discretisation disc;
  KSP ksp, ksp_solver;
  PetscCall(heat::MeshCreate(comm, mo.nx, mo.ny, mo.lx, mo.ly, mo.refine, &mesh));
  PetscCall(heat::DiscretisationCreate(mesh, [&](double x, double y) { return p.kappa(x, y); }, p.beta, dt, &disc));
  PetscCall(heat::CreateKSP(comm, disc, rtol, &ksp));
  PetscCall(heat::CreateKSP(comm, disc, rtol, &ksp_solver));
  if (solver_rtol != static_cast<PetscReal>(PETSC_DEFAULT))
    PetscCall(KSPSetTolerances(ksp_solver, solver_rtol, PETSC_DEFAULT, PETSC_DEFAULT, PETSC_DEFAULT));
  PetscCall(KSPGetTolerances(ksp_solver, &solver_rtol, nullptr, nullptr, nullptr));
  PetscCall(KSPGetTolerances(ksp, &rtol, nullptr, nullptr, nullptr));
  const heat::BoundaryFunction g = [&](double, double, double, double, double) { return p.beta * p.u_ambient; };

  // 3. The surrogate, from the options (-surrogate_model, -surrogate_accept_rtol, ...); its points are the
  //    rank's owned vertices, given once.
  surrogate_t model;
  ModelInputs inputs;
  PetscReal accept_rtol;
  const char* vtk_dir;
  const PetscLogDouble open_start = Now(comm);
  PetscCall(SurrogateCreateFromOptions(comm, nullptr, &model));
  PetscCall(ModelInputsCreate(model, mesh, p, &inputs));
  PetscCall(SurrogateSetPointsVec(model, inputs.coords));
  const PetscLogDouble open_time = Now(comm) - open_start;
  PetscCall(SurrogateGetAcceptTolerance(model, &accept_rtol));
  PetscCall(SurrogateGetVTKDirectory(model, &vtk_dir));
  char line[256];  // std::snprintf for %g (PETSc's printf writes "1." for 1.0)
  std::snprintf(line, sizeof(line), "heat_petsc: %lld vertices on %d rank(s), dt %g s, %lld steps, KSP rtol %g (solver alone %g); "
                "surrogate accepted when ||b - A u_pred|| / ||b|| <= %g\n", static_cast<long long>(mesh.global_vertices), ranks,
                static_cast<double>(dt), static_cast<long long>(steps), static_cast<double>(rtol), static_cast<double>(solver_rtol),
                static_cast<double>(accept_rtol));
  PetscCall(PetscPrintf(comm, "%s", line));

  // 4. Two runs from the same initial state: the hybrid one (u) and the solver alone (u_solver).
  Vec u, u_solver, f, b, b_solver, du, prediction, difference;
  PetscCall(heat::MeshCreateVec(mesh, &u));
  for (Vec* v : {&u_solver, &f, &b, &b_solver, &du, &prediction, &difference}) PetscCall(VecDuplicate(u, v));
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.initial(x, y); }, 0, u));
  PetscCall(VecCopy(u, u_solver));
  PetscCall(VecCopy(u, prediction));

  // 5. ParaView output (-surrogate_vtk DIR): the local triangles, both states, the prediction, the source.
  std::optional<surrogate::VtkSeries> vtk;
  std::vector<double> vu, vs, vp, vd, vf, vk;
  const auto write_vtk = [&](double t) -> PetscErrorCode {
    PetscFunctionBeginUser;
    PetscCall(VecWAXPY(difference, -1.0, u_solver, u));
    for (auto [vec, values] : {std::pair{u, &vu}, {u_solver, &vs}, {prediction, &vp}, {difference, &vd}, {f, &vf}, {inputs.kappa, &vk}})
      PetscCall(heat::MeshLocalValues(mesh, vec, values));
    try {
      if (!vtk) {
        std::vector<std::int64_t> connectivity(mesh.triangles.begin(), mesh.triangles.end()), offsets;
        for (std::size_t c = 1; c <= mesh.triangles.size() / 3; ++c) offsets.push_back(static_cast<std::int64_t>(3 * c));
        vtk.emplace(comm, vtk_dir, "heat");
        vtk->set_cells(connectivity, offsets, std::vector<surrogate::VtkCell>(offsets.size(), surrogate::VtkCell::triangle));
      }
      vtk->add_array("u", "K", 1, {vu.data(), 1, 1});
      vtk->add_array("u_solver", "K", 1, {vs.data(), 1, 1});
      vtk->add_array("u_surrogate", "K", 1, {vp.data(), 1, 1});
      vtk->add_array("difference", "K", 1, {vd.data(), 1, 1});
      vtk->add_array("f", "K/s", 1, {vf.data(), 1, 1});
      vtk->add_array("kappa", "m^2/s", 1, {vk.data(), 1, 1});
      vtk->write(t, mesh.local_vertices(), 2, {mesh.xy.data(), 2, 1});
    } catch (const std::exception& e) {  // agreed across the ranks by the writer
      SETERRQ(comm, PETSC_ERR_LIB, "surrogate: %s", e.what());
    }
    PetscFunctionReturn(0);
  };
  if (vtk_dir) PetscCall(write_vtk(0.0));

  // 6. The time loop.
  PetscCall(PetscPrintf(comm, "%5s %6s  %-9s %9s %9s   %8s %11s %5s | %10s %5s | %s\n", "step", "t [s]", "surrogate", "residual",
                        "(of u^n)", "predict", "check/solve", "its", "solver [ms]", "its", "hybrid - solver"));
  PetscInt accepted_steps = 0, hybrid_its = 0, solver_its = 0;
  double hybrid_time = 0, solver_time = 0, predict_time = 0, max_difference = 0;
  for (PetscInt n = 0; n < steps; ++n) {
    const double t = static_cast<double>(n + 1) * static_cast<double>(dt);
    PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double tt) { return p.source(x, y, tt); }, t, f));

    // 6a. The solver alone: b = M/dt u^n + M f^{n+1} + G, KSPSolve from the previous state.
    PetscInt its_solver = 0;
    const PetscLogDouble t0 = Now(comm);
    PetscCall(heat::AssembleRhs(mesh, disc, u_solver, f, g, t, b_solver));
    PetscCall(Solve(ksp_solver, b_solver, u_solver, true, &its_solver));
    const PetscLogDouble t1 = Now(comm);

    // 6b. The hybrid step: the surrogate predicts u^{n+1} = u^n + du; SurrogateAcceptOrSolve keeps the
    //     prediction when its residual is below the tolerance, else solves from it (the same on every rank).
    std::vector<Vec> in;
    PetscBool accepted;
    PetscReal residual;
    PetscInt its = 0;
    const PetscLogDouble t2 = Now(comm);
    PetscCall(heat::AssembleRhs(mesh, disc, u, f, g, t, b));
    PetscCall(ModelInputVecs(inputs, disc, u, f, b, &in));
    PetscCall(SurrogatePredictVecs(model, static_cast<PetscInt>(in.size()), in.data(), 1, &du));
    if (inputs.increment) PetscCall(VecAXPY(u, 1.0, du));  // u becomes the prediction u^n + du
    else PetscCall(VecCopy(du, u));
    const PetscLogDouble t3 = Now(comm);
    PetscCall(VecCopy(u, prediction));  // kept for the output only
    const PetscLogDouble t4 = Now(comm);
    PetscCall(SurrogateAcceptOrSolve(model, ksp, b, u, PETSC_DEFAULT, &accepted, &residual));
    const PetscLogDouble t5 = Now(comm);
    if (!accepted) PetscCall(KSPGetIterationNumber(ksp, &its));

    // 6c. How far the hybrid run is from the solver alone (lumped-mass L2 norm), and what the tolerance means:
    //     the residual the previous state would have had as the guess (rate = M^{-1}(b - A u^n)).
    double diff_norm, ref_norm, previous_residual, b_norm;
    PetscCall(VecWAXPY(difference, -1.0, u_solver, u));
    PetscCall(heat::MassNorm(disc, difference, &diff_norm));
    PetscCall(heat::MassNorm(disc, u_solver, &ref_norm));
    PetscCall(VecPointwiseMult(difference, inputs.rate, disc.mass));
    PetscCall(VecNorm(difference, NORM_2, &previous_residual));
    PetscCall(VecNorm(b, NORM_2, &b_norm));
    const double difference_now = ref_norm > 0 ? diff_norm / ref_norm : diff_norm;
    max_difference = std::max(max_difference, difference_now);
    accepted_steps += accepted ? 1 : 0;
    hybrid_its += its;
    solver_its += its_solver;
    predict_time += t3 - t2;
    hybrid_time += (t3 - t2) + (t5 - t4);
    solver_time += t1 - t0;
    PetscCall(PetscPrintf(comm, "%5" PetscInt_FMT " %6.1f  %-9s %9.2e %9.2e   %8.2f %11.2f %5" PetscInt_FMT " | %10.2f %5" PetscInt_FMT
                          " | %8.3f %%\n", n + 1, t, accepted ? "accepted" : "solved", static_cast<double>(residual),
                          static_cast<double>(previous_residual / b_norm), 1e3 * (t3 - t2), 1e3 * (t5 - t4), its, 1e3 * (t1 - t0),
                          its_solver, 100 * difference_now));
    if (vtk_dir && ((n + 1) % std::max<PetscInt>(vtk_every, 1) == 0 || n + 1 == steps)) PetscCall(write_vtk(t));
  }

  // 7. The summary: time of the hybrid run against the solver alone, and the difference it costs.
  const double steps_d = static_cast<double>(std::max<PetscInt>(steps, 1));
  PetscCall(PetscPrintf(comm, "hybrid: %" PetscInt_FMT " of %" PetscInt_FMT " steps taken by the surrogate (%.0f %%), %" PetscInt_FMT
                        " KSP iterations; predict %.2f ms/step; opening the model and setting the points %.2f s (once)\n",
                        accepted_steps, steps, 100.0 * static_cast<double>(accepted_steps) / steps_d, hybrid_its,
                        1e3 * predict_time / steps_d, open_time));
  PetscCall(PetscPrintf(comm, "solver alone: %" PetscInt_FMT " KSP iterations, %.2f ms/step\n", solver_its, 1e3 * solver_time / steps_d));
  // When it pays off: a prediction costs as much as this many of the solver's KSP iterations (with its
  // share of the right-hand side); the surrogate saves time only where a step needs many more.
  const double iteration_time = solver_its > 0 ? solver_time / static_cast<double>(solver_its) : 0;
  if (iteration_time > 0)
    PetscCall(PetscPrintf(comm, "break-even: one prediction costs as much as %.0f KSP iterations of the solver alone, which needs %.0f "
                          "per step\n", predict_time / steps_d / iteration_time, static_cast<double>(solver_its) / steps_d));
  if (vtk) PetscCall(PetscPrintf(comm, "VTK: %s (%d steps)\n", vtk->pvd_path().c_str(), vtk->steps()));
  const bool faster = hybrid_time < solver_time;
  PetscCall(PetscPrintf(comm,
                        "heat_petsc: hybrid run %.3f s, solver alone %.3f s on %d rank(s): the hybrid is %.2fx %s; its state stays "
                        "within %.2f %% of the solver's (relative L2, worst of %" PetscInt_FMT " steps); the surrogate took %" PetscInt_FMT
                        " of the steps\n",
                        hybrid_time, solver_time, ranks, faster ? solver_time / hybrid_time : hybrid_time / solver_time,
                        faster ? "faster" : "slower", 100 * max_difference, steps, accepted_steps));

  // 8. Clean up.
  vtk.reset();
  for (Vec* v : {&u, &u_solver, &f, &b, &b_solver, &du, &prediction, &difference}) PetscCall(VecDestroy(v));
  PetscCall(ModelInputsDestroy(&inputs));
  PetscCall(SurrogateDestroy(&model));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(KSPDestroy(&ksp_solver));
  PetscCall(heat::DiscretisationDestroy(&disc));
  PetscCall(heat::MeshDestroy(&mesh));
  PetscCall(PetscFinalize());
  return 0;
}
