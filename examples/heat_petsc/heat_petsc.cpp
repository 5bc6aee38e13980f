// heat_petsc: transient heat conduction on a distributed DMPlex triangle mesh (heat_solver.hpp), solved
// implicitly with KSP (CG + Jacobi) at every time step, with a FLARE surrogate that predicts the next
// state from the current one: its prediction is the KSP's initial guess. See README.md.
//
//   mpirun -np 4 heat_petsc -surrogate_model share/models/heat/model.h5 -surrogate_vtk out   (run)
//   heat_petsc -generate data.h5 -trajectories 160 -steps 40 -seed 1                          (training data)
//   mpirun -np 3 heat_petsc -verify                                                           (convergence tests)
//
// Modes and options: heat_petsc -help.
#include <petscdmplex.h>
#include <petscksp.h>
#include <petsctime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <exception>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "heat_problem.hpp"
#include "surrogate/petsc.h"
#include "surrogate/surrogate.hpp"
#include "surrogate/vtk.hpp"

static const char help[] =
    "Transient heat conduction (P1 FEM on DMPlex, backward Euler, KSP CG+Jacobi) with a FLARE surrogate's\n"
    "one-step prediction as the KSP's initial guess.\n"
    "Modes: run (default; -surrogate_model <file> to use a surrogate), -generate <file.h5> (training data),\n"
    "-verify (manufactured-solution convergence tests).\n\n";

