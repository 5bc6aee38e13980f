// Host versions of the launchers only BSA's device forward uses (the common ones are in
// emulated_cuda_backend.cpp): its gate kernels (bsa_gate_kernels.cuh) and the coarse and selected-block
// attention (ball_attention_kernels.cuh), whose unchanged device code runs the threads of a block one
// after another (those kernels use neither shared memory nor __syncthreads). Compiled into the BSA
// emulation tests (test_bsa_device_emulated.cpp, test_bsa_device_mpi_emulated.cpp), where they replace
// libsurrogate_kernels.so's, like emulated_cuda_backend.cpp.
#include "emulated_bsa_launchers.hpp"  // first: replaces the CUDA keywords for the kernel sources below

#include "ball_attention_kernels.cuh"
#include "bsa_gate_kernels.cuh"

#include <string>

int emulated_bsa::fail_after = 0;

namespace surrogate::kernels::cuda {

using emulated_backend::grid_for;
using emulated_backend::launches;
using emulated_backend::run_sequentially;
using emulated_backend::with_head_dim;

namespace {

// Counts a BSA launch; the one that brings fail_after to zero fails as a CUDA launch error would.
void count_launch(const char* kernel) {
  ++launches;
  if (emulated_bsa::fail_after > 0 && --emulated_bsa::fail_after == 0)
    throw CudaError(cudaErrorLaunchFailure, std::string(kernel) + ": emulated launch failure");
}

}  // namespace

namespace gk = bsa_kernels;
void row_map(const RowMapArgs& a, cudaStream_t) {
  count_launch("row_map");
  run_sequentially(grid_for(a.rows * a.width, gk::kThreads), gk::kThreads, [&] { gk::row_map_kernel(a); });
}
void gated_sum(const GatedSumArgs& a, cudaStream_t) {
  count_launch("gated_sum");
  run_sequentially(grid_for(a.rows * a.heads * a.E, gk::kThreads), gk::kThreads, [&] { gk::gated_sum_kernel(a); });
}

namespace bk = ball_kernels;
void coarse_attention(const CoarseAttentionArgs& a, cudaStream_t) {
  count_launch("coarse_attention");
  with_head_dim(a.E, [&](auto width) {
    run_sequentially(grid_for(static_cast<index_t>(a.samples) * a.queries, bk::kThreads, a.heads), bk::kThreads,
                     [&] { bk::coarse_kernel<decltype(width)::value>(a); });
  });
}
void selected_block_attention(const SelectedBlockAttentionArgs& a, cudaStream_t) {
  count_launch("selected_block_attention");
  with_head_dim(a.E, [&](auto width) {
    run_sequentially(grid_for(static_cast<index_t>(a.samples) * a.n, bk::kThreads, a.heads), bk::kThreads,
                     [&] { bk::selected_block_kernel<decltype(width)::value>(a); });
  });
}

}  // namespace surrogate::kernels::cuda
