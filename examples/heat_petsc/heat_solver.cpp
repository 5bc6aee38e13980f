#include "heat_solver.hpp"

#include <array>
#include <cmath>

namespace heat {

namespace {

// Vertices of a cell or an edge (the points of its closure that are vertices), in closure order.
PetscErrorCode closure_vertices(DM dm, PetscInt point, PetscInt v_start, PetscInt v_end, PetscInt* vertices, PetscInt max,
                                PetscInt* count) {
  PetscInt n = 0, *closure = nullptr;
  PetscFunctionBeginUser;
  PetscCall(DMPlexGetTransitiveClosure(dm, point, PETSC_TRUE, &n, &closure));
  *count = 0;
  for (PetscInt k = 0; k < 2 * n; k += 2)
    if (closure[k] >= v_start && closure[k] < v_end) {
      PetscCheck(*count < max, PETSC_COMM_SELF, PETSC_ERR_PLIB, "point %" PetscInt_FMT " has too many vertices", point);
      vertices[(*count)++] = closure[k];
    }
  PetscCall(DMPlexRestoreTransitiveClosure(dm, point, PETSC_TRUE, &n, &closure));
  PetscFunctionReturn(0);
}

}  // namespace

PetscErrorCode MeshCreate(MPI_Comm comm, PetscInt nx, PetscInt ny, double lx, double ly, PetscInt refine, Mesh* mesh) {
  PetscMPIInt rank;
  PetscFunctionBeginUser;
  PetscCheck(nx > 0 && ny > 0 && refine >= 0, comm, PETSC_ERR_ARG_OUTOFRANGE, "bad mesh size %" PetscInt_FMT " x %" PetscInt_FMT
             ", refine %" PetscInt_FMT, nx, ny, refine);
  PetscCallMPI(MPI_Comm_rank(comm, &rank));
  mesh->lx = lx;
  mesh->ly = ly;

  // Rank 0 builds the coarse triangulation; the others pass nothing.
  std::vector<PetscInt> cells;
  std::vector<PetscReal> coords;
  PetscInt n_cells = 0, n_vertices = 0;
  if (rank == 0) {
    n_vertices = (nx + 1) * (ny + 1);
    n_cells = 2 * nx * ny;
    for (PetscInt j = 0; j <= ny; ++j)
      for (PetscInt i = 0; i <= nx; ++i) {
        coords.push_back(lx * static_cast<double>(i) / static_cast<double>(nx));
        coords.push_back(ly * static_cast<double>(j) / static_cast<double>(ny));
      }
    for (PetscInt j = 0; j < ny; ++j)
      for (PetscInt i = 0; i < nx; ++i) {
        const PetscInt v00 = j * (nx + 1) + i, v10 = v00 + 1, v01 = v00 + nx + 1, v11 = v01 + 1;
        for (PetscInt v : {v00, v10, v11, v00, v11, v01}) cells.push_back(v);  // counter-clockwise
      }
  }
  DM dm;
  PetscCall(DMPlexCreateFromCellListPetsc(comm, 2, n_cells, n_vertices, 3, PETSC_TRUE, cells.data(), 2, coords.data(), &dm));
  // Boundary edges (support of size one), marked before distribution; labels follow distribution and refinement.
  DMLabel label;
  PetscCall(DMCreateLabel(dm, "boundary"));
  PetscCall(DMGetLabel(dm, "boundary", &label));
  PetscCall(DMPlexMarkBoundaryFaces(dm, 1, label));
  DM distributed = nullptr;
  PetscCall(DMPlexDistribute(dm, 0, nullptr, &distributed));
  if (distributed) {
    PetscCall(DMDestroy(&dm));
    dm = distributed;
  }
  for (PetscInt r = 0; r < refine; ++r) {
    DM fine;
    PetscCall(DMRefine(dm, comm, &fine));
    PetscCall(DMDestroy(&dm));
    dm = fine;
  }
  PetscCall(PetscObjectSetName(reinterpret_cast<PetscObject>(dm), "mesh"));
  PetscCall(DMViewFromOptions(dm, nullptr, "-dm_view"));
  mesh->dm = dm;

  // One unknown per vertex.
  PetscInt p_start, p_end;
  PetscCall(DMPlexGetChart(dm, &p_start, &p_end));
  PetscCall(DMPlexGetDepthStratum(dm, 0, &mesh->v_start, &mesh->v_end));
  PetscCall(DMPlexGetHeightStratum(dm, 0, &mesh->c_start, &mesh->c_end));
  PetscSection section;
  PetscCall(PetscSectionCreate(comm, &section));
  PetscCall(PetscSectionSetChart(section, p_start, p_end));
  for (PetscInt v = mesh->v_start; v < mesh->v_end; ++v) PetscCall(PetscSectionSetDof(section, v, 1));
  PetscCall(PetscSectionSetUp(section));
  PetscCall(DMSetLocalSection(dm, section));
  PetscCall(PetscSectionDestroy(&section));

  PetscSection global;
  PetscCall(DMGetGlobalSection(dm, &global));
  Vec probe;
  PetscCall(DMCreateGlobalVector(dm, &probe));
  PetscCall(VecGetOwnershipRange(probe, &mesh->row_start, nullptr));
  PetscCall(VecGetLocalSize(probe, &mesh->n_owned));
  PetscCall(VecGetSize(probe, &mesh->global_vertices));
  PetscCall(VecDestroy(&probe));

  // Coordinates, global rows, owned vertices (in point order: the order of the global Vec's rows).
  const PetscInt nv = mesh->local_vertices();
  mesh->xy.assign(static_cast<std::size_t>(2 * nv), 0.0);
  mesh->global_row.assign(static_cast<std::size_t>(nv), -1);
  mesh->owned.assign(static_cast<std::size_t>(mesh->n_owned), -1);
  Vec coordinates;
  PetscSection csection;
  const PetscScalar* c;
  PetscCall(DMGetCoordinatesLocal(dm, &coordinates));
  PetscCall(DMGetCoordinateSection(dm, &csection));
  PetscCall(VecGetArrayRead(coordinates, &c));
  for (PetscInt v = mesh->v_start; v < mesh->v_end; ++v) {
    const auto k = static_cast<std::size_t>(v - mesh->v_start);
    PetscInt off, goff;
    PetscCall(PetscSectionGetOffset(csection, v, &off));
    mesh->xy[2 * k] = c[off];
    mesh->xy[2 * k + 1] = c[off + 1];
    PetscCall(PetscSectionGetOffset(global, v, &goff));
    mesh->global_row[k] = goff >= 0 ? goff : -(goff + 1);
    if (goff >= 0) mesh->owned[static_cast<std::size_t>(goff - mesh->row_start)] = v;
  }
  PetscCall(VecRestoreArrayRead(coordinates, &c));
  for (PetscInt v : mesh->owned) PetscCheck(v >= 0, comm, PETSC_ERR_PLIB, "owned vertices do not fill the rows");

  // Triangles (counter-clockwise) and the local area.
  double area = 0;
  mesh->triangles.clear();
  for (PetscInt cell = mesh->c_start; cell < mesh->c_end; ++cell) {
    PetscInt v[3], n;
    PetscCall(closure_vertices(dm, cell, mesh->v_start, mesh->v_end, v, 3, &n));
    PetscCheck(n == 3, comm, PETSC_ERR_PLIB, "cell %" PetscInt_FMT " is not a triangle", cell);
    std::array<PetscInt, 3> t = {v[0] - mesh->v_start, v[1] - mesh->v_start, v[2] - mesh->v_start};
    const double* p0 = &mesh->xy[2 * static_cast<std::size_t>(t[0])];
    const double* p1 = &mesh->xy[2 * static_cast<std::size_t>(t[1])];
    const double* p2 = &mesh->xy[2 * static_cast<std::size_t>(t[2])];
    const double twice = (p1[0] - p0[0]) * (p2[1] - p0[1]) - (p2[0] - p0[0]) * (p1[1] - p0[1]);
    if (twice < 0) std::swap(t[1], t[2]);
    area += 0.5 * std::abs(twice);
    mesh->triangles.insert(mesh->triangles.end(), t.begin(), t.end());
  }

  // Boundary edges of the local triangles, with the outward normal (away from the triangle's centroid).
  double length = 0;
  mesh->boundary.clear();
  IS is;
  PetscCall(DMGetLabel(dm, "boundary", &label));  // the refined mesh's own label
  PetscCheck(label, comm, PETSC_ERR_PLIB, "the mesh lost its boundary label");
  PetscCall(DMLabelGetStratumIS(label, 1, &is));
  if (is) {
    PetscInt n_edges;
    const PetscInt* edges;
    PetscCall(ISGetLocalSize(is, &n_edges));
    PetscCall(ISGetIndices(is, &edges));
    for (PetscInt k = 0; k < n_edges; ++k) {
      const PetscInt e = edges[k];
      PetscInt support_size, v[2], n;
      const PetscInt* support;
      PetscCall(DMPlexGetSupportSize(dm, e, &support_size));
      if (support_size != 1) continue;  // not an edge of a local triangle
      PetscCall(DMPlexGetSupport(dm, e, &support));
      PetscCall(closure_vertices(dm, e, mesh->v_start, mesh->v_end, v, 2, &n));
      PetscCheck(n == 2, comm, PETSC_ERR_PLIB, "boundary point %" PetscInt_FMT " is not an edge", e);
      PetscInt cv[3], nc;
      PetscCall(closure_vertices(dm, support[0], mesh->v_start, mesh->v_end, cv, 3, &nc));
      double cx = 0, cy = 0;
      for (PetscInt j = 0; j < 3; ++j) {
        cx += mesh->xy[2 * static_cast<std::size_t>(cv[j] - mesh->v_start)] / 3;
        cy += mesh->xy[2 * static_cast<std::size_t>(cv[j] - mesh->v_start) + 1] / 3;
      }
      Mesh::Edge edge{v[0] - mesh->v_start, v[1] - mesh->v_start, 0, 0, 0};
      const double* a = &mesh->xy[2 * static_cast<std::size_t>(edge.a)];
      const double* b = &mesh->xy[2 * static_cast<std::size_t>(edge.b)];
      edge.length = std::hypot(b[0] - a[0], b[1] - a[1]);
      edge.nx = (b[1] - a[1]) / edge.length;
      edge.ny = -(b[0] - a[0]) / edge.length;
      if (edge.nx * (0.5 * (a[0] + b[0]) - cx) + edge.ny * (0.5 * (a[1] + b[1]) - cy) < 0) {
        edge.nx = -edge.nx;
        edge.ny = -edge.ny;
      }
      length += edge.length;
      mesh->boundary.push_back(edge);
    }
    PetscCall(ISRestoreIndices(is, &edges));
    PetscCall(ISDestroy(&is));
  }
  PetscInt n_triangles = mesh->c_end - mesh->c_start;
  PetscCallMPI(MPI_Allreduce(&n_triangles, &mesh->global_triangles, 1, MPIU_INT, MPI_SUM, comm));
  PetscCallMPI(MPI_Allreduce(&area, &mesh->area, 1, MPI_DOUBLE, MPI_SUM, comm));
  PetscCallMPI(MPI_Allreduce(&length, &mesh->boundary_length, 1, MPI_DOUBLE, MPI_SUM, comm));
  PetscFunctionReturn(0);
}

PetscErrorCode MeshDestroy(Mesh* mesh) {
  PetscFunctionBeginUser;
  PetscCall(DMDestroy(&mesh->dm));
  *mesh = Mesh{};
  PetscFunctionReturn(0);
}

PetscErrorCode MeshCreateVec(const Mesh& mesh, Vec* v) {
  PetscFunctionBeginUser;
  PetscCall(DMCreateGlobalVector(mesh.dm, v));
  PetscFunctionReturn(0);
}

PetscErrorCode MeshCreateCoordsVec(const Mesh& mesh, Vec* coords) {
  PetscScalar* a;
  PetscFunctionBeginUser;
  PetscCall(VecCreate(PetscObjectComm(reinterpret_cast<PetscObject>(mesh.dm)), coords));
  PetscCall(VecSetSizes(*coords, 2 * mesh.n_owned, PETSC_DETERMINE));
  PetscCall(VecSetBlockSize(*coords, 2));
  PetscCall(VecSetType(*coords, VECSTANDARD));
  PetscCall(VecGetArrayWrite(*coords, &a));
  for (PetscInt i = 0; i < mesh.n_owned; ++i) {
    const auto k = static_cast<std::size_t>(mesh.owned[static_cast<std::size_t>(i)] - mesh.v_start);
    a[2 * i] = mesh.xy[2 * k];
    a[2 * i + 1] = mesh.xy[2 * k + 1];
  }
  PetscCall(VecRestoreArrayWrite(*coords, &a));
  PetscFunctionReturn(0);
}

PetscErrorCode MeshInterpolate(const Mesh& mesh, const PointFunction& f, double t, Vec v) {
  PetscScalar* a;
  PetscFunctionBeginUser;
  PetscCall(VecGetArrayWrite(v, &a));
  for (PetscInt i = 0; i < mesh.n_owned; ++i) {
    const auto k = static_cast<std::size_t>(mesh.owned[static_cast<std::size_t>(i)] - mesh.v_start);
    a[i] = f(mesh.xy[2 * k], mesh.xy[2 * k + 1], t);
  }
  PetscCall(VecRestoreArrayWrite(v, &a));
  PetscFunctionReturn(0);
}

PetscErrorCode DiscretisationCreate(const Mesh& mesh, const std::function<double(double, double)>& kappa, double beta,
                                    double dt, Discretisation* disc) {
  PetscFunctionBeginUser;
  disc->dt = dt;
  PetscCall(DMCreateMatrix(mesh.dm, &disc->A));
  PetscCall(MatSetOption(disc->A, MAT_SPD, PETSC_TRUE));
  PetscCall(MeshCreateVec(mesh, &disc->mass));
  PetscCall(VecDuplicate(disc->mass, &disc->work));
  PetscCall(VecSet(disc->mass, 0.0));

  // Triangles: stiffness kappa * area * grad(lambda_i) . grad(lambda_j), lumped mass area / 3.
  for (std::size_t c = 0; c < mesh.triangles.size(); c += 3) {
    PetscInt rows[3];
    const double* p[3];
    for (std::size_t j = 0; j < 3; ++j) {
      const auto v = static_cast<std::size_t>(mesh.triangles[c + j]);
      rows[j] = mesh.global_row[v];
      p[j] = &mesh.xy[2 * v];
    }
    const double twice = (p[1][0] - p[0][0]) * (p[2][1] - p[0][1]) - (p[2][0] - p[0][0]) * (p[1][1] - p[0][1]);
    const double area = 0.5 * twice;  // counter-clockwise: positive
    const double gx[3] = {(p[1][1] - p[2][1]) / twice, (p[2][1] - p[0][1]) / twice, (p[0][1] - p[1][1]) / twice};
    const double gy[3] = {(p[2][0] - p[1][0]) / twice, (p[0][0] - p[2][0]) / twice, (p[1][0] - p[0][0]) / twice};
    const double k = kappa((p[0][0] + p[1][0] + p[2][0]) / 3, (p[0][1] + p[1][1] + p[2][1]) / 3);
    PetscScalar ke[9], me[3];
    for (int i = 0; i < 3; ++i) {
      me[i] = area / 3;
      for (int j = 0; j < 3; ++j) ke[3 * i + j] = k * area * (gx[i] * gx[j] + gy[i] * gy[j]);
    }
    PetscCall(MatSetValues(disc->A, 3, rows, 3, rows, ke, ADD_VALUES));
    PetscCall(VecSetValues(disc->mass, 3, rows, me, ADD_VALUES));
  }
  // Boundary edges: consistent boundary mass beta * length / 6 * [2 1; 1 2].
  for (const Mesh::Edge& e : mesh.boundary) {
    const PetscInt rows[2] = {mesh.global_row[static_cast<std::size_t>(e.a)], mesh.global_row[static_cast<std::size_t>(e.b)]};
    const double w = beta * e.length / 6;
    const PetscScalar be[4] = {2 * w, w, w, 2 * w};
    PetscCall(MatSetValues(disc->A, 2, rows, 2, rows, be, ADD_VALUES));
  }
  PetscCall(VecAssemblyBegin(disc->mass));
  PetscCall(VecAssemblyEnd(disc->mass));
  PetscCall(MatAssemblyBegin(disc->A, MAT_FINAL_ASSEMBLY));
  PetscCall(MatAssemblyEnd(disc->A, MAT_FINAL_ASSEMBLY));
  // A = M/dt + K + B.
  PetscCall(VecCopy(disc->mass, disc->work));
  PetscCall(VecScale(disc->work, 1.0 / dt));
  PetscCall(MatDiagonalSet(disc->A, disc->work, ADD_VALUES));
  PetscFunctionReturn(0);
}

PetscErrorCode DiscretisationDestroy(Discretisation* disc) {
  PetscFunctionBeginUser;
  PetscCall(MatDestroy(&disc->A));
  PetscCall(VecDestroy(&disc->mass));
  PetscCall(VecDestroy(&disc->work));
  PetscFunctionReturn(0);
}

PetscErrorCode AssembleRhs(const Mesh& mesh, const Discretisation& disc, Vec u_old, Vec f, const BoundaryFunction& g,
                           double t, Vec b) {
  PetscFunctionBeginUser;
  // b = M (u_old / dt + f)
  PetscCall(VecWAXPY(disc.work, 1.0 / disc.dt, u_old, f));
  PetscCall(VecPointwiseMult(b, disc.mass, disc.work));
  // + int_edge g phi_i, 2-point Gauss per edge.
  const double s[2] = {0.5 - 0.5 / std::sqrt(3.0), 0.5 + 0.5 / std::sqrt(3.0)};
  for (const Mesh::Edge& e : mesh.boundary) {
    const double* a = &mesh.xy[2 * static_cast<std::size_t>(e.a)];
    const double* c = &mesh.xy[2 * static_cast<std::size_t>(e.b)];
    PetscScalar ge[2] = {0, 0};
    for (double q : s) {
      const double value = g(a[0] + q * (c[0] - a[0]), a[1] + q * (c[1] - a[1]), t, e.nx, e.ny) * 0.5 * e.length;
      ge[0] += value * (1 - q);
      ge[1] += value * q;
    }
    const PetscInt rows[2] = {mesh.global_row[static_cast<std::size_t>(e.a)], mesh.global_row[static_cast<std::size_t>(e.b)]};
    PetscCall(VecSetValues(b, 2, rows, ge, ADD_VALUES));
  }
  PetscCall(VecAssemblyBegin(b));
  PetscCall(VecAssemblyEnd(b));
  PetscFunctionReturn(0);
}

PetscErrorCode MassNorm(const Discretisation& disc, Vec v, double* norm) {
  PetscScalar dot;
  PetscFunctionBeginUser;
  PetscCall(VecPointwiseMult(disc.work, v, v));
  PetscCall(VecDot(disc.work, disc.mass, &dot));
  *norm = std::sqrt(std::max(dot, 0.0));
  PetscFunctionReturn(0);
}

PetscErrorCode MeshLocalValues(const Mesh& mesh, Vec global, std::vector<double>* values) {
  Vec local;
  PetscSection section;
  const PetscScalar* a;
  PetscFunctionBeginUser;
  PetscCall(DMGetLocalVector(mesh.dm, &local));
  PetscCall(DMGlobalToLocal(mesh.dm, global, INSERT_VALUES, local));
  PetscCall(DMGetLocalSection(mesh.dm, &section));
  PetscCall(VecGetArrayRead(local, &a));
  values->resize(static_cast<std::size_t>(mesh.local_vertices()));
  for (PetscInt v = mesh.v_start; v < mesh.v_end; ++v) {
    PetscInt off;
    PetscCall(PetscSectionGetOffset(section, v, &off));
    (*values)[static_cast<std::size_t>(v - mesh.v_start)] = a[off];
  }
  PetscCall(VecRestoreArrayRead(local, &a));
  PetscCall(DMRestoreLocalVector(mesh.dm, &local));
  PetscFunctionReturn(0);
}

PetscErrorCode CreateKSP(MPI_Comm comm, const Discretisation& disc, double rtol, KSP* ksp) {
  PC pc;
  PetscFunctionBeginUser;
  PetscCall(KSPCreate(comm, ksp));
  PetscCall(KSPSetOperators(*ksp, disc.A, disc.A));
  PetscCall(KSPSetType(*ksp, KSPCG));
  PetscCall(KSPGetPC(*ksp, &pc));
  PetscCall(PCSetType(pc, PCJACOBI));
  PetscCall(KSPSetTolerances(*ksp, rtol, PETSC_DEFAULT, PETSC_DEFAULT, 10000));
  PetscCall(KSPSetFromOptions(*ksp));
  PetscCall(KSPSetUp(*ksp));
  PetscFunctionReturn(0);
}

}  // namespace heat
