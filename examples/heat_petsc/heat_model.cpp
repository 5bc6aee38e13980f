// heat_petsc: the heat surrogate's input channels as the solver's Vecs (heat_model.hpp).
#include "heat_model.hpp"

#include <algorithm>
#include <map>

namespace heat_example {

PetscErrorCode ModelInputsCreate(surrogate_t model, const heat::Mesh& mesh, const Params& p, ModelInputs* in) {
  MPI_Comm comm = PETSC_COMM_WORLD;
  int cin = 0, cout = 0;
  char name[64];
  PetscFunctionBeginUser;
  PetscCheck(surrogate_in_channels(model, &cin) == SURROGATE_OK && surrogate_out_channels(model, &cout) == SURROGATE_OK, comm,
             PETSC_ERR_LIB, "surrogate: %s", surrogate_last_error());
  for (int c = 0; c < cin; ++c) {
    PetscCheck(surrogate_channel_name(model, 0, c, name, sizeof(name)) == SURROGATE_OK, comm, PETSC_ERR_LIB, "surrogate: %s",
               surrogate_last_error());
    in->names.emplace_back(name);
  }
  PetscCheck(surrogate_channel_name(model, 1, 0, name, sizeof(name)) == SURROGATE_OK, comm, PETSC_ERR_LIB, "surrogate: %s",
             surrogate_last_error());
  in->output = name;
  const std::vector<std::string> known = {"x", "y", "u", "f", "kappa", "rate"};
  for (const std::string& n : in->names)
    PetscCheck(std::find(known.begin(), known.end(), n) != known.end(), comm, PETSC_ERR_ARG_INCOMP,
               "the model's input channel '%s' is none of x, y, u, f, kappa, rate (is it a heat model?)", n.c_str());
  PetscCheck(cout == 1 && (in->output == "du" || in->output == "u_next"), comm, PETSC_ERR_ARG_INCOMP,
             "the model must have one output channel named du or u_next, it has %d (first '%s')", cout, in->output.c_str());
  in->increment = in->output == "du";

  // The points: the owned vertices in the order of the global Vec's rows.
  PetscCall(heat::MeshCreateCoordsVec(mesh, &in->coords));

  PetscCall(heat::MeshCreateVec(mesh, &in->x));
  for (Vec* v : {&in->y, &in->kappa, &in->rate}) PetscCall(VecDuplicate(in->x, v));
  PetscCall(heat::MeshInterpolate(mesh, [](double x, double, double) { return x; }, 0, in->x));
  PetscCall(heat::MeshInterpolate(mesh, [](double, double y, double) { return y; }, 0, in->y));
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.kappa(x, y); }, 0, in->kappa));
  PetscFunctionReturn(0);
}

PetscErrorCode ModelInputVecs(ModelInputs& in, const heat::Discretisation& disc, Vec u, Vec f, Vec b, std::vector<Vec>* vecs) {
  PetscFunctionBeginUser;
  PetscCall(ComputeRate(disc, b, u, in.rate));  // also the residual of u as the step's guess: M rate
  const std::map<std::string, Vec> by_name = {{"x", in.x}, {"y", in.y}, {"u", u}, {"f", f}, {"kappa", in.kappa}, {"rate", in.rate}};
  vecs->clear();
  for (const std::string& n : in.names) vecs->push_back(by_name.at(n));
  PetscFunctionReturn(0);
}

PetscErrorCode ModelInputsDestroy(ModelInputs* in) {
  PetscFunctionBeginUser;
  for (Vec* v : {&in->coords, &in->x, &in->y, &in->kappa, &in->rate}) PetscCall(VecDestroy(v));
  PetscFunctionReturn(0);
}

}  // namespace heat_example
