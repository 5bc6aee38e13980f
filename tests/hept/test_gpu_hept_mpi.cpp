// HEPT's CUDA forward across 1-4 ranks on the device under test: whole graphs on their owner ranks (the
// device plan never splits a graph), bitwise the one-process device forward for graphs dealt to ranks,
// points dealt round robin, everything on the last rank and fewer graphs than ranks (empty ranks); a
// launch failure on one rank is the same error on every rank (host backend only).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>
#include <vector>

#include "gpu_mpi_test.hpp"
#include "hept_batch.hpp"
#include "host_backend_hooks.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using namespace hept_batch;  // NOLINT: the shared batch
using surrogate::testing::local_device;

surrogate::RunOptions on_device(int device) {
  surrogate::RunOptions o;
  o.cuda_device = device;
  return o;
}

/// The rows of `out` (this rank's points `mine`) against the one-process result `all` (reversed order).
void expect_rows(const std::vector<float>& out, const std::vector<std::int64_t>& mine, const std::vector<float>& all,
                 std::int64_t n, int od, const std::string& what) {
  for (std::size_t r = 0; r < mine.size(); ++r) {
    const auto ref = static_cast<std::size_t>(n - 1 - mine[r]);
    for (int k = 0; k < od; ++k)
      ASSERT_EQ(out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)],
                all[ref * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)])
          << what << ": point " << mine[r];
  }
}

TEST(GpuHeptMpi, AnySpreadIsTheOneProcessDeviceForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const int device = local_device(), size = comm.size(), rank = comm.rank();
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int od = model->out_channels();
  for (const std::int64_t graphs : {4, 2}) {
    const Batch b(graphs);
    std::vector<std::int64_t> all;
    const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, on_device(device), all);
    const std::vector<std::pair<std::string, std::function<int(std::int64_t)>>> spreads = {
        {"graphs round robin", [&](std::int64_t i) { return static_cast<int>(b.graph[static_cast<std::size_t>(i)] % size); }},
        {"points round robin", [&](std::int64_t i) { return static_cast<int>(i % size); }},
        {"all on the last rank", [&](std::int64_t) { return size - 1; }}};
    for (const auto& [name, owner] : spreads) {
      std::vector<std::int64_t> mine;
      const auto out = predict(comm, *model, b, owner, on_device(device), mine);
      expect_rows(out, mine, reference, b.n(), od,
                  "rank " + std::to_string(rank) + ", " + std::to_string(graphs) + " graphs, " + name);
    }
  }
}

// A kernel launch failing on the last rank in the middle of the forward (its tenth launch: inside the
// first block) is the same Error on every rank, the failing rank's; nothing hangs, and the next call gives
// the one-process bits.
TEST(HeptMpiHostBackend, ALaunchFailureOnOneRankIsAnAgreedError) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const Batch b;
  const auto owner = [&](std::int64_t i) { return static_cast<int>(b.graph[static_cast<std::size_t>(i)] % comm.size()); };
  std::vector<std::int64_t> all, mine;
  const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, on_device(host_backend::kDevice), all);
  if (comm.rank() == comm.size() - 1) host_backend::fail_after = 10;
  try {
    predict(comm, *model, b, owner, on_device(host_backend::kDevice), mine);
    ADD_FAILURE() << "rank " << comm.rank() << ": no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("hept: CUDA device cuda-emulated"), std::string::npos) << e.what();
  }
  host_backend::fail_after = 0;
  const auto out = predict(comm, *model, b, owner, on_device(host_backend::kDevice), mine);
  expect_rows(out, mine, reference, b.n(), model->out_channels(), "rank " + std::to_string(comm.rank()) + " after the failure");
}

}  // namespace
