// nonlinear_petsc: a parameter study of steady, strongly nonlinear heat conduction (P1 on DMPlex, Newton
// with GMRES + GAMG). For each unseen case a FLARE surrogate predicts the temperature; the prediction is
// accepted when its residual ||F(u)|| is below the solver's tolerance, else Newton starts from it. The
// solver alone runs each case too, from the better of the usual guesses. README.md.
//   mpirun -np 2 nonlinear_petsc -surrogate_model share/models/nonlinear/model.h5
// Options: nonlinear_petsc -help (the physics: nonlinear_problem.hpp; the discretisation: nonlinear_solver.hpp).
#include <petscsnes.h>
#include <petsctime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "heat_problem.hpp"
#include "nonlinear_model.hpp"
#include "nonlinear_solver.hpp"
#include "surrogate/petsc.h"
#include "surrogate/vtk.hpp"

static const char help[] =
    "A parameter study of steady nonlinear heat conduction (P1 FEM on DMPlex, SNES newtonls, GMRES + GAMG).\n"
    "A FLARE surrogate predicts each case's temperature; the prediction is accepted when ||F(u)|| < -snes_atol,\n"
    "else Newton starts from it. The solver alone solves every case from the better of the ambient state and\n"
    "the previous case's solution; both runs stop at the same absolute residual. -snes_*, -ksp_*, -pc_* apply to\n"
    "both runs, -solver_snes_* (default: line search basic) and -hybrid_snes_* (default: line search bt, the\n"
    "preconditioner built once per case) to one; both default to -ksp_rtol 1e-3.\n\n";

using namespace nonlinear_example;

