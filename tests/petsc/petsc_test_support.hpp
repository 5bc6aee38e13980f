// Helpers shared by the PETSc adapter tests: a Vec's local values, bitwise comparison, agreement across
// PETSC_COMM_WORLD, PETSc error messages and calls run under PETSc's return-only error handler.
#pragma once

#include <gtest/gtest.h>
#include <petscsys.h>
#include <petscvec.h>

#include <cstring>
#include <string>
#include <vector>

namespace petsc_test {

/// The local values of a Vec.
inline std::vector<double> values(Vec v) {
  PetscInt n;
  const PetscScalar* a;
  EXPECT_EQ(VecGetLocalSize(v, &n), 0);
  EXPECT_EQ(VecGetArrayRead(v, &a), 0);
  std::vector<double> out(a, a + n);
  EXPECT_EQ(VecRestoreArrayRead(v, &a), 0);
  return out;
}

inline bool bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(double)) == 0);
}

/// Whether `value` is the same on every rank of PETSC_COMM_WORLD.
template <class T>
bool agreed(T value) {
  double v[2] = {static_cast<double>(value), -static_cast<double>(value)};
  MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_DOUBLE, MPI_MAX, PETSC_COMM_WORLD);
  return v[0] == -v[1];
}

/// The specific message of the last PETSc error with this code.
inline std::string petsc_message(PetscErrorCode code) {
  const char* text = nullptr;
  char* specific = nullptr;
  PetscErrorMessage(code, &text, &specific);
  return specific ? specific : "";
}

/// Runs `call` with PETSc's return-only error handler, so a failure returns here instead of printing a
/// traceback; checks that every rank got the same code.
template <class F>
PetscErrorCode caught(F&& call) {
  PetscPushErrorHandler(PetscReturnErrorHandler, nullptr);
  const PetscErrorCode code = call();
  PetscPopErrorHandler();
  EXPECT_TRUE(agreed(code)) << "the ranks disagree on the error code";
  return code;
}

}  // namespace petsc_test
