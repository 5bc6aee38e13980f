// The BSA device forward across 1-4 ranks on the device under test: the golden models dealt unevenly,
// bitwise the one-rank device forward and within 8e-6 max|y| of the CPU; errors on one rank agreed (launch
// failures and a missing device on the host backend only). share/docs/balltree.md, "BSA on a CUDA
// device".
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "bsa_device_mpi_cases.hpp"
#include "gpu_mpi_test.hpp"
#include "host_backend_hooks.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using namespace bsa_device_mpi;  // NOLINT: the shared cases
using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::testing::local_device;

/// Bytes uploaded to the emulated device so far (host backend), to check that this rank's part went
/// through its device; 0 on a GPU.
long long uploaded() { return surrogate::testing::on_host_backend() ? host_backend::bytes_to_device : 0; }

/// A golden model on the emulated device, this rank's part of its points and the plan of them.
struct OnEmulatedDevice {
  OnEmulatedDevice(const surrogate::Comm& comm, Golden golden)
      : g(std::move(golden)), p(deal(g, comm.rank(), comm.size())), model(surrogate::make_model(g.file)),
        plan(plan_of(comm, *model, g, p)) {
    options.cuda_device = host_backend::kDevice;
  }
  OnEmulatedDevice(const surrogate::Comm& comm, const std::string& name) : OnEmulatedDevice(comm, load(name)) {}
  Golden g;
  Part p;
  std::unique_ptr<surrogate::Model> model;
  surrogate::RunOptions options;
  std::unique_ptr<surrogate::Plan> plan;

  /// This rank's input rows and `out_values` zeros on the emulated device, as predict_device's arrays.
  struct DeviceRows {
    surrogate::kernels::cuda::DeviceBuffer<float> in, out;
    surrogate::Model::DeviceArrays arrays;
    std::vector<float> outputs() const { return surrogate::testing::to_host(out.data(), out.size(), host_backend::kDevice); }
  };
  DeviceRows device_rows(std::size_t out_values) const {
    DeviceRows d;
    d.in = surrogate::testing::to_device(p.rows_of(g.features, g.cin), host_backend::kDevice);
    d.out = surrogate::testing::to_device(std::vector<float>(out_values), host_backend::kDevice);
    d.arrays.in = d.in.data();
    d.arrays.out = d.out.data();
    d.arrays.in_point_stride = g.cin;
    d.arrays.out_point_stride = model->out_channels();
    return d;
  }
};

class GpuBsaMpi : public ::testing::TestWithParam<const char*> {};

// A rank may launch no kernel (the global model's sample rows are attended on their owner rank), but every
// rank uploads its part.
TEST_P(GpuBsaMpi, EveryRankCountGivesTheOneRankDeviceForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const long long before = uploaded();
  expect_one_rank_device_bits(GetParam(), local_device());
  if (surrogate::testing::on_host_backend()) {
    EXPECT_GT(uploaded(), before);
  }
}

INSTANTIATE_TEST_SUITE_P(Bsa, GpuBsaMpi,
                         ::testing::Values("sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball",
                                           "global"));

// The dense layers in bf16 and tf32: every rank count gives the one-rank device forward in that precision.
TEST(GpuBsaMpiPrecision, TensorCorePrecisionsAreTheOneRankForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  expect_one_rank_device_bits("sparse_rot", local_device(), surrogate::Precision::bf16);
  expect_one_rank_device_bits("ball", local_device(), surrogate::Precision::tf32);
}

// The ShapeNet-Car wrapper around sparse_rot (inputs: the positions only): its Fourier features and
// head on the device, every rank count the one-rank device forward's bits, fp32 within the bound of the
// CPU's wrapped forward, bf16 bitwise across ranks too.
TEST(GpuBsaMpiWrapper, ShapenetCarWrapperOnTheDevice) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Golden g = shapenet(load("sparse_rot"));
  expect_one_rank_device_bits(g, "sparse_rot in the ShapeNet-Car wrapper", local_device());
  expect_one_rank_device_bits(g, "sparse_rot in the ShapeNet-Car wrapper", local_device(), surrogate::Precision::bf16);
}

