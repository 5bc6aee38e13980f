// ExchangePlan moves of device rows (CUDA builds; exchange.hpp): this rank's own rows are copied on the
// device; the rows for other ranks are gathered on the device into a packed buffer, moved by the Place's
// DeviceTransport (NCCL device to device, or staged through host memory), and scattered on the device;
// then the plan's copies. The same row lists as the host move, so the same bits.
#include <algorithm>
#include <string>
#include <vector>

#include "../cuda_errors.hpp"
#include "move_timer.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace surrogate {

namespace cu = kernels::cuda;

/// The plan's row lists on one device (uploaded on the first move there) and the packed buffers.
struct ExchangePlan::DeviceState {
  int device = -1;
  std::int64_t local = 0, remote_sent = 0, remote_received = 0, copies = 0;
  // This rank's segment (source row, target row), the other ranks' rows in packed order (source rows
  // sent, target rows received) and the copies (target row, the target row it takes).
  cu::DeviceBuffer<std::int64_t> local_source, local_target, remote_source, remote_target, copy_target, copy_source;
  std::vector<std::size_t> packed_send_rows, packed_recv_rows;  // per peer, own rank 0 (forward direction)
  cu::DeviceBuffer<float> packed_out, packed_in;
};

namespace {

template <class T>
void upload(cu::DeviceBuffer<T>& dst, const std::vector<T>& src, int device, cudaStream_t stream) {
  dst.resize(std::max<std::size_t>(src.size(), 1), device);
  if (!src.empty()) cu::copy_to_device(dst.data(), src.data(), src.size() * sizeof(T), stream);
}

/// dst[dst_index[r]] = src[src_index[r]] (an index array may be null: r itself).
void copy_rows(const float* src, std::int64_t ld_src, const std::int64_t* src_index, float* dst, std::int64_t ld_dst,
               const std::int64_t* dst_index, std::int64_t rows, int width, cudaStream_t stream) {
  if (rows <= 0) return;
  cu::RowCopyArgs a;
  a.src = src;
  a.ld_src = ld_src;
  a.src_index = src_index;
  a.dst = dst;
  a.ld_dst = ld_dst;
  a.dst_index = dst_index;
  a.rows = rows;
  a.width = width;
  cu::copy_rows(a, stream);
}

/// Bytes and offsets of rows of `row_bytes` bytes per peer.
void to_bytes(const std::vector<std::size_t>& rows, std::size_t row_bytes, std::vector<std::size_t>& bytes,
              std::vector<std::size_t>& offsets) {
  bytes.resize(rows.size());
  offsets.resize(rows.size());
  std::size_t at = 0;
  for (std::size_t q = 0; q < rows.size(); ++q) {
    offsets[q] = at;
    bytes[q] = rows[q] * row_bytes;
    at += bytes[q];
  }
}

}  // namespace

