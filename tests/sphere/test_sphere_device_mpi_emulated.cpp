// The spherical single-layer models (s2_attention, s2_neighborhood_attention) with RunOptions::cuda_device
// across MPI ranks (model.cpp: latitude bands, the rows moved between the devices by the plan's exchanges,
// here through the host-staged DeviceTransport; the device operators' row-range forward) run on the CPU
// with the host-emulated CUDA backend (emulated_cuda_backend.cpp, emulated_sphere_launchers.cpp: each rank
// its own emulated device, the unchanged device code of sphere_attention_kernels.cuh). ctest runs it at 1,
// 2, 3 and 4 ranks.
//
// Checks (sphere_device_mpi_cases.hpp), on the golden self-attention layer files (global with qk-norm;
// neighbourhood), the grid rows spread unequally over the ranks (rank 0 ~55 %, cut inside latitude rows;
// also the last rank without rows):
//  * the gathered result equals bit for bit the one-process device forward (the whole-grid device
//    operator: the same kernels on the same rows), and lies within twice the float32 bound of
//    test_sphere_transformer_device_emulated.cpp of the CPU forward; a second call on the same Plan gives
//    the same bits;
//  * the device path ran on every rank that holds a band (kernel launches counted);
//  * a launch failing on one rank only becomes the same Error on every rank (no rank left waiting).
// The same checks for the SphericalTransformer golden files (global / neighbourhood attention, instance
// norm, layer norm, none; bilinear decoder; SHT decoder), with a launch failing on one rank inside its band
// forward.
// What this does not check: nvcc's code, the real runtime, the hardware.
#include "host_backend_hooks.hpp"

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "sphere_device_mpi_cases.hpp"
#include "surrogate/error.hpp"

namespace {

using host_backend::launches;
using namespace sphere_device_mpi;

TEST(SphereDeviceMpiEmulated, GlobalAttentionLayerIsTheOneProcessDeviceForwardBitwise) {
  const int before = launches;
  expect_one_process_device_bits("s2_attention_self_qknorm", host_backend::kDevice);
  EXPECT_GT(launches, before);
}

TEST(SphereDeviceMpiEmulated, NeighborhoodAttentionLayerIsTheOneProcessDeviceForwardBitwise) {
  const int before = launches;
  expect_one_process_device_bits("s2_neighborhood_self", host_backend::kDevice);
  EXPECT_GT(launches, before);
}

/// Every rank's band runs the device operator (counted on the emulated device of each rank). Prints the
/// bytes each rank copies to and from its device per forward (the second call on the same plan: the
/// band's neighbour lists and the exchanges' row lists already uploaded).
TEST(SphereDeviceMpiEmulated, EveryRankWithABandLaunchesKernels) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  for (const char* name : {"s2_neighborhood_self", "s2_attention_self_qknorm"}) {
    const Case c = load(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.dir + "/model.h5"));
    const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), false);
    const auto plan = model->plan(comm, layout_of(comm, c, begin, end));
    predict(comm, *model, *plan, c, begin, end, host_backend::kDevice);
    const int before = launches;
    const long long up = host_backend::bytes_to_device, down = host_backend::bytes_to_host;
    predict(comm, *model, *plan, c, begin, end, host_backend::kDevice);
    // B = 2 samples: balanced bands of nlat = 8 or 10 rows, every rank has one at up to 4 ranks.
    EXPECT_GT(launches, before) << name << ": rank " << comm.rank() << " ran no kernel";
    const std::vector<float> moved = gather({static_cast<float>(host_backend::bytes_to_device - up),
                                             static_cast<float>(host_backend::bytes_to_host - down)});
    if (comm.rank() == 0) {
      std::printf("%s, %d ranks, bytes to / from the device per forward:", name, comm.size());
      for (std::size_t r = 0; r + 1 < moved.size(); r += 2) std::printf(" rank %zu %.0f / %.0f;", r / 2, moved[r], moved[r + 1]);
      std::printf("\n");
    }
  }
}

/// A launch failing on one rank: every rank throws the same surrogate::Error (agreed), and the model
/// works again afterwards.
TEST(SphereDeviceMpiEmulated, ALaunchFailingOnOneRankIsAnErrorOnEveryRank) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Case c = load("s2_attention_self_qknorm");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.dir + "/model.h5"));
  const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), false);
  const int failing = comm.size() - 1;
  host_backend::fail_after = comm.rank() == failing ? 1 : 0;
  std::string message;
  try {
    predict(comm, *model, c, begin, end, host_backend::kDevice);
  } catch (const surrogate::Error& e) {
    message = e.what();
  }
  host_backend::fail_after = 0;
  EXPECT_NE(message.find("emulated launch failure"), std::string::npos) << "rank " << comm.rank() << ": '" << message << "'";
  // The same message everywhere.
  const std::vector<float> one(1, static_cast<float>(message.size()));
  for (const float len : gather(one)) EXPECT_EQ(len, static_cast<float>(message.size()));
  const std::vector<float> got = gather(predict(comm, *model, c, begin, end, host_backend::kDevice));
  const surrogate::SelfComm self;
  const auto single = surrogate::make_model(surrogate::ModelFile::read(c.dir + "/model.h5"));
  const std::vector<float> want = predict(self, *single, c, 0, c.n(), host_backend::kDevice);
  EXPECT_EQ(first_difference(got, want), got.size()) << "after the failure";
}

