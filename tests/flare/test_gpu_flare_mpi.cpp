// FLARE on the device under test across 1-3 ranks: every golden case in four partitions, over the
// communicator's transport and a test one that declares itself direct (the NCCL branch), against the
// one-process device forward (default within 1e-6, reproducible bitwise); tf32 / bf16 against the
// reference within twice the one-process error; device arrays; errors agreed.
// share/docs/cuda.md, "Tests and benchmark".
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>

#include "flare_partitions.hpp"
#include "golden.hpp"
#include "gpu_mpi_test.hpp"
#include "host_backend_hooks.hpp"
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



/// The case's inputs and sample ids of `rows`.

/// Model::predict_device on copies of `in` in the device's memory (at least one element, for empty shares).
std::vector<float> predict_on_device_arrays(const Comm& comm, surrogate::Model& model, surrogate::Plan& plan,
                                            const std::vector<float>& in, std::size_t out_size, int in_dim,
                                            int out_dim, const surrogate::RunOptions& options) {
  std::vector<float> padded_in = in;
  padded_in.resize(std::max<std::size_t>(in.size(), 1));
  auto d_in = st::to_device(padded_in, options.cuda_device);
  auto d_out = st::to_device(std::vector<float>(std::max<std::size_t>(out_size, 1)), options.cuda_device);
  surrogate::Model::DeviceArrays arrays;
  arrays.in = d_in.data();
  arrays.out = d_out.data();
  arrays.in_point_stride = in_dim;
  arrays.out_point_stride = out_dim;
  model.predict_device(comm, plan, arrays, options);
  auto out = st::to_host(d_out.data(), d_out.size(), options.cuda_device);
  out.resize(out_size);
  return out;
}

class FlareMpiGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
};

TEST_P(FlareMpiGpu, PredictionsDoNotDependOnTheRanksOrTheTransport) {
  surrogate::MpiComm mpi(MPI_COMM_WORLD);
  DirectComm direct;
  surrogate::SelfComm self;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(mpi, c.model_path));
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.points()));
  std::iota(all.begin(), all.end(), 0);
  const int device = st::local_device();
  surrogate::RunOptions fast, exact;
  fast.cuda_device = exact.cuda_device = device;
  exact.reproducible = true;
  const auto single_fast = st::predict_rows(self, *model, c, all, fast);
  const auto single_exact = st::predict_rows(self, *model, c, all, exact);
  double scale = 0;
  for (float v : single_fast) scale = std::max(scale, double(std::abs(v)));
  EXPECT_TRUE(direct.device_transport(device).direct());
  for (const Comm* comm : {static_cast<const Comm*>(&mpi), static_cast<const Comm*>(&direct)}) {
    const std::string transport = comm->device_transport(device).name();
    for (const Partition& p : partitions(c.points(), comm->rank(), comm->size())) {
      std::vector<float> in;
      std::vector<std::int64_t> ids;
      gather(c, p.rows, in, ids);
      const auto n = static_cast<std::int64_t>(p.rows.size());
      const auto plan = model->plan(*comm, surrogate::SampleLayout::build(*comm, n, ids.data()));
      for (const auto* options : {&fast, &exact}) {
        std::vector<float> out(static_cast<std::size_t>(n * c.out_dim));
        model->predict(*comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim, *options);
        EXPECT_EQ(predict_on_device_arrays(*comm, *model, *plan, in, out.size(), c.in_dim, c.out_dim, *options), out)
            << c.name << " " << p.name << " over " << transport << ": device arrays";
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

INSTANTIATE_TEST_SUITE_P(Cases, FlareMpiGpu, ::testing::ValuesIn(st::golden_case_names()),
                         [](const auto& param_info) { return param_info.param; });

// tf32 / bf16: the encode's partials come from the tensor cores, one per chunk of each rank's points, and
// are merged across the ranks in double as in fp32. The chunks move with the partition, so the FP32 sums
// inside them round differently: not bitwise, but every partition's error against the official float64
// reference stays within twice the one-process forward's in the same precision (plus the fp32 bound); a
// wrong merge of the ranks' partials would miss it by orders of magnitude.
TEST(FlareMpiGpuPrecisions, TensorCorePartialsMergeAcrossTheRanks) {
  SURROGATE_SKIP_WITHOUT_GPU();
  surrogate::MpiComm mpi(MPI_COMM_WORLD);
  surrogate::SelfComm self;
  for (const std::string name : {"default", "paper"}) {
    const st::GoldenCase c = st::load_golden_case(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(mpi, c.model_path));
    std::vector<std::int64_t> all(static_cast<std::size_t>(c.points()));
    std::iota(all.begin(), all.end(), 0);
    for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
      surrogate::RunOptions options;
      options.cuda_device = st::local_device();
      options.precision = precision;
      const double single = st::relative_max_error(st::predict_rows(self, *model, c, all, options), c.reference);
      for (const Partition& p : partitions(c.points(), mpi.rank(), mpi.size())) {
        std::vector<float> in;
        std::vector<std::int64_t> ids;
        gather(c, p.rows, in, ids);
        const auto n = static_cast<std::int64_t>(p.rows.size());
        const auto plan = model->plan(mpi, surrogate::SampleLayout::build(mpi, n, ids.data()));
        std::vector<float> out(static_cast<std::size_t>(n * c.out_dim));
        model->predict(mpi, *plan, in.data(), c.in_dim, out.data(), c.out_dim, options);
        // The whole prediction on every rank, in global row order, against the reference.
        std::vector<float> whole(static_cast<std::size_t>(c.points()) * c.out_dim, 0.0f);
        for (std::size_t i = 0; i < p.rows.size(); ++i)
          std::copy_n(out.begin() + static_cast<std::ptrdiff_t>(i) * c.out_dim, c.out_dim,
                      whole.begin() + p.rows[i] * c.out_dim);
        mpi.allreduce(whole.data(), whole.size(), surrogate::DType::f32, surrogate::ReduceOp::sum);  // one owner each
        const double err = st::relative_max_error(whole, c.reference);
        EXPECT_LE(err, 2 * single + 1e-5) << name << " " << surrogate::precision_name(precision) << " " << p.name
                                          << " on " << mpi.size() << " ranks (one process: " << single << ")";
      }
    }
  }
}

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

/// The golden case "default" on the contiguous partition of `comm`, with its plan and good prediction.
struct Contiguous {
  Contiguous(const Comm& comm, const surrogate::RunOptions& options)
      : c(st::load_golden_case("default")),
        model(surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path))) {
    rows = partitions(c.points(), comm.rank(), comm.size())[0].rows;
    gather(c, rows, in, ids);
    n = static_cast<std::int64_t>(rows.size());
    plan = model->plan(comm, surrogate::SampleLayout::build(comm, n, ids.data()));
    good.resize(static_cast<std::size_t>(n * c.out_dim));
    model->predict(comm, *plan, in.data(), c.in_dim, good.data(), c.out_dim, options);
  }
  std::vector<float> predict(const Comm& comm, const surrogate::RunOptions& options) const {
    std::vector<float> out(good.size());
    model->predict(comm, *plan, in.data(), c.in_dim, out.data(), c.out_dim, options);
    return out;
  }
  st::GoldenCase c;
  std::unique_ptr<surrogate::Model> model;
  std::vector<std::int64_t> rows, ids;
  std::vector<float> in, good;
  std::int64_t n = 0;
  std::unique_ptr<surrogate::Plan> plan;
};

