// heat_petsc: the heat surrogate's input channels (share/models/heat) as the solver's Vecs, in the order the
// model file names them: x, y [m], u = u^n [K], f = f^{n+1} [K/s], kappa [m^2/s] and rate = M^{-1}(b - A u^n)
// [K/s] (the residual of the step's system at the current state per unit mass; one MatMult). The output is
// du = u^{n+1} - u^n (or u_next).
#pragma once

#include <petscksp.h>

#include <string>
#include <vector>

#include "heat_problem.hpp"
#include "surrogate/petsc.h"

namespace heat_example {

struct ModelInputs {
  Vec coords = nullptr;  // the owned vertices, block size 2, for SurrogateSetPointsVec
  Vec x = nullptr, y = nullptr, kappa = nullptr, rate = nullptr;
  std::vector<std::string> names;  // the model's input channels, in its order
  std::string output;              // du or u_next
  bool increment = true;           // output == "du"
};

// Collective. Checks that the model's channels are heat channels and fills the constant inputs.
PetscErrorCode ModelInputsCreate(surrogate_t model, const heat::Mesh& mesh, const Params& p, ModelInputs* in);
// The input Vecs of one prediction in the model's order, for the state u, the source f at the new time and
// the step's right-hand side b; computes in.rate = M^{-1}(b - A u) (one MatMult).
PetscErrorCode ModelInputVecs(ModelInputs& in, const heat::Discretisation& disc, Vec u, Vec f, Vec b, std::vector<Vec>* vecs);
PetscErrorCode ModelInputsDestroy(ModelInputs* in);

}  // namespace heat_example
