// HEPT's CUDA forward across 1-4 ranks on the device under test, bitwise the one-process device forward:
// whole graphs on their owner ranks, and with fewer graphs than ranks the graphs split over the ranks'
// devices (buckets sorted over the ranks, their rows moved between the devices), for graphs dealt to
// ranks, points dealt round robin and everything on the last rank (empty ranks), from host arrays and
// from the caller's device arrays (predict_device); the src layout split;
// a launch failure on one rank, also in the plan's geometry or inside the split bucket stage, is the same
// error on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "device_arrays.hpp"
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

/// A predict whose launch `n` fails on the last rank: the same agreed Error on this rank; returns its text.
std::string injected_failure(const surrogate::Comm& comm, surrogate::Model& model, const Batch& b,
                             const std::function<int(std::int64_t)>& owner, int n, std::vector<std::int64_t>& mine) {
  if (comm.rank() == comm.size() - 1) host_backend::fail_after = n;
  std::string what;
  try {
    predict(comm, model, b, owner, on_device(host_backend::kDevice), mine);
    ADD_FAILURE() << "rank " << comm.rank() << ", failure at launch " << n << ": no error";
  } catch (const surrogate::Error& e) {
    what = e.what();
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << what;
    EXPECT_NE(what.find("emulated launch failure"), std::string::npos) << "launch " << n << ": " << what;
  }
  host_backend::fail_after = 0;
  return what;
}

/// The bucket sorts over the ranks of `plan` so far (one per hash table and layer when graphs are split).
std::uint64_t sorts_over_ranks(const surrogate::Plan& plan) {
  for (const auto& phase : plan.profile().phases())
    if (phase.name == "bucket sort over ranks") return phase.calls;
  return 0;
}

/// predict() through a plan of this rank's points; `sorts`: the plan's bucket sorts over the ranks. The
/// same plan's predict_device on the same rows in device memory gives the same bits.
std::vector<float> predict_counting_sorts(const surrogate::Comm& comm, surrogate::Model& model, const Batch& b,
                                          const std::function<int(std::int64_t)>& owner, int device,
                                          std::vector<std::int64_t>& mine, std::uint64_t& sorts) {
  const LocalPoints p(comm, b, owner);
  mine = p.mine;
  const int od = model.out_channels();
  const auto plan = model.plan(comm, p.layout(comm), p.geometry(), on_device(device));
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(p.n(), 1) * od));
  model.predict(comm, *plan, p.x.data(), b.in, out.data(), od, on_device(device));
  sorts = sorts_over_ranks(*plan);
  surrogate::testing::expect_device_arrays_match(comm, model, *plan, p.x, b.in, out, od, 0.0f, on_device(device),
                                                 "device arrays");
  return out;
}

TEST(GpuHeptMpi, AnySpreadIsTheOneProcessDeviceForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const int device = local_device(), size = comm.size(), rank = comm.rank();
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int od = model->out_channels();
  for (const std::int64_t graphs : {4, 2, 1}) {
    const Batch b(graphs);
    std::vector<std::int64_t> all;
    const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, on_device(device), all);
    const std::vector<std::pair<std::string, std::function<int(std::int64_t)>>> spreads = {
        {"graphs round robin", [&](std::int64_t i) { return static_cast<int>(b.graph[static_cast<std::size_t>(i)] % size); }},
        {"points round robin", [&](std::int64_t i) { return static_cast<int>(i % size); }},
        {"all on the last rank", [&](std::int64_t) { return size - 1; }}};
    for (const auto& [name, owner] : spreads) {
      std::vector<std::int64_t> mine;
      std::uint64_t sorts = 0;
      const auto out = predict_counting_sorts(comm, *model, b, owner, device, mine, sorts);
      const std::string what = "rank " + std::to_string(rank) + ", " + std::to_string(graphs) + " graphs, " + name;
      // Split graphs (fewer graphs than ranks): 3 hash tables x 2 layers sorted over the ranks.
      EXPECT_EQ(sorts, graphs < size ? 6U : 0U) << what;
      expect_rows(out, mine, reference, b.n(), od, what);
    }
  }
}

// The dense layers and the bucket attention in bf16 and tf32 across the ranks, whole and split graphs:
// the one-process device forward in that precision, bitwise.
TEST(GpuHeptMpi, TensorCorePrecisionsAreTheOneProcessForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const int size = comm.size();
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  for (const auto precision : {surrogate::Precision::bf16, surrogate::Precision::tf32}) {
    surrogate::RunOptions options = on_device(local_device());
    options.precision = precision;
    for (const std::int64_t graphs : {4, 1}) {
      const Batch b(graphs);
      std::vector<std::int64_t> all, mine;
      const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, options, all);
      const auto out = predict(comm, *model, b, [&](std::int64_t i) { return static_cast<int>(i % size); }, options, mine);
      expect_rows(out, mine, reference, b.n(), model->out_channels(),
                  std::string(surrogate::precision_name(precision)) + ", rank " + std::to_string(comm.rank()) + ", " +
                      std::to_string(graphs) + " graphs");
    }
  }
}

