// The host-emulated launchers of the sphere operators' own kernels (emulated_sphere_launchers.cpp), on
// top of the shared emulated backend (emulated_cuda_backend.hpp).
#pragma once

#include "emulated_cuda_backend.hpp"  // first: replaces the CUDA keywords

namespace surrogate::kernels::cuda {

/// Launches of the wide-head attention kernels (the e128 tests check they ran).
extern int wide_attention_launches;
/// Launches of the SHT kernels (the upsample_sht tests check they ran).
extern int sht_launches;

}  // namespace surrogate::kernels::cuda

namespace emulated_sphere {

/// When > 0: the sphere attention launch (global or neighbourhood) that brings it to 0 throws
/// kernels::cuda::CudaError(cudaErrorLaunchFailure), as a failed launch on a GPU would (tests of the error
/// agreement across ranks). 0: never.
extern int fail_after;

}  // namespace emulated_sphere