namespace heat_example {
namespace {

// A surrogate::Error (or any C++ exception) from the VTK writer as a PETSc error on every rank (the writer
// agrees on errors across ranks).
template <class F>
PetscErrorCode CallVtk(MPI_Comm comm, F&& body) {
  PetscFunctionBeginUser;
  try {
    body();
  } catch (const std::exception& e) {
    SETERRQ(comm, PETSC_ERR_LIB, "surrogate: %s", e.what());
  }
  PetscFunctionReturn(0);
}

// Values of a global Vec at the rank's local vertices (owned and ghost), for VTK pieces with cells.
PetscErrorCode LocalValues(const heat::Mesh& mesh, Vec global, Vec local, std::vector<double>& out) {
  const PetscScalar* a;
  PetscSection section;
  PetscFunctionBeginUser;
  PetscCall(DMGlobalToLocal(mesh.dm, global, INSERT_VALUES, local));
  PetscCall(DMGetLocalSection(mesh.dm, &section));
  PetscCall(VecGetArrayRead(local, &a));
  out.resize(static_cast<std::size_t>(mesh.local_vertices()));
  for (PetscInt v = mesh.v_start; v < mesh.v_end; ++v) {
    PetscInt off;
    PetscCall(PetscSectionGetOffset(section, v, &off));
    out[static_cast<std::size_t>(v - mesh.v_start)] = a[off];
  }
  PetscCall(VecRestoreArrayRead(local, &a));
  PetscFunctionReturn(0);
}

// ---------------------------------------------------------------------------------------------------
// The surrogate's view of the problem: per-point inputs as one Vec per channel, in the model's channel
// order (matched by the names in the model file's /fields): x, y [m], u = u^n [K], f = f^{n+1} [K/s],
// kappa [m^2/s] and rate = M^{-1} (b - A u^n) [K/s] (the residual of the step's system at the current
// state, per unit mass: du/dt + M^{-1}(K + B) du; one MatMult). Output 'du' (u^{n+1} - u^n) or 'u_next'.
struct SurrogateInputs {
  surrogate_t handle = nullptr;
  Vec coords = nullptr;  // block size 2, for SurrogateSetPointsVec
  Vec x = nullptr, y = nullptr, kappa = nullptr, rate = nullptr, out = nullptr;
  std::vector<std::string> input_names;
  std::string output_name;
  bool increment = true;  // output is du
};

PetscErrorCode SurrogateSetup(const heat::Mesh& mesh, const Params& p, SurrogateInputs* s) {
  MPI_Comm comm = PETSC_COMM_WORLD;
  PetscFunctionBeginUser;
  PetscCall(SurrogateCreateFromOptions(comm, nullptr, &s->handle));
  int cin = 0, cout = 0;
  PetscCheck(surrogate_in_channels(s->handle, &cin) == SURROGATE_OK && surrogate_out_channels(s->handle, &cout) == SURROGATE_OK,
             comm, PETSC_ERR_LIB, "surrogate: %s", surrogate_last_error());
  char name[64];
  for (int c = 0; c < cin; ++c) {
    PetscCheck(surrogate_channel_name(s->handle, 0, c, name, sizeof(name)) == SURROGATE_OK, comm, PETSC_ERR_LIB,
               "surrogate: %s", surrogate_last_error());
    s->input_names.emplace_back(name);
  }
  PetscCheck(surrogate_channel_name(s->handle, 1, 0, name, sizeof(name)) == SURROGATE_OK, comm, PETSC_ERR_LIB,
             "surrogate: %s", surrogate_last_error());
  s->output_name = name;
  const std::vector<std::string> known = {"x", "y", "u", "f", "kappa", "rate"};
  for (const std::string& n : s->input_names)
    PetscCheck(std::find(known.begin(), known.end(), n) != known.end(), comm, PETSC_ERR_ARG_INCOMP,
               "the model's input channel '%s' is none of x, y, u, f, kappa, rate (is it a heat model?)", n.c_str());
  PetscCheck(cout == 1 && (s->output_name == "du" || s->output_name == "u_next"), comm, PETSC_ERR_ARG_INCOMP,
             "the model must have one output channel named du or u_next, it has %d (first '%s')", cout, s->output_name.c_str());
  s->increment = s->output_name == "du";

  // Points: the owned vertices in the order of the global Vec's rows.
  PetscCall(VecCreate(comm, &s->coords));
  PetscCall(VecSetSizes(s->coords, 2 * mesh.n_owned, PETSC_DETERMINE));
  PetscCall(VecSetBlockSize(s->coords, 2));
  PetscCall(VecSetType(s->coords, VECSTANDARD));
  PetscScalar* a;
  PetscCall(VecGetArrayWrite(s->coords, &a));
  for (PetscInt i = 0; i < mesh.n_owned; ++i) {
    const auto k = static_cast<std::size_t>(mesh.owned[static_cast<std::size_t>(i)] - mesh.v_start);
    a[2 * i] = mesh.xy[2 * k];
    a[2 * i + 1] = mesh.xy[2 * k + 1];
  }
  PetscCall(VecRestoreArrayWrite(s->coords, &a));
  PetscCall(SurrogateSetPointsVec(s->handle, s->coords));

  PetscCall(heat::MeshCreateVec(mesh, &s->x));
  PetscCall(VecDuplicate(s->x, &s->y));
  PetscCall(VecDuplicate(s->x, &s->kappa));
  PetscCall(VecDuplicate(s->x, &s->rate));
  PetscCall(VecDuplicate(s->x, &s->out));
  PetscCall(heat::MeshInterpolate(mesh, [](double x, double, double) { return x; }, 0, s->x));
  PetscCall(heat::MeshInterpolate(mesh, [](double, double y, double) { return y; }, 0, s->y));
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.kappa(x, y); }, 0, s->kappa));
  PetscFunctionReturn(0);
}

// The input Vecs of a prediction in the model's channel order: the state u = u^n, the source f = f^{n+1};
// rate is computed from the step's right-hand side b when the model takes it.
PetscErrorCode SurrogateInputVecs(SurrogateInputs& s, const heat::Discretisation& disc, Vec u, Vec f, Vec b,
                                  std::vector<Vec>* in) {
  PetscFunctionBeginUser;
  if (std::find(s.input_names.begin(), s.input_names.end(), "rate") != s.input_names.end())
    PetscCall(ComputeRate(disc, b, u, s.rate));
  std::map<std::string, Vec> by_name = {{"x", s.x}, {"y", s.y}, {"u", u}, {"f", f}, {"kappa", s.kappa}, {"rate", s.rate}};
  in->clear();
  for (const std::string& n : s.input_names) in->push_back(by_name[n]);
  PetscFunctionReturn(0);
}

