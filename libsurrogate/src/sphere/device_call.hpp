// Host-side helpers shared by the CUDA forwards of the spherical operators (attention_device.cpp,
// grid_ops_device.cpp; CUDA builds only): CUDA calls under a device guard with their errors turned into
// Error naming the operator and the device, and synchronous uploads of host vectors.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "../cuda_errors.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::sphere::device_call {

/// Runs f with `device` current; CUDA errors become Error naming the operator and the device, the
/// kernels' argument errors Error(invalid_argument).
template <class F>
void on_device(const char* op, int device, F&& f) {
  try {
    kernels::cuda::DeviceGuard guard(device);
    f();
  } catch (const kernels::cuda::CudaError& e) {
    throw Error(surrogate::detail::error_code_for(e.code()), std::string(op) + ": CUDA device " + std::to_string(device) + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorCode::invalid_argument, std::string(op) + ": " + e.what());
  }
}

/// A synchronous copy of `src` into `dst` (resized on `device`). Pageable copies may still be in flight
/// when cudaMemcpy returns: synchronize the device before a caller's non-blocking stream reads them.
template <class T>
void upload(kernels::cuda::DeviceBuffer<T>& dst, const std::vector<T>& src, int device) {
  dst.resize(src.size(), device);
  kernels::cuda::check(cudaMemcpy(dst.data(), src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice),
                       "cudaMemcpy(host to device)");
}

}  // namespace surrogate::sphere::device_call