// A NaN in channel 0 on rank 0 and an Inf in channel 1 on the last rank, in the device inputs: the same
// Error(input) on every rank (both transports), summing up every rank's counts per channel as the host path
// does; the plan works afterwards.
TEST(FlareMpiGpuErrors, BadDeviceInputsOnSomeRanksAreAgreed) {
  SURROGATE_SKIP_WITHOUT_GPU();
  surrogate::MpiComm mpi(MPI_COMM_WORLD);
  DirectComm direct;
  surrogate::RunOptions options;
  options.cuda_device = st::local_device();
  for (const Comm* comm : {static_cast<const Comm*>(&mpi), static_cast<const Comm*>(&direct)}) {
    const Contiguous run(*comm, options);
    const auto& c = run.c;
    const bool first = comm->rank() == 0, last = comm->rank() == comm->size() - 1;
    std::vector<float> bad = run.in;
    if (first && run.n > 0) bad[0] = std::nanf("");
    if (last && run.n > 0 && c.in_dim > 1) bad[static_cast<std::size_t>((run.n - 1) * c.in_dim + 1)] = INFINITY;
    std::vector<std::int64_t> counts(static_cast<std::size_t>(comm->size()));
    MPI_Allgather(&run.n, 1, MPI_INT64_T, counts.data(), 1, MPI_INT64_T, MPI_COMM_WORLD);
    const surrogate::Error e = error_everywhere(*comm, [&] {
      predict_on_device_arrays(*comm, *run.model, *run.plan, bad, run.good.size(), c.in_dim, c.out_dim, options);
    });
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
    const std::string what = e.what();
    if (counts.front() > 0) {
      EXPECT_NE(what.find("(channel 0) has 1 NaN/Inf value(s) (rank 0: 1)"), std::string::npos) << what;
    }
    if (counts.back() > 0 && c.in_dim > 1) {
      EXPECT_NE(what.find("(channel 1) has 1 NaN/Inf value(s) (rank " + std::to_string(comm->size() - 1) + ": 1)"),
                std::string::npos) << what;
    }
    EXPECT_EQ(run.predict(*comm, options), run.good);
  }
}

