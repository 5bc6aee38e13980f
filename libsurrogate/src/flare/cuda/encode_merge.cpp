// FLARE's CUDA forward, the encode of a block merged across the ranks (forward.hpp), exactly as the CPU
// merges it:
//   default mode:      max of the power-of-two reference exponents, exact rescale, sum of doubles;
//   reproducible mode: max of the logits and |v|, then sums of int64 fixed-point words;
// allreduces on device buffers through the communicator's DeviceTransport: NCCL when every rank owns its
// GPU, else staged through host memory and the Comm (share/docs/cuda.md, "Across ranks").
#include "forward.hpp"

namespace surrogate::flare::cuda {

void Forward::allreduce(const Comm& comm, void* device_data, std::size_t count, DType type, ReduceOp op) {
  if (comm.size() == 1 || count == 0) return;
  // Both transports agree on their own steps (NCCL on the enqueue, the next local step waits).
  transport_->allreduce(device_data, count, type, op, stream_.get());
}

void Forward::exact_scales(const Plan& plan) {
  const std::size_t S = static_cast<std::size_t>(plan.segments());
  scales_host_.assign(S * (1 + static_cast<std::size_t>(H_)), kernels::ExactScale{});
  for (std::size_t s = 0; s < S; ++s) {
    const auto sample = static_cast<std::size_t>(plan.segment_sample()[s]);
    const index_t count = plan.segment_size()[s];
    scales_host_[s] = kernels::exact_scale(count, 1.0);
    for (int h = 0; h < H_; ++h)
      scales_host_[S + s * H_ + static_cast<std::size_t>(h)] =
          kernels::exact_scale(count, value_max_host_[sample * H_ + static_cast<std::size_t>(h)]);
  }
}

void Forward::merge_encode(const Comm& comm, const Plan& plan, const Tables& t, int b, bool reproducible) {
  const std::size_t global_hm = static_cast<std::size_t>(samples_) * H_ * M_;
  const std::size_t width = static_cast<std::size_t>(E_) + 1;
  if (reproducible) {
    allreduce(comm, maxima_.data(), global_hm + static_cast<std::size_t>(samples_) * H_, DType::f32, ReduceOp::max);
    local_step(comm, [&] {
      const std::size_t value_maxima = static_cast<std::size_t>(samples_) * H_;
      value_max_host_.resize(value_maxima);
      cu::copy_to_host(value_max_host_.data(), maxima_.data() + global_hm, value_maxima * sizeof(float), stream_.get());
      stream_.synchronize();
      exact_scales(plan);
      cu::copy_to_device(scales_.data(), scales_host_.data(), scales_host_.size() * sizeof(kernels::ExactScale),
                         stream_.get());
      cu::zero(exact_.data(), exact_.bytes(), stream_.get());
      const cu::SegmentInfo seg = t.segment_info();
      cu::latent_encode_exact(problem(t, b), maxima_.data(), seg, scales_.data(), scales_.data() + seg.segments,
                              exact_.data(), exact_.data() + exact_words(), stream_.get());
    });
    allreduce(comm, exact_.data(), exact_size(), DType::i64, ReduceOp::sum);
  } else if (comm.size() > 1) {
    local_step(comm, [&] {
      cu::copy_on_device(global_ref_.data(), local_ref_.data(), global_hm * sizeof(std::int32_t), stream_.get());
    });
    allreduce(comm, global_ref_.data(), global_hm, DType::i32, ReduceOp::max);
    local_step(comm, [&] {
      cu::latent_encode_rescale(local_ref_.data(), global_ref_.data(), sums_.data(), static_cast<index_t>(global_hm), E_,
                                stream_.get());
    });
    allreduce(comm, sums_.data(), global_hm * width, DType::f64, ReduceOp::sum);
  }
}

}  // namespace surrogate::flare::cuda
