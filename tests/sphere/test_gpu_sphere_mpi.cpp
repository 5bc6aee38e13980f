// The spherical layer models and transformers across 1-4 ranks in latitude bands on the device under test:
// bitwise the one-process device forward, within twice the float32 bound of the CPU (sphere_device_mpi_cases
// .hpp); host backend only: every band launched kernels, a launch failure on one rank agreed.
// share/docs/sphere.md, "CUDA forward of the SphericalTransformer" (Several ranks).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gpu_mpi_test.hpp"
#include "host_backend_hooks.hpp"
#include "sphere_device_mpi_cases.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace {

namespace st = surrogate::testing;
using namespace sphere_device_mpi;

class GpuSphereMpi : public ::testing::TestWithParam<const char*> {};

// On the host backend, kernels ran on this rank's device (the layers), the SHT kernels (the SHT decoder)
// or the wide-head attention kernels (the zoo's one-head e128 file).
TEST_P(GpuSphereMpi, EveryRankCountGivesTheOneProcessDeviceForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const std::string name = GetParam();
  const bool host = st::on_host_backend();
  const int launches = host ? static_cast<int>(host_backend::launches) : 0;
  const int sht = host ? static_cast<int>(host_backend::sht_launches) : 0;
  const int wide = host ? static_cast<int>(host_backend::wide_attention_launches) : 0;
  expect_one_process_device_bits(name.c_str(), st::local_device());
  if (!host) return;
  EXPECT_GT(static_cast<int>(host_backend::launches), launches) << name;
  if (name.rfind("st_sht_global", 0) == 0) {
    EXPECT_GT(static_cast<int>(host_backend::sht_launches), sht) << name;
  }
  if (name.rfind("zoo_", 0) == 0) {
    EXPECT_GT(static_cast<int>(host_backend::wide_attention_launches), wide) << name;
  }
}

INSTANTIATE_TEST_SUITE_P(Layers, GpuSphereMpi, ::testing::Values("s2_attention_self_qknorm", "s2_neighborhood_self"));
// The SphericalTransformer in latitude bands (transformer_bands.cpp forward_bands): global and neighbourhood
// attention, instance, layer and no norm, the bilinear decoder; the SHT decoder (the Fourier rows of each
// rank's internal rows, the orders split over the ranks, the coefficients of every order to each rank with
// decoder rows, the synthesis of those rows only); the model zoo's one-head e128 neighbourhood transformer
// (reduced grid: the wide-head attention kernels).
INSTANTIATE_TEST_SUITE_P(Transformers, GpuSphereMpi,
                         ::testing::Values("st_global_instance_spectral", "st_neighborhood_instance_latlon_cutoff",
                                           "st_neighborhood_layernorm_lat", "st_global_none_morlet",
                                           "st_sht_global_lobatto", "st_sht_neighborhood_instance",
                                           "zoo_s2ntransformer_e128_reduced"));
// The transformer's dense layers and the layer models' projections in bf16 and tf32 in latitude bands: the
// one-process device forward in that precision, bitwise, with the last rank holding rows or none.
class GpuSphereMpiPrecision : public ::testing::TestWithParam<const char*> {};
TEST_P(GpuSphereMpiPrecision, TensorCorePrecisionsAreTheOneProcessForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const Case c = load(GetParam());
  const auto file = surrogate::ModelFile::read(comm, c.dir + "/model.h5");
  for (const auto precision : {surrogate::Precision::bf16, surrogate::Precision::tf32}) {
    const auto single = surrogate::make_model(file);
    const std::vector<float> one = predict(self, *single, c, 0, c.n(), st::local_device(), precision);
    for (const bool last_empty : {false, true}) {
      const auto model = surrogate::make_model(file);
      const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), last_empty);
      const std::vector<float> got = gather(predict(comm, *model, c, begin, end, st::local_device(), precision));
      EXPECT_EQ(first_difference(got, one), got.size())
          << surrogate::precision_name(precision) << (last_empty ? ", last rank empty" : "") << " at " << comm.size()
          << " ranks";
    }
  }
}
INSTANTIATE_TEST_SUITE_P(Models, GpuSphereMpiPrecision,
                         ::testing::Values("st_neighborhood_layernorm_lat", "s2_attention_self_qknorm",
                                           "s2_neighborhood_self"));