// prediction = u + du (or u_next) from the state u, the source f at the new time and the step's rhs b.
PetscErrorCode SurrogatePredictState(SurrogateInputs& s, const heat::Discretisation& disc, Vec u, Vec f, Vec b,
                                     Vec prediction) {
  std::vector<Vec> in;
  PetscFunctionBeginUser;
  PetscCall(SurrogateInputVecs(s, disc, u, f, b, &in));
  PetscCall(SurrogatePredictVecs(s.handle, static_cast<PetscInt>(in.size()), in.data(), 1, &s.out));
  if (s.increment)
    PetscCall(VecWAXPY(prediction, 1.0, u, s.out));
  else
    PetscCall(VecCopy(s.out, prediction));
  PetscFunctionReturn(0);
}

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

// -check_partition: the surrogate's output s.out for the inputs `in`, computed by the ranks on the solver's
// partition, against the same model run by rank 0 alone on all points (PETSC_COMM_SELF), from the same
// input values gathered to rank 0. The prediction for a point must not depend on the partition: bitwise
// with -surrogate_reproducible, else within `tolerance` (max |difference| / max |output|).
PetscErrorCode CheckAgainstOneRank(MPI_Comm comm, const SurrogateInputs& s, const std::vector<Vec>& in, const char* model,
                                   PetscBool reproducible, double tolerance) {
  PetscMPIInt rank, size;
  std::vector<double> coords, channel, out;
  std::vector<std::vector<double>> inputs(in.size());
  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(GatherToZero(s.coords, &coords));
  for (std::size_t c = 0; c < in.size(); ++c) PetscCall(GatherToZero(in[c], &inputs[c]));
  PetscCall(GatherToZero(s.out, &out));
  // On rank 0: the one-rank prediction; the outcome (difference or error message) is broadcast so that every
  // rank reports the same.
  double result[2] = {0.0, 0.0};  // max |difference|, max |output|
  char message[512] = "";
  if (rank == 0) {
    try {
      const std::int64_t n = static_cast<std::int64_t>(out.size());
      const std::size_t channels = in.size();
      std::vector<double> features(static_cast<std::size_t>(n) * channels), reference(out.size());
      for (std::size_t c = 0; c < channels; ++c)
        for (std::size_t i = 0; i < out.size(); ++i) features[i * channels + c] = inputs[c][i];
      surrogate::Options options;
      options.threads = 1;
      options.reproducible = reproducible == PETSC_TRUE;
      surrogate::Surrogate one_rank(PETSC_COMM_SELF, model, options);
      one_rank.set_points<double>(n, 2, {coords.data(), 2, 1});
      one_rank.predict<double>({features.data(), static_cast<std::int64_t>(channels), 1}, {reference.data(), 1, 1});
      for (std::size_t i = 0; i < out.size(); ++i) {
        result[0] = std::max(result[0], std::abs(out[i] - reference[i]));
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

PetscErrorCode SurrogateTeardown(SurrogateInputs* s) {
  PetscFunctionBeginUser;
  for (Vec* v : {&s->coords, &s->x, &s->y, &s->kappa, &s->rate, &s->out}) PetscCall(VecDestroy(v));
  PetscCall(SurrogateDestroy(&s->handle));
  PetscFunctionReturn(0);
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// Run: the time loop with the surrogate (if -surrogate_model is given).
PetscErrorCode Run() {
  MPI_Comm comm = PETSC_COMM_WORLD;
  PetscMPIInt size;
  MeshOptions mo;
  Params p;
  PetscInt steps = 40, compare_every = 1, vtk_every = 1;
  double dt = 1.0, rtol = 1e-8, check_error = 0.1;
  PetscBool check = PETSC_FALSE, check_partition = PETSC_FALSE, has_model = PETSC_FALSE;
  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_size(comm, &size));
  PetscCall(MeshOptionsFromOptions(&mo));
  PetscCall(ParamsFromOptions(&p));
  PetscOptionsBegin(comm, nullptr, "Time stepping", "heat_petsc");
  PetscCall(PetscOptionsInt("-steps", "Time steps", nullptr, steps, &steps, nullptr));
  PetscCall(PetscOptionsReal("-dt", "Time step [s] (the heat model was trained at 1 s)", nullptr, dt, &dt, nullptr));
  PetscCall(PetscOptionsReal("-rtol", "KSP relative tolerance (default for -ksp_rtol)", nullptr, rtol, &rtol, nullptr));
  PetscCall(PetscOptionsInt("-compare_every", "Also solve from a zero and from the previous state every n steps (0: never)",
                            nullptr, compare_every, &compare_every, nullptr));
  PetscCall(PetscOptionsInt("-vtk_every", "Write VTK every n steps (with -surrogate_vtk)", nullptr, vtk_every, &vtk_every, nullptr));
  PetscCall(PetscOptionsBool("-check", "Fail unless the warm start saves KSP iterations and the surrogate beats the previous state",
                             nullptr, check, &check, nullptr));
  PetscCall(PetscOptionsReal("-check_error", "Largest mean relative L2 surrogate error accepted by -check", nullptr, check_error,
                             &check_error, nullptr));
  PetscCall(PetscOptionsBool("-check_partition",
                             "At the first step, compare the surrogate's prediction with rank 0 predicting all points alone",
                             nullptr, check_partition, &check_partition, nullptr));
  PetscOptionsEnd();
  PetscCall(PetscOptionsHasName(nullptr, nullptr, "-surrogate_model", &has_model));

  heat::Mesh mesh;
  heat::Discretisation disc;
  KSP ksp;
  PetscCall(heat::MeshCreate(comm, mo.nx, mo.ny, mo.lx, mo.ly, mo.refine, &mesh));
  PetscCall(heat::DiscretisationCreate(mesh, [&](double x, double y) { return p.kappa(x, y); }, p.beta, dt, &disc));
  PetscCall(heat::CreateKSP(comm, disc, rtol, &ksp));
  KSPType ksp_type;
  PC pc;
  PCType pc_type;
  PetscReal ksp_rtol;
  PetscCall(KSPGetType(ksp, &ksp_type));
  PetscCall(KSPGetPC(ksp, &pc));
  PetscCall(PCGetType(pc, &pc_type));
  PetscCall(KSPGetTolerances(ksp, &ksp_rtol, nullptr, nullptr, nullptr));
  {
    // std::snprintf for %g (PETSc's printf appends a '.' to integral %g values).
    char line[512];
    std::snprintf(line, sizeof(line),
                  "heat_petsc: %lld vertices, %lld triangles on %d rank(s); dt %g s, %lld steps; KSP %s + %s, rtol %g\n"
                  "  kappa %g | %g m^2/s (x < %g | x >= %g), beta %g m/s, u_ambient %g K; source %g K/s, sigma %g m, "
                  "path centre (%g, %g) m, radius %g m, omega %g rad/s, on/off every %g s; initial bump %g K at (%g, %g)\n",
                  static_cast<long long>(mesh.global_vertices), static_cast<long long>(mesh.global_triangles), size, dt,
                  static_cast<long long>(steps), ksp_type, pc_type, static_cast<double>(ksp_rtol), p.kappa_left, p.kappa_right,
                  p.x_interface, p.x_interface, p.beta, p.u_ambient, p.amplitude, p.sigma, p.cx, p.cy, p.radius, p.omega,
                  p.switch_period, p.u0_amplitude, p.u0_x, p.u0_y);
    PetscCall(PetscPrintf(comm, "%s", line));
  }

  Vec u, u_new, f, b, guess, work, prediction, diff, local;
  PetscCall(heat::MeshCreateVec(mesh, &u));
  for (Vec* v : {&u_new, &f, &b, &guess, &work, &prediction, &diff}) PetscCall(VecDuplicate(u, v));
  PetscCall(DMCreateLocalVector(mesh.dm, &local));
  PetscCall(PetscObjectSetName(reinterpret_cast<PetscObject>(u), "u"));
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.initial(x, y); }, 0, u));
  const heat::BoundaryFunction g = [&](double, double, double, double, double) { return p.beta * p.u_ambient; };

  SurrogateInputs s;
  const char* vtk_dir = nullptr;
  if (has_model) {
    PetscCall(SurrogateSetup(mesh, p, &s));
    PetscCall(SurrogateGetVTKDirectory(s.handle, &vtk_dir));
    char model[PETSC_MAX_PATH_LEN];
    PetscCall(PetscOptionsGetString(nullptr, nullptr, "-surrogate_model", model, sizeof(model), nullptr));
    std::string inputs;
    for (const std::string& n : s.input_names) inputs += (inputs.empty() ? "" : ", ") + n;
    PetscCall(PetscPrintf(comm, "surrogate: %s (inputs %s -> output %s), one sample of %" PetscInt_FMT " points\n", model,
                          inputs.c_str(), s.output_name.c_str(), mesh.global_vertices));
    if (std::abs(dt - 1.0) > 1e-12)
      PetscCall(PetscPrintf(comm, "warning: the heat model was trained with dt = 1 s; -dt %.6e is outside its training data\n", dt));
  } else {
    PetscCall(PetscPrintf(comm, "no -surrogate_model: solver only (KSP from a zero and from the previous state)\n"));
  }

  // VTK series: the local triangles over the local vertices (owned and ghost).
  std::optional<surrogate::VtkSeries> vtk;
  std::vector<double> vu, vp, vd, vf, vk;
  if (vtk_dir) {
    std::vector<std::int64_t> connectivity(mesh.triangles.begin(), mesh.triangles.end()), offsets;
    std::vector<surrogate::VtkCell> types(mesh.triangles.size() / 3, surrogate::VtkCell::triangle);
    for (std::size_t c = 0; c < types.size(); ++c) offsets.push_back(static_cast<std::int64_t>(3 * (c + 1)));
    PetscCall(CallVtk(comm, [&] {
      vtk.emplace(comm, vtk_dir, "heat");
      vtk->set_cells(connectivity, offsets, types);
    }));
    vk.resize(static_cast<std::size_t>(mesh.local_vertices()));
    for (PetscInt v = 0; v < mesh.local_vertices(); ++v)
      vk[static_cast<std::size_t>(v)] = p.kappa(mesh.xy[2 * static_cast<std::size_t>(v)], mesh.xy[2 * static_cast<std::size_t>(v) + 1]);
  }
  const auto write_vtk = [&](double t, Vec source) -> PetscErrorCode {
    PetscFunctionBeginUser;
    PetscCall(LocalValues(mesh, u, local, vu));
    PetscCall(LocalValues(mesh, prediction, local, vp));
    PetscCall(LocalValues(mesh, diff, local, vd));
    PetscCall(LocalValues(mesh, source, local, vf));
    PetscCall(CallVtk(comm, [&] {
      vtk->add_array("u", "K", 1, {vu.data(), 1, 1});
      vtk->add_array("u_surrogate", "K", 1, {vp.data(), 1, 1});
      vtk->add_array("difference", "K", 1, {vd.data(), 1, 1});
      vtk->add_array("f", "K/s", 1, {vf.data(), 1, 1});
      vtk->add_array("kappa", "m^2/s", 1, {vk.data(), 1, 1});
      vtk->write(t, mesh.local_vertices(), 2, {mesh.xy.data(), 2, 1});
    }));
    PetscFunctionReturn(0);
  };
  if (vtk) {
    PetscCall(VecCopy(u, prediction));
    PetscCall(VecSet(diff, 0.0));
    PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double t) { return p.source(x, y, t); }, 0, f));
    PetscCall(write_vtk(0.0, f));
  }

  PetscCall(PetscPrintf(comm, "%5s %7s %8s  %10s %12s   %s %9s %9s   %s\n", "step", "t [s]", "max u", "surrogate", "error/incr.",
                        "KSP its: zero", "previous", "surrogate", "predict, solve [ms]"));
  PetscInt total_zero = 0, total_prev = 0, total_sur = 0, total_sur_compared = 0, compared = 0;
  double sum_error = 0, max_error = 0, sum_ratio = 0, predict_time = 0, solve_time = 0;
  for (PetscInt n = 0; n < steps; ++n) {
    const double t = static_cast<double>(n + 1) * dt;
    PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double tt) { return p.source(x, y, tt); }, t, f));
    PetscCall(heat::AssembleRhs(mesh, disc, u, f, g, t, b));

    PetscLogDouble t0, t1, t2;
    PetscCall(PetscTime(&t0));
    if (has_model) PetscCall(SurrogatePredictState(s, disc, u, f, b, prediction));
    PetscCall(PetscTime(&t1));
    if (has_model && check_partition && n == 0) {
      std::vector<Vec> in;
      PetscBool reproducible = PETSC_FALSE;
      char model[PETSC_MAX_PATH_LEN];
      PetscCall(SurrogateInputVecs(s, disc, u, f, b, &in));
      PetscCall(PetscOptionsGetBool(nullptr, nullptr, "-surrogate_reproducible", &reproducible, nullptr));
      PetscCall(PetscOptionsGetString(nullptr, nullptr, "-surrogate_model", model, sizeof(model), nullptr));
      // The default mode's cross-rank merge agrees to 1e-6 relative (share/docs/reproducibility.md).
      PetscCall(CheckAgainstOneRank(comm, s, in, model, reproducible, 1e-6));
    }

    const bool compare = compare_every > 0 && n % compare_every == 0;
    PetscInt its_zero = -1, its_prev = -1, its_sur = -1;
    if (compare) {
      PetscCall(Solve(ksp, b, work, false, &its_zero));
      PetscCall(VecCopy(u, work));
      PetscCall(Solve(ksp, b, work, true, &its_prev));
    }
    PetscCall(PetscTime(&t2));
    PetscLogDouble t3 = t2;
    if (has_model) {
      PetscCall(VecCopy(prediction, u_new));
      PetscCall(Solve(ksp, b, u_new, true, &its_sur));
      PetscCall(PetscTime(&t3));
    } else if (compare) {
      PetscCall(VecCopy(work, u_new));
    } else {
      PetscCall(VecCopy(u, u_new));
      PetscCall(Solve(ksp, b, u_new, true, &its_prev));
      PetscCall(PetscTime(&t3));
    }

    double error = 0, ratio = 0, umax = 0;
    PetscCall(VecMax(u_new, nullptr, &umax));
    if (has_model) {
      double err, ref, inc;
      PetscCall(VecWAXPY(diff, -1.0, u_new, prediction));
      PetscCall(VecWAXPY(work, -1.0, u, u_new));
      PetscCall(heat::MassNorm(disc, diff, &err));
      PetscCall(heat::MassNorm(disc, u_new, &ref));
      PetscCall(heat::MassNorm(disc, work, &inc));
      error = ref > 0 ? err / ref : 0;
      ratio = inc > 0 ? err / inc : 0;
      sum_error += error;
      sum_ratio += ratio;
      max_error = std::max(max_error, error);
      total_sur += its_sur;
      predict_time += t1 - t0;
      solve_time += t3 - t2;
    }
    if (compare) {
      ++compared;
      total_zero += its_zero;
      total_prev += its_prev;
      if (has_model) total_sur_compared += its_sur;
    }
    char line[256];
    const auto its = [](PetscInt k) { return k < 0 ? std::string("-") : std::to_string(k); };
    if (has_model)
      PetscCall(PetscSNPrintf(line, sizeof(line), "%5" PetscInt_FMT " %7.1f %8.3f  %8.3f %% %10.1f %%   %13s %9s %9s   %7.2f %7.2f\n",
                              n + 1, t, umax, 100 * error, 100 * ratio, its(its_zero).c_str(), its(its_prev).c_str(),
                              its(its_sur).c_str(), 1e3 * (t1 - t0), 1e3 * (t3 - t2)));
    else
      PetscCall(PetscSNPrintf(line, sizeof(line), "%5" PetscInt_FMT " %7.1f %8.3f  %10s %12s   %13s %9s %9s\n", n + 1, t, umax, "-",
                              "-", its(its_zero).c_str(), its(its_prev).c_str(), "-"));
    PetscCall(PetscPrintf(comm, "%s", line));

    PetscCall(VecCopy(u_new, u));
    if (vtk && ((n + 1) % std::max<PetscInt>(vtk_every, 1) == 0 || n + 1 == steps)) PetscCall(write_vtk(t, f));
  }

  // Totals.
  if (compared > 0)
    PetscCall(PetscPrintf(comm, "totals over %" PetscInt_FMT " compared steps: KSP iterations from zero %" PetscInt_FMT
                                ", from the previous state %" PetscInt_FMT "%s",
                          compared, total_zero, total_prev, has_model ? "" : "\n"));
  if (has_model && compared > 0) {
    PetscCall(PetscPrintf(comm, ", from the surrogate %" PetscInt_FMT " (%.1f %% fewer than from the previous state, %.1f %% fewer than from zero)\n",
                          total_sur_compared, 100.0 * (1.0 - static_cast<double>(total_sur_compared) / static_cast<double>(total_prev)),
                          100.0 * (1.0 - static_cast<double>(total_sur_compared) / static_cast<double>(total_zero))));
  }
  if (has_model && steps > 0) {
    PetscCall(PetscPrintf(comm,
                          "surrogate: relative L2 error mean %.3f %%, max %.3f %%; error / increment mean %.1f %%; "
                          "predict %.2f ms/step, warm-started solve %.2f ms/step, %" PetscInt_FMT " KSP iterations in all\n",
                          100 * sum_error / static_cast<double>(steps), 100 * max_error, 100 * sum_ratio / static_cast<double>(steps),
                          1e3 * predict_time / static_cast<double>(steps), 1e3 * solve_time / static_cast<double>(steps), total_sur));
  }
  if (vtk) PetscCall(PetscPrintf(comm, "VTK: %s (%d steps)\n", vtk->pvd_path().c_str(), vtk->steps()));

  if (check) {
    PetscCheck(has_model, comm, PETSC_ERR_USER_INPUT, "-check needs -surrogate_model");
    PetscCheck(compared > 0, comm, PETSC_ERR_USER_INPUT, "-check needs -compare_every > 0");
    PetscCheck(total_sur_compared < total_prev && total_sur_compared < total_zero, comm, PETSC_ERR_NOT_CONVERGED,
               "check failed: the surrogate's warm start took %" PetscInt_FMT " KSP iterations, the previous state %" PetscInt_FMT
               ", zero %" PetscInt_FMT,
               total_sur_compared, total_prev, total_zero);
    const double mean = sum_error / static_cast<double>(std::max<PetscInt>(steps, 1));
    const double mean_ratio = sum_ratio / static_cast<double>(std::max<PetscInt>(steps, 1));
    PetscCheck(mean_ratio < 0.5, comm, PETSC_ERR_NOT_CONVERGED,
               "check failed: the surrogate's error is %.1f %% of the step's increment on average (the previous state: 100 %%)",
               100 * mean_ratio);
    PetscCheck(mean <= check_error, comm, PETSC_ERR_NOT_CONVERGED, "check failed: mean surrogate error %.3e > %.3e", mean,
               check_error);
    PetscCall(PetscPrintf(comm,
                          "check passed: the warm start saves KSP iterations; the surrogate's error is %.1f %% of the increment "
                          "and %.3f %% of the state on average (limit %.1f %%)\n",
                          100 * mean_ratio, 100 * mean, 100 * check_error));
  }

  if (has_model) PetscCall(SurrogateTeardown(&s));
  vtk.reset();
  for (Vec* v : {&u, &u_new, &f, &b, &guess, &work, &prediction, &diff, &local}) PetscCall(VecDestroy(v));
  PetscCall(KSPDestroy(&ksp));
  PetscCall(heat::DiscretisationDestroy(&disc));
  PetscCall(heat::MeshDestroy(&mesh));
  PetscFunctionReturn(0);
}

}  // namespace heat_example

using heat_example::Generate;
using heat_example::Run;
using heat_example::Verify;

int main(int argc, char** argv) {
  char generate[PETSC_MAX_PATH_LEN] = "";
  PetscBool has_generate = PETSC_FALSE, verify = PETSC_FALSE;
  PetscCall(PetscInitialize(&argc, &argv, nullptr, help));
  PetscCall(SurrogateInitializePackage());
  PetscOptionsBegin(PETSC_COMM_WORLD, nullptr, "heat_petsc mode", "heat_petsc");
  PetscCall(PetscOptionsString("-generate", "Write training data (HDF5) to this file instead of running", nullptr, generate, generate,
                               sizeof(generate), &has_generate));
  PetscCall(PetscOptionsBool("-verify", "Run the convergence tests instead", nullptr, verify, &verify, nullptr));
  PetscOptionsEnd();
  if (verify)
    PetscCall(Verify());
  else if (has_generate)
    PetscCall(Generate(generate));
  else
    PetscCall(Run());
  PetscCall(PetscFinalize());
  return 0;
}
