// nonlinear_petsc: the surrogate's input channels (share/models/nonlinear) as the solver's Vecs, in the
// order the model file names them: x, y [m], q [W/m^3] (the source), k [W/(m K)] (the base conductivity)
// and u_ambient [K] (the same at every vertex). Its output is the temperature u [K].
#pragma once

#include <petscvec.h>

#include <string>
#include <vector>

#include "heat_solver.hpp"
#include "nonlinear_problem.hpp"
#include "surrogate/petsc.h"

namespace nonlinear_example {

struct ModelInputs {
  Vec coords = nullptr;  // the owned vertices, block size 2, for SurrogateSetPointsVec
  Vec x = nullptr, y = nullptr, q = nullptr, k = nullptr, u_ambient = nullptr;
  std::vector<Vec> in;   // the channels in the model's order
};

/// Collective. Checks that the model's channels are those above (a PETSc error naming the channel if
/// not) and creates the Vecs.
PetscErrorCode ModelInputsCreate(surrogate_t model, const heat::Mesh& mesh, ModelInputs* in);
/// Collective. Fills the channels of one case.
PetscErrorCode ModelInputsSet(const heat::Mesh& mesh, const Params& p, ModelInputs* in);
PetscErrorCode ModelInputsDestroy(ModelInputs* in);

}  // namespace nonlinear_example
