// Transient heat conduction on a distributed DMPlex triangle mesh: P1 finite elements assembled by hand,
// lumped mass, Robin boundary condition, backward Euler in time (see README.md for the equations).
//
//   du/dt - div(kappa grad u) = f            in the rectangle [0, lx] x [0, ly]
//   kappa du/dn + beta u      = g            on its boundary (physics: g = beta u_ambient)
//
//   (M/dt + K + B) u^{n+1} = M/dt u^n + M f^{n+1} + G(t^{n+1})
//
// M: lumped mass (diagonal, area/3 per triangle and vertex), K: stiffness with kappa constant per
// triangle, B: consistent boundary mass beta * int_edge phi_i phi_j, G: boundary load int_edge g phi_i
// (2-point Gauss per edge), f interpolated at the vertices. Unknowns: one value per mesh vertex; the
// rows of a global Vec are the rank's owned vertices (in plex point order).
#pragma once

#include <petscdmplex.h>
#include <petscksp.h>

#include <functional>
#include <type_traits>
#include <vector>

static_assert(std::is_same_v<PetscScalar, double> && std::is_same_v<PetscReal, double>,
              "heat_petsc needs a real, double-precision PETSc build");

namespace heat {

/// f(x, y, t), u(x, y, t), kappa(x, y) ...
using PointFunction = std::function<double(double x, double y, double t)>;
/// g(x, y, t, nx, ny) on the boundary, (nx, ny) the outward unit normal.
using BoundaryFunction = std::function<double(double x, double y, double t, double nx, double ny)>;

/// The mesh and the numbering of its vertices.
struct Mesh {
  DM dm = nullptr;
  double lx = 1, ly = 1;
  PetscInt v_start = 0, v_end = 0;  // local vertices (owned and ghost)
  PetscInt c_start = 0, c_end = 0;  // local triangles
  PetscInt n_owned = 0;             // owned vertices = local rows of a global Vec
  PetscInt row_start = 0;           // first global row of this rank
  std::vector<PetscInt> owned;      // local row i -> plex vertex
  std::vector<PetscInt> global_row; // (v - v_start) -> global row of vertex v (owned or not)
  std::vector<double> xy;           // (v - v_start) -> x, y of local vertex v
  std::vector<PetscInt> triangles;  // 3 local vertex indices (v - v_start) per local triangle, counter-clockwise
  struct Edge {
    PetscInt a, b;        // local vertex indices
    double nx, ny, length;  // outward unit normal, length
  };
  std::vector<Edge> boundary;  // boundary edges of the local triangles (each edge on exactly one rank)
  PetscInt global_vertices = 0, global_triangles = 0;
  double boundary_length = 0, area = 0;  // global sums (checks)

  PetscInt local_vertices() const { return v_end - v_start; }
};

/// Collective. nx x ny rectangles, each cut into two triangles along its rising diagonal, built on rank 0,
/// distributed with DMPlexDistribute (PETSc's partitioner) and refined `refine` times regularly (every
/// triangle into four) in parallel: (nx 2^refine + 1) x (ny 2^refine + 1) vertices.
PetscErrorCode MeshCreate(MPI_Comm comm, PetscInt nx, PetscInt ny, double lx, double ly, PetscInt refine, Mesh* mesh);
PetscErrorCode MeshDestroy(Mesh* mesh);
/// A global Vec (one value per owned vertex).
PetscErrorCode MeshCreateVec(const Mesh& mesh, Vec* v);
/// Collective. The owned vertices' coordinates, interlaced, block size 2, in the order of a global Vec's
/// rows (the points a surrogate is given with SurrogateSetPointsVec).
PetscErrorCode MeshCreateCoordsVec(const Mesh& mesh, Vec* coords);
/// v[i] = f(x_i, y_i, t) at the owned vertices.
PetscErrorCode MeshInterpolate(const Mesh& mesh, const PointFunction& f, double t, Vec v);
/// The values of a global Vec at the rank's local vertices (owned and ghost, in local order), e.g. for VTK
/// pieces made of the local triangles. Collective (a ghost update).
PetscErrorCode MeshLocalValues(const Mesh& mesh, Vec global, std::vector<double>* values);

/// The discrete operator for a conductivity field, a Robin coefficient and a time step.
struct Discretisation {
  Mat A = nullptr;     // M/dt + K + B
  Vec mass = nullptr;  // lumped mass (diagonal of M)
  Vec work = nullptr;
  double dt = 0;
};
/// Collective. kappa is evaluated at each triangle's centroid (constant per triangle).
PetscErrorCode DiscretisationCreate(const Mesh& mesh, const std::function<double(double, double)>& kappa, double beta,
                                    double dt, Discretisation* disc);
PetscErrorCode DiscretisationDestroy(Discretisation* disc);
/// b = M/dt u_old + M f + G(t) with f given at the owned vertices (at t = t^{n+1}).
PetscErrorCode AssembleRhs(const Mesh& mesh, const Discretisation& disc, Vec u_old, Vec f, const BoundaryFunction& g,
                           double t, Vec b);
/// ||v||_M = sqrt(sum_i m_i v_i^2): the discrete L2 norm with the lumped mass.
PetscErrorCode MassNorm(const Discretisation& disc, Vec v, double* norm);

/// A KSP for disc.A: CG + Jacobi, rtol 1e-8 by default; -ksp_* options override.
PetscErrorCode CreateKSP(MPI_Comm comm, const Discretisation& disc, double rtol, KSP* ksp);

}  // namespace heat
