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

void refuse_fp64_on_device(const std::string& what, Precision precision) {
  if (precision == Precision::fp64)
    throw Error(ErrorCode::unsupported, what + ": the CUDA forward computes in fp32, tf32 or bf16 (precision 'fp64' "
                                               "requested; fp64 runs on the CPU where the model offers it)");
}

}  // namespace surrogate::detail
