#include "device_support.hpp"

#include "surrogate/error.hpp"

namespace surrogate::detail {

void refuse_without_cuda_backend(const std::string& what, int device) {
  throw Error(ErrorCode::unsupported, what + ": CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}

}  // namespace surrogate::detail
