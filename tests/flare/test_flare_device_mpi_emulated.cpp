// FLARE's device forward across 1-4 ranks (ctest runs it under mpirun), on the CPU with the host-emulated
// CUDA backend (see test_flare_device_emulated.cpp), each rank its own emulated device. The encode merges
// go through the communicator's DeviceTransport: host staging (no GPU: no NCCL), and a transport that
// declares itself direct, as NCCL does, so that the forward's NCCL branch runs too. Every golden case,
// partitioned in several ways, against the one-process device forward: reproducible mode bitwise, default
// mode within 1e-6; the device-resident predict bitwise the host-array one; errors agreed on every rank.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "host_backend_hooks.hpp"
#include "golden.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"


namespace st = surrogate::testing;
using surrogate::Comm;
using surrogate::DeviceTransport;

namespace {

/// The staged transport under the name and the direct() of NCCL: the forward takes its NCCL branch.
class DirectTransport final : public DeviceTransport {
 public:
  explicit DirectTransport(std::shared_ptr<DeviceTransport> staged)
      : DeviceTransport(staged->device()), staged_(std::move(staged)) {}
  std::string name() const override { return "direct (" + staged_->name() + ")"; }
  bool direct() const override { return true; }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_offsets,
                 void* stream) override {
    staged_->alltoallv(send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets, stream);
  }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets, void* stream) override {
    staged_->allgatherv(send, send_bytes, recv, recv_bytes, recv_offsets, stream);
  }
  void allreduce(void* data, std::size_t count, surrogate::DType type, surrogate::ReduceOp op, void* stream) override {
    staged_->allreduce(data, count, type, op, stream);
  }

 private:
  std::shared_ptr<DeviceTransport> staged_;
};

/// MPI_COMM_WORLD whose device transport is a DirectTransport.
class DirectComm final : public Comm {
 public:
  DirectComm() : mpi_(MPI_COMM_WORLD) {}
  int rank() const override { return mpi_.rank(); }
  int size() const override { return mpi_.size(); }
  std::string name() const override { return mpi_.name(); }
  using Comm::allreduce;
  void allreduce(void* inout, std::size_t count, surrogate::DType type, surrogate::ReduceOp op) const override {
    mpi_.allreduce(inout, count, type, op);
  }
  void broadcast(void* buffer, std::size_t bytes, int root) const override { mpi_.broadcast(buffer, bytes, root); }
  void allgather(const void* send, std::size_t bytes, void* recv) const override { mpi_.allgather(send, bytes, recv); }
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets) const override {
    mpi_.allgatherv(send, send_bytes, recv, recv_bytes, recv_offsets);
  }
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes,
                 std::span<const std::size_t> recv_offsets) const override {
    mpi_.alltoallv(send, send_bytes, send_offsets, recv, recv_bytes, recv_offsets);
  }
  void sendrecv(const void* send, std::size_t send_bytes, int dest, void* recv, std::size_t recv_bytes, int source,
                int tag) const override {
    mpi_.sendrecv(send, send_bytes, dest, recv, recv_bytes, source, tag);
  }
  void barrier() const override { mpi_.barrier(); }

 protected:
  std::shared_ptr<DeviceTransport> make_device_transport(int device) const override {
    return std::make_shared<DirectTransport>(Comm::make_device_transport(device));
  }

 private:
  surrogate::MpiComm mpi_;
};

struct Partition {
  std::string name;
  std::vector<std::int64_t> rows;  // global rows owned by this rank, in local order
};

std::vector<Partition> partitions(std::int64_t n, int rank, int size) {
  std::vector<Partition> result;
  Partition contiguous{"contiguous", {}};
  for (std::int64_t i = n * rank / size; i < n * (rank + 1) / size; ++i) contiguous.rows.push_back(i);
  result.push_back(contiguous);
  std::mt19937 gen(1234);  // the same permutation and cuts on every rank
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<std::int64_t> cuts = {0, n};
  std::uniform_int_distribution<std::int64_t> cut(0, n);
  for (int r = 1; r < size; ++r) cuts.push_back(cut(gen));
  std::sort(cuts.begin(), cuts.end());
  result.push_back({"shuffled", {perm.begin() + cuts[rank], perm.begin() + cuts[rank + 1]}});
  Partition last{"all-on-last-rank", {}};
  for (std::int64_t i = 0; i < n && rank == size - 1; ++i) last.rows.push_back(i);
  result.push_back(last);
  return result;
}

/// The case's inputs and sample ids of `rows`.
void gather(const st::GoldenCase& c, const std::vector<std::int64_t>& rows, std::vector<float>& in,
            std::vector<std::int64_t>& ids) {
  for (std::int64_t g : rows) {
    ids.push_back(c.sample_ids[static_cast<std::size_t>(g)]);
    for (int j = 0; j < c.in_dim; ++j) in.push_back(c.features[static_cast<std::size_t>(g * c.in_dim + j)]);
  }
}

class FlareDeviceMpiEmulated : public ::testing::TestWithParam<std::string> {};

