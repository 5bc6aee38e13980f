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

#include "heat_problem.hpp"

namespace heat_example {
namespace {

// ---------------------------------------------------------------------------------------------------
// Generate: trajectories with random parameters, gathered to rank 0 and written to HDF5.
struct H5 {
  hid_t file = -1;
  ~H5() {
    if (file >= 0) H5Fclose(file);
  }
};

PetscErrorCode H5Check(bool ok, const char* what) {
  PetscFunctionBeginUser;
  PetscCheck(ok, PETSC_COMM_SELF, PETSC_ERR_FILE_WRITE, "HDF5: %s failed", what);
  PetscFunctionReturn(0);
}

PetscErrorCode H5Write(hid_t file, const char* name, hid_t type, hid_t mem_type, std::vector<hsize_t> dims, const void* data) {
  PetscFunctionBeginUser;
  const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t set = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  PetscCall(H5Check(set >= 0, name));
  if (data) PetscCall(H5Check(H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0, name));
  H5Dclose(set);
  H5Sclose(space);
  PetscFunctionReturn(0);
}

// Writes rows [first, first + count) along the leading dimension of an existing dataset.
PetscErrorCode H5WriteRows(hid_t file, const char* name, hsize_t first, hsize_t count, const float* data) {
  PetscFunctionBeginUser;
  const hid_t set = H5Dopen2(file, name, H5P_DEFAULT);
  PetscCall(H5Check(set >= 0, name));
  const hid_t space = H5Dget_space(set);
  hsize_t dims[3] = {0, 0, 0}, start[3] = {first, 0, 0};
  const int rank = H5Sget_simple_extent_dims(space, dims, nullptr);
  dims[0] = count;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, dims, nullptr);
  const hid_t mem = H5Screate_simple(rank, dims, nullptr);
  PetscCall(H5Check(H5Dwrite(set, H5T_NATIVE_FLOAT, mem, space, H5P_DEFAULT, data) >= 0, name));
  H5Sclose(mem);
  H5Sclose(space);
  H5Dclose(set);
  PetscFunctionReturn(0);
}

PetscErrorCode H5Attribute(hid_t file, const char* name, double value) {
  PetscFunctionBeginUser;
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  PetscCall(H5Check(attr >= 0 && H5Awrite(attr, H5T_NATIVE_DOUBLE, &value) >= 0, name));
  H5Aclose(attr);
  H5Sclose(space);
  PetscFunctionReturn(0);
}

PetscErrorCode H5StringAttribute(hid_t file, const char* name, const std::string& value) {
  PetscFunctionBeginUser;
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, value.size() + 1);
  const hid_t space = H5Screate(H5S_SCALAR);
  const hid_t attr = H5Acreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  PetscCall(H5Check(attr >= 0 && H5Awrite(attr, type, value.c_str()) >= 0, name));
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
  PetscFunctionReturn(0);
}

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

  H5 h5;
  std::vector<float> gx(nv), gy(nv), gk(nv), us((S + 1) * nv), fs(S * nv), rs(S * nv);
  Vec rate;
  PetscCall(VecDuplicate(u, &rate));
  PetscCall(heat::MeshInterpolate(mesh, [](double xx, double, double) { return xx; }, 0, x));
  PetscCall(heat::MeshInterpolate(mesh, [](double, double yy, double) { return yy; }, 0, y));
  PetscCall(gather(x, gx.data()));
  PetscCall(gather(y, gy.data()));
  const std::vector<std::string> names = Params::names();
  if (rank == 0) {
    h5.file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    PetscCall(H5Check(h5.file >= 0, path));
    std::vector<double> coords(2 * nv);
    for (hsize_t i = 0; i < nv; ++i) {
      coords[2 * i] = gx[i];
      coords[2 * i + 1] = gy[i];
    }
    PetscCall(H5Write(h5.file, "coords", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {nv, 2}, coords.data()));
    PetscCall(H5Write(h5.file, "u", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, S + 1, nv}, nullptr));
    PetscCall(H5Write(h5.file, "f", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, S, nv}, nullptr));
    PetscCall(H5Write(h5.file, "rate", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, S, nv}, nullptr));
    PetscCall(H5Write(h5.file, "kappa", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, {T, nv}, nullptr));
    PetscCall(H5Write(h5.file, "params", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, {T, static_cast<hsize_t>(names.size())}, nullptr));
    std::string joined;
    for (const auto& n : names) joined += (joined.empty() ? "" : ",") + n;
    PetscCall(H5StringAttribute(h5.file, "param_names", joined));
    PetscCall(H5StringAttribute(h5.file, "description",
                                "heat_generate: u[t, n] is the state at time n*dt of trajectory t (n = 0: initial "
                                "condition); f[t, n] is the source at time (n+1)*dt (used to step from n to n+1); "
                                "rate[t, n] = M^-1 (b - A u[t, n]) of that step; kappa[t] the diffusivity at the "
                                "vertices; coords the vertices (m)"));
    PetscCall(H5Attribute(h5.file, "dt", dt));
    PetscCall(H5Attribute(h5.file, "steps", static_cast<double>(steps)));
    PetscCall(H5Attribute(h5.file, "seed", static_cast<double>(seed)));
    PetscCall(H5Attribute(h5.file, "nx", static_cast<double>(mo.nx)));
    PetscCall(H5Attribute(h5.file, "ny", static_cast<double>(mo.ny)));
    PetscCall(H5Attribute(h5.file, "refine", static_cast<double>(mo.refine)));
    PetscCall(H5Attribute(h5.file, "rtol", rtol));
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
      PetscCall(H5WriteRows(h5.file, "u", tt, 1, us.data()));
      PetscCall(H5WriteRows(h5.file, "f", tt, 1, fs.data()));
      PetscCall(H5WriteRows(h5.file, "rate", tt, 1, rs.data()));
      PetscCall(H5WriteRows(h5.file, "kappa", tt, 1, gk.data()));
      const hid_t set = H5Dopen2(h5.file, "params", H5P_DEFAULT);
      const hid_t space = H5Dget_space(set);
      hsize_t start[2] = {tt, 0}, count[2] = {1, static_cast<hsize_t>(values.size())};
      H5Sselect_hyperslab(space, H5S_SELECT_SET, start, nullptr, count, nullptr);
      const hid_t mem = H5Screate_simple(2, count, nullptr);
      PetscCall(H5Check(H5Dwrite(set, H5T_NATIVE_DOUBLE, mem, space, H5P_DEFAULT, values.data()) >= 0, "params"));
      H5Sclose(mem);
      H5Sclose(space);
      H5Dclose(set);
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
