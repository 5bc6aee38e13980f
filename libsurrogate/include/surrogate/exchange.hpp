// Data movement between the ranks of a communicator: one ExchangePlan type for every family, built once per
// point set (inside the family's Plan) and applied to host or device rows with the same call; on devices
// through a DeviceTransport (NCCL, or host staging). share/docs/adding-a-family.md, "Moving data".
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "surrogate/comm.hpp"
#include "surrogate/transport.hpp"  // Traffic, DeviceTransport (once declared here)

namespace surrogate {

/// Where the rows of a move live: host memory (the default), or the memory of a CUDA device with the
/// stream the move is ordered on and the transport between the ranks' devices.
struct Place {
  int device = -1;                       // -1: host memory
  void* stream = nullptr;                // cudaStream_t (device memory only)
  DeviceTransport* transport = nullptr;  // Comm::device_transport(device) (device memory only)
  bool on_device() const { return device >= 0; }
};

/// Global rows [begin, end) of a distributed array (sphere bands, HEPT buckets, ...).
struct RowRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};

/// Moves rows between two layouts over the same ranks: "source" rows and "target" rows, local to every
/// rank. forward: every target row receives the source row it was planned from (rows a plan marks as
/// copies take the value of another target row of the same rank afterwards); backward: every source row
/// receives the target row planned from it (a row sent to several targets: which one wins is unspecified).
/// Built once (collective), applied every step; pure data movement, so bitwise reproducible; any rank may
/// send or receive nothing. The plan keeps a pointer to the communicator it was built with, which must
/// outlive it (or rebind). forward/backward are collective (every rank with the same width); they reuse
/// internal buffers, so one plan must not be applied by two threads at once.
class ExchangePlan {
 public:
  ExchangePlan() = default;

  /// From the target side: for every local target row, the rank and the key of the source row it takes
  /// (source_rank < 0: a copy, see `copy_from`). On the source side, key k names the local row
  /// key_to_row[k] (identity when key_to_row is empty). copy_from[t] >= 0 makes target row t a copy of local
  /// target row copy_from[t] (which must itself be received). Collective; errors agreed.
  static ExchangePlan from_requests(const Comm& comm, std::int64_t source_rows, std::span<const int> source_rank,
                                    std::span<const std::int64_t> source_key, std::span<const std::int64_t> key_to_row,
                                    std::span<const std::int64_t> copy_from);

  /// Rows of a distributed array named by global row ids. This rank holds the global rows of `held`
  /// (disjoint over all ranks), range i at local source rows [held_first_row[i], held_first_row[i] + size);
  /// the target rows are the ranges of `wanted` concatenated in order. Every wanted row must be held by
  /// exactly one rank: otherwise Error(internal) on every rank, naming the rank and the range. Collective.
  static ExchangePlan from_ranges(const Comm& comm, std::int64_t source_rows, std::span<const RowRange> held,
                                  std::span<const std::int64_t> held_first_row, std::span<const RowRange> wanted);

  /// Every rank's `local_rows` source rows to every rank: the target rows are rank 0's rows, then rank 1's,
  /// ... (an all-gather: on devices one collective of the transport). forward only. Collective.
  static ExchangePlan all_gather(const Comm& comm, std::int64_t local_rows);

  /// Host rows of `width` contiguous values.
  void forward(const float* source, int width, float* target) const;
  void forward(const double* source, int width, double* target) const;
  void backward(const float* target, int width, float* source) const;
  void backward(const double* target, int width, double* source) const;
  /// Rows of `width` values at row strides ld_source / ld_target, in host memory or in device memory
  /// (`place`): the same rows moved, bitwise the same. On a device, an error of one rank (a failed copy or
  /// launch) is the same Error on every rank, raised before any message, never a hang; the move is
  /// ordered on the stream (work enqueued there after the call sees its rows). Across ranks (and for an
  /// all-gather) it has completed when the call returns; in one process it is only enqueued: no wait.
  void forward(const float* source, std::int64_t ld_source, float* target, std::int64_t ld_target, int width,
               const Place& place = {}) const;
  void backward(const float* target, std::int64_t ld_target, float* source, std::int64_t ld_source, int width,
                const Place& place = {}) const;

  std::int64_t source_rows() const { return source_rows_; }
  std::int64_t target_rows() const { return target_rows_; }
  bool is_all_gather() const { return all_gather_; }

  /// What this plan moved on this rank since it was built, and a second total it adds to (the family
  /// Plan's: Plan::traffic()); the sink must outlive the plan's moves (null: none).
  const Traffic& traffic() const { return traffic_; }
  void count_into(Traffic* sink) { sink_ = sink; }

  /// The rows the plan moves: forward reads the source rows sent_rows(), grouped by destination rank
  /// (send_counts()[q] rows for rank q, ranks in order), and writes the target rows received_rows(),
  /// grouped by source rank (recv_counts()), then the copies (pairs: target row, the target row it takes);
  /// this rank's own segments pair up row by row. backward moves the same rows the other way, no copies.
  std::span<const std::int64_t> sent_rows() const { return send_rows_; }
  std::span<const std::size_t> send_counts() const { return send_counts_; }
  std::span<const std::int64_t> received_rows() const { return recv_rows_; }
  std::span<const std::size_t> recv_counts() const { return recv_counts_; }
  std::span<const std::int64_t> copies() const { return copies_; }
  /// The communicator the plan is applied through (Error(invalid_argument) for a plan never built).
  const Comm& comm() const;
  /// Applies the plan through `comm` from now on: another communicator object over the same ranks (same
  /// size, each process the same rank). Throws Error(invalid_argument) when the size differs.
  void rebind(const Comm& comm);

  struct DeviceState;  // the row lists on a device and the staging buffers (exchange_device.cpp)

 private:
  class MoveTimer;
  void move(const void* in, std::size_t row_bytes, std::int64_t ld_in, void* out, std::int64_t ld_out, int width,
            bool forward_direction) const;
  void move_on_device(const float* in, std::int64_t ld_in, float* out, std::int64_t ld_out, int width,
                      const Place& place, bool forward_direction) const;
  void count(std::size_t row_bytes, bool forward_direction) const;

  const Comm* comm_ = nullptr;
  bool all_gather_ = false;
  std::int64_t source_rows_ = 0, target_rows_ = 0;
  std::vector<std::size_t> send_counts_, send_offsets_;  // rows per peer (forward direction)
  std::vector<std::int64_t> send_rows_;                  // local source rows, grouped by destination rank
  std::vector<std::size_t> recv_counts_, recv_offsets_;
  std::vector<std::int64_t> recv_rows_;                  // local target rows, grouped by source rank
  std::vector<std::int64_t> copies_;                     // pairs (target row, copied target row)
  mutable std::vector<char> send_buffer_, recv_buffer_;  // kept between calls (a plan is not thread-safe)
  mutable std::shared_ptr<DeviceState> device_;          // built on the first device move
  mutable Traffic traffic_;
  Traffic* sink_ = nullptr;
};

}  // namespace surrogate