TEST_P(FlareDeviceMpiEmulated, PredictionsDoNotDependOnTheRanksOrTheTransport) {
  surrogate::MpiComm mpi(MPI_COMM_WORLD);
  DirectComm direct;
  surrogate::SelfComm self;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(mpi, c.model_path));
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.points()));
  std::iota(all.begin(), all.end(), 0);
  surrogate::RunOptions fast, exact;
  fast.cuda_device = exact.cuda_device = host_backend::kDevice;
  exact.reproducible = true;
  const auto single_fast = st::predict_rows(self, *model, c, all, fast);
  const auto single_exact = st::predict_rows(self, *model, c, all, exact);
  double scale = 0;
  for (float v : single_fast) scale = std::max(scale, double(std::abs(v)));
  EXPECT_TRUE(direct.device_transport(host_backend::kDevice).direct());
  for (const Comm* comm : {static_cast<const Comm*>(&mpi), static_cast<const Comm*>(&direct)}) {
    const std::string transport = comm->device_transport(host_backend::kDevice).name();
    for (const Partition& p : partitions(c.points(), comm->rank(), comm->size())) {
      std::vector<float> in;
      std::vector<std::int64_t> ids;
      gather(c, p.rows, in, ids);
      const auto n = static_cast<std::int64_t>(p.rows.size());
      const auto plan = model->plan(*comm, surrogate::SampleLayout::build(*comm, n, ids.data()));
      for (const auto* options : {&fast, &exact}) {
        std::vector<float> out(static_cast<std::size_t>(n * c.out_dim)), again(out.size());
        model->predict(*comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim, *options);
        // The device-resident predict on the same plan: bitwise the host arrays' result.
        surrogate::Model::DeviceArrays arrays;
        arrays.in = in.data();
        arrays.out = again.data();
        arrays.in_point_stride = c.in_dim;
        arrays.out_point_stride = c.out_dim;
        model->predict_device(*comm, *plan, arrays, *options);
        EXPECT_EQ(again, out) << c.name << " " << p.name << " over " << transport << ": device arrays";
        const auto& single = options->reproducible ? single_exact : single_fast;
        double worst = 0;
        bool identical = true;
        for (std::size_t i = 0; i < p.rows.size(); ++i)
          for (int j = 0; j < c.out_dim; ++j) {
            const float a = out[i * c.out_dim + j], b = single[static_cast<std::size_t>(p.rows[i] * c.out_dim + j)];
            worst = std::max(worst, double(std::abs(a - b)));
            identical = identical && a == b;
          }
        if (options->reproducible)
          EXPECT_TRUE(identical) << c.name << " " << p.name << " over " << transport << " on " << comm->size()
                                 << " ranks: reproducible mode is not bitwise the one-process device forward";
        else
          EXPECT_LE(worst / scale, 1e-6) << c.name << " " << p.name << " over " << transport;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FlareDeviceMpiEmulated, ::testing::ValuesIn(st::golden_case_names()),
                         [](const auto& param_info) { return param_info.param; });

/// The error every rank caught (code and message the same everywhere).
template <class F>
surrogate::Error error_everywhere(const Comm& comm, F&& f) {
  surrogate::Error caught(surrogate::ErrorCode::ok, "");
  try {
    f();
  } catch (const surrogate::Error& e) {
    caught = e;
  }
  EXPECT_NE(caught.code(), surrogate::ErrorCode::ok) << "rank " << comm.rank() << " got no error";
  const std::string message = caught.what();
  EXPECT_EQ(message, comm.broadcast_string(message, 0)) << "rank " << comm.rank();
  return caught;
}

// A launch failure on the last rank only, and a NaN in its device inputs, are the same Error on every rank
// (over both transports); the model and the plan work afterwards.
TEST(FlareDeviceMpiEmulatedErrors, OneRanksFailureIsAgreed) {
  surrogate::MpiComm mpi(MPI_COMM_WORLD);
  DirectComm direct;
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(mpi, c.model_path));
  for (const Comm* comm : {static_cast<const Comm*>(&mpi), static_cast<const Comm*>(&direct)}) {
    const Partition p = partitions(c.points(), comm->rank(), comm->size())[0];
    std::vector<float> in;
    std::vector<std::int64_t> ids;
    gather(c, p.rows, in, ids);
    const auto n = static_cast<std::int64_t>(p.rows.size());
    const auto plan = model->plan(*comm, surrogate::SampleLayout::build(*comm, n, ids.data()));
    std::vector<float> out(static_cast<std::size_t>(n * c.out_dim)), good(out.size());
    surrogate::RunOptions options;
    options.cuda_device = host_backend::kDevice;
    model->predict(*comm, *plan, in.data(), c.in_dim, good.data(), c.out_dim, options);
    const bool last = comm->rank() == comm->size() - 1;
    if (last) host_backend::fail_after = 3;
    surrogate::Error e = error_everywhere(*comm, [&] {
      model->predict(*comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim, options);
    });
    host_backend::fail_after = 0;
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
    // A NaN in channel 0 on rank 0 and an Inf in channel 1 on the last rank: the agreed message sums up
    // every rank's counts per channel, as the host path does.
    std::vector<float> bad = in;
    const bool first = comm->rank() == 0;
    if (first && n > 0) bad[0] = std::nanf("");
    if (last && n > 0 && c.in_dim > 1) bad[static_cast<std::size_t>((n - 1) * c.in_dim + 1)] = INFINITY;
    std::vector<std::int64_t> counts(static_cast<std::size_t>(comm->size()));
    MPI_Allgather(&n, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    surrogate::Model::DeviceArrays arrays;
    arrays.in = bad.data();
    arrays.out = out.data();
    arrays.in_point_stride = c.in_dim;
    arrays.out_point_stride = c.out_dim;
    e = error_everywhere(*comm, [&] { model->predict_device(*comm, *plan, arrays, options); });
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
    const std::string what = e.what();
    if (counts.front() > 0) {
      EXPECT_NE(what.find("(channel 0) has 1 NaN/Inf value(s) (rank 0: 1)"), std::string::npos) << what;
    }
    if (counts.back() > 0 && c.in_dim > 1) {
      EXPECT_NE(what.find("(channel 1) has 1 NaN/Inf value(s) (rank " + std::to_string(comm->size() - 1) + ": 1)"),
                std::string::npos) << what;
    }
    model->predict(*comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim, options);
    EXPECT_EQ(out, good);
  }
}

}  // namespace
