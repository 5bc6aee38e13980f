// Shared by the device tests under mpirun (share/docs/cuda.md, "Tests"): the device of this rank.
#pragma once

#include <mpi.h>

#include "gpu_test.hpp"

namespace surrogate::testing {

/// The emulated device on the host backend; on GPUs the node-local rank modulo the visible devices.
inline int local_device() {
  if (on_host_backend()) return kernels::cuda::kEmulatedDevice;
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank % kernels::cuda::device_count();
}

}  // namespace surrogate::testing
