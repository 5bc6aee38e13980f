// The single-layer spherical models (s2_attention, s2_neighborhood_attention) and the sphere_transformer
// (bilinear decoder) with RunOptions::cuda_device
// across MPI ranks on GPUs (ctest at 1, 2 and 3 ranks; the ranks share the node's devices: node-local rank
// mod device count): the checks of test_sphere_device_mpi_emulated.cpp (sphere_device_mpi_cases.hpp) with
// the real runtime and kernels - the grid rows spread unequally over the ranks, the gathered result
// bitwise the one-process device forward (the kernels are deterministic and a query's arithmetic does not
// depend on which rows a launch holds), within twice the float32 bound of the CPU forward, the same bits
// on a second call. SKIPS when no CUDA device is visible (every rank: the same machine).
#include <gtest/gtest.h>
#include <mpi.h>

#include <string>

#include "gpu_test.hpp"
#include "sphere_device_mpi_cases.hpp"
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

class GpuSphereMpi : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuSphereMpi, EveryRankCountGivesTheOneProcessDeviceForwardBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  sphere_device_mpi::expect_one_process_device_bits(GetParam(), local_device());
}

INSTANTIATE_TEST_SUITE_P(Layers, GpuSphereMpi, ::testing::Values("s2_attention_self_qknorm", "s2_neighborhood_self"));
// The SphericalTransformer in latitude bands on the devices (bilinear and SHT decoders; instance norm's
// per-row sums gathered through host memory).
INSTANTIATE_TEST_SUITE_P(Transformers, GpuSphereMpi,
                         ::testing::Values("st_global_instance_spectral", "st_neighborhood_instance_latlon_cutoff",
                                           "st_neighborhood_layernorm_lat", "zoo_s2ntransformer_e128_reduced",
                                           "st_sht_global_lobatto", "st_sht_neighborhood_instance"));

}  // namespace
