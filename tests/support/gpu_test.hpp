// Shared by the device tests, which run on two backends from one source: the host backend (device
// "cuda-emulated", ctest names cuda.*, in every CUDA build) and a real GPU (gpu.*, skipped without one).
// SURROGATE_TEST_DEVICE=cuda-emulated selects the first (ctest sets it); host <-> device helpers.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "surrogate/kernels/cuda.hpp"

namespace surrogate::testing {

/// The device under test: kernels::cuda::kEmulatedDevice when SURROGATE_TEST_DEVICE is "cuda-emulated",
/// else CUDA device 0.
inline int test_device() {
  const char* env = std::getenv("SURROGATE_TEST_DEVICE");
  return env && std::string(env) == "cuda-emulated" ? kernels::cuda::kEmulatedDevice : 0;
}
inline bool on_host_backend() { return test_device() == kernels::cuda::kEmulatedDevice; }

/// On the host backend, the emulated device is current on the main thread for the whole run (the null
/// stream of the tests' launches is then the emulated device's, as a GPU's is after cudaSetDevice).
inline const bool host_backend_current = [] {
  if (on_host_backend()) static const kernels::cuda::DeviceGuard guard(kernels::cuda::kEmulatedDevice);
  return true;
}();

/// Whether the device under test can run; otherwise *why holds the runtime's reason.
inline bool cuda_device_visible(std::string* why) { return on_host_backend() || kernels::cuda::device_count(why) > 0; }

template <class T>
kernels::cuda::DeviceBuffer<T> to_device(const std::vector<T>& host, int device = test_device()) {
  kernels::cuda::DeviceBuffer<T> d(host.size(), device);
  kernels::cuda::copy_blocking(d.data(), host.data(), host.size() * sizeof(T), device);
  return d;
}

/// Waits for the device's work, then copies count values to the host.
template <class T>
std::vector<T> to_host(const T* device_data, std::size_t count, int device = test_device()) {
  std::vector<T> h(count);
  kernels::cuda::device_synchronize(device);
  kernels::cuda::copy_blocking(h.data(), device_data, count * sizeof(T), device);
  return h;
}

}  // namespace surrogate::testing

/// Every device test starts with this: on a real device that is not there it is reported as SKIPPED
/// (never passed); on the host backend it always runs.
#define SURROGATE_SKIP_WITHOUT_GPU()                                                                   \
  do {                                                                                                 \
    std::string why_;                                                                                  \
    if (!::surrogate::testing::cuda_device_visible(&why_))                                             \
      GTEST_SKIP() << "no CUDA device is visible (" << why_ << "): this GPU test did not run";         \
  } while (0)

/// Tests that need the host backend's hooks (tests/support/host_backend_hooks.hpp: injected launch
/// failures, counters) start with this: skipped on a real GPU. Their suites end in "HostBackend", which
/// the GPU runs under mpirun leave out (SurrogateTesting.cmake), so one skip does not mark a whole run.
#define SURROGATE_HOST_BACKEND_ONLY()                                                                  \
  do {                                                                                                 \
    if (!::surrogate::testing::on_host_backend())                                                      \
      GTEST_SKIP() << "needs the host backend's hooks (device cuda-emulated): not run on a GPU";       \
  } while (0)
