// Communicator abstraction. Models see only this interface: a single process needs no MPI (SelfComm),
// and the same model code runs over MPI (surrogate::MpiComm in the coupling layer) or NCCL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/transport.hpp"  // DType, ReduceOp, DeviceTransport

namespace surrogate {

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// A short description for messages ("self", "MPI (4 ranks)").
  virtual std::string name() const = 0;

  // Collectives: every rank of the communicator must call them in the same order.
  virtual void allreduce(void* inout, std::size_t count, DType type, ReduceOp op) const = 0;
  virtual void broadcast(void* buffer, std::size_t bytes, int root) const = 0;
  /// recv gets every rank's `bytes` bytes, rank-major.
  virtual void allgather(const void* send, std::size_t bytes, void* recv) const = 0;
  /// Variable-size all-gather of bytes; recv_bytes/recv_offsets are per source rank.
  virtual void allgatherv(const void* send, std::size_t send_bytes, void* recv,
                          std::span<const std::size_t> recv_bytes, std::span<const std::size_t> recv_offsets) const = 0;
  /// Personalised all-to-all of bytes (counts and offsets per peer rank).
  virtual void alltoallv(const void* send, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_offsets, void* recv, std::span<const std::size_t> recv_bytes,
                         std::span<const std::size_t> recv_offsets) const = 0;
  /// Send to `dest` and receive from `source` in one step (either may be -1 for none).
  virtual void sendrecv(const void* send, std::size_t send_bytes, int dest, void* recv, std::size_t recv_bytes,
                        int source, int tag) const = 0;
  virtual void barrier() const = 0;

  // Typed conveniences.
  template <class T> void allreduce(std::span<T> values, ReduceOp op) const {
    allreduce(values.data(), values.size(), dtype_of<T>(), op);
  }
  template <class T> T allreduce(T value, ReduceOp op) const {
    allreduce(&value, 1, dtype_of<T>(), op);
    return value;
  }

  /// Collective agreement on an outcome: if any rank failed, every rank gets the failure of the
  /// lowest failing rank (code and message, the message prefixed with that rank), else success.
  Status agree(const Status& local) const;
  /// agree() and throw the agreed error, if any, on every rank.
  void agree_or_throw(const Status& local) const;
  /// Broadcast a string from root.
  std::string broadcast_string(const std::string& text, int root) const;
  /// A setting as a collective call compares it over the ranks: a name for messages ("device", "--output")
  /// and its value as text.
  using Setting = std::pair<std::string, std::string>;
  /// Collective, before anything else collective that depends on the settings: every rank passes the same
  /// list (the same names in the same order); the values are compared over the ranks by a 64-bit digest.
  /// When any differs, every rank throws the same Error(invalid_argument), "<context>: the ranks disagree
  /// on <name>: rank 0 has '<value>', rank(s) 1, 2 have another", for the first setting that differs.
  void agree_on_settings(const std::vector<Setting>& settings, const std::string& context) const;

  /// The transport between the ranks' CUDA devices, every rank passing its own device (CUDA builds):
  /// collective on the first call for a device (it may bootstrap NCCL), the same object afterwards.
  /// Staged through host memory and this communicator unless the implementation offers better (MpiComm
  /// in NCCL builds: NCCL when every rank owns its GPU). Error(unsupported) without the CUDA backend.
  DeviceTransport& device_transport(int device) const;

 protected:
  /// A new transport for `device` (collective; the same kind on every rank). The default stages through
  /// host memory and this communicator.
  virtual std::shared_ptr<DeviceTransport> make_device_transport(int device) const;

 private:
  mutable std::vector<std::pair<int, std::shared_ptr<DeviceTransport>>> transports_;
};

/// The communicator of a single process.
class SelfComm final : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "self"; }
  using Comm::allreduce;
  void allreduce(void*, std::size_t, DType, ReduceOp) const override {}
  void broadcast(void*, std::size_t, int) const override {}
  void allgather(const void* send, std::size_t bytes, void* recv) const override;
  void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                  std::span<const std::size_t> recv_offsets) const override;
  void alltoallv(const void* send, std::span<const std::size_t> send_bytes, std::span<const std::size_t> send_offsets,
                 void* recv, std::span<const std::size_t> recv_bytes,
                 std::span<const std::size_t> recv_offsets) const override;
  void sendrecv(const void* send, std::size_t send_bytes, int dest, void* recv, std::size_t recv_bytes, int source,
                int tag) const override;
  void barrier() const override {}
};

/// Run `work` on every rank and agree on its outcome: an exception on any rank becomes the same
/// surrogate::Error on all ranks (nobody hangs, provided `work` itself makes no collective calls).
template <class F>
void collectively(const Comm& comm, F&& work) {
  Status local;
  try {
    work();
  } catch (...) {
    local = Status::from_current_exception();
  }
  comm.agree_or_throw(local);
}

}  // namespace surrogate
