// ExchangePlan on device rows under mpirun (1-4 ranks) on the host backend (host only: a test transport
// moves the emulated device's buffers with the host Comm): the device move of every builder is bitwise
// the host move, through the communicator's own transport (host staging) and through a transport
// that moves device buffers directly as NCCL does (the path a GPU run takes when every rank owns its GPU);
// a failed launch on one rank is the same Error on every rank and the next move works again.
#include <gtest/gtest.h>
#include <mpi.h>

#include "host_backend_hooks.hpp"

#include <string>
#include <vector>

#include "exchange_cases.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
using exchange_cases::Index;
using surrogate::ExchangePlan;
using surrogate::MpiComm;
using surrogate::Place;

/// Moves device buffers device to device as the NCCL transport does (here with the Comm's collectives on
/// the emulated device memory, which is host memory), counting its calls. NCCL is ordered on the stream:
/// the work queued before the call completes first (the emulated streams run only when synchronised).
class DirectTransport final : public surrogate::DeviceTransport {
 public:
  explicit DirectTransport(const MpiComm& comm) : DeviceTransport(host_backend::kDevice), comm_(comm) {}
  std::string name() const override { return "direct (test)"; }
  bool direct() const override { return true; }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_offsets,
                 void* stream) override {
    ++calls;
    cu::synchronize(static_cast<cudaStream_t>(stream));
    comm_.alltoallv(send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
  }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets, void* stream) override {
    ++calls;
    cu::synchronize(static_cast<cudaStream_t>(stream));
    comm_.allgatherv(send, send_bytes, recv, recv_bytes, recv_offsets);
  }
  void allreduce(void* data, std::size_t count, surrogate::DType type, surrogate::ReduceOp op, void* stream) override {
    ++calls;
    cu::synchronize(static_cast<cudaStream_t>(stream));
    comm_.allreduce(data, count, type, op);
  }
  int calls = 0;

 private:
  const MpiComm& comm_;
};

/// Host rows copied to (emulated) device memory and back.
cu::DeviceBuffer<float> to_device(const std::vector<float>& host) {
  cu::DeviceBuffer<float> d(host.size(), host_backend::kDevice);
  cu::copy_to_device(d.data(), host.data(), host.size() * sizeof(float), nullptr);
  return d;
}
std::vector<float> to_host(const cu::DeviceBuffer<float>& d) {
  std::vector<float> host(d.size());
  cu::copy_to_host(host.data(), d.data(), host.size() * sizeof(float), nullptr);
  return host;
}

/// The plan's forward on the host and on the device (both transports), with strided rows: the same bits.
void expect_device_equals_host(const MpiComm& comm, const ExchangePlan& plan, const std::vector<float>& source,
                               Index ld_in, int width, const std::string& what) {
  const Index ld_out = width + 3;
  std::vector<float> host(static_cast<std::size_t>(std::max<Index>(plan.target_rows(), 1) * ld_out), -1.0f);
  plan.forward(source.data(), ld_in, host.data(), ld_out, width);
  DirectTransport direct(comm);
  for (surrogate::DeviceTransport* transport : {&comm.device_transport(host_backend::kDevice), static_cast<surrogate::DeviceTransport*>(&direct)}) {
    const cu::DeviceBuffer<float> src = to_device(source);
    cu::DeviceBuffer<float> dst = to_device(std::vector<float>(host.size(), -1.0f));
    plan.forward(src.data(), ld_in, dst.data(), ld_out, width, Place{host_backend::kDevice, nullptr, transport});
    EXPECT_EQ(to_host(dst), host) << what << " through " << transport->name() << " on rank " << comm.rank();
  }
  if (comm.size() > 1) {
    EXPECT_GE(direct.calls, 1) << what;
  }
}

