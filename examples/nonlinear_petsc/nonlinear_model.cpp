// nonlinear_petsc: the surrogate's input channels as the solver's Vecs (nonlinear_model.hpp).
#include "nonlinear_model.hpp"

#include <map>

namespace nonlinear_example {

PetscErrorCode ModelInputsCreate(surrogate_t model, const heat::Mesh& mesh, ModelInputs* in) {
  MPI_Comm comm = PetscObjectComm(reinterpret_cast<PetscObject>(mesh.dm));
  int cin = 0, cout = 0;
  char name[64];
  PetscFunctionBeginUser;
  PetscCheck(surrogate_in_channels(model, &cin) == SURROGATE_OK && surrogate_out_channels(model, &cout) == SURROGATE_OK, comm,
             PETSC_ERR_LIB, "surrogate: %s", surrogate_last_error());
  PetscCall(heat::MeshCreateVec(mesh, &in->x));
  for (Vec* v : {&in->y, &in->q, &in->k, &in->u_ambient}) PetscCall(VecDuplicate(in->x, v));
  const std::map<std::string, Vec> by_name = {{"x", in->x}, {"y", in->y}, {"q", in->q}, {"k", in->k}, {"u_ambient", in->u_ambient}};
  in->in.clear();
  for (int c = 0; c < cin; ++c) {
    PetscCheck(surrogate_channel_name(model, 0, c, name, sizeof(name)) == SURROGATE_OK, comm, PETSC_ERR_LIB, "surrogate: %s",
               surrogate_last_error());
    const auto it = by_name.find(name);
    PetscCheck(it != by_name.end(), comm, PETSC_ERR_ARG_INCOMP,
               "the model's input channel %d '%s' is none of x, y, q, k, u_ambient (is it a nonlinear_petsc model?)", c, name);
    in->in.push_back(it->second);
  }
  PetscCheck(cout == 1 && surrogate_channel_name(model, 1, 0, name, sizeof(name)) == SURROGATE_OK && std::string(name) == "u", comm,
             PETSC_ERR_ARG_INCOMP, "the model must have one output channel named u, it has %d", cout);

  // The points: the owned vertices in the order of the global Vec's rows.
  PetscCall(heat::MeshCreateCoordsVec(mesh, &in->coords));
  PetscCall(heat::MeshInterpolate(mesh, [](double x, double, double) { return x; }, 0, in->x));
  PetscCall(heat::MeshInterpolate(mesh, [](double, double y, double) { return y; }, 0, in->y));
  PetscFunctionReturn(0);
}

PetscErrorCode ModelInputsSet(const heat::Mesh& mesh, const Params& p, ModelInputs* in) {
  PetscFunctionBeginUser;
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.source(x, y); }, 0, in->q));
  PetscCall(heat::MeshInterpolate(mesh, [&](double x, double y, double) { return p.k_base(x, y); }, 0, in->k));
  PetscCall(VecSet(in->u_ambient, p.u_ambient));
  PetscFunctionReturn(0);
}

PetscErrorCode ModelInputsDestroy(ModelInputs* in) {
  PetscFunctionBeginUser;
  for (Vec* v : {&in->coords, &in->x, &in->y, &in->q, &in->k, &in->u_ambient}) PetscCall(VecDestroy(v));
  in->in.clear();
  PetscFunctionReturn(0);
}

}  // namespace nonlinear_example
