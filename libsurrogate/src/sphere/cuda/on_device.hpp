// What the spherical device operators share (CUDA builds): CUDA work with the operator's device current,
// its failures turned into Error by the library's one mapping (cuda_errors.hpp), and uploads of host
// vectors. share/docs/cuda.md.
#pragma once

#include <span>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../../device/layers.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sphere::device_ops {

/// Runs f with `device` current; a CUDA failure or a launcher's refusal becomes the Error of
/// raise_current_cuda_error naming the operator `op` and the device.
template <class F>
void on_device(const char* op, int device, F&& f) {
  try {
    kernels::cuda::DeviceGuard guard(device);
    f();
  } catch (...) {
    surrogate::detail::raise_current_cuda_error(op, device);
  }
}

/// Copies `src` into `dst` (grown on `device`) on the default stream; the caller synchronizes the device
/// before a non-blocking stream reads it.
template <class T>
void upload(kernels::cuda::DeviceBuffer<T>& dst, const std::vector<T>& src, int device) {
  surrogate::device::upload(dst, std::span<const T>(src), device, nullptr);
}

}  // namespace surrogate::sphere::device_ops
