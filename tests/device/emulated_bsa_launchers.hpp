// The host-emulated launchers of BSA's own kernels (emulated_bsa_launchers.cpp), on top of the shared
// emulated backend (emulated_cuda_backend.hpp).
#pragma once

#include "emulated_cuda_backend.hpp"  // first: replaces the CUDA keywords

#include "surrogate/kernels/cuda_ball_attention.hpp"
#include "surrogate/kernels/cuda_bsa_gate.hpp"

namespace emulated_bsa {

/// When > 0: the launch of a BSA kernel (row_map, gated_sum, coarse, selected-block attention) that
/// brings it to 0 throws kernels::cuda::CudaError(cudaErrorLaunchFailure), as a failed launch on a GPU
/// would (tests of the error agreement across ranks). 0: never.
extern int fail_after;

}  // namespace emulated_bsa
