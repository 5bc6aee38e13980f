// ExchangePlan on device rows (device_exchange.hpp): the plan's own device move.
#include "device_exchange.hpp"

#include <string>

#include "surrogate/error.hpp"

namespace surrogate::balltree::device {

namespace cu = kernels::cuda;

DeviceExchange::DeviceExchange(const ExchangePlan& plan, int device, const cu::Stream&, const char*)
    : plan_(&plan), device_(device) {
  const auto me = static_cast<std::size_t>(plan.comm().rank());
  for (std::size_t q = 0; q < plan.send_counts().size(); ++q) {
    if (q == me) continue;
    remote_sent_ += static_cast<std::int64_t>(plan.send_counts()[q]);
    remote_received_ += static_cast<std::int64_t>(plan.recv_counts()[q]);
  }
}

Place DeviceExchange::place(const cu::Stream& stream) const {
  if (plan_ == nullptr) throw Error(ErrorCode::internal, "device exchange never built");
  return {device_, stream.get(), &plan_->comm().device_transport(device_)};
}

void DeviceExchange::forward(const float* source, std::int64_t ld_source, float* target, std::int64_t ld_target, int width,
                             const cu::Stream& stream) const {
  plan_->forward(source, ld_source, target, ld_target, width, place(stream));
}

void DeviceExchange::backward(const float* target, std::int64_t ld_target, float* source, std::int64_t ld_source, int width,
                              const cu::Stream& stream) const {
  plan_->backward(target, ld_target, source, ld_source, width, place(stream));
}

}  // namespace surrogate::balltree::device
