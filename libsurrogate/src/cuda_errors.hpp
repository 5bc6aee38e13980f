// CUDA runtime errors as the library's error codes: one mapping for every device forward (CUDA builds only).
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::detail {

/// No usable device (none, no driver, a device without this build's code) is `unsupported`, not a bug;
/// an allocation failure is `out_of_memory`; anything else is `internal`.
inline ErrorCode error_code_for(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return ErrorCode::out_of_memory;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorInvalidDevice:
    case cudaErrorNoKernelImageForDevice:
    case cudaErrorUnsupportedPtxVersion:
    case cudaErrorDevicesUnavailable: return ErrorCode::unsupported;
    default: return ErrorCode::internal;
  }
}

/// Call inside a catch block of a device forward: an Error passes through; a CUDA runtime error becomes an
/// Error with error_code_for's code, and a launch the kernels rejected (std::invalid_argument: the caller
/// broke a launcher's contract, a bug) Error(internal), both naming `what` (the model or operator) and the
/// device. The one mapping from CUDA failures to library errors; status_of_current_cuda_error is the same
/// as a Status.
[[noreturn]] inline void raise_current_cuda_error(const char* what, int device) {
  const std::string where = std::string(what) + ": CUDA device " + kernels::cuda::device_label(device) + ": ";
  try {
    throw;
  } catch (const Error&) {
    throw;
  } catch (const kernels::cuda::CudaError& e) {
    throw Error(error_code_for(e.code()), where + e.what());
  } catch (const std::invalid_argument& e) {
    throw Error(ErrorCode::internal, where + e.what());
  }
}

/// f() with `device` current, returning what f returns; a CUDA failure or a launcher's refusal leaves as
/// raise_current_cuda_error's Error naming `what` (the model or operator) and the device.
template <class F>
decltype(auto) on_device(const char* what, int device, F&& f) {
  try {
    const kernels::cuda::DeviceGuard guard(device);
    return f();
  } catch (...) {
    raise_current_cuda_error(what, device);
  }
}

/// Error(unsupported) "<what>: CUDA device <device> requested, but no CUDA device is visible (why)" or
/// "... but N device(s) are visible", unless `device` is a visible device or the host backend's emulated
/// one: every device forward's first check.
inline void require_visible_device(const char* what, int device) {
  if (device == kernels::cuda::kEmulatedDevice) return;
  std::string why;
  const int count = kernels::cuda::device_count(&why);
  if (device >= 0 && device < count) return;
  throw Error(ErrorCode::unsupported, std::string(what) + ": CUDA device " + std::to_string(device) +
                                          " requested, but " +
                                          (count == 0 ? "no CUDA device is visible (" + why + ")"
                                                      : std::to_string(count) + " device(s) are visible"));
}

/// raise_current_cuda_error as a Status (for code that agrees on a Status before a collective).
inline Status status_of_current_cuda_error(const char* what, int device) noexcept {
  try {
    raise_current_cuda_error(what, device);
  } catch (...) {
    return Status::from_current_exception();
  }
}

}  // namespace surrogate::detail
