// The BSA device forward across MPI ranks (libsurrogate/src/bsa/cuda/distributed.cpp: every rank the
// layers on its slots of the distributed tree, the rotated layers, the compressed K/V all-gather, the
// selected blocks' fetch and the global branch's sample K/V moved by the plan's exchanges on device rows,
// here through the host staging transport) run on the CPU under mpirun with the host-emulated CUDA backend
// (emulated_cuda_backend.cpp, emulated_bsa_launchers.cpp; each rank its own emulated device). The code of
// the library is the code a GPU build runs; what is emulated is the runtime and the kernels' launch.
//
// Checks, on the golden BSA models with the points dealt unevenly over the ranks (shuffled, rank r taking
// a share proportional to r + 1, global ids the golden order):
//  - Model::predict with cuda_device = 0 is bitwise the one-rank device forward on the whole batch
//    (bsa::detail::make_bsa_cuda_forward(...)->forward, computed on rank 0): every row, ball, block and
//    query is computed from the same values in the same order, and the selection is the CPU's
//    select_blocks on the same (all-gathered) compressed keys;
//  - within the float32 bound of the one-rank emulated test (8e-6 max|y|, test_bsa_device_emulated.cpp)
//    of the CPU forward;
//  - a second call (kept plan and device geometry) gives the same bits, new features the one-rank device
//    forward's bits for them;
//  - errors on one rank (a failed kernel launch mid-forward, a NaN feature, a device this rank lacks) are
//    the same Error on every rank, no hang, and the model runs again afterwards.
#include "host_backend_hooks.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "bsa_device_mpi_cases.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using namespace bsa_device_mpi;  // NOLINT: the shared cases
using surrogate::Error;
using surrogate::ErrorCode;

class BsaDeviceMpiEmulated : public ::testing::TestWithParam<const char*> {};

TEST_P(BsaDeviceMpiEmulated, EveryRankCountGivesTheOneRankDeviceForwardBitwise) {
  const long long uploaded_before = host_backend::bytes_to_device;
  expect_one_rank_device_bits(GetParam(), host_backend::kDevice);
  // This rank's part went through its device (a rank may launch no kernel: e.g. the global model's
  // sample rows are attended on their owner rank).
  EXPECT_GT(static_cast<long long>(host_backend::bytes_to_device), uploaded_before);
}

INSTANTIATE_TEST_SUITE_P(Bsa, BsaDeviceMpiEmulated,
                         ::testing::Values("sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball",
                                           "global"));

// One sample of 250 points (256 slots, two tree granules of 128): at 3 and 4 ranks some ranks hold no slot
// but take part in every exchange (with group selection and block means).
TEST(BsaDeviceMpiEmulatedSmall, RanksWithoutSlots) {
  const long long uploaded_before = host_backend::bytes_to_device;
  expect_one_rank_device_bits(first_sample(load("means_static")), "means_static (first sample)", host_backend::kDevice);
  EXPECT_GT(static_cast<long long>(host_backend::bytes_to_device), uploaded_before);
}

// A kernel launch that fails on the last rank in the middle of the forward (the third BSA launch there:
// inside the first sparse layer, between its exchanges) is the same Error on every rank, with the
// failing rank's message; nothing hangs, and the next call on the plan runs (its device geometry uploaded
// again) with the one-rank result's bits.
TEST(BsaDeviceMpiEmulatedErrors, ALaunchFailureOnOneRankIsAnAgreedError) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Golden g = load("means_static");
  const surrogate::ModelFile file = surrogate::ModelFile::read(g.path);
  const Part p = deal(g, comm.rank(), comm.size());
  const auto model = surrogate::make_model(file);
  surrogate::RunOptions options;
  options.cuda_device = host_backend::kDevice;
  const std::unique_ptr<surrogate::Plan> plan = plan_of(comm, *model, g, p);
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

// A NaN feature on the last rank, tf32, and a device only the last rank asks for (the emulation has one
// device) are the same Error on every rank.
TEST(BsaDeviceMpiEmulatedErrors, InputAndOptionErrorsAreAgreed) {
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
  options.cuda_device = host_backend::kDevice;
  std::int64_t id_on_last_rank = p.ids.empty() ? 0 : p.ids.back();  // (the last rank has the most points)
  MPI_Bcast(&id_on_last_rank, 1, MPI_INT64_T, comm.size() - 1, MPI_COMM_WORLD);
  std::vector<float> nan_on_last = g.features;
  nan_on_last[static_cast<std::size_t>(id_on_last_rank * g.cin)] = std::nanf("");
  expect_error(nan_on_last, options, ErrorCode::input, "NaN");
  surrogate::RunOptions tf32 = options;
  tf32.precision = surrogate::Precision::tf32;
  expect_error(g.features, tf32, ErrorCode::unsupported, "fp32 only");
  surrogate::RunOptions mixed = options;
  if (comm.rank() == comm.size() - 1) mixed.cuda_device = 1;
  expect_error(g.features, mixed, ErrorCode::unsupported, "CUDA device 1");
  // Still usable: the features without the NaN run.
  const std::vector<float> y = predict(comm, *model, g, p, g.features, options);
  EXPECT_EQ(static_cast<std::int64_t>(y.size()), p.size() * model->out_channels());
}

}  // namespace
