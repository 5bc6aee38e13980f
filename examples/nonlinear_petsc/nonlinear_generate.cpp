// nonlinear_generate: training data for nonlinear_petsc's surrogate. Cases with random parameters
// (RandomParams), each solved by Newton to a tight tolerance from the ambient state, gathered to rank 0 and
// written to one HDF5 file (layout in README.md, "Training data").
//   mpirun -np 2 nonlinear_generate -o data.h5 -cases 1024 -seed 1
#include <petscsnes.h>
#include <petsctime.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "h5_write.hpp"
#include "heat_problem.hpp"
#include "nonlinear_model.hpp"
#include "nonlinear_solver.hpp"

namespace nonlinear_example {
namespace {

PetscErrorCode Generate(const char* path) {
  MPI_Comm comm = PETSC_COMM_WORLD;
  PetscMPIInt rank;
  heat_example::MeshOptions mo;
  Params base;
  PetscInt cases = 1024, seed = 1;
  PetscReal atol = 1e-9;
  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCall(heat_example::MeshOptionsFromOptions(&mo));
  PetscCall(ParamsFromOptions(&base));  // u_ref, h, emissivity, x_interface are kept; the rest is drawn
  PetscOptionsBegin(comm, nullptr, "Training data", "nonlinear_generate");
  PetscCall(PetscOptionsInt("-cases", "Cases (random parameter sets)", nullptr, cases, &cases, nullptr));
  PetscCall(PetscOptionsInt("-seed", "Random seed", nullptr, seed, &seed, nullptr));
  PetscCall(PetscOptionsReal("-atol", "Newton's absolute tolerance ||F(u)||_2 [W/m]", nullptr, atol, &atol, nullptr));
  PetscOptionsEnd();

  heat::Mesh mesh;
  PetscCall(heat::MeshCreate(comm, mo.nx, mo.ny, mo.lx, mo.ly, mo.refine, &mesh));
  Problem problem;
  PetscCall(ProblemCreate(mesh, base, &problem));
  SNES snes;
  PetscCall(CreateSNES(comm, problem, nullptr, atol, &snes, {SNESLINESEARCHL2}));  // bt stalls at the melting front
  const auto nv = static_cast<hsize_t>(mesh.global_vertices), C = static_cast<hsize_t>(cases);
  PetscCall(PetscPrintf(comm, "generate: %" PetscInt_FMT " cases on %" PetscInt_FMT " vertices, Newton to ||F|| <= %g -> %s\n", cases,
                        mesh.global_vertices, static_cast<double>(atol), path));

  Vec u, gathered;
  VecScatter to_zero;
  ModelInputs inputs;
  PetscCall(heat::MeshCreateVec(mesh, &u));
  PetscCall(VecScatterCreateToZero(u, &to_zero, &gathered));
  const auto gather = [&](Vec v, std::vector<float>* out) -> PetscErrorCode {
    PetscFunctionBeginUser;
    PetscCall(VecScatterBegin(to_zero, v, gathered, INSERT_VALUES, SCATTER_FORWARD));
    PetscCall(VecScatterEnd(to_zero, v, gathered, INSERT_VALUES, SCATTER_FORWARD));
    if (rank == 0) {
      const PetscScalar* a;
      out->resize(nv);
      PetscCall(VecGetArrayRead(gathered, &a));
      for (hsize_t i = 0; i < nv; ++i) (*out)[i] = static_cast<float>(a[i]);
      PetscCall(VecRestoreArrayRead(gathered, &a));
    }
    PetscFunctionReturn(0);
  };
  // The model's channels without a model: x, y, q, k, u_ambient.
  PetscCall(heat::MeshCreateVec(mesh, &inputs.x));
  for (Vec* v : {&inputs.y, &inputs.q, &inputs.k, &inputs.u_ambient}) PetscCall(VecDuplicate(inputs.x, v));
  PetscCall(heat::MeshInterpolate(mesh, [](double x, double, double) { return x; }, 0, inputs.x));
  PetscCall(heat::MeshInterpolate(mesh, [](double, double y, double) { return y; }, 0, inputs.y));

  example_h5::File h5;
  std::vector<float> gx, gy, gu, gq, gk;
  PetscCall(gather(inputs.x, &gx));
  PetscCall(gather(inputs.y, &gy));
  const std::vector<std::string> names = Params::names();
  if (rank == 0) {
    PetscCall(example_h5::Create(path, &h5));
    std::vector<double> coords(2 * nv);
    for (hsize_t i = 0; i < nv; ++i) coords[2 * i] = gx[i], coords[2 * i + 1] = gy[i];
    PetscCall(example_h5::Write(h5.file, "coords", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {nv, 2}, coords.data()));
    for (const char* name : {"u", "q", "k"}) PetscCall(example_h5::Write(h5.file, name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {C, nv}, nullptr));
    PetscCall(example_h5::Write(h5.file, "params", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {C, static_cast<hsize_t>(names.size())}, nullptr));
    PetscCall(example_h5::Write(h5.file, "newton_its", H5T_STD_I32LE, H5T_NATIVE_INT, {C}, nullptr));
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
    PetscCall(example_h5::StringAttribute(h5.file, "param_names", joined));
    PetscCall(example_h5::StringAttribute(h5.file, "description",
                                          "nonlinear_generate: u[c] is the converged temperature (K) of case c at the vertices "
                                          "coords (m); q[c] its source (W/m^3), k[c] its base conductivity (W/(m K)); params[c] "
                                          "its parameters (param_names); newton_its[c] Newton's iterations from the ambient state"));
    PetscCall(example_h5::Attribute(h5.file, "seed", static_cast<double>(seed)));
    PetscCall(example_h5::Attribute(h5.file, "nx", static_cast<double>(mo.nx)));
    PetscCall(example_h5::Attribute(h5.file, "ny", static_cast<double>(mo.ny)));
    PetscCall(example_h5::Attribute(h5.file, "refine", static_cast<double>(mo.refine)));
    PetscCall(example_h5::Attribute(h5.file, "atol", atol));
  }

  std::mt19937_64 gen(static_cast<std::uint64_t>(seed));
  PetscInt total_newton = 0, total_krylov = 0;
  PetscLogDouble start, now;
  PetscCall(PetscTime(&start));
  for (PetscInt c = 0; c < cases; ++c) {
    const Params p = RandomParams(gen, base);  // the same draw on every rank
    PetscCall(ProblemSetParams(&problem, p));
    PetscCall(ModelInputsSet(mesh, p, &inputs));
    PetscCall(VecSet(u, p.u_ambient));
    PetscInt newton = 0, krylov = 0;
    PetscCall(SolveFrom(snes, u, &newton, &krylov));
    total_newton += newton;
    total_krylov += krylov;
    PetscCall(gather(u, &gu));
    PetscCall(gather(inputs.q, &gq));
    PetscCall(gather(inputs.k, &gk));
    if (rank == 0) {
      const auto row = static_cast<hsize_t>(c);
      const std::vector<double> values = p.values();
      const int its = static_cast<int>(newton);
      PetscCall(example_h5::WriteRows(h5.file, "u", row, 1, H5T_NATIVE_FLOAT, gu.data()));
      PetscCall(example_h5::WriteRows(h5.file, "q", row, 1, H5T_NATIVE_FLOAT, gq.data()));
      PetscCall(example_h5::WriteRows(h5.file, "k", row, 1, H5T_NATIVE_FLOAT, gk.data()));
      PetscCall(example_h5::WriteRows(h5.file, "params", row, 1, H5T_NATIVE_DOUBLE, values.data()));
      PetscCall(example_h5::WriteRows(h5.file, "newton_its", row, 1, H5T_NATIVE_INT, &its));
    }
    if ((c + 1) % 64 == 0 || c + 1 == cases) {
      PetscCall(PetscTime(&now));
      PetscCall(PetscPrintf(comm, "  %" PetscInt_FMT " / %" PetscInt_FMT " cases, %.1f Newton and %.0f Krylov iterations per case, %.1f s\n",
                            c + 1, cases, static_cast<double>(total_newton) / static_cast<double>(c + 1),
                            static_cast<double>(total_krylov) / static_cast<double>(c + 1), now - start));
    }
  }
  PetscCall(VecScatterDestroy(&to_zero));
  PetscCall(VecDestroy(&u));
  PetscCall(VecDestroy(&gathered));
  PetscCall(ModelInputsDestroy(&inputs));
  PetscCall(SNESDestroy(&snes));
  PetscCall(ProblemDestroy(&problem));
  PetscCall(heat::MeshDestroy(&mesh));
  PetscFunctionReturn(0);
}

}  // namespace
}  // namespace nonlinear_example

int main(int argc, char** argv) {
  char path[PETSC_MAX_PATH_LEN] = "";
  PetscBool has_path = PETSC_FALSE;
  PetscCall(PetscInitialize(&argc, &argv, nullptr, "Training data for nonlinear_petsc's surrogate (HDF5).\n"));
  PetscOptionsBegin(PETSC_COMM_WORLD, nullptr, "Output", "nonlinear_generate");
  PetscCall(PetscOptionsString("-o", "HDF5 file to write", nullptr, path, path, sizeof(path), &has_path));
  PetscOptionsEnd();
  PetscCheck(has_path && path[0] != '\0', PETSC_COMM_WORLD, PETSC_ERR_USER_INPUT, "give the output file: -o data.h5");
  PetscCall(nonlinear_example::Generate(path));
  PetscCall(PetscFinalize());
  return 0;
}