TEST(ExchangePlanDevice, RequestsRangesAndAllGatherAreBitwiseTheHostMove) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const Index total = 83;
  const auto deal = exchange_cases::deal(total, P, 9, P - 1);
  const std::vector<Index>& mine = deal.rows[static_cast<std::size_t>(me)];
  const int width = 5;
  const Index ld = 6;
  const std::vector<float> source = exchange_cases::rows_of(mine, width, ld);

  const auto q = exchange_cases::requests(deal, total, 9 + 4 * me, 70u + static_cast<unsigned>(me));
  const ExchangePlan requests = ExchangePlan::from_requests(comm, static_cast<Index>(mine.size()), q.source_rank,
                                                            q.source_key, {}, q.copy_from);
  expect_device_equals_host(comm, requests, source, ld, width, "from_requests");

  const auto held = exchange_cases::range_deal(total, P, me, 0);
  const std::vector<float> range_source = exchange_cases::rows_of(held.local_globals, width, ld);
  const ExchangePlan ranges = ExchangePlan::from_ranges(comm, static_cast<Index>(held.local_globals.size()), held.held,
                                                        held.first_row, exchange_cases::wanted_ranges(total, 4, 3u + me));
  expect_device_equals_host(comm, ranges, range_source, ld, width, "from_ranges");

  const ExchangePlan gather = ExchangePlan::all_gather(comm, static_cast<Index>(mine.size()));
  expect_device_equals_host(comm, gather, source, ld, width, "all_gather");
}

TEST(ExchangePlanDevice, BackwardIsBitwiseTheHostMove) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const Index total = 64;
  const auto sources = exchange_cases::deal(total, P, 12, 0);
  const auto targets = exchange_cases::deal(total, P, 13, P - 1);
  std::vector<int> rank;
  std::vector<Index> key;
  for (const Index g : targets.rows[static_cast<std::size_t>(me)]) {
    rank.push_back(sources.owner[static_cast<std::size_t>(g)]);
    key.push_back(sources.local_row[static_cast<std::size_t>(g)]);
  }
  const Index source_rows = static_cast<Index>(sources.rows[static_cast<std::size_t>(me)].size());
  const ExchangePlan plan = ExchangePlan::from_requests(comm, source_rows, rank, key, {}, {});
  const int width = 3;
  const std::vector<float> target = exchange_cases::rows_of(targets.rows[static_cast<std::size_t>(me)], width, width);
  std::vector<float> host(static_cast<std::size_t>(std::max<Index>(source_rows, 1) * width), -1.0f);
  plan.backward(target.data(), width, host.data(), width, width);
  DirectTransport direct(comm);
  const cu::DeviceBuffer<float> t = to_device(target);
  cu::DeviceBuffer<float> s = to_device(std::vector<float>(host.size(), -1.0f));
  plan.backward(t.data(), width, s.data(), width, width, Place{host_backend::kDevice, nullptr, &direct});
  EXPECT_EQ(to_host(s), host);
}

TEST(ExchangePlanDevice, AFailedLaunchOnOneRankIsAnErrorOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const auto deal = exchange_cases::deal(50, P, 21, -1);
  const std::vector<Index>& mine = deal.rows[static_cast<std::size_t>(me)];
  const auto q = exchange_cases::requests(deal, 50, 12, 5u + static_cast<unsigned>(me));
  const ExchangePlan plan = ExchangePlan::from_requests(comm, static_cast<Index>(mine.size()), q.source_rank,
                                                        q.source_key, {}, q.copy_from);
  const int width = 2;
  const cu::DeviceBuffer<float> src = to_device(exchange_cases::rows_of(mine, width, width));
  cu::DeviceBuffer<float> dst(static_cast<std::size_t>(12 * width), host_backend::kDevice);
  const Place place{host_backend::kDevice, nullptr, &comm.device_transport(host_backend::kDevice)};
  if (me == P - 1) host_backend::fail_after = 1;
  try {
    plan.forward(src.data(), width, dst.data(), width, width, place);
    FAIL() << "rank " << me << ": no error";
  } catch (const surrogate::Error& e) {
    // One rank: its own message; several: prefixed with the failing rank.
    const std::string expected = (P > 1 ? "rank " + std::to_string(P - 1) + ": " : "") + "exchange plan: CUDA device cuda-emulated";
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  host_backend::fail_after = 0;
  plan.forward(src.data(), width, dst.data(), width, width, place);  // the next move works again
  const std::vector<float> got = to_host(dst);
  for (std::size_t t = 0; t < q.expected.size(); ++t)
    ASSERT_EQ(got[t * width + 1], exchange_cases::value(q.expected[t], 1));
}

}  // namespace
