// Builds without the CUDA backend: a CUDA forward is refused with a clear error.
#include "flare_device.hpp"

namespace surrogate::detail {

std::unique_ptr<FlareDeviceForward> make_flare_cuda_forward(const FlareConfig&, const ModelFile&, int device) {
  throw Error(ErrorCode::unsupported, "CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}

}  // namespace surrogate::detail
