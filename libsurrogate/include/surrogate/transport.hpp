// The layer below the communicator: the element types and reductions of the collectives, the transport
// between the ranks' CUDA devices, and the count of the bytes a rank moved. Depends on nothing of the
// library above it; comm.hpp (Comm::device_transport), exchange.hpp (ExchangePlan's moves and Place) and
// model.hpp (Plan::traffic) include it, so every dependency points down: transport <- comm <- exchange
// <- model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace surrogate {

enum class DType : std::uint8_t { f32, f64, i32, i64, u8 };
enum class ReduceOp : std::uint8_t { sum, max, min };

std::size_t size_of(DType type) noexcept;

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::f32; }
template <> constexpr DType dtype_of<double>() { return DType::f64; }
template <> constexpr DType dtype_of<std::int32_t>() { return DType::i32; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::i64; }
template <> constexpr DType dtype_of<std::uint8_t>() { return DType::u8; }

/// Bytes moved on this rank, accumulated over the moves of one or more exchange plans.
struct Traffic {
  std::uint64_t sent = 0;      // bytes to other ranks
  std::uint64_t received = 0;  // bytes from other ranks
  std::uint64_t local = 0;     // bytes copied within this rank
  std::uint64_t moves = 0;     // forward / backward applications
  double seconds = 0.0;        // wall time of the moves (packing, messages, unpacking)
  Traffic& operator+=(const Traffic& other);
};

/// Collectives on device memory between the ranks' CUDA devices (CUDA builds), from
/// Comm::device_transport: NCCL when every rank owns its GPU (MpiComm in NCCL builds), otherwise staged
/// through host memory and the Comm. Every call is collective over the communicator's ranks and ordered on
/// `stream` (a cudaStream_t of the transport's device); buffers are device memory of that device. Every
/// call agrees on its own outcome: a failure on one rank throws the same Error on every rank, never a hang.
class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  /// "NCCL (4 ranks)", "host staging through MPI (4 ranks)".
  virtual std::string name() const = 0;
  int device() const { return device_; }
  /// Whether data moves device to device (NCCL) rather than through host memory.
  virtual bool direct() const = 0;
  /// Personalised all-to-all of bytes (counts and offsets per peer rank, this rank's own part included).
  virtual void alltoallv(const void* send, std::span<const std::size_t> send_bytes,
                         std::span<const std::size_t> send_offsets, void* recv, std::span<const std::size_t> recv_bytes,
                         std::span<const std::size_t> recv_offsets, void* stream) = 0;
  /// Variable-size all-gather of bytes (recv_bytes / recv_offsets per source rank).
  virtual void allgatherv(const void* send, std::size_t send_bytes, void* recv, std::span<const std::size_t> recv_bytes,
                          std::span<const std::size_t> recv_offsets, void* stream) = 0;
  /// In-place allreduce of `count` values.
  virtual void allreduce(void* data, std::size_t count, DType type, ReduceOp op, void* stream) = 0;

 protected:
  explicit DeviceTransport(int device) : device_(device) {}

 private:
  int device_;
};

}  // namespace surrogate
