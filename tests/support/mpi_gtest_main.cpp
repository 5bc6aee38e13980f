// GoogleTest main for tests run under mpirun: every rank runs every test; only rank 0 prints the usual
// report, other ranks print their failures prefixed with their rank; the exit status is the maximum
// over the ranks.
#include <gtest/gtest.h>
#include <mpi.h>

#include "rank_reporting.hpp"

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  surrogate::test::report_failures_only_off_root(rank);
  int rc = RUN_ALL_TESTS();
  MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return rc;
}
