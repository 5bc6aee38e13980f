// heat_generate: training data for heat_petsc's surrogate. Trajectories with random parameters
// (RandomParams), solved to a tight tolerance, gathered to rank 0 and written to one HDF5 file (layout in
// README.md, "Training data").   heat_generate -o data.h5 -trajectories 192 -steps 40 -seed 1
#include <hdf5.h>
#include <petscdmplex.h>
#include <petscksp.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "h5_write.hpp"
#include "heat_problem.hpp"

namespace heat_example {
namespace {

// Generate: trajectories with random parameters, gathered to rank 0 and written to HDF5.
PetscErrorCode Generate(const char* path) {
  MPI_Comm comm = PETSC_COMM_WORLD;
  PetscMPIInt rank;
  MeshOptions mo;
  Params base;
  PetscInt trajectories = 160, steps = 40, seed = 1;
  double dt = 1.0, rtol = 1e-10;
  PetscFunctionBeginUser;
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  PetscCall(MeshOptionsFromOptions(&mo));
  PetscCall(ParamsFromOptions(&base));  // beta and u_ambient are kept; the rest is drawn at random
  PetscOptionsBegin(comm, nullptr, "Training data", "heat_generate");
  PetscCall(PetscOptionsInt("-trajectories", "Trajectories (random parameter sets)", nullptr, trajectories, &trajectories, nullptr));
  PetscCall(PetscOptionsInt("-steps", "Time steps per trajectory", nullptr, steps, &steps, nullptr));
  PetscCall(PetscOptionsInt("-seed", "Random seed", nullptr, seed, &seed, nullptr));
  PetscCall(PetscOptionsReal("-dt", "Time step [s]", nullptr, dt, &dt, nullptr));
  PetscCall(PetscOptionsReal("-rtol", "KSP relative tolerance", nullptr, rtol, &rtol, nullptr));
  PetscOptionsEnd();

  heat::Mesh mesh;
  PetscCall(heat::MeshCreate(comm, mo.nx, mo.ny, mo.lx, mo.ly, mo.refine, &mesh));
  const auto nv = static_cast<hsize_t>(mesh.global_vertices);
  const auto T = static_cast<hsize_t>(trajectories), S = static_cast<hsize_t>(steps);
  PetscCall(PetscPrintf(comm, "generate: %" PetscInt_FMT " trajectories x %" PetscInt_FMT " steps (dt %.4f s) on %" PetscInt_FMT
                              " vertices -> %s\n",
                        trajectories, steps, dt, mesh.global_vertices, path));

  Vec u, f, b, x, y, kappa, gathered;
  VecScatter to_zero;
  PetscCall(heat::MeshCreateVec(mesh, &u));
  for (Vec* v : {&f, &b, &x, &y, &kappa}) PetscCall(VecDuplicate(u, v));
  PetscCall(VecScatterCreateToZero(u, &to_zero, &gathered));
  const auto gather = [&](Vec v, float* out) -> PetscErrorCode {
    PetscFunctionBeginUser;
    PetscCall(VecScatterBegin(to_zero, v, gathered, INSERT_VALUES, SCATTER_FORWARD));
    PetscCall(VecScatterEnd(to_zero, v, gathered, INSERT_VALUES, SCATTER_FORWARD));
    if (rank == 0) {
      const PetscScalar* a;
      PetscCall(VecGetArrayRead(gathered, &a));
      for (hsize_t i = 0; i < nv; ++i) out[i] = static_cast<float>(a[i]);
      PetscCall(VecRestoreArrayRead(gathered, &a));
    }
    PetscFunctionReturn(0);
  };

  example_h5::File h5;
  std::vector<float> gx(nv), gy(nv), gk(nv), us((S + 1) * nv), fs(S * nv), rs(S * nv);
  Vec rate;
  PetscCall(VecDuplicate(u, &rate));
  PetscCall(heat::MeshInterpolate(mesh, [](double xx, double, double) { return xx; }, 0, x));
  PetscCall(heat::MeshInterpolate(mesh, [](double, double yy, double) { return yy; }, 0, y));
  PetscCall(gather(x, gx.data()));
  PetscCall(gather(y, gy.data()));
  const std::vector<std::string> names = Params::names();
  if (rank == 0) {
    PetscCall(example_h5::Create(path, &h5));
    std::vector<double> coords(2 * nv);
    for (hsize_t i = 0; i < nv; ++i) {
      coords[2 * i] = gx[i];
      coords[2 * i + 1] = gy[i];
    }
    PetscCall(example_h5::Write(h5.file, "coords", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {nv, 2}, coords.data()));
    PetscCall(example_h5::Write(h5.file, "u", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, S + 1, nv}, nullptr));
    PetscCall(example_h5::Write(h5.file, "f", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, S, nv}, nullptr));
    PetscCall(example_h5::Write(h5.file, "rate", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, S, nv}, nullptr));
    PetscCall(example_h5::Write(h5.file, "kappa", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, nv}, nullptr));
    PetscCall(example_h5::Write(h5.file, "params", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {T, static_cast<hsize_t>(names.size())}, nullptr));
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
    PetscCall(example_h5::StringAttribute(h5.file, "param_names", joined));
    PetscCall(example_h5::StringAttribute(h5.file, "description",
                                "heat_generate: u[t, n] is the state at time n*dt of trajectory t (n = 0: initial "
                                "condition); f[t, n] is the source at time (n+1)*dt (used to step from n to n+1); "
                                "rate[t, n] = M^-1 (b - A u[t, n]) of that step; kappa[t] the diffusivity at the "
                                "vertices; coords the vertices (m)"));
    PetscCall(example_h5::Attribute(h5.file, "dt", dt));
    PetscCall(example_h5::Attribute(h5.file, "steps", static_cast<double>(steps)));
    PetscCall(example_h5::Attribute(h5.file, "seed", static_cast<double>(seed)));
    PetscCall(example_h5::Attribute(h5.file, "nx", static_cast<double>(mo.nx)));
    PetscCall(example_h5::Attribute(h5.file, "ny", static_cast<double>(mo.ny)));
    PetscCall(example_h5::Attribute(h5.file, "refine", static_cast<double>(mo.refine)));
    PetscCall(example_h5::Attribute(h5.file, "rtol", rtol));
  }

  std::mt19937_64 gen(static_cast<std::uint64_t>(seed));
  PetscInt total_its = 0;
  for (PetscInt traj = 0; traj < trajectories; ++traj) {
    const Params p = RandomParams(gen, base.beta, base.u_ambient);  // the same draw on every rank
    heat::Discretisation disc;
    KSP ksp;
    PetscCall(heat::DiscretisationCreate(mesh, [&](double xx, double yy) { return p.kappa(xx, yy); }, p.beta, dt, &disc));
    PetscCall(heat::CreateKSP(comm, disc, rtol, &ksp));
    const heat::BoundaryFunction g = [&](double, double, double, double, double) { return p.beta * p.u_ambient; };
    PetscCall(heat::MeshInterpolate(mesh, [&](double xx, double yy, double) { return p.initial(xx, yy); }, 0, u));
    PetscCall(heat::MeshInterpolate(mesh, [&](double xx, double yy, double) { return p.kappa(xx, yy); }, 0, kappa));
    PetscCall(gather(u, us.data()));
    PetscCall(gather(kappa, gk.data()));
    for (PetscInt n = 0; n < steps; ++n) {
      const double t = static_cast<double>(n + 1) * dt;
      PetscCall(heat::MeshInterpolate(mesh, [&](double xx, double yy, double tt) { return p.source(xx, yy, tt); }, t, f));
      PetscCall(heat::AssembleRhs(mesh, disc, u, f, g, t, b));
      PetscCall(ComputeRate(disc, b, u, rate));
      PetscCall(gather(rate, rs.data() + static_cast<std::size_t>(n) * nv));
      PetscInt its = 0;
      PetscCall(Solve(ksp, b, u, true, &its));  // from the previous state
      total_its += its;
      PetscCall(gather(f, fs.data() + static_cast<std::size_t>(n) * nv));
      PetscCall(gather(u, us.data() + static_cast<std::size_t>(n + 1) * nv));
    }
    if (rank == 0) {
      const auto tt = static_cast<hsize_t>(traj);
      std::vector<double> values = p.values();
      PetscCall(example_h5::WriteRows(h5.file, "u", tt, 1, H5T_NATIVE_FLOAT, us.data()));
      PetscCall(example_h5::WriteRows(h5.file, "f", tt, 1, H5T_NATIVE_FLOAT, fs.data()));
      PetscCall(example_h5::WriteRows(h5.file, "rate", tt, 1, H5T_NATIVE_FLOAT, rs.data()));
      PetscCall(example_h5::WriteRows(h5.file, "kappa", tt, 1, H5T_NATIVE_FLOAT, gk.data()));
      PetscCall(example_h5::WriteRows(h5.file, "params", tt, 1, H5T_NATIVE_DOUBLE, values.data()));
    }
    PetscCall(KSPDestroy(&ksp));
    PetscCall(heat::DiscretisationDestroy(&disc));
    if ((traj + 1) % 20 == 0 || traj + 1 == trajectories)
      PetscCall(PetscPrintf(comm, "  %" PetscInt_FMT " / %" PetscInt_FMT " trajectories, %" PetscInt_FMT " KSP iterations so far\n",
                            traj + 1, trajectories, total_its));
  }
  PetscCall(VecScatterDestroy(&to_zero));
  for (Vec* v : {&u, &f, &b, &x, &y, &kappa, &rate, &gathered}) PetscCall(VecDestroy(v));
  PetscCall(heat::MeshDestroy(&mesh));
  PetscFunctionReturn(0);
}

}  // namespace
}  // namespace heat_example

int main(int argc, char** argv) {
  char path[PETSC_MAX_PATH_LEN] = "";
  PetscBool has_path = PETSC_FALSE;
  PetscCall(PetscInitialize(&argc, &argv, nullptr, "Training data for heat_petsc's surrogate (HDF5).\n"));
  PetscOptionsBegin(PETSC_COMM_WORLD, nullptr, "Output", "heat_generate");
  PetscCall(PetscOptionsString("-o", "HDF5 file to write", nullptr, path, path, sizeof(path), &has_path));
  PetscOptionsEnd();
  PetscCheck(has_path && path[0] != '\0', PETSC_COMM_WORLD, PETSC_ERR_USER_INPUT, "give the output file: -o data.h5");
  PetscCall(heat_example::Generate(path));
  PetscCall(PetscFinalize());
  return 0;
}
