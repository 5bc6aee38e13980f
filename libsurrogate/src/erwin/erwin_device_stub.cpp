// Builds without the CUDA backend: the Erwin CUDA forward is refused with a clear error.
#include <string>

#include "erwin_device.hpp"
#include "surrogate/error.hpp"

namespace surrogate::erwin::detail {

std::unique_ptr<ErwinDeviceForward> make_erwin_cuda_forward(const Network&, int device, index_t) {
  throw Error(ErrorCode::unsupported, "erwin: CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}

}  // namespace surrogate::erwin::detail