/// Every rank's band runs the device operator (counted on the emulated device of each rank). Prints the
/// bytes each rank copies to and from its device per forward (the second call on the same plan: the
/// band's neighbour lists and the exchanges' row lists already uploaded).
TEST(SphereMpiHostBackend, EveryRankWithABandLaunchesKernels) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  for (const char* name : {"s2_neighborhood_self", "s2_attention_self_qknorm"}) {
    const Case c = load(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.dir + "/model.h5"));
    const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), false);
    const auto plan = model->plan(comm, layout_of(comm, c, begin, end));
    predict(comm, *model, *plan, c, begin, end, host_backend::kDevice);
    const int before = host_backend::launches;
    const long long up = host_backend::bytes_to_device, down = host_backend::bytes_to_host;
    predict(comm, *model, *plan, c, begin, end, host_backend::kDevice);
    // B = 2 samples: balanced bands of nlat = 8 or 10 rows, every rank has one at up to 4 ranks.
    EXPECT_GT(host_backend::launches, before) << name << ": rank " << comm.rank() << " ran no kernel";
    const std::vector<float> moved = gather({static_cast<float>(host_backend::bytes_to_device - up),
                                             static_cast<float>(host_backend::bytes_to_host - down)});
    if (comm.rank() == 0) {
      std::printf("%s, %d ranks, bytes to / from the device per forward:", name, comm.size());
      for (std::size_t r = 0; r + 1 < moved.size(); r += 2) std::printf(" rank %zu %.0f / %.0f;", r / 2, moved[r], moved[r + 1]);
      std::printf("\n");
    }
  }
}

/// The first kernel launch on the last rank fails inside `name`'s forward: every rank throws the same
/// surrogate::Error (agreed, not a hang), and the next forward gives the one-process device bits.
void expect_launch_failure_agreed(const char* name) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Case c = load(name);
  const auto model = surrogate::make_model(surrogate::ModelFile::read(comm, c.dir + "/model.h5"));
  const auto [begin, end] = piece(c.n(), comm.rank(), comm.size(), false);
  host_backend::fail_after = comm.rank() == comm.size() - 1 ? 1 : 0;
  std::string message;
  try {
    predict(comm, *model, c, begin, end, host_backend::kDevice);
  } catch (const surrogate::Error& e) {
    message = e.what();
  }
  host_backend::fail_after = 0;
  EXPECT_NE(message.find("emulated launch failure"), std::string::npos) << "rank " << comm.rank() << ": '" << message << "'";
  const std::vector<float> one(1, static_cast<float>(message.size()));  // the same message everywhere
  for (const float len : gather(one)) EXPECT_EQ(len, static_cast<float>(message.size())) << name;
  const std::vector<float> got = gather(predict(comm, *model, c, begin, end, host_backend::kDevice));
  const surrogate::SelfComm self;
  const auto single = surrogate::make_model(surrogate::ModelFile::read(c.dir + "/model.h5"));
  const std::vector<float> want = predict(self, *single, c, 0, c.n(), host_backend::kDevice);
  EXPECT_EQ(first_difference(got, want), got.size()) << name << ": after the failure";
}

TEST(SphereMpiHostBackend, ALaunchFailingOnOneRankIsAnErrorOnEveryRank) {
  SURROGATE_HOST_BACKEND_ONLY();
  expect_launch_failure_agreed("s2_attention_self_qknorm");
}

/// Inside the transformer's band forward, between its collectives (its first attention launch).
TEST(SphereMpiHostBackend, ATransformerLaunchFailingOnOneRankIsAnErrorOnEveryRank) {
  SURROGATE_HOST_BACKEND_ONLY();
  expect_launch_failure_agreed("st_neighborhood_instance_latlon_cutoff");
}

}  // namespace
