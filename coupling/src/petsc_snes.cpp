// The nonlinear counterpart of SurrogateAcceptOrSolve: accept a predicted solution of a SNES's system or
// start Newton from it (surrogate/petsc.h, share/docs/petsc.md).
#include "petsc_handle_info.hpp"
#include "surrogate/petsc.h"

#include <petscsnes.h>

#include <cmath>

extern "C" {

PetscErrorCode SurrogateSNESAcceptOrSolve(surrogate_t surrogate, SNES snes, Vec b, Vec x, PetscReal atol, PetscBool* accepted,
                                          PetscReal* fnorm) {
  PetscFunctionBegin;
  PetscCall(SurrogateInitializePackage());
  PetscCheck(snes && x, PETSC_COMM_SELF, PETSC_ERR_ARG_NULL, "surrogate: SurrogateSNESAcceptOrSolve: null SNES or x");
  const MPI_Comm comm = PetscObjectComm(reinterpret_cast<PetscObject>(snes));
  PetscCheck(surrogate, comm, PETSC_ERR_ARG_NULL, "surrogate: SurrogateSNESAcceptOrSolve: null surrogate handle");
  PetscCheck(b != x, comm, PETSC_ERR_ARG_IDN, "surrogate: SurrogateSNESAcceptOrSolve: b and x must be different Vecs");
  Vec f = nullptr;
  PetscCall(SNESGetFunction(snes, &f, nullptr, nullptr));
  PetscCheck(f, comm, PETSC_ERR_ORDER, "surrogate: SurrogateSNESAcceptOrSolve: the SNES has no function (SNESSetFunction)");
  // The tolerance: the argument, else the handle's -surrogate_accept_atol, else the SNES's own atol, the
  // test SNESSolve applies to its initial guess. The same on every rank (checked), so is the decision.
  if (atol == static_cast<PetscReal>(PETSC_DEFAULT)) atol = surrogate::petsc_detail::accept_atol(surrogate);
  if (atol == static_cast<PetscReal>(PETSC_DEFAULT)) PetscCall(SNESGetTolerances(snes, &atol, nullptr, nullptr, nullptr, nullptr));
  double range[2] = {static_cast<double>(atol), -static_cast<double>(atol)};
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, range, 2, MPI_DOUBLE, MPI_MAX, comm));
  PetscCheck(range[0] == -range[1], comm, PETSC_ERR_ARG_WRONG,
             "surrogate: SurrogateSNESAcceptOrSolve: atol differs across ranks (from %g to %g)", -range[1], range[0]);
  PetscCheck(range[0] >= 0 && std::isfinite(range[0]), comm, PETSC_ERR_ARG_OUTOFRANGE,
             "surrogate: SurrogateSNESAcceptOrSolve: atol %g must be a finite number >= 0 (or PETSC_DEFAULT)", range[0]);

  // ||F(x) - b||_2: one evaluation of the SNES's function into its own residual vector.
  PetscReal norm = 0;
  PetscCall(PetscLogEventBegin(SURROGATE_Check, reinterpret_cast<PetscObject>(snes), reinterpret_cast<PetscObject>(x), 0, 0));
  PetscCall(SNESComputeFunction(snes, x, f));
  if (b) PetscCall(VecAXPY(f, -1.0, b));
  PetscCall(VecNorm(f, NORM_2, &norm));
  PetscCall(PetscLogEventEnd(SURROGATE_Check, reinterpret_cast<PetscObject>(snes), reinterpret_cast<PetscObject>(x), 0, 0));
  const bool finite = std::isfinite(static_cast<double>(norm));
  const bool accept = finite && static_cast<double>(norm) < range[0];
  if (!accept) {
    if (!finite) PetscCall(VecZeroEntries(x));  // a NaN or Inf prediction is no guess: Newton starts from zero
    PetscCall(SNESSolve(snes, b, x));
  }
  if (accepted) *accepted = accept ? PETSC_TRUE : PETSC_FALSE;
  if (fnorm) *fnorm = norm;
  PetscFunctionReturn(0);
}

}  // extern "C"
