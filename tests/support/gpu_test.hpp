// Shared by the GPU tests: the skip when no CUDA device is visible, and host <-> device helpers.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "surrogate/kernels/cuda.hpp"

namespace surrogate::testing {

/// Whether a CUDA device is visible; otherwise *why holds the runtime's reason.
inline bool cuda_device_visible(std::string* why) { return kernels::cuda::device_count(why) > 0; }

template <class T>
kernels::cuda::DeviceBuffer<T> to_device(const std::vector<T>& host, int device = 0) {
  kernels::cuda::DeviceBuffer<T> d(host.size(), device);
  kernels::cuda::check(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                       "cudaMemcpy(host to device)");
  return d;
}

template <class T>
std::vector<T> to_host(const T* device_data, std::size_t count) {
  std::vector<T> h(count);
  kernels::cuda::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  kernels::cuda::check(cudaMemcpy(h.data(), device_data, count * sizeof(T), cudaMemcpyDeviceToHost),
                       "cudaMemcpy(device to host)");
  return h;
}

}  // namespace surrogate::testing

/// Every GPU test starts with this: without a visible device it is reported as SKIPPED (never passed).
#define SURROGATE_SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                                 \
    std::string why_;                                                                                  \
    if (!::surrogate::testing::cuda_device_visible(&why_))                                             \
      GTEST_SKIP() << "no CUDA device is visible (" << why_ << "): this GPU test did not run";         \
  } while (0)