// One sample of 250 points (256 slots, two tree granules of 128): at 3 ranks one rank holds no slot but takes
// part in every exchange (with group selection and block means).
TEST(GpuBsaMpiSmall, RanksWithoutSlots) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const long long before = uploaded();
  expect_one_rank_device_bits(first_sample(load("means_static")), "means_static (first sample)", local_device());
  if (surrogate::testing::on_host_backend()) {
    EXPECT_GT(uploaded(), before);
  }
}

// A kernel launch that fails on the last rank in the middle of the forward (the third BSA launch there:
// inside the first sparse layer, between its exchanges) is the same Error on every rank, with the
// failing rank's message; nothing hangs, and the next call on the plan runs (its device geometry uploaded
// again) with the one-rank result's bits.
TEST(BsaMpiHostBackend, ALaunchFailureOnOneRankIsAnAgreedError) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const OnEmulatedDevice setup(comm, "means_static");
  const auto& [g, p, model, options, plan] = std::tie(setup.g, setup.p, setup.model, setup.options, setup.plan);
  const std::vector<float> good = predict(comm, *model, *plan, g, p, g.features, options);
  if (comm.rank() == comm.size() - 1) host_backend::fail_after = 3;
  try {
    predict(comm, *model, *plan, g, p, g.features, options);
    ADD_FAILURE() << "rank " << comm.rank() << ": no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA device cuda-emulated"), std::string::npos) << e.what();
  }
  host_backend::fail_after = 0;
  EXPECT_EQ(bit_differences(predict(comm, *model, *plan, g, p, g.features, options), good), 0) << "rank " << comm.rank();
}

// predict_device on a kept plan keeps the rows on the device: the caller's arrays reach the network's rows
// and come back through the plan's exchanges on device rows, bitwise predict()'s result. In one process it
// waits for the device twice (the agreed counts of non-finite inputs, and the end) and downloads only those
// counts; across ranks the staged transport adds its copies (NCCL would not), printed per rank. A launch
// failure in that path is agreed and the next call recovers. So with the ShapeNet-Car wrapper (no input
// rows; its Fourier features and head on the device).
TEST(BsaMpiHostBackend, DeviceArraysStayOnTheDeviceOnAKeptPlan) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  for (const char* name : {"sparse_rot", "global", "wrapped sparse_rot"}) {
    SCOPED_TRACE(name);
    const std::string base = name;
    const OnEmulatedDevice setup(comm, base == "wrapped sparse_rot" ? shapenet(load("sparse_rot")) : load(name));
    const auto& [g, p, model, options, plan] = std::tie(setup.g, setup.p, setup.model, setup.options, setup.plan);
    std::vector<float> good = predict(comm, *model, *plan, g, p, g.features, options);  // plan and geometry kept
    const int cout = model->out_channels();
    good.resize(std::max<std::size_t>(good.size(), 1));
    const auto rows = setup.device_rows(good.size());
    const surrogate::Model::DeviceArrays& arrays = rows.arrays;
    const long long waits = host_backend::host_waits, down = host_backend::bytes_to_host;
    model->predict_device(comm, *plan, arrays, options);
    long long moved[2] = {host_backend::host_waits - waits, host_backend::bytes_to_host - down};
    EXPECT_EQ(bit_differences(rows.outputs(), good), 0) << "rank " << comm.rank();
    std::vector<long long> all(static_cast<std::size_t>(2 * comm.size()));
    MPI_Gather(moved, 2, MPI_LONG_LONG, all.data(), 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (comm.rank() == 0)
      for (int r = 0; r < comm.size(); ++r)
        std::printf("%s, %d ranks, device arrays on a kept plan: rank %d waits %lld times, downloads %lld bytes\n", name,
                    comm.size(), r, all[static_cast<std::size_t>(2 * r)], all[static_cast<std::size_t>(2 * r + 1)]);
    if (comm.size() == 1) {
      EXPECT_EQ(moved[0], 2);
      EXPECT_LE(moved[1], static_cast<long long>(sizeof(unsigned long long)) * (g.cin + cout + 1));  // the counts
    }
    // A launch failing inside the forward on the last rank is one Error on every rank, and the next call
    // (its geometry uploaded again) gives the same bits.
    if (comm.rank() == comm.size() - 1) host_backend::fail_after = 5;
    try {
      model->predict_device(comm, *plan, arrays, options);
      ADD_FAILURE() << "rank " << comm.rank() << ": no error";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::internal) << e.what();
      EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
    }
    host_backend::fail_after = 0;
    model->predict_device(comm, *plan, arrays, options);
    EXPECT_EQ(bit_differences(rows.outputs(), good), 0) << "rank " << comm.rank() << ", after the failure";
  }
}

