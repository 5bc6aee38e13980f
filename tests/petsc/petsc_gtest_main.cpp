// GoogleTest main for the PETSc adapter tests under mpirun: PetscInitialize (which initialises MPI),
// every rank runs every test, rank 0 prints the report, other ranks print their failures with their
// rank; the exit status is the maximum over the ranks. Logging is on so the tests can read the
// SurrogatePredict event's counters.
#include <gtest/gtest.h>
#include <petscsys.h>

#include "rank_reporting.hpp"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);  // removes the --gtest_* arguments before PETSc sees them
  PetscCall(PetscInitialize(&argc, &argv, nullptr, nullptr));
  PetscCall(PetscLogDefaultBegin());
  PetscMPIInt rank = 0;
  PetscCallMPI(MPI_Comm_rank(PETSC_COMM_WORLD, &rank));
  surrogate::test::report_failures_only_off_root(rank);
  int rc = RUN_ALL_TESTS();
  PetscCallMPI(MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, PETSC_COMM_WORLD));
  PetscCall(PetscFinalize());
  return rc;
}
