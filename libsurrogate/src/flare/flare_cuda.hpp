// The CUDA forward of FLARE (CUDA builds): hooks shared with the coupling layer and the GPU benchmark.
// Internal header; needs the CUDA toolkit's include directory (link CUDA::cudart).
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "flare_device.hpp"

namespace surrogate::detail {

/// CUDA-event timings of the last forward (milliseconds on the device's clock: upload of the inputs,
/// everything between, download of the outputs) and the transport used for the encode reduction.
struct FlareCudaTiming {
  float upload_ms = 0, compute_ms = 0, download_ms = 0, total_ms = 0;
  std::string transport;  // "none" (one rank) or the communicator's DeviceTransport::name()
};
/// Throws Error(invalid_argument) when `forward` is not a CUDA forward.
FlareCudaTiming last_cuda_timing(const FlareDeviceForward& forward);

}  // namespace surrogate::detail
