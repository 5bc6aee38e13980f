// The device-resident predict's gather and scatter (caller_rows.hpp).
#include "caller_rows.hpp"

#include <algorithm>

#include "layers.hpp"

namespace surrogate::device {

namespace cu = kernels::cuda;

CallerOrder::CallerOrder(std::span<const index_t> order, int device, cudaStream_t stream)
    : device_(device), empty_(order.empty()) {
  upload(order_, order, device, stream);
  cu::synchronize(stream);
}

CallerRows::CallerRows(const Normalization& n, int in_channels, int out_channels, int device, cudaStream_t stream)
    : device_(device), in_(in_channels), out_(out_channels), has_in_norm_(n.has_input()), has_out_norm_(n.has_output()) {
  std::vector<double> values;
  for (const auto* v : {&n.input_mean, &n.input_std, &n.output_mean, &n.output_std})
    values.insert(values.end(), v->begin(), v->end());
  upload(norm_, std::span<const double>(values), device, stream);
  const auto counters = static_cast<std::size_t>(in_ + 1 + out_);
  counters_.resize(counters, device);
  host_.resize(counters);
  std::fill(host_.data(), host_.data() + counters, 0ULL);
  cu::synchronize(stream);
}

void CallerRows::gather(const Model::DeviceArrays& arrays, const index_t* order, index_t rows, float* work,
                        index_t ld_work, cudaStream_t stream, const ValueRange* range) {
  // The caller's arrays may still be written by its work on the default stream.
  cu::wait_for_default_stream(stream, device_);
  const std::size_t bytes = static_cast<std::size_t>(in_ + 1) * sizeof(unsigned long long);
  cu::zero(counters_.data(), bytes, stream);
  rows_ = rows;
  cu::CallerInput g;
  g.data = arrays.in;
  g.is_double = arrays.is_double;
  g.point_stride = arrays.in_point_stride;
  g.component_stride = arrays.in_component_stride;
  g.channels = in_;
  g.rows = rows;
  g.order = order;
  g.mean = has_in_norm_ ? norm_.data() : nullptr;
  g.std = has_in_norm_ ? norm_.data() + in_ : nullptr;
  g.work = work;
  g.ld_work = ld_work;
  g.bad = counters_.data();
  if (range) {
    g.range_channel = range->channel;
    g.range_lo = range->lo;
    g.range_hi = range->hi;
    g.outside = counters_.data() + in_;
  }
  cu::gather_caller_input(g, stream);
  cu::copy_to_host(host_.data(), counters_.data(), bytes, stream);
}

std::vector<std::uint64_t> CallerRows::input_counts() const {
  return std::vector<std::uint64_t>(host_.data(), host_.data() + in_);
}

index_t CallerRows::first_outside() const {
  const auto raised = static_cast<index_t>(host_.data()[in_]);
  return raised == 0 ? -1 : rows_ - raised;
}

void CallerRows::scatter(const Model::DeviceArrays& arrays, const index_t* order, index_t rows, const float* work,
                         index_t ld_work, bool count, cudaStream_t stream) {
  const std::size_t at = static_cast<std::size_t>(in_ + 1);
  const std::size_t bytes = static_cast<std::size_t>(out_) * sizeof(unsigned long long);
  cu::CallerOutput o;
  o.data = arrays.out;
  o.is_double = arrays.is_double;
  o.point_stride = arrays.out_point_stride;
  o.component_stride = arrays.out_component_stride;
  o.channels = out_;
  o.rows = rows;
  o.order = order;
  const std::size_t norm_at = has_in_norm_ ? 2 * static_cast<std::size_t>(in_) : 0;
  o.mean = has_out_norm_ ? norm_.data() + norm_at : nullptr;
  o.std = has_out_norm_ ? norm_.data() + norm_at + out_ : nullptr;
  o.work = work;
  o.ld_work = ld_work;
  if (count) {
    cu::zero(counters_.data() + at, bytes, stream);
    o.bad = counters_.data() + at;
  }
  cu::scatter_caller_output(o, stream);
  if (count) cu::copy_to_host(host_.data() + at, counters_.data() + at, bytes, stream);
}

std::vector<std::uint64_t> CallerRows::output_counts() const {
  const std::size_t at = static_cast<std::size_t>(in_ + 1);
  return std::vector<std::uint64_t>(host_.data() + at, host_.data() + at + static_cast<std::size_t>(out_));
}

}  // namespace surrogate::device
