// The MLP activations on the device, shared by the FP32 and the tensor-core MLP kernels and the dense layers.
//
// An epilogue applies one activation to every output it holds: with_activation() picks it once, so that
// the unrolled epilogue is compiled once per activation with that activation inline, instead of a switch
// per output (a branch chain per value, and every variant's code interleaved over the whole epilogue).
#pragma once

#include <type_traits>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN

/// x * sigmoid(t) = x / (1 + exp(-t)) with t = 2u (GELU, tanh approximation) or t = x (SiLU); the
/// exponent is capped at 80 so that 1 + exp(.) stays finite. ReLU keeps NaN and -0 (nan_keeping.hpp).
template <Activation A>
__device__ __forceinline__ float activate(float v) {
  if constexpr (A == Activation::gelu_tanh) {
    const float u2 = v * (1.5957691216057308f + 0.071354816272600250f * (v * v));
    return v / (1.0f + expf(fminf(-u2, 80.0f)));
  } else if constexpr (A == Activation::silu) {
    return v / (1.0f + expf(fminf(-v, 80.0f)));
  } else if constexpr (A == Activation::gelu_erf) {
    return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f));
  } else if constexpr (A == Activation::relu) {
    return relu_keep_nan(v);
  } else {
    return v;
  }
}

template <Activation A>
using ActivationTag = std::integral_constant<Activation, A>;

/// f(ActivationTag<act>{}): the caller's code with `act` a compile-time constant (decltype(tag)::value).
template <class F>
__device__ __forceinline__ void with_activation(Activation act, F&& f) {
  switch (act) {
    case Activation::gelu_tanh: f(ActivationTag<Activation::gelu_tanh>{}); return;
    case Activation::silu: f(ActivationTag<Activation::silu>{}); return;
    case Activation::gelu_erf: f(ActivationTag<Activation::gelu_erf>{}); return;
    case Activation::relu: f(ActivationTag<Activation::relu>{}); return;
    case Activation::none: break;
  }
  f(ActivationTag<Activation::none>{});
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
