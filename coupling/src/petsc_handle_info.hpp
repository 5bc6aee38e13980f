// What the PETSc adapters keep per handle beside the C handle, shared by petsc.cpp (which owns the table)
// and petsc_snes.cpp.
#pragma once

#include <petscsys.h>

#include "surrogate.h"

namespace surrogate::petsc_detail {

/// The handle's -surrogate_accept_atol, or PETSC_DEFAULT when it was not given (or the handle was not
/// opened by SurrogateCreateFromOptions). Not collective.
PetscReal accept_atol(surrogate_t s) noexcept;

}  // namespace surrogate::petsc_detail