namespace {

// Wall time of a collective phase, started together on every rank.
PetscLogDouble Now(MPI_Comm comm) {
  PetscLogDouble t = 0;
  MPI_Barrier(comm);
  PetscTime(&t);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  // 1. PETSc (which initialises MPI) and the study's options.
  PetscCall(PetscInitialize(&argc, &argv, nullptr, help));
  MPI_Comm comm = PETSC_COMM_WORLD;
  PetscMPIInt ranks;
  PetscCallMPI(MPI_Comm_size(comm, &ranks));
  Params base;
  heat_example::MeshOptions mo;
  PetscInt cases = 16, seed = 3;
  PetscReal atol = 1e-6;
  PetscCall(ParamsFromOptions(&base));
  PetscCall(heat_example::MeshOptionsFromOptions(&mo));
  PetscOptionsBegin(comm, nullptr, "Parameter study", "nonlinear_petsc");
  PetscCall(PetscOptionsInt("-cases", "Cases of the study (random parameters)", nullptr, cases, &cases, nullptr));
  PetscCall(PetscOptionsInt("-seed", "Random seed of the cases (the model was trained on seed 1, tested on seed 2)", nullptr,
                            seed, &seed, nullptr));
  PetscCall(PetscOptionsReal("-atol", "Newton's tolerance ||F(u)||_2 [W/m] (default for -snes_atol)", nullptr, atol, &atol, nullptr));
  PetscOptionsEnd();

  // 2. The mesh, the discrete problem and one SNES per run (newtonls, GMRES + GAMG; -snes_*, -ksp_*, -pc_*
  //    options apply to both).
  heat::Mesh mesh;
  Problem problem;
  SNES snes, snes_solver;
  PetscCall(heat::MeshCreate(comm, mo.nx, mo.ny, mo.lx, mo.ly, mo.refine, &mesh));
  PetscCall(ProblemCreate(mesh, base, &problem));
  //    Each run with the settings that make it fastest (README.md, "The discretisation"): both solve each
  //    Newton step's linear system to GMRES rtol 1e-3; the solver alone takes full Newton steps (basic);
  //    the hybrid backtracks (bt) and builds the preconditioner once, at the prediction, which is close
  //    enough to the answer for it to serve every step.
  PetscCall(CreateRunSNES(comm, problem, "hybrid_", {SNESLINESEARCHBT, kLagOncePerSolve, 1e-3}, atol, &snes));
  PetscCall(CreateRunSNES(comm, problem, "solver_", {SNESLINESEARCHBASIC, 1, 1e-3}, atol, &snes_solver));
  PetscCall(SNESGetTolerances(snes, &atol, nullptr, nullptr, nullptr, nullptr));

  // 3. The surrogate, from the options (-surrogate_model, -surrogate_accept_atol, ...); its points are
  //    the rank's owned vertices, given once.
  surrogate_t model;
  ModelInputs inputs;
  const char* vtk_dir;
  int vtk_format;
  const PetscLogDouble open_start = Now(comm);
  PetscCall(SurrogateCreateFromOptions(comm, nullptr, &model));
  PetscCall(ModelInputsCreate(model, mesh, &inputs));
  PetscCall(SurrogateSetPointsVec(model, inputs.coords));
  const PetscLogDouble open_time = Now(comm) - open_start;
  PetscCall(SurrogateGetVTKDirectory(model, &vtk_dir));
  PetscCall(SurrogateGetVTKFormat(model, &vtk_format));  // -surrogate_vtk_format vtu | vtkhdf
  char line[512];  // std::snprintf for %g (PETSc's printf writes "1." for 1.0)
  std::snprintf(line, sizeof(line),
                "nonlinear_petsc: %lld vertices on %d rank(s), %lld cases (seed %lld); both runs stop at ||F(u)|| < %g W/m; "
                "a prediction is accepted below the same tolerance, else Newton starts from it\n",
                static_cast<long long>(mesh.global_vertices), ranks, static_cast<long long>(cases), static_cast<long long>(seed),
                static_cast<double>(atol));
  PetscCall(PetscPrintf(comm, "%s", line));
  // Each run's line search, GMRES tolerance and preconditioner lag, as its options left them.
  const auto describe = [](SNES run, char* text, std::size_t size) -> PetscErrorCode {
    SNESLineSearch ls;
    SNESLineSearchType type;
    KSP ksp;
    PetscReal rtol;
    PetscInt lag;
    PetscFunctionBeginUser;
    PetscCall(SNESGetLineSearch(run, &ls));
    PetscCall(SNESLineSearchGetType(ls, &type));
    PetscCall(SNESGetKSP(run, &ksp));
    PetscCall(KSPGetTolerances(ksp, &rtol, nullptr, nullptr, nullptr));
    PetscCall(SNESGetLagPreconditioner(run, &lag));
    const int n = std::snprintf(text, size, "the %s line search, GMRES rtol %g", type, static_cast<double>(rtol));
    if (lag >= kLagOncePerSolve) std::snprintf(text + n, size - n, ", the preconditioner built once per case");
    else if (lag != 1) std::snprintf(text + n, size - n, ", the preconditioner lagged %lld", static_cast<long long>(lag));
    PetscFunctionReturn(0);
  };
  char text_solver[160], text_hybrid[160];
  PetscCall(describe(snes_solver, text_solver, sizeof(text_solver)));
  PetscCall(describe(snes, text_hybrid, sizeof(text_hybrid)));
  PetscCall(PetscPrintf(comm, "Newton (newtonls, GMRES + GAMG): the solver alone with %s; the hybrid with %s\n", text_solver,
                        text_hybrid));

  // 4. The states: the hybrid run's u, the solver alone's u_solver (whose previous case is its guess
  //    candidate), the prediction, and work vectors.
  Vec u, u_solver, prediction, difference, work, work2;
  PetscCall(heat::MeshCreateVec(mesh, &u));
  for (Vec* v : {&u_solver, &prediction, &difference, &work, &work2}) PetscCall(VecDuplicate(u, v));

  // 5. ParaView output (-surrogate_vtk DIR, -surrogate_vtk_format): per case (time = case number) both
  //    states, the prediction and its error, the source and the conductivity.
  std::optional<surrogate::VtkSeries> vtk;
  std::vector<double> vu, vs, vp, vd, vq, vk;
  const auto write_vtk = [&](double t) -> PetscErrorCode {
    PetscFunctionBeginUser;
    PetscCall(VecWAXPY(difference, -1.0, u_solver, prediction));
    for (auto [vec, values] : {std::pair{u, &vu}, {u_solver, &vs}, {prediction, &vp}, {difference, &vd}, {inputs.q, &vq}, {inputs.k, &vk}})
      PetscCall(heat::MeshLocalValues(mesh, vec, values));
    try {
      if (!vtk) {
        std::vector<std::int64_t> connectivity(mesh.triangles.begin(), mesh.triangles.end()), offsets;
        for (std::size_t c = 1; c <= mesh.triangles.size() / 3; ++c) offsets.push_back(static_cast<std::int64_t>(3 * c));
        vtk.emplace(comm, vtk_dir, "nonlinear", static_cast<surrogate::VtkFormat>(vtk_format));
        vtk->set_cells(connectivity, offsets, std::vector<surrogate::VtkCell>(offsets.size(), surrogate::VtkCell::triangle));
      }
      vtk->add_array("u", "K", 1, {vu.data(), 1, 1});
      vtk->add_array("u_solver", "K", 1, {vs.data(), 1, 1});
      vtk->add_array("u_surrogate", "K", 1, {vp.data(), 1, 1});
      vtk->add_array("surrogate_error", "K", 1, {vd.data(), 1, 1});
      vtk->add_array("q", "W/m^3", 1, {vq.data(), 1, 1});
      vtk->add_array("k", "W/(m K)", 1, {vk.data(), 1, 1});
      vtk->write(t, mesh.local_vertices(), 2, {mesh.xy.data(), 2, 1});
    } catch (const std::exception& e) {  // agreed across the ranks by the writer
      SETERRQ(comm, PETSC_ERR_LIB, "surrogate: %s", e.what());
    }
    PetscFunctionReturn(0);
  };

  // 6. The study.
  PetscCall(PetscPrintf(comm, "%4s %11s %8s %6s | %-8s %6s %5s %9s | %9s %-8s %6s %5s %8s %9s | %s\n", "case", "source [m]",
                        "[kW/m3]", "u_amb", "guess", "newton", "gmres", "time [ms]", "||F(pred)||", "decision", "newton", "gmres",
                        "predict", "time [ms]", "max |u - u_solver| [K]"));
  std::mt19937_64 gen(static_cast<std::uint64_t>(seed));
  PetscInt newton_h = 0, newton_s = 0, krylov_h = 0, krylov_s = 0, accepted_cases = 0;
  double time_h = 0, time_s = 0, time_predict = 0, max_difference = 0, worst_share = 0, max_rise = 0;
  for (PetscInt c = 0; c < cases; ++c) {
    const Params p = RandomParams(gen, base);  // the same draw on every rank

    // 6a. The solver alone: from the ambient state or the previous case's solution, whichever has the
    //     smaller residual (two evaluations of F, counted in its time).
    PetscInt its_s = 0, lits_s = 0;
    const PetscLogDouble t0 = Now(comm);
    PetscCall(ProblemSetParams(&problem, p));
    const char* guess = "ambient";
    if (c > 0) {
      PetscReal f_previous, f_ambient;
      PetscCall(ResidualNorm(problem, u_solver, work, &f_previous));
      PetscCall(VecSet(work2, p.u_ambient));
      PetscCall(ResidualNorm(problem, work2, work, &f_ambient));
      if (f_ambient <= f_previous) PetscCall(VecCopy(work2, u_solver));
      else guess = "previous";
    } else {
      PetscCall(VecSet(u_solver, p.u_ambient));
    }
    PetscCall(SolveFrom(snes_solver, u_solver, &its_s, &lits_s));
    const PetscLogDouble t1 = Now(comm);

    // 6b. The hybrid: the surrogate predicts u; SurrogateSNESAcceptOrSolve keeps it when ||F(u)|| is below
    //     the SNES's tolerance, else Newton starts from it (the same decision on every rank).
    PetscBool accepted;
    PetscReal fnorm_prediction;
    PetscInt its_h = 0, lits_h = 0;
    SNESConvergedReason reason;
    const PetscLogDouble t2 = Now(comm);
    PetscCall(ProblemSetParams(&problem, p));
    PetscCall(ModelInputsSet(mesh, p, &inputs));
    PetscCall(SurrogatePredictVecs(model, static_cast<PetscInt>(inputs.in.size()), inputs.in.data(), 1, &u));
    const PetscLogDouble t3 = Now(comm);
    PetscCall(VecCopy(u, prediction));  // kept for the output only
    const PetscLogDouble t4 = Now(comm);
    PetscCall(SurrogateSNESAcceptOrSolve(model, snes, nullptr, u, PETSC_DEFAULT, &accepted, &fnorm_prediction));
    const PetscLogDouble t5 = Now(comm);
    if (!accepted) {
      PetscCall(SNESGetConvergedReason(snes, &reason));
      PetscCheck(reason > 0, comm, PETSC_ERR_NOT_CONVERGED, "case %" PetscInt_FMT ": Newton from the prediction did not converge: %s", c,
                 SNESConvergedReasons[reason]);
      PetscCall(SNESGetIterationNumber(snes, &its_h));
      PetscCall(SNESGetLinearSolveIterations(snes, &lits_h));
    }

    // 6c. How far apart the two final states are, and how far the tolerance lets them be: both residuals
    //     are below atol, so the states differ by at most about 2 atol ||J^{-1}||_2 (estimated; not timed).
    PetscReal difference_max, inverse_norm, umax;
    PetscCall(VecWAXPY(difference, -1.0, u_solver, u));
    PetscCall(VecNorm(difference, NORM_INFINITY, &difference_max));
    PetscCall(EstimateInverseNorm(problem, u_solver, 8, &inverse_norm));
    const PetscReal allowed_max = 2 * atol * inverse_norm;
    PetscCall(VecMax(u_solver, nullptr, &umax));
    max_difference = std::max(max_difference, static_cast<double>(difference_max));
    worst_share = std::max(worst_share, static_cast<double>(difference_max / allowed_max));
    max_rise = std::max(max_rise, static_cast<double>(umax) - p.u_ambient);
    accepted_cases += accepted ? 1 : 0;
    newton_h += its_h, newton_s += its_s, krylov_h += lits_h, krylov_s += lits_s;
    time_predict += t3 - t2;
    time_h += (t3 - t2) + (t5 - t4);
    time_s += t1 - t0;
    std::snprintf(line, sizeof(line),
                  "%4lld (%.2f,%.2f) %8.0f %6.1f | %-8s %6lld %5lld %9.1f | %11.2e %-8s %6lld %5lld %8.1f %9.1f | %.2e (tolerance: %.1e)\n",
                  static_cast<long long>(c), p.source_x, p.source_y, p.power / 1e3, p.u_ambient, guess, static_cast<long long>(its_s),
                  static_cast<long long>(lits_s), 1e3 * (t1 - t0), static_cast<double>(fnorm_prediction), accepted ? "accepted" : "solved",
                  static_cast<long long>(its_h), static_cast<long long>(lits_h), 1e3 * (t3 - t2), 1e3 * ((t3 - t2) + (t5 - t4)),
                  static_cast<double>(difference_max), static_cast<double>(allowed_max));
    PetscCall(PetscPrintf(comm, "%s", line));
    if (vtk_dir) PetscCall(write_vtk(static_cast<double>(c)));
  }

  // 7. The totals: time of the hybrid run against the solver alone, and the difference of the states.
  const double n = static_cast<double>(std::max<PetscInt>(cases, 1));
  std::snprintf(line, sizeof(line),
                "hybrid: %lld of %lld predictions accepted, %lld Newton and %lld GMRES iterations, predict %.1f ms/case; opening "
                "the model and setting the points %.2f s (once)\nsolver alone: %lld Newton and %lld GMRES iterations\n",
                static_cast<long long>(accepted_cases), static_cast<long long>(cases), static_cast<long long>(newton_h),
                static_cast<long long>(krylov_h), 1e3 * time_predict / n, open_time, static_cast<long long>(newton_s),
                static_cast<long long>(krylov_s));
  PetscCall(PetscPrintf(comm, "%s", line));
  if (vtk) PetscCall(PetscPrintf(comm, "VTK: %s (%d cases)\n", vtk->series_path().c_str(), vtk->steps()));
  const bool faster = time_h < time_s;
  std::snprintf(line, sizeof(line),
                "nonlinear_petsc: hybrid %.3f s, solver alone %.3f s on %d rank(s): the hybrid is %.2fx %s; the final states differ "
                "by at most %.2e K, %.0f %% of what the tolerance allows (2 atol ||J^-1||; largest temperature rise %.0f K)\n",
                time_h, time_s, ranks, faster ? time_s / time_h : time_h / time_s, faster ? "faster" : "slower", max_difference,
                100 * worst_share, max_rise);
  PetscCall(PetscPrintf(comm, "%s", line));
  // The hybrid's promise: the solver's answer. A difference beyond the tolerance's bound is an error.
  PetscCheck(worst_share <= 1.0, comm, PETSC_ERR_NOT_CONVERGED,
             "the hybrid's final state differs from the solver's by more than the tolerance allows (%.0f %% of 2 atol ||J^-1||)",
             100 * worst_share);

  // 8. Clean up.
  vtk.reset();
  for (Vec* v : {&u, &u_solver, &prediction, &difference, &work, &work2}) PetscCall(VecDestroy(v));
  PetscCall(ModelInputsDestroy(&inputs));
  PetscCall(SurrogateDestroy(&model));
  PetscCall(SNESDestroy(&snes));
  PetscCall(SNESDestroy(&snes_solver));
  PetscCall(ProblemDestroy(&problem));
  PetscCall(heat::MeshDestroy(&mesh));
  PetscCall(PetscFinalize());
  return 0;
}
