// GoogleTest under mpirun: every rank runs every test; rank 0 prints the usual report, the other ranks
// print only their failures, prefixed with their rank. Shared by the MPI test mains (mpi_gtest_main.cpp,
// tests/petsc/petsc_gtest_main.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>

namespace surrogate::test {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] FAILURE at %s:%d\n%s\n", rank_, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.summary());
  }

 private:
  int rank_;
};

// On ranks other than 0, replaces GoogleTest's default printer by a RankFailurePrinter.
inline void report_failures_only_off_root(int rank) {
  if (rank == 0) return;
  auto& listeners = testing::UnitTest::GetInstance()->listeners();
  delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(rank));
}

}  // namespace surrogate::test
