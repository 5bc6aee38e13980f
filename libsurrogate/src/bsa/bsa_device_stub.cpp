// Builds without the CUDA backend: the BSA CUDA forward is refused with a clear error.
#include <string>

#include "bsa_device.hpp"
#include "surrogate/error.hpp"

namespace surrogate::bsa::detail {

std::unique_ptr<BsaDeviceForward> make_bsa_cuda_forward(const Network&, int device) {
  throw Error(ErrorCode::unsupported, "bsa: CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}

}  // namespace surrogate::bsa::detail