/// The SphericalTransformer on the devices of every rank (latitude bands, cuda/transformer_bands.cpp
/// forward_bands): bitwise the one-process device forward, within the float32 bound of the CPU. Global
/// attention with instance norm, neighbourhood attention with instance norm and with layer norm, global
/// attention without norm (bilinear decoder upsampling in all).
TEST(SphereDeviceMpiEmulated, GlobalInstanceNormTransformerIsTheOneProcessDeviceForwardBitwise) {
  const int before = launches;
  expect_one_process_device_bits("st_global_instance_spectral", host_backend::kDevice);
  EXPECT_GT(launches, before);
}

TEST(SphereDeviceMpiEmulated, NeighborhoodInstanceNormTransformerIsTheOneProcessDeviceForwardBitwise) {
  const int before = launches;
  expect_one_process_device_bits("st_neighborhood_instance_latlon_cutoff", host_backend::kDevice);
  EXPECT_GT(launches, before);
}

TEST(SphereDeviceMpiEmulated, NeighborhoodLayerNormTransformerIsTheOneProcessDeviceForwardBitwise) {
  expect_one_process_device_bits("st_neighborhood_layernorm_lat", host_backend::kDevice);
}

TEST(SphereDeviceMpiEmulated, GlobalNoNormTransformerIsTheOneProcessDeviceForwardBitwise) {
  expect_one_process_device_bits("st_global_none_morlet", host_backend::kDevice);
}

/// The model zoo's one-head e128 neighbourhood transformer (reduced grid): the wide-head attention
/// kernels in latitude bands. Too slow for CI under emulation (23 s at np 1, 30 s at np 2, 72 s at np 3
/// on the shared 2-core machine), so disabled there; run it by hand:
///   mpirun -np 3 tests/gpu/test_sphere_device_mpi_emulated --gtest_also_run_disabled_tests --gtest_filter='*Zoo*'
TEST(SphereDeviceMpiEmulated, DISABLED_ZooWideHeadTransformerIsTheOneProcessDeviceForwardBitwise) {
  const int before = host_backend::wide_attention_launches;
  expect_one_process_device_bits("zoo_s2ntransformer_e128_reduced", host_backend::kDevice);
  EXPECT_GT(host_backend::wide_attention_launches, before);
}

/// The SHT decoder (upsample_sht) in latitude bands on devices: the Fourier rows of each rank's internal
/// rows, the orders split over the ranks (the Legendre analysis of the rank's orders of every latitude), the
/// coefficients of every order to each rank with decoder rows, the synthesis of those rows only. Global
/// attention on a Lobatto grid and neighbourhood attention with instance norm.
TEST(SphereDeviceMpiEmulated, ShtGlobalTransformerIsTheOneProcessDeviceForwardBitwise) {
  const int before = host_backend::sht_launches;
  expect_one_process_device_bits("st_sht_global_lobatto", host_backend::kDevice);
  EXPECT_GT(host_backend::sht_launches, before);
}

TEST(SphereDeviceMpiEmulated, ShtNeighborhoodInstanceNormTransformerIsTheOneProcessDeviceForwardBitwise) {
  expect_one_process_device_bits("st_sht_neighborhood_instance", host_backend::kDevice);
}

/// A launch failing on one rank inside the transformer's band forward (between its collectives): the same
/// Error on every rank, and the next forward gives the one-process device bits.
TEST(SphereDeviceMpiEmulated, ATransformerLaunchFailingOnOneRankIsAnErrorOnEveryRank) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Case c = load("st_neighborhood_instance_latlon_cutoff");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.dir + "/model.h5"));
  const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), false);
  host_backend::fail_after = comm.rank() == comm.size() - 1 ? 1 : 0;  // its first attention launch
  std::string message;
  try {
    predict(comm, *model, c, begin, end, host_backend::kDevice);
  } catch (const surrogate::Error& e) {
    message = e.what();
  }
  host_backend::fail_after = 0;
  EXPECT_NE(message.find("emulated launch failure"), std::string::npos) << "rank " << comm.rank() << ": '" << message << "'";
  const std::vector<float> one(1, static_cast<float>(message.size()));
  for (const float len : gather(one)) EXPECT_EQ(len, static_cast<float>(message.size()));
  const std::vector<float> got = gather(predict(comm, *model, c, begin, end, host_backend::kDevice));
  const surrogate::SelfComm self;
  const auto single = surrogate::make_model(surrogate::ModelFile::read(c.dir + "/model.h5"));
  const std::vector<float> want = predict(self, *single, c, 0, c.n(), host_backend::kDevice);
  EXPECT_EQ(first_difference(got, want), got.size()) << "after the failure";
}

}  // namespace
