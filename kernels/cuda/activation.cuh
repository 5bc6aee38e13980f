// The MLP activations on the device, shared by the FP32 and the tensor-core MLP kernels.
#pragma once

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN

/// x * sigmoid(t) = x / (1 + exp(-t)) with t = 2u (GELU, tanh approximation) or t = x (SiLU); the
/// exponent is capped at 80 so that 1 + exp(.) stays finite. ReLU keeps NaN and -0 (nan_keeping.hpp).
__device__ __forceinline__ float activate(Activation act, float v) {
  switch (act) {
    case Activation::gelu_tanh: {
      const float u2 = v * (1.5957691216057308f + 0.071354816272600250f * (v * v));
      return v / (1.0f + expf(fminf(-u2, 80.0f)));
    }
    case Activation::silu: return v / (1.0f + expf(fminf(-v, 80.0f)));
    case Activation::gelu_erf: return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
    case Activation::relu: return relu_keep_nan(v);
    case Activation::none: break;
  }
  return v;
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
