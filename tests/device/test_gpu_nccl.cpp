// The NCCL communicator (NCCL builds), under mpirun: the use-or-not decision is collective and refuses
// ranks that share a GPU; where NCCL is usable (one GPU per rank), device allreduces and a reproducible
// FLARE forward through it (bitwise identical to one process), an abort ending a collective whose peers
// never joined it. SKIPS without a CUDA device, and the NCCL-path tests SKIP where the ranks share a GPU
// (then the forward uses MPI, tested elsewhere).
#include <gtest/gtest.h>
#include <mpi.h>

#include <numeric>

#include "golden.hpp"
#include "gpu_mpi_test.hpp"
#include "surrogate/model.hpp"
#include "surrogate/nccl_comm.hpp"

namespace st = surrogate::testing;
namespace cu = surrogate::kernels::cuda;

namespace {

class Nccl : public ::testing::Test {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
};

/// The cases that need NCCL itself: SKIP unless every rank owns its GPU (NcclComm::usable).
class NcclPath : public Nccl {
 protected:
  void SetUp() override {
    Nccl::SetUp();
    if (IsSkipped()) return;
    device = st::local_device();
    std::string why;
    if (!surrogate::NcclComm::usable(comm, device, &why)) GTEST_SKIP() << "NCCL not usable here (" << why << ")";
  }
  surrogate::MpiComm comm{MPI_COMM_WORLD};
  int device = -1;
};

TEST_F(Nccl, TheDecisionIsCollectiveAndRefusesSharedGpus) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int device = st::local_device();
  std::string why;
  const bool usable = surrogate::NcclComm::usable(comm, device, &why);
  int lo = usable, hi = usable;
  MPI_Allreduce(MPI_IN_PLACE, &lo, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(MPI_IN_PLACE, &hi, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  EXPECT_EQ(lo, hi) << "ranks disagree on using NCCL";
  int local_ranks = 1;
  {
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &local_ranks);
    MPI_Comm_free(&local);
  }
  if (local_ranks > cu::device_count()) {
    EXPECT_FALSE(usable) << "two ranks of this node share a GPU, yet NCCL was judged usable";
    EXPECT_NE(why.find("share the GPU"), std::string::npos) << why;
  }
}

TEST_F(NcclPath, AllreducesDeviceBuffers) {
  surrogate::NcclComm nccl(comm, device);
  cu::DeviceGuard guard(device);
  cu::Stream stream(device);
  std::vector<std::int64_t> ints(1000);
  std::iota(ints.begin(), ints.end(), std::int64_t{comm.rank()} << 40);
  auto d = st::to_device(ints, device);
  nccl.allreduce(d.data(), ints.size(), surrogate::DType::i64, surrogate::ReduceOp::sum, stream.get());
  stream.synchronize();
  const auto sum = st::to_host(d.data(), ints.size());
  const int n = comm.size();
  for (std::size_t i = 0; i < ints.size(); ++i)
    ASSERT_EQ(sum[i], (std::int64_t{n} * (n - 1) / 2 << 40) + n * static_cast<std::int64_t>(i));
  std::vector<float> f = {static_cast<float>(comm.rank()), -static_cast<float>(comm.rank())};
  auto df = st::to_device(f, device);
  nccl.allreduce(df.data(), 2, surrogate::DType::f32, surrogate::ReduceOp::max, stream.get());
  stream.synchronize();
  const auto mx = st::to_host(df.data(), 2);
  EXPECT_EQ(mx[0], static_cast<float>(n - 1));
  EXPECT_EQ(mx[1], 0.0f);
}

// What the transport's agreement on a failed enqueue relies on (coupling/src/agreed_enqueue.hpp): the
// last rank enqueues an allreduce that its peers never join, and ncclCommAbort ends it (a hang here is
// a failure by the test's timeout); the aborted communicator refuses the next call.
TEST_F(NcclPath, AbortEndsACollectiveThePeersNeverJoined) {
  surrogate::NcclComm nccl(comm, device);
  cu::DeviceGuard guard(device);
  cu::Stream stream(device);
  auto d = st::to_device(std::vector<float>(1024, 1.0f), device);
  if (comm.rank() == comm.size() - 1)
    nccl.allreduce(d.data(), 1024, surrogate::DType::f32, surrogate::ReduceOp::sum, stream.get());
  nccl.abort();
  EXPECT_TRUE(nccl.aborted());
  (void)cudaStreamSynchronize(stream.get());  // returns once the abandoned collective is ended
  (void)cudaGetLastError();
  EXPECT_THROW(nccl.allreduce(d.data(), 1024, surrogate::DType::f32, surrogate::ReduceOp::sum, stream.get()),
               surrogate::Error);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_F(NcclPath, ReproducibleForwardThroughNcclIsBitwiseIdenticalToOneProcess) {
  surrogate::SelfComm self;
  const st::GoldenCase c = st::load_golden_case("elasticity");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  surrogate::RunOptions o;
  o.cuda_device = device;
  o.reproducible = true;
  auto run = [&](const surrogate::Comm& on, std::int64_t begin, std::int64_t end) {
    std::vector<float> in(c.features.begin() + begin * c.in_dim, c.features.begin() + end * c.in_dim);
    std::vector<std::int64_t> ids(c.sample_ids.begin() + begin, c.sample_ids.begin() + end);
    const auto layout = surrogate::SampleLayout::build(on, end - begin, ids.data());
    std::vector<float> out(static_cast<std::size_t>(end - begin) * c.out_dim);
    model->predict(on, layout, in.data(), c.in_dim, out.data(), c.out_dim, o);
    return out;
  };
  const auto single = run(self, 0, c.points());
  const std::int64_t begin = c.points() * comm.rank() / comm.size(), end = c.points() * (comm.rank() + 1) / comm.size();
  const auto mine = run(comm, begin, end);
  for (std::int64_t i = begin; i < end; ++i)
    for (int j = 0; j < c.out_dim; ++j)
      ASSERT_EQ(mine[(i - begin) * c.out_dim + j], single[i * c.out_dim + j]) << "point " << i;
}

}  // namespace
