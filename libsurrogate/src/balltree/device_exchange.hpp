// An ExchangePlan (surrogate/balltree_distributed.hpp) applied to rows that live in device memory, with
// the messages staged through host memory (CUDA builds only). The rows that stay on this rank are copied
// on the device (one row-copy launch); only the rows that go to or come from other ranks cross the bus:
// gathered on the device into a packed array, downloaded, moved by the plan's MPI all-to-all
// (ExchangePlan::exchange_packed, through the plan's communicator), uploaded, and scattered on the device;
// then the plan's copies (padding duplicates) on the device. Bitwise data movement, like the plan.
// Used by the multi-rank device forwards of the ball-tree models (Erwin: erwin_cuda_layout.cpp).
// NCCL point-to-point is not used: every exchange goes through MPI and host memory.
#pragma once

#include <cstdint>
#include <vector>

#include "surrogate/balltree_distributed.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::balltree::device {

class DeviceExchange {
 public:
  DeviceExchange() = default;
  /// Uploads the plan's row lists to `device` on `stream` (once per plan). The plan must outlive this
  /// object and keep its communicator bound (ExchangePlan::rebind); `what` names the model in errors.
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
  void move(const float* in, std::int64_t ld_in, float* out, std::int64_t ld_out, int width,
            const kernels::cuda::Stream& stream, bool forward_direction) const;

  const ExchangePlan* plan_ = nullptr;
  int device_ = -1;
  const char* what_ = "exchange";
  std::int64_t local_ = 0, remote_sent_ = 0, remote_received_ = 0, copies_ = 0;
  // This rank's segment (source row, target row), the other ranks' (source rows sent, target rows
  // received, in the plan's packed order) and the copies (target row, the target row it takes).
  kernels::cuda::DeviceBuffer<std::int64_t> local_source_, local_target_, remote_source_, remote_target_,
      copy_target_, copy_source_;
  mutable kernels::cuda::DeviceBuffer<float> packed_out_, packed_in_;
  mutable std::vector<float> host_out_, host_in_;
};

}  // namespace surrogate::balltree::device
