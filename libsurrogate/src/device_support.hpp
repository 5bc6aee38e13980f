// What the device paths of every family share in every build: the one refusal of a build without the
// CUDA backend (share/docs/adding-a-family.md, "Device forward").
#pragma once

#include <string>

namespace surrogate::detail {

/// Throws Error(unsupported) "<what>: CUDA device <device> requested, but this build of surrogate has no
/// CUDA backend". Families call it where their device forward would be created in a CUDA build.
[[noreturn]] void refuse_without_cuda_backend(const std::string& what, int device);

}  // namespace surrogate::detail
