// ExchangePlan on device rows through host memory (device_exchange.hpp).
#include "device_exchange.hpp"

#include <algorithm>
#include <span>
#include <string>

#include "../cuda_errors.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"  // index_t, used by point_device.hpp
#include "point_device.hpp"

namespace surrogate::balltree::device {

namespace cu = kernels::cuda;

DeviceExchange::DeviceExchange(const ExchangePlan& plan, int device, const cu::Stream& stream, const char* what)
    : plan_(&plan), device_(device), what_(what) {
  const auto me = static_cast<std::size_t>(plan.comm().rank());
  const std::span<const std::int64_t> sent = plan.sent_rows(), received = plan.received_rows();
  const std::span<const std::size_t> send_counts = plan.send_counts(), recv_counts = plan.recv_counts();
  std::size_t send_begin = 0, recv_begin = 0;
  for (std::size_t q = 0; q < me; ++q) {
    send_begin += send_counts[q];
    recv_begin += recv_counts[q];
  }
  const std::size_t local = send_counts[me];
  if (recv_counts[me] != local) throw Error(ErrorCode::internal, std::string(what) + ": exchange plan with unpaired own rows");
  std::vector<std::int64_t> remote_source, remote_target;
  remote_source.insert(remote_source.end(), sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(send_begin));
  remote_source.insert(remote_source.end(), sent.begin() + static_cast<std::ptrdiff_t>(send_begin + local), sent.end());
  remote_target.insert(remote_target.end(), received.begin(), received.begin() + static_cast<std::ptrdiff_t>(recv_begin));
  remote_target.insert(remote_target.end(), received.begin() + static_cast<std::ptrdiff_t>(recv_begin + local), received.end());
  std::vector<std::int64_t> copy_target, copy_source;
  const std::span<const std::int64_t> copies = plan.copies();
  for (std::size_t i = 0; i + 1 < copies.size(); i += 2) {
    copy_target.push_back(copies[i]);
    copy_source.push_back(copies[i + 1]);
  }
  local_ = static_cast<std::int64_t>(local);
  remote_sent_ = static_cast<std::int64_t>(remote_source.size());
  remote_received_ = static_cast<std::int64_t>(remote_target.size());
  copies_ = static_cast<std::int64_t>(copy_target.size());
  try {
    cu::DeviceGuard guard(device_);
    upload(local_source_, sent.subspan(send_begin, local), device_, stream.get());
    upload(local_target_, received.subspan(recv_begin, local), device_, stream.get());
    upload(remote_source_, std::span<const std::int64_t>(remote_source), device_, stream.get());
    upload(remote_target_, std::span<const std::int64_t>(remote_target), device_, stream.get());
    upload(copy_target_, std::span<const std::int64_t>(copy_target), device_, stream.get());
    upload(copy_source_, std::span<const std::int64_t>(copy_source), device_, stream.get());
    stream.synchronize();  // the host lists are released on return
  } catch (...) {
    surrogate::detail::raise_current_cuda_error(what_, device_);
  }
}

void DeviceExchange::forward(const float* source, std::int64_t ld_source, float* target, std::int64_t ld_target, int width,
                             const cu::Stream& stream) const {
  move(source, ld_source, target, ld_target, width, stream, true);
}

void DeviceExchange::backward(const float* target, std::int64_t ld_target, float* source, std::int64_t ld_source, int width,
                              const cu::Stream& stream) const {
  move(target, ld_target, source, ld_source, width, stream, false);
}

void DeviceExchange::move(const float* in, std::int64_t ld_in, float* out, std::int64_t ld_out, int width,
                          const cu::Stream& stream, bool forward_direction) const {
  if (plan_ == nullptr) throw Error(ErrorCode::internal, std::string(what_) + ": device exchange never built");
  const Comm& comm = plan_->comm();
  // forward: in = source rows, out = target rows; backward the other way round.
  const std::int64_t* local_in = (forward_direction ? local_source_ : local_target_).data();
  const std::int64_t* local_out = (forward_direction ? local_target_ : local_source_).data();
  const std::int64_t* remote_in = (forward_direction ? remote_source_ : remote_target_).data();
  const std::int64_t* remote_out = (forward_direction ? remote_target_ : remote_source_).data();
  const std::int64_t packed_rows = forward_direction ? remote_sent_ : remote_received_;
  const std::int64_t unpacked_rows = forward_direction ? remote_received_ : remote_sent_;
  const auto w = static_cast<std::size_t>(std::max(width, 1));
  // This rank's rows on the device, the outgoing rows packed and downloaded; agreed before the messages.
  collectively(comm, [&] {
    if (width < 1) throw Error(ErrorCode::internal, std::string(what_) + ": device exchange of width " + std::to_string(width));
    try {
      cu::DeviceGuard guard(device_);
      copy_rows(in, ld_in, local_in, out, ld_out, local_out, local_, width, stream.get());
      host_out_.resize(static_cast<std::size_t>(packed_rows) * w);
      host_in_.resize(static_cast<std::size_t>(unpacked_rows) * w);
      if (packed_rows > 0) {
        packed_out_.resize(static_cast<std::size_t>(packed_rows) * w, device_);
        copy_rows(in, ld_in, remote_in, packed_out_.data(), width, nullptr, packed_rows, width, stream.get());
        cu::copy_to_host(host_out_.data(), packed_out_.data(), host_out_.size() * sizeof(float), stream.get());
      }
      stream.synchronize();
    } catch (...) {
      surrogate::detail::raise_current_cuda_error(what_, device_);
    }
  });
  plan_->exchange_packed(host_out_.data(), width, host_in_.data(), forward_direction);
  // The incoming rows uploaded and scattered, then the copies (forward only).
  collectively(comm, [&] {
    try {
      cu::DeviceGuard guard(device_);
      if (unpacked_rows > 0) {
        packed_in_.resize(static_cast<std::size_t>(unpacked_rows) * w, device_);
        cu::copy_to_device(packed_in_.data(), host_in_.data(), host_in_.size() * sizeof(float), stream.get());
        copy_rows(packed_in_.data(), width, nullptr, out, ld_out, remote_out, unpacked_rows, width, stream.get());
      }
      if (forward_direction)
        copy_rows(out, ld_out, copy_source_.data(), out, ld_out, copy_target_.data(), copies_, width, stream.get());
      stream.synchronize();  // host_in_ may be reused by the next exchange
    } catch (...) {
      surrogate::detail::raise_current_cuda_error(what_, device_);
    }
  });
}

}  // namespace surrogate::balltree::device