// An output std of 1e300 overflows float32 at every point: predictions into device arrays are the same
// agreed Error(input) as predict()'s on host arrays, with every rank's count, unless
// allow_non_finite_output hands them over.
// Finite inputs that overflow inside the network: in both modes the agreed non-finite-prediction error (the
// reproducible encode counts the terms whose fixed-point image does not fit and gives NaN, as the CPU).
TEST(FlareMpiGpuErrors, ActivationsOverflowingToInfAreAnAgreedErrorInBothModes) {
  SURROGATE_SKIP_WITHOUT_GPU();
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.model_path));
  const auto rows = partitions(c.points(), comm.rank(), comm.size())[0].rows;
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, rows, in, ids);
  for (float& v : in) v = 3e38f;
  const auto n = static_cast<std::int64_t>(rows.size());
  const auto layout = surrogate::SampleLayout::build(comm, n, ids.data());
  std::vector<float> out(static_cast<std::size_t>(n * c.out_dim));
  for (bool reproducible : {false, true}) {
    surrogate::RunOptions options;
    options.cuda_device = st::local_device();
    options.reproducible = reproducible;
    const surrogate::Error e = error_everywhere(comm, [&] {
      model->predict(comm, layout, in.data(), c.in_dim, out.data(), c.out_dim, options);
    });
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
    EXPECT_NE(std::string(e.what()).find("non-finite predictions"), std::string::npos) << e.what();
  }
}

TEST(FlareMpiGpuErrors, NonFiniteDevicePredictionsAreAgreedUnlessAllowed) {
  SURROGATE_SKIP_WITHOUT_GPU();
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  surrogate::RunOptions options;
  options.cuda_device = st::local_device();
  const st::GoldenCase c = st::load_golden_case("default");
  surrogate::ModelFile file = surrogate::ModelFile::read(comm, c.model_path);
  file.normalization.output_mean.assign(static_cast<std::size_t>(c.out_dim), 0.0);
  file.normalization.output_std.assign(static_cast<std::size_t>(c.out_dim), 1e300);
  const auto model = surrogate::make_model(file);
  const auto rows = partitions(c.points(), comm.rank(), comm.size())[0].rows;
  std::vector<float> in;
  std::vector<std::int64_t> ids;
  gather(c, rows, in, ids);
  const auto n = static_cast<std::int64_t>(rows.size());
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, n, ids.data()));
  const std::size_t out_size = static_cast<std::size_t>(n * c.out_dim);
  const surrogate::Error e = error_everywhere(comm, [&] {
    predict_on_device_arrays(comm, *model, *plan, in, out_size, c.in_dim, c.out_dim, options);
  });
  EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
  const std::string what = e.what();
  EXPECT_NE(what.find("non-finite predictions: output field"), std::string::npos) << what;
  EXPECT_NE(what.find("(channel 0) has " + std::to_string(c.points()) + " NaN/Inf value(s)"), std::string::npos) << what;
  if (n > 0) {
    EXPECT_NE(what.find("rank " + std::to_string(comm.rank()) + ": " + std::to_string(n)), std::string::npos) << what;
  }
  options.allow_non_finite_output = true;
  for (const float v : predict_on_device_arrays(comm, *model, *plan, in, out_size, c.in_dim, c.out_dim, options))
    EXPECT_FALSE(std::isfinite(v));
}

// A launch failure on the last rank only is the same Error(internal) on every rank (both transports); the
// model and the plan work afterwards.
TEST(FlareMpiHostBackend, OneRanksLaunchFailureIsAgreed) {
  SURROGATE_HOST_BACKEND_ONLY();
  surrogate::MpiComm mpi(MPI_COMM_WORLD);
  DirectComm direct;
  surrogate::RunOptions options;
  options.cuda_device = host_backend::kDevice;
  for (const Comm* comm : {static_cast<const Comm*>(&mpi), static_cast<const Comm*>(&direct)}) {
    const Contiguous run(*comm, options);
    if (comm->rank() == comm->size() - 1) host_backend::fail_after = 3;
    const surrogate::Error e = error_everywhere(*comm, [&] { run.predict(*comm, options); });
    host_backend::fail_after = 0;
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
    EXPECT_EQ(run.predict(*comm, options), run.good);
  }
}

}  // namespace
