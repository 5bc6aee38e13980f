// The BSA device forward across MPI ranks on GPUs (libsurrogate/src/bsa/cuda/distributed.cpp; ranks
// share the node's devices: node-local rank mod device count): the checks of
// test_bsa_device_mpi_emulated.cpp (bsa_device_mpi_cases.hpp) with the real runtime and kernels: on the
// golden BSA models with the points dealt unevenly over the ranks, Model::predict with cuda_device is
// bitwise the one-rank device forward of the whole batch (rank 0's device; the kernels are deterministic
// and a query's arithmetic does not depend on which rows a launch holds), within 8e-6 max|y| of the CPU
// forward, the kept geometry and new features as there. Prints the wall time of a predict. SKIPS when no
// CUDA device is visible (every rank: the same machine).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "bsa_device_mpi_cases.hpp"
#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace {

int local_device() {
  if (surrogate::testing::on_host_backend()) return surrogate::kernels::cuda::kEmulatedDevice;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank % surrogate::kernels::cuda::device_count();
}

class GpuBsaMpi : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuBsaMpi, EveryRankCountGivesTheOneRankDeviceForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  bsa_device_mpi::expect_one_rank_device_bits(GetParam(), local_device());
}

INSTANTIATE_TEST_SUITE_P(Bsa, GpuBsaMpi,
                         ::testing::Values("sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball",
                                           "global"));

// One sample of 250 points (two tree granules): at 3 ranks one rank holds no slot.
TEST(GpuBsaMpiSmall, RanksWithoutSlots) {
  SURROGATE_SKIP_WITHOUT_GPU();
  bsa_device_mpi::expect_one_rank_device_bits(bsa_device_mpi::first_sample(bsa_device_mpi::load("means_static")),
                                              "means_static (first sample)", local_device());
}

}  // namespace
