// NCCL communicator for device buffers, bootstrapped from an MPI communicator (builds with CUDA and
// NCCL only; needs the CUDA toolkit's include directory). MpiComm's DeviceTransport uses it when every
// rank owns a different GPU, and host staging through MPI otherwise; see share/docs/cuda.md.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <span>
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
  /// ncclCommAbort: ends the collectives still pending on the device (those whose peers never joined)
  /// and frees the communicator; later calls throw Error(communication). Local; for a failure the
  /// ranks agreed on (the transport's AgreedEnqueue, share/docs/cuda.md).
  void abort() noexcept;
  bool aborted() const;
  /// In-place allreduce of `count` values of device memory, enqueued on `stream` (asynchronous).
  /// Collective over the ranks; throws Error(communication).
  void allreduce(void* device_data, std::size_t count, DType type, ReduceOp op, cudaStream_t stream) const;
  /// Personalised all-to-all of device bytes (one group of ncclSend/ncclRecv; counts and offsets per peer,
  /// this rank's own part included), enqueued on `stream`. Collective; throws Error(communication).
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_offsets,
                 cudaStream_t stream) const;
  /// Variable-size all-gather of device bytes (ncclAllGather when the parts are equal and packed, else one
  /// group of ncclBroadcast), enqueued on `stream`. Collective; throws Error(communication).
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets, cudaStream_t stream) const;

 private:
  void refuse_if_aborted() const;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate
