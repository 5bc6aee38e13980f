// heat_check: the checks ctest runs on heat_petsc's surrogate (no part of the example): the warm start from
// the prediction saves KSP iterations against a zero guess and the previous state, the prediction beats the
// previous state, and the first prediction does not depend on the partition (rank 0 predicting all points
// alone; bitwise with -surrogate_reproducible).   mpirun -np 3 heat_check -surrogate_model heat.h5 -steps 8
#include <petscksp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "heat_model.hpp"
#include "heat_problem.hpp"
#include "surrogate/petsc.h"
#include "surrogate/surrogate.hpp"

namespace heat_example {
namespace {

// The whole Vec on rank 0 (global order; empty elsewhere).
PetscErrorCode GatherToZero(Vec v, std::vector<double>* values) {
  VecScatter scatter;
  Vec seq;
  PetscInt n;
  const PetscScalar* a;
  PetscFunctionBeginUser;
  PetscCall(VecScatterCreateToZero(v, &scatter, &seq));
  PetscCall(VecScatterBegin(scatter, v, seq, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecScatterEnd(scatter, v, seq, INSERT_VALUES, SCATTER_FORWARD));
  PetscCall(VecGetLocalSize(seq, &n));
  PetscCall(VecGetArrayRead(seq, &a));
  values->assign(a, a + n);
  PetscCall(VecRestoreArrayRead(seq, &a));
  PetscCall(VecScatterDestroy(&scatter));
  PetscCall(VecDestroy(&seq));
  PetscFunctionReturn(0);
}

// The output `out` of the ranks' prediction from the inputs `in` against the same model run by rank 0 alone
// on all points (PETSC_COMM_SELF) from the same values: bitwise with -surrogate_reproducible, else within
// `tolerance` (max |difference| / max |output|).
PetscErrorCode CheckAgainstOneRank(MPI_Comm comm, Vec coords, const std::vector<Vec>& in, Vec out, const char* model,
                                   PetscBool reproducible, double tolerance) {
  PetscMPIInt rank, size;
  std::vector<double> xy, prediction;
  std::vector<std::vector<double>> inputs(in.size());
  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(GatherToZero(coords, &xy));
  for (std::size_t c = 0; c < in.size(); ++c) PetscCall(GatherToZero(in[c], &inputs[c]));
  PetscCall(GatherToZero(out, &prediction));
  double result[2] = {0.0, 0.0};  // max |difference|, max |output|
  char message[512] = "";
  if (rank == 0) {
    try {
      const std::size_t n = prediction.size(), channels = in.size();
      std::vector<double> features(n * channels), reference(n);
      for (std::size_t c = 0; c < channels; ++c)
        for (std::size_t i = 0; i < n; ++i) features[i * channels + c] = inputs[c][i];
      surrogate::Options options;
      options.threads = 1;
      options.reproducible = reproducible == PETSC_TRUE;
      surrogate::Surrogate one_rank(PETSC_COMM_SELF, model, options);
      one_rank.set_points<double>(static_cast<std::int64_t>(n), 2, {xy.data(), 2, 1});
      one_rank.predict<double>({features.data(), static_cast<std::int64_t>(channels), 1}, {reference.data(), 1, 1});
      for (std::size_t i = 0; i < n; ++i) {
        result[0] = std::max(result[0], std::abs(prediction[i] - reference[i]));
        result[1] = std::max(result[1], std::abs(reference[i]));
      }
    } catch (const std::exception& e) {
      std::snprintf(message, sizeof(message), "%s", e.what());
    }
  }
  PetscCallMPI(MPI_Bcast(result, 2, MPI_DOUBLE, 0, comm));
  PetscCallMPI(MPI_Bcast(message, sizeof(message), MPI_CHAR, 0, comm));
  PetscCheck(message[0] == '\0', comm, PETSC_ERR_LIB, "partition check: the one-rank prediction failed: %s", message);
  const double relative = result[1] > 0 ? result[0] / result[1] : result[0];
  char line[256];
  std::snprintf(line, sizeof(line),
                "partition check: %d-rank prediction vs one rank on all points: max difference %.3e (%.3e of max |output|)%s\n",
                size, result[0], relative, reproducible ? ", reproducible mode: must be 0" : "");
  PetscCall(PetscPrintf(comm, "%s", line));
  if (reproducible)
    PetscCheck(result[0] == 0.0, comm, PETSC_ERR_PLIB, "partition check failed: reproducible mode differs by %.3e", result[0]);
  else
    PetscCheck(relative <= tolerance, comm, PETSC_ERR_PLIB, "partition check failed: relative difference %.3e > %.3e", relative,
               tolerance);
  PetscFunctionReturn(0);
}

PetscErrorCode Check() {
  MPI_Comm comm = PETSC_COMM_WORLD;
  Params p;
  MeshOptions mo;
  PetscInt steps = 8;
  PetscReal dt = 1.0, rtol = 1e-8, max_error = 0.1;
  PetscBool iterations = PETSC_TRUE, reproducible = PETSC_FALSE;
  char model_path[PETSC_MAX_PATH_LEN] = "";
  PetscFunctionBeginUser;
  PetscCall(ParamsFromOptions(&p));
  PetscCall(MeshOptionsFromOptions(&mo));
  PetscOptionsBegin(comm, nullptr, "heat_check", "heat_check");
  PetscCall(PetscOptionsInt("-steps", "Time steps", nullptr, steps, &steps, nullptr));
  PetscCall(PetscOptionsReal("-dt", "Time step [s]", nullptr, dt, &dt, nullptr));
  PetscCall(PetscOptionsReal("-rtol", "KSP relative tolerance", nullptr, rtol, &rtol, nullptr));
  PetscCall(PetscOptionsBool("-check_iterations", "Solve from zero, the previous state and the prediction and compare",
                             nullptr, iterations, &iterations, nullptr));
  PetscCall(PetscOptionsReal("-check_error", "Largest mean relative L2 error of the prediction", nullptr, max_error, &max_error,
                             nullptr));
  PetscOptionsEnd();
  PetscCall(PetscOptionsGetBool(nullptr, nullptr, "-surrogate_reproducible", &reproducible, nullptr));
  PetscCall(PetscOptionsGetString(nullptr, nullptr, "-surrogate_model", model_path, sizeof(model_path), nullptr));

  heat::Mesh mesh;
  heat::Discretisation disc;
  KSP ksp;
  surrogate_t model;
  ModelInputs inputs;
  PetscCall(heat::MeshCreate(comm, mo.nx, mo.ny, mo.lx, mo.ly, mo.refine, &mesh));
  PetscCall(heat::DiscretisationCreate(mesh, [&](double x, double y) { return p.kappa(x, y); }, p.beta, dt, &disc));
  PetscCall(heat::CreateKSP(comm, disc, rtol, &ksp));
  PetscCall(SurrogateCreateFromOptions(comm, nullptr, &model));
  PetscCall(ModelInputsCreate(model, mesh, p, &inputs));
  PetscCall(SurrogateSetPointsVec(model, inputs.coords));
  const heat::BoundaryFunction g = [&](double, double, double, double, double) { return p.beta * p.u_ambient; };

  Vec u, u_new, f, b, du, prediction, work;
  PetscCall(heat::MeshCreateVec(mesh, &u));
  for (Vec* v : {&u_new, &f, &b, &du, &prediction, &work}) PetscCall(VecDuplicate(u, v));
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.initial(x, y); }, 0, u));

  PetscCall(PetscPrintf(comm, "%5s %10s %12s   %s %9s %9s\n", "step", "error", "error/incr.", "KSP its: zero", "previous", "surrogate"));
  PetscInt total_zero = 0, total_prev = 0, total_sur = 0;
  double sum_error = 0, sum_ratio = 0;
  for (PetscInt n = 0; n < steps; ++n) {
    const double t = static_cast<double>(n + 1) * static_cast<double>(dt);
    PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double tt) { return p.source(x, y, tt); }, t, f));
    PetscCall(heat::AssembleRhs(mesh, disc, u, f, g, t, b));
    std::vector<Vec> in;
    PetscCall(ModelInputVecs(inputs, disc, u, f, b, &in));
    PetscCall(SurrogatePredictVecs(model, static_cast<PetscInt>(in.size()), in.data(), 1, &du));
    if (n == 0)  // the default mode's cross-rank merge agrees to 1e-6 relative (share/docs/reproducibility.md)
      PetscCall(CheckAgainstOneRank(comm, inputs.coords, in, du, model_path, reproducible, 1e-6));
    if (inputs.increment) PetscCall(VecWAXPY(prediction, 1.0, u, du));
    else PetscCall(VecCopy(du, prediction));

    PetscInt its_zero = -1, its_prev = -1, its_sur = -1;
    if (iterations) {
      PetscCall(Solve(ksp, b, work, false, &its_zero));
      PetscCall(VecCopy(u, work));
      PetscCall(Solve(ksp, b, work, true, &its_prev));
    }
    PetscCall(VecCopy(prediction, u_new));
    PetscCall(Solve(ksp, b, u_new, true, &its_sur));

    // Relative L2 error of the prediction (lumped-mass norm), and relative to the step's increment.
    double err, ref, inc;
    PetscCall(VecWAXPY(work, -1.0, u_new, prediction));
    PetscCall(heat::MassNorm(disc, work, &err));
    PetscCall(heat::MassNorm(disc, u_new, &ref));
    PetscCall(VecWAXPY(work, -1.0, u, u_new));
    PetscCall(heat::MassNorm(disc, work, &inc));
    sum_error += ref > 0 ? err / ref : 0;
    sum_ratio += inc > 0 ? err / inc : 0;
    total_zero += its_zero;
    total_prev += its_prev;
    total_sur += its_sur;
    PetscCall(PetscPrintf(comm, "%5" PetscInt_FMT " %8.3f %% %10.1f %%   %13" PetscInt_FMT " %9" PetscInt_FMT " %9" PetscInt_FMT "\n", n + 1,
                          100 * (ref > 0 ? err / ref : 0), 100 * (inc > 0 ? err / inc : 0), its_zero, its_prev, its_sur));
    PetscCall(VecCopy(u_new, u));
  }

  const double mean = sum_error / static_cast<double>(std::max<PetscInt>(steps, 1));
  const double mean_ratio = sum_ratio / static_cast<double>(std::max<PetscInt>(steps, 1));
  if (iterations) {
    PetscCheck(total_sur < total_prev && total_sur < total_zero, comm, PETSC_ERR_NOT_CONVERGED,
               "check failed: the surrogate's warm start took %" PetscInt_FMT " KSP iterations, the previous state %" PetscInt_FMT
               ", zero %" PetscInt_FMT, total_sur, total_prev, total_zero);
    PetscCheck(mean_ratio < 0.5, comm, PETSC_ERR_NOT_CONVERGED,
               "check failed: the surrogate's error is %.1f %% of the step's increment on average (the previous state: 100 %%)",
               100 * mean_ratio);
    PetscCheck(mean <= max_error, comm, PETSC_ERR_NOT_CONVERGED, "check failed: mean surrogate error %.3e > %.3e", mean,
               static_cast<double>(max_error));
    PetscCall(PetscPrintf(comm,
                          "check passed: KSP iterations from the prediction %" PetscInt_FMT ", the previous state %" PetscInt_FMT
                          ", zero %" PetscInt_FMT "; the surrogate's error is %.1f %% of the increment and %.3f %% of the state on "
                          "average (limit %.1f %%)\n",
                          total_sur, total_prev, total_zero, 100 * mean_ratio, 100 * mean, 100 * static_cast<double>(max_error)));
  }

  for (Vec* v : {&u, &u_new, &f, &b, &du, &prediction, &work}) PetscCall(VecDestroy(v));
  PetscCall(ModelInputsDestroy(&inputs));
  PetscCall(SurrogateDestroy(&model));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(heat::DiscretisationDestroy(&disc));
  PetscCall(heat::MeshDestroy(&mesh));
  PetscFunctionReturn(0);
}

}  // namespace
}  // namespace heat_example

int main(int argc, char** argv) {
  PetscCall(PetscInitialize(&argc, &argv, nullptr, "Checks of heat_petsc's surrogate (ctest).\n"));
  PetscCall(heat_example::Check());
  PetscCall(PetscFinalize());
  return 0;
}
