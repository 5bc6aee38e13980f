// Comm over MPI: wraps (a duplicate of) the caller's communicator. MPI errors are returned, not fatal,
// and become surrogate::Error(communication).
#pragma once

#include <mpi.h>

#include <string>

#include "surrogate/comm.hpp"

namespace surrogate {

class MpiComm final : public Comm {
 public:
  /// Duplicates `comm` (collective), so the library's messages never mix with the caller's. A handle that
  /// check_communicator refuses throws before anything collective.
  explicit MpiComm(MPI_Comm comm);
  /// Local: throws Error(invalid_argument) naming `what` when `comm` is MPI_COMM_NULL, not a valid handle
  /// (as MPI_Comm_f2c gives for a bad Fortran integer) or an intercommunicator, and Error(communication)
  /// before MPI_Init or after MPI_Finalize. Never aborts through MPI's error handlers.
  static void check_communicator(MPI_Comm comm, const std::string& what);
  ~MpiComm() override;
  MpiComm(const MpiComm&) = delete;
  MpiComm& operator=(const MpiComm&) = delete;

  MPI_Comm get() const { return comm_; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override;

  using Comm::allreduce;
  void allreduce(void* inout, std::size_t count, DType type, ReduceOp op) const override;
  void broadcast(void* buffer, std::size_t bytes, int root) const override;
  void allgather(const void* send, std::size_t bytes, void* recv) const override;
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets) const override;
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes,
                 std::span<const std::size_t> recv_offsets) const override;
  void sendrecv(const void* send, std::size_t send_bytes, int dest, void* recv, std::size_t recv_bytes, int source,
                int tag) const override;
  void barrier() const override;

 protected:
  /// NCCL builds: NCCL when every rank owns its GPU (NcclComm::usable; SURROGATE_NCCL=0 disables it),
  /// otherwise (and in other builds) host staging through this communicator. Collective.
  std::shared_ptr<DeviceTransport> make_device_transport(int device) const override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace surrogate
