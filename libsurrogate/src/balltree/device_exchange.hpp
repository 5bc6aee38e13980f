// An ExchangePlan applied to rows in device memory through the communicator's DeviceTransport (NCCL or
// host staging): a thin adapter for the ball-tree device forwards, which the family template replaces by
// ExchangePlan::forward(..., Place) directly.
#pragma once

#include <cstdint>
#include <vector>

#include "surrogate/balltree_distributed.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::balltree::device {

class DeviceExchange {
 public:
  DeviceExchange() = default;
  /// The plan must outlive this object and keep its communicator bound (ExchangePlan::rebind).
  DeviceExchange(const ExchangePlan& plan, int device, const kernels::cuda::Stream& stream, const char* what);

  /// The plan's forward on device rows: target rows (stride ld_target) <- source rows (stride
  /// ld_source), `width` values per row. Collective (every rank calls it with the same width); a device
  /// error on one rank is an agreed Error on all (before the messages), never a hang. Returns when the
  /// target rows are complete on the stream (the staging is synchronous).
  void forward(const float* source, std::int64_t ld_source, float* target, std::int64_t ld_target, int width,
               const kernels::cuda::Stream& stream) const;
  /// The plan's backward: every source row receives the target row planned from it. The plan must send
  /// each source row at most once (true of the tree and rotation plans), else which copy wins is unspecified.
  void backward(const float* target, std::int64_t ld_target, float* source, std::int64_t ld_source, int width,
                const kernels::cuda::Stream& stream) const;

  /// Rows that cross host memory per application (downloaded + uploaded), for the docs' cost figures.
  std::int64_t staged_rows() const { return remote_sent_ + remote_received_; }

 private:
  Place place(const kernels::cuda::Stream& stream) const;

  const ExchangePlan* plan_ = nullptr;
  int device_ = -1;
  std::int64_t remote_sent_ = 0, remote_received_ = 0;
};

}  // namespace surrogate::balltree::device
