// The agreement of the NCCL transport's enqueues (coupling/src/agreed_enqueue.hpp) under mpirun, with
// enqueue and abort stand-ins: a failure on any rank aborts on every rank and is the same Error there,
// the lowest failing rank's; the aborted communicator is refused afterwards on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <stdexcept>
#include <string>

#include "agreed_enqueue.hpp"
#include "surrogate/error.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::MpiComm;
using surrogate::detail::AgreedEnqueue;

struct Counts {
  int enqueued = 0;
  int aborted = 0;
};

/// One call on every rank; `fails(rank)` says which ranks' enqueue throws. Returns the message thrown
/// ("" when none) and counts the calls of the stand-ins.
template <class Fails>
std::string call(AgreedEnqueue& agreed, const MpiComm& comm, Counts& counts, Fails fails, ErrorCode* code = nullptr) {
  try {
    agreed(
        [&] {
          ++counts.enqueued;
          if (fails(comm.rank()))
            throw Error(ErrorCode::communication, "ncclGroupEnd failed on rank " + std::to_string(comm.rank()));
        },
        [&]() noexcept { ++counts.aborted; });
  } catch (const Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return {};
}

TEST(AgreedEnqueue, WithoutAFailureNothingIsAborted) {
  MpiComm comm(MPI_COMM_WORLD);
  AgreedEnqueue agreed(comm);
  Counts counts;
  for (int i = 0; i < 3; ++i) EXPECT_EQ(call(agreed, comm, counts, [](int) { return false; }), "");
  EXPECT_EQ(counts.enqueued, 3);
  EXPECT_EQ(counts.aborted, 0);
  EXPECT_FALSE(agreed.aborted());
}

TEST(AgreedEnqueue, AFailureOnOneRankAbortsEveryRankWithTheSameError) {
  MpiComm comm(MPI_COMM_WORLD);
  for (int failing = 0; failing < comm.size(); ++failing) {
    AgreedEnqueue agreed(comm);
    Counts counts;
    ErrorCode code = ErrorCode::ok;
    const std::string message = call(agreed, comm, counts, [&](int r) { return r == failing; }, &code);
    const std::string expected = (comm.size() > 1 ? "rank " + std::to_string(failing) + ": " : std::string()) +
                                 "ncclGroupEnd failed on rank " + std::to_string(failing);
    EXPECT_EQ(message, expected) << "failing rank " << failing;
    EXPECT_EQ(code, ErrorCode::communication);
    EXPECT_EQ(counts.enqueued, 1);
    EXPECT_EQ(counts.aborted, 1) << "every rank aborts, the failing one included";
    EXPECT_TRUE(agreed.aborted());
  }
}

TEST(AgreedEnqueue, TheLowestFailingRanksErrorIsReported) {
  MpiComm comm(MPI_COMM_WORLD);
  if (comm.size() < 3) GTEST_SKIP() << "needs 3 ranks";
  AgreedEnqueue agreed(comm);
  Counts counts;
  const std::string message = call(agreed, comm, counts, [](int r) { return r >= 1; });
  EXPECT_EQ(message, "rank 1: ncclGroupEnd failed on rank 1");
  EXPECT_EQ(counts.aborted, 1);
}

TEST(AgreedEnqueue, AnAbortedCommunicatorIsRefusedWithoutEnqueueing) {
  MpiComm comm(MPI_COMM_WORLD);
  AgreedEnqueue agreed(comm);
  Counts counts;
  const int last = comm.size() - 1;
  const std::string first = call(agreed, comm, counts, [&](int r) { return r == last; });
  ASSERT_FALSE(first.empty());
  // Only the last rank calls again: the refusal needs no communication, so it cannot hang.
  if (comm.rank() == last) {
    ErrorCode code = ErrorCode::ok;
    const std::string again = call(agreed, comm, counts, [](int) { return false; }, &code);
    EXPECT_NE(again.find("aborted after an earlier failure (" + first + ")"), std::string::npos) << again;
    EXPECT_EQ(code, ErrorCode::communication);
    EXPECT_EQ(counts.enqueued, 1) << "an aborted communicator enqueues nothing";
    EXPECT_EQ(counts.aborted, 1);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(AgreedEnqueue, AnyExceptionIsAgreed) {
  MpiComm comm(MPI_COMM_WORLD);
  AgreedEnqueue agreed(comm);
  Counts counts;
  std::string message;
  try {
    agreed(
        [&] {
          if (comm.rank() == 0) throw std::runtime_error("not an Error");
        },
        [&]() noexcept { ++counts.aborted; });
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find("not an Error"), std::string::npos) << message;
  EXPECT_EQ(counts.aborted, 1);
}

}  // namespace