// One graph per kept plan: on one rank the batch's device forward runs directly once, is captured as one
// CUDA graph on the second predict and replayed from the third, with the direct forward's bits (host
// arrays and the caller's device arrays alike). Across ranks nothing is captured.
TEST(BsaMpiHostBackend, AKeptPlansForwardIsOneGraphOnOneRank) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  for (const char* name : {"sparse_rot", "global", "wrapped sparse_rot"}) {
    SCOPED_TRACE(name);
    const std::string base = name;
    const OnEmulatedDevice setup(comm, base == "wrapped sparse_rot" ? shapenet(load("sparse_rot")) : load(name));
    const auto& [g, p, model, options, plan] = std::tie(setup.g, setup.p, setup.model, setup.options, setup.plan);
    const std::vector<float> in = p.rows_of(g.features, g.cin);
    const int cout = model->out_channels();
    const auto predict_on_plan = [&] {
      std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, p.size() * cout)));
      model->predict(comm, *plan, in.data(), g.cin, out.data(), cout, options);
      return out;
    };
    if (comm.size() > 1) {
      const host_backend::Counts before = host_backend::counts();
      EXPECT_EQ(bit_differences(predict_on_plan(), predict_on_plan()), 0) << "rank " << comm.rank();
      EXPECT_EQ(host_backend::counts().captures, before.captures);
      EXPECT_EQ(host_backend::counts().graphs, before.graphs);
      continue;
    }
    host_backend::expect_one_graph_per_plan(predict_on_plan, name);
    // predict_device on the same plan replays the same graph between its own gather and scatter.
    const std::vector<float> good = predict_on_plan();
    const auto rows = setup.device_rows(good.size());
    const host_backend::Counts before = host_backend::counts();
    model->predict_device(comm, *plan, rows.arrays, options);
    EXPECT_EQ(host_backend::counts().captures, before.captures);
    EXPECT_EQ(host_backend::counts().graphs, before.graphs + 1);
    EXPECT_EQ(bit_differences(rows.outputs(), good), 0);
  }
}

// A NaN feature on the last rank, tf32, and (host backend: it has one device) a device only the last rank
// asks for are the same Error on every rank.
TEST(GpuBsaMpiErrors, InputAndOptionErrorsAreAgreed) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Golden g = load("global");
  const surrogate::ModelFile file = surrogate::ModelFile::read(g.path);
  const Part p = deal(g, comm.rank(), comm.size());
  const auto model = surrogate::make_model(file);
  auto expect_error = [&](const std::vector<float>& features, const surrogate::RunOptions& options, ErrorCode code,
                          const std::string& text) {
    try {
      predict(comm, *model, g, p, features, options);
      ADD_FAILURE() << "rank " << comm.rank() << ": no error (" << text << ")";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), code) << e.what();
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
  };
  surrogate::RunOptions options;
  options.cuda_device = local_device();
  std::int64_t id_on_last_rank = p.ids.empty() ? 0 : p.ids.back();  // (the last rank has the most points)
  MPI_Bcast(&id_on_last_rank, 1, MPI_INT64_T, comm.size() - 1, MPI_COMM_WORLD);
  std::vector<float> nan_on_last = g.features;
  nan_on_last[static_cast<std::size_t>(id_on_last_rank * g.cin)] = std::nanf("");
  expect_error(nan_on_last, options, ErrorCode::input, "NaN");
  surrogate::RunOptions fp64 = options;
  fp64.precision = surrogate::Precision::fp64;
  expect_error(g.features, fp64, ErrorCode::unsupported, "fp64");
  if (surrogate::testing::on_host_backend()) {
    surrogate::RunOptions mixed = options;
    if (comm.rank() == comm.size() - 1) mixed.cuda_device = 1;
    expect_error(g.features, mixed, ErrorCode::unsupported, "CUDA device 1");
  }
  // Still usable: the features without the NaN run.
  const std::vector<float> y = predict(comm, *model, g, p, g.features, options);
  EXPECT_EQ(static_cast<std::int64_t>(y.size()), p.size() * model->out_channels());
}

}  // namespace
