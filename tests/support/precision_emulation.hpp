// Emulation, on the CPU, of the tensor-core precisions of the CUDA forward (MlpPrecision tf32 / bf16): a
// CPU kernel table whose Linear layers round both operands (the layer's input and its weights) to TF32
// or BF16 and accumulate in FP32, and whose latent encode (default mode), decode (also the global S2
// attention's), ball attention and Gaussian bucket attention round their two products' operands likewise,
// every other kernel unchanged. It documents the accuracy of the GPU
// options without a GPU (share/docs/cuda.md) and is the reference of the GPU tensor-core tests.
#pragma once

#include "surrogate/kernels/cpu.hpp"
#include "surrogate/model.hpp"

namespace surrogate::testing {

/// BF16: round to nearest even of the float32 bit pattern to 8 significant bits (NaN kept quiet).
float round_to_bf16(float x);
/// TF32 as cvt.rna.tf32.f32 does it: 11 significant bits (10 stored), nearest, ties away from zero.
float round_to_tf32(float x);

/// What an emulation rounds: the CUDA forward's tensor-core kernels (the Linear layers, FLARE's latent
/// encode and decode, the ball attention of Erwin and BSA, the global S2 attention, HEPT's bucket
/// attention), or the Linear layers only (the CPU's bf16 engines).
enum class EmulatedKernels { linear_and_attention, linear };

/// The detected CPU kernels with `linear` (and `latent_encode`, `latent_decode`, `ball_attention`) replaced by the
/// emulation of `precision` (fp32: unchanged). Linear: products accumulate in FP32 from zero in k order,
/// then the bias, the activation (the device's formula, kernels/cuda/activation.cuh, not the CPU
/// kernels') and the residuals (the tensor-core epilogue's order).
const kernels::CpuKernels& emulated_cpu_kernels(Precision precision,
                                                EmulatedKernels which = EmulatedKernels::linear_and_attention);

/// Installs emulated_cpu_kernels(precision, which) as kernels::cpu() for its lifetime.
class ScopedPrecisionEmulation {
 public:
  explicit ScopedPrecisionEmulation(Precision precision,
                                    EmulatedKernels which = EmulatedKernels::linear_and_attention);
  ~ScopedPrecisionEmulation();
  ScopedPrecisionEmulation(const ScopedPrecisionEmulation&) = delete;
  ScopedPrecisionEmulation& operator=(const ScopedPrecisionEmulation&) = delete;
};

}  // namespace surrogate::testing
