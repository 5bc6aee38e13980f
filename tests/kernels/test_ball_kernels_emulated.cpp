// The device code of the ball-tree attention kernels (kernels/cuda/ball_attention_kernels.cuh), unchanged,
// run on the CPU through the host emulation of the CUDA constructs it uses (cuda_host_emulation.hpp), with
// the checks of ball_attention_checks.hpp (naive double reference with a float32 error bound, the CPU
// kernel and BSA's CPU branches, determinism, launch independence). This checks the kernels' indexing
// (balls, heads, samples, strides, copies, selection rows and blocks) and their arithmetic without a GPU;
// it says nothing about the hardware (compilation by nvcc, the real launch, memory). Labels unit;cuda,
// CUDA builds.
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel source below

#include "ball_attention_kernels.cuh"

#include <gtest/gtest.h>

#include <vector>

#include "ball_attention_checks.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace bk = surrogate::kernels::cuda::ball_kernels;
namespace checks = surrogate::testing::ball_attention_checks;
using surrogate::kernels::index_t;

/// The grid of the launchers in ball_attention.cu: one thread per query and head.
dim3 grid_of(index_t queries, int heads) {
  return dim3(static_cast<unsigned>((queries + bk::kThreads - 1) / bk::kThreads), static_cast<unsigned>(heads));
}

/// Calls run(std::integral_constant<int, kMaxE>) for E's head-width bucket, as ball_attention.cu does.
template <class Run>
void with_head_dim(int E, Run&& run) {
  surrogate::kernels::cuda::detail::dispatch_head_width(E, run);
}

/// Runs the kernels on the args' host arrays (the output in a copy of a.out), returns the output array.
struct EmulatedBackend {
  std::vector<float> ball(cu::BallAttentionLaunch a) {
    std::vector<float> out(a.out, a.out + a.rows * a.ldo);
    a.out = out.data();
    with_head_dim(a.E, [&](auto width) {
      constexpr int kE = decltype(width)::value;
      if (a.sigma)
        cuda_host_emulation::launch(grid_of(a.rows, a.heads), bk::kThreads, [&] { bk::ball_kernel<kE, true>(a); });
      else
        cuda_host_emulation::launch(grid_of(a.rows, a.heads), bk::kThreads, [&] { bk::ball_kernel<kE, false>(a); });
    });
    return out;
  }
  std::vector<float> coarse(cu::CoarseAttentionArgs a) {
    const index_t queries = a.samples * a.queries;
    std::vector<float> out(a.out, a.out + queries * a.copies * a.ldo);
    a.out = out.data();
    with_head_dim(a.E, [&](auto width) {
      cuda_host_emulation::launch(grid_of(queries, a.heads), bk::kThreads,
                                  [&] { bk::coarse_kernel<decltype(width)::value>(a); });
    });
    return out;
  }
  std::vector<float> selected(cu::SelectedBlockAttentionArgs a) {
    const index_t tokens = a.samples * a.n;
    std::vector<float> out(a.out, a.out + tokens * a.ldo);
    a.out = out.data();
    with_head_dim(a.E, [&](auto width) {
      cuda_host_emulation::launch(grid_of(tokens, a.heads), bk::kThreads,
                                  [&] { bk::selected_block_kernel<decltype(width)::value>(a); });
    });
    return out;
  }
};

TEST(BallKernelsEmulated, BallAttentionMatchesTheNaiveReferenceAndTheCpuKernel) {
  EmulatedBackend backend;
  checks::check_ball_attention(backend);
}
TEST(BallKernelsEmulated, CoarseAttentionMatchesTheNaiveReferenceAndTheCpuBranch) {
  EmulatedBackend backend;
  checks::check_coarse_attention(backend);
}
TEST(BallKernelsEmulated, SelectedBlockAttentionMatchesTheNaiveReferenceAndTheCpuBranch) {
  EmulatedBackend backend;
  checks::check_selected_block_attention(backend);
}

}  // namespace
