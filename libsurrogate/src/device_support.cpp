#include "device_support.hpp"

#include "surrogate/error.hpp"
#if SURROGATE_HAVE_CUDA
#include "surrogate/kernels/cuda.hpp"
#endif

namespace surrogate::detail {

void refuse_without_cuda_backend(const std::string& what, int device) {
  throw Error(ErrorCode::unsupported, what + ": CUDA device " + std::to_string(device) +
                                          " requested, but this build of surrogate has no CUDA backend");
}

void refuse_device_for_cpu_only_family(const std::string& what, int device) {
#if SURROGATE_HAVE_CUDA
  throw Error(ErrorCode::unsupported, what + ": no CUDA forward (CUDA device " + kernels::cuda::device_label(device) +
                                          " requested); run it with device \"cpu\"");
#else
  refuse_without_cuda_backend(what, device);
#endif
}

}  // namespace surrogate::detail
