// What the spherical device operators share (CUDA builds): CUDA work with the operator's device current
// (on_device: cuda_errors.hpp's one mapping of its failures), and uploads of host vectors.
// share/docs/cuda.md.
#pragma once

#include <span>
#include <vector>

#include "../../cuda_errors.hpp"
#include "../../device/layers.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sphere::device_ops {

using surrogate::detail::on_device;

/// Copies `src` into `dst` (grown on `device`) on the default stream; the caller synchronizes the device
/// before a non-blocking stream reads it.
template <class T>
void upload(kernels::cuda::DeviceBuffer<T>& dst, const std::vector<T>& src, int device) {
  surrogate::device::upload(dst, std::span<const T>(src), device, nullptr);
}

}  // namespace surrogate::sphere::device_ops