// The src layout (one graph, zero pads with +inf keys; tracking and pileup) split over the ranks'
// devices: bitwise one process.
TEST(GpuHeptMpi, SrcLayoutSplitOverDevicesIsTheOneProcessForward) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const std::string name : {"src_small", "src_pileup"}) {
    const std::string path = std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_" + name + ".h5";
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const surrogate::SelfComm self;
    const int device = local_device(), size = comm.size();
    const auto model = surrogate::make_model(surrogate::ModelFile::read(path));
    const Batch b(1, path);
    std::vector<std::int64_t> all, mine;
    const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, on_device(device), all);
    std::uint64_t sorts = 0;
    const auto out = predict_counting_sorts(comm, *model, b,
                                            [size](std::int64_t i) { return i < 200 ? 0 : size - 1; }, device, mine,
                                            sorts);
    EXPECT_EQ(sorts > 0, size > 1) << name << " rank " << comm.rank();
    expect_rows(out, mine, reference, b.n(), model->out_channels(), name + " rank " + std::to_string(comm.rank()));
  }
}

// A kernel launch failing on the last rank is the same Error on every rank, the failing rank's, wherever it
// fails: in the plan's geometry on the device before its first maxima over the ranks (launch 1: the axis
// keys; 4: the regions), between them (6: the codes), after them (10: the tags), or in the forward's
// first block (20); nothing hangs, and the next call gives the one-process bits.
TEST(HeptMpiHostBackend, ALaunchFailureOnOneRankIsAnAgreedError) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const Batch b;
  const auto owner = [&](std::int64_t i) { return static_cast<int>(b.graph[static_cast<std::size_t>(i)] % comm.size()); };
  std::vector<std::int64_t> all, mine;
  const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, on_device(host_backend::kDevice), all);
  for (const int n : {1, 4, 6, 10, 20}) {
    const std::string what = injected_failure(comm, *model, b, owner, n, mine);
    EXPECT_NE(what.find("hept: CUDA device cuda-emulated"), std::string::npos) << what;
  }
  const auto out = predict(comm, *model, b, owner, on_device(host_backend::kDevice), mine);
  expect_rows(out, mine, reference, b.n(), model->out_channels(), "rank " + std::to_string(comm.rank()) + " after the failure");
}

// The same from the caller's device arrays (predict_device), whole graphs and split graphs: a launch
// failing on the last rank in the gather of its arrays (launch 1), in the plan's geometry or the rows'
// moves (2, 6, 12) or in the forward (30) is the failing rank's Error on every rank, before or after the
// agreed check of the inputs; nothing hangs, and the next call gives the host-array bits.
TEST(HeptMpiHostBackend, ADeviceArrayLaunchFailureOnOneRankIsAnAgreedError) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int size = comm.size(), device = host_backend::kDevice;
  for (const std::int64_t graphs : {4, 1}) {
    const Batch b(graphs);
    const LocalPoints p(comm, b, [&](std::int64_t i) { return static_cast<int>(i % size); });
    const int od = model->out_channels();
    for (const int n : {1, 2, 6, 12, 30}) {
      const auto plan = model->plan(comm, p.layout(comm), p.geometry(), on_device(device));
      if (comm.rank() == size - 1) host_backend::fail_after = n;
      try {
        surrogate::testing::predict_device_rows(comm, *model, *plan, p.x, b.in, p.x.size() / b.in * od, od, 0.0f,
                                                on_device(device));
        ADD_FAILURE() << "rank " << comm.rank() << ", failure at launch " << n << ": no error";
      } catch (const surrogate::Error& e) {
        const std::string what = e.what();
        EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << what;
        EXPECT_NE(what.find("emulated launch failure"), std::string::npos) << "launch " << n << ": " << what;
        EXPECT_EQ(what, comm.broadcast_string(what, size - 1)) << "rank " << comm.rank() << ", launch " << n;
      }
      host_backend::fail_after = 0;
      std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(p.n(), 1) * od));
      model->predict(comm, *plan, p.x.data(), b.in, out.data(), od, on_device(device));
      out.resize(static_cast<std::size_t>(p.n() * od));
      surrogate::testing::expect_device_arrays_match(comm, *model, *plan, p.x, b.in, out, od, 0.0f, on_device(device),
                                                     "after the failure at launch " + std::to_string(n));
    }
  }
}

// One graph split over the ranks' devices: a launch failing on the last rank at nine points of the first
// layer (at 2 ranks two of them inside the split bucket stage: the values' copies by head and a table's
// bucket sums) is the same Error on every rank; nothing hangs, and the next call gives the one-process bits.
TEST(HeptMpiHostBackend, ALaunchFailureInTheSplitBucketStageIsAnAgreedError) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const Batch b(1);
  const int size = comm.size();
  const auto owner = [size](std::int64_t i) { return static_cast<int>(i % size); };
  std::vector<std::int64_t> all, mine;
  const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, on_device(host_backend::kDevice), all);
  for (const int n : {10, 11, 13, 15, 17, 19, 22, 26, 30}) injected_failure(comm, *model, b, owner, n, mine);
  const auto out = predict(comm, *model, b, owner, on_device(host_backend::kDevice), mine);
  expect_rows(out, mine, reference, b.n(), model->out_channels(), "rank " + std::to_string(comm.rank()) + " after the failures");
}

}  // namespace