void ExchangePlan::move_on_device(const float* in, std::int64_t ld_in, float* out, std::int64_t ld_out, int width,
                                  const Place& place, bool forward_direction) const {
  const MoveTimer timer(*this);
  const Comm& comm = this->comm();
  const auto me = static_cast<std::size_t>(comm.rank());
  const auto stream = static_cast<cudaStream_t>(place.stream);
  const std::int64_t in_rows = forward_direction ? source_rows_ : target_rows_;
  const std::int64_t out_rows = forward_direction ? target_rows_ : source_rows_;
  DeviceState* d = nullptr;
  // The row lists on the device (first move there), this rank's rows, the outgoing rows packed; agreed
  // before any message.
  collectively(comm, [&] {
    if (place.transport == nullptr || place.transport->device() != place.device)
      throw Error(ErrorCode::internal, "exchange plan: a device move needs the transport of CUDA device " +
                                           cu::device_label(place.device));
    if (width < 1 || ld_in < width || ld_out < width)
      throw Error(ErrorCode::invalid_argument, "exchange plan: width " + std::to_string(width) + " and row strides " +
                                                   std::to_string(ld_in) + ", " + std::to_string(ld_out));
    if (all_gather_ && !forward_direction) throw Error(ErrorCode::internal, "exchange plan: an all-gather has no backward move");
    if ((in_rows > 0 && in == nullptr) || (out_rows > 0 && out == nullptr))
      throw Error(ErrorCode::invalid_argument, "exchange plan: null device rows");
    try {
      cu::DeviceGuard guard(place.device);
      if (!device_ || device_->device != place.device) {
        auto state = std::make_shared<DeviceState>();
        state->device = place.device;
        const std::size_t local = send_counts_[me];
        std::vector<std::int64_t> local_source(send_rows_.begin() + static_cast<std::ptrdiff_t>(send_offsets_[me]),
                                               send_rows_.begin() + static_cast<std::ptrdiff_t>(send_offsets_[me] + local));
        std::vector<std::int64_t> local_target(recv_rows_.begin() + static_cast<std::ptrdiff_t>(recv_offsets_[me]),
                                               recv_rows_.begin() + static_cast<std::ptrdiff_t>(recv_offsets_[me] + recv_counts_[me]));
        std::vector<std::int64_t> remote_source, remote_target, copy_target, copy_source;
        for (std::size_t q = 0; q < send_counts_.size(); ++q) {
          if (q == me) continue;
          remote_source.insert(remote_source.end(), send_rows_.begin() + static_cast<std::ptrdiff_t>(send_offsets_[q]),
                               send_rows_.begin() + static_cast<std::ptrdiff_t>(send_offsets_[q] + send_counts_[q]));
          remote_target.insert(remote_target.end(), recv_rows_.begin() + static_cast<std::ptrdiff_t>(recv_offsets_[q]),
                               recv_rows_.begin() + static_cast<std::ptrdiff_t>(recv_offsets_[q] + recv_counts_[q]));
        }
        for (std::size_t i = 0; i + 1 < copies_.size(); i += 2) {
          copy_target.push_back(copies_[i]);
          copy_source.push_back(copies_[i + 1]);
        }
        state->local = static_cast<std::int64_t>(local);
        state->remote_sent = static_cast<std::int64_t>(remote_source.size());
        state->remote_received = static_cast<std::int64_t>(remote_target.size());
        state->copies = static_cast<std::int64_t>(copy_target.size());
        state->packed_send_rows = send_counts_;
        state->packed_recv_rows = recv_counts_;
        state->packed_send_rows[me] = state->packed_recv_rows[me] = 0;
        upload(state->local_source, local_source, place.device, stream);
        upload(state->local_target, local_target, place.device, stream);
        upload(state->remote_source, remote_source, place.device, stream);
        upload(state->remote_target, remote_target, place.device, stream);
        upload(state->copy_target, copy_target, place.device, stream);
        upload(state->copy_source, copy_source, place.device, stream);
        cu::synchronize(stream);  // the host lists are released on return
        device_ = std::move(state);
      }
      d = device_.get();
      const std::int64_t* local_in = (forward_direction ? d->local_source : d->local_target).data();
      const std::int64_t* local_out = (forward_direction ? d->local_target : d->local_source).data();
      const std::int64_t* remote_in = (forward_direction ? d->remote_source : d->remote_target).data();
      const std::int64_t packed_rows = all_gather_ ? source_rows_ : forward_direction ? d->remote_sent : d->remote_received;
      const std::int64_t unpacked_rows = all_gather_ ? target_rows_ : forward_direction ? d->remote_received : d->remote_sent;
      const auto w = static_cast<std::size_t>(width);
      d->packed_out.resize(static_cast<std::size_t>(std::max<std::int64_t>(packed_rows, 1)) * w, place.device);
      d->packed_in.resize(static_cast<std::size_t>(std::max<std::int64_t>(unpacked_rows, 1)) * w, place.device);
      if (all_gather_ && comm.size() == 1) {  // one rank gathers its own rows: a copy
        copy_rows(in, ld_in, nullptr, out, ld_out, nullptr, source_rows_, width, stream);
      } else if (all_gather_) {
        copy_rows(in, ld_in, nullptr, d->packed_out.data(), width, nullptr, source_rows_, width, stream);
      } else {
        copy_rows(in, ld_in, local_in, out, ld_out, local_out, d->local, width, stream);
        copy_rows(in, ld_in, remote_in, d->packed_out.data(), width, nullptr, packed_rows, width, stream);
      }
    } catch (...) {
      detail::raise_current_cuda_error("exchange plan", place.device);
    }
  });
  count(sizeof(float) * static_cast<std::size_t>(width), forward_direction);
  // The messages, by the transport (its own steps agreed). One process sends none: its move is the local
  // copies (an all-gather's too), enqueued on the stream, and nothing waits for the device.
  const bool messages = comm.size() > 1;
  const std::size_t row_bytes = sizeof(float) * static_cast<std::size_t>(width);
  std::vector<std::size_t> send_bytes, send_offsets, recv_bytes, recv_offsets;
  if (!messages) {
  } else if (all_gather_) {
    to_bytes(recv_counts_, row_bytes, recv_bytes, recv_offsets);
    place.transport->allgatherv(d->packed_out.data(), static_cast<std::size_t>(source_rows_) * row_bytes,
                                d->packed_in.data(), recv_bytes, recv_offsets, place.stream);
  } else {
    to_bytes(forward_direction ? d->packed_send_rows : d->packed_recv_rows, row_bytes, send_bytes, send_offsets);
    to_bytes(forward_direction ? d->packed_recv_rows : d->packed_send_rows, row_bytes, recv_bytes, recv_offsets);
    place.transport->alltoallv(d->packed_out.data(), send_bytes, send_offsets, d->packed_in.data(), recv_bytes,
                               recv_offsets, place.stream);
  }
  // The incoming rows scattered, then the copies (forward only).
  collectively(comm, [&] {
    try {
      cu::DeviceGuard guard(place.device);
      if (all_gather_) {
        if (messages) copy_rows(d->packed_in.data(), width, nullptr, out, ld_out, nullptr, target_rows_, width, stream);
      } else {
        const std::int64_t* remote_out = (forward_direction ? d->remote_target : d->remote_source).data();
        const std::int64_t unpacked_rows = forward_direction ? d->remote_received : d->remote_sent;
        if (messages)
          copy_rows(d->packed_in.data(), width, nullptr, out, ld_out, remote_out, unpacked_rows, width, stream);
        if (forward_direction)
          copy_rows(out, ld_out, d->copy_source.data(), out, ld_out, d->copy_target.data(), d->copies, width, stream);
      }
      if (messages) cu::synchronize(stream);  // the packed buffers may be reused by the next move
    } catch (...) {
      detail::raise_current_cuda_error("exchange plan", place.device);
    }
  });
}

}  // namespace surrogate
