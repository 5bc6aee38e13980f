// NCCL communicator for device buffers, bootstrapped from an MPI communicator (builds with CUDA and
// NCCL only; needs the CUDA toolkit's include directory). The CUDA forward of the models uses it for the
// encode reduction when every rank owns a different GPU, and the MPI communicator (through host memory)
// otherwise; see share/docs/cuda.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "surrogate/mpi_comm.hpp"

namespace surrogate {

class NcclComm {
 public:
  /// Whether NCCL can connect the ranks of `comm`, each on its CUDA device `device`: false when two
  /// ranks share a GPU (same host name and PCI bus id: NCCL refuses two ranks on one GPU), when a rank
  /// cannot query its device, or when the environment variable SURROGATE_NCCL is 0 or off on any rank.
  /// Collective (one all-gather); every rank gets the same answer; `why` receives the reason for false.
  static bool usable(const MpiComm& comm, int device, std::string* why = nullptr);

  /// Collective: ncclGetUniqueId on rank 0, MPI_Bcast, ncclCommInitRank on `device` (the caller's
  /// current device is restored). Throws Error(communication) on every rank when any rank fails.
  NcclComm(const MpiComm& comm, int device);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int rank() const;
  int size() const;
  int device() const;
  /// Whether this communicator connects the ranks of `comm` in the same order (MPI_Comm_compare;
  /// local, no communication).
  bool connects(const MpiComm& comm) const;
  /// In-place allreduce of `count` values of device memory, enqueued on `stream` (asynchronous).
  /// Collective over the ranks; throws Error(communication).
  void allreduce(void* device_data, std::size_t count, DType type, ReduceOp op, cudaStream_t stream) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate
