// What the device paths of every family share in every build: the one refusal of a build without the
// CUDA backend, and of fp64 on a device (share/docs/adding-a-family.md, "Device forward").
#pragma once

#include <string>

#include "surrogate/model.hpp"  // Precision

namespace surrogate::detail {

/// Throws Error(unsupported) "<what>: CUDA device <device> requested, but this build of surrogate has no
/// CUDA backend". Families call it where their device forward would be created in a CUDA build.
[[noreturn]] void refuse_without_cuda_backend(const std::string& what, int device);

/// For a family without a device forward: throws Error(unsupported) "<what>: no CUDA forward (CUDA device
/// <label> requested); run it with device \"cpu\"" (label: the number, or "cuda-emulated"), or in a build
/// without the CUDA backend refuse_without_cuda_backend's error.
[[noreturn]] void refuse_device_for_cpu_only_family(const std::string& what, int device);

/// Throws Error(unsupported) "<what>: the CUDA forward computes in fp32, tf32 or bf16 (precision 'fp64'
/// requested; fp64 runs on the CPU where the model offers it)" for fp64; nothing otherwise.
void refuse_fp64_on_device(const std::string& what, Precision precision);

}  // namespace surrogate::detail
