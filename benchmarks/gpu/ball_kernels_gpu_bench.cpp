// The ball-tree attention kernels alone (surrogate/kernels/cuda_ball_attention.hpp) at the shapes of one
// sparse layer of the BSA benchmark's model (D 64, 8 heads of width 8, balls of 256, blocks of C = 8, S = 4,
// block-level importance), random inputs: CUDA-event milliseconds per launch, best of REPEATS after a
// warm-up, one JSON line per kernel (share/docs/cuda.md, "Tests and benchmark"); the ball attention also
// in tf32 and bf16 on the tensor cores.
//   ball_kernels_gpu_bench N [REPEATS] [DEVICE|cuda-emulated]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "device_arg.hpp"
#include "event_timing.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace cu = surrogate::kernels::cuda;
using surrogate::kernels::index_t;

namespace {

constexpr int kHeads = 8, kE = 8, kD = kHeads * kE, kBall = 256, kC = 8, kS = 4, kDim = 3;

cu::DeviceBuffer<float> random_device(std::size_t count, std::mt19937& gen, int device) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> host(count);
  for (float& x : host) x = dist(gen);
  cu::DeviceBuffer<float> buffer(count, device);
  cu::copy_blocking(buffer.data(), host.data(), count * sizeof(float), device);
  return buffer;
}


void print(const char* kernel, index_t n, double ms, double flop) {
  std::printf("{\"kernel\": \"%s\", \"points\": %ld, \"ms\": %.4f, \"gflop_per_s\": %.1f}\n", kernel,
              static_cast<long>(n), ms, flop / (ms * 1e6));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s N [REPEATS] [DEVICE|cuda-emulated]\n", argv[0]);
    return 2;
  }
  try {
    const index_t n = std::atol(argv[1]);
    const int repeats = argc > 2 ? std::max(1, std::atoi(argv[2])) : 5;
    const int device = bench_gpu::device_arg(argc, argv, 3);
    if (n < kBall || n % kBall != 0) {
      std::fprintf(stderr, "N = %ld must be a positive multiple of the ball size %d\n", static_cast<long>(n), kBall);
      return 2;
    }
    const index_t blocks = n / kC;
    const float scale = 1.0f / 2.8284271f;  // 1 / sqrt(E)
    // 1. Token rows [q | k | v] (3 D), positions, compressed blocks [k | v] and queries, outputs.
    std::mt19937 gen(7);
    const cu::DeviceBuffer<float> u = random_device(static_cast<std::size_t>(n * 3 * kD), gen, device);
    const cu::DeviceBuffer<float> pos = random_device(static_cast<std::size_t>(n * kDim), gen, device);
    const cu::DeviceBuffer<float> sigma = random_device(kHeads, gen, device);
    const cu::DeviceBuffer<float> kc = random_device(static_cast<std::size_t>(blocks * kD), gen, device);
    const cu::DeviceBuffer<float> vc = random_device(static_cast<std::size_t>(blocks * kD), gen, device);
    const cu::DeviceBuffer<float> qc = random_device(static_cast<std::size_t>(blocks * kD), gen, device);
    cu::DeviceBuffer<float> out(static_cast<std::size_t>(n * kD), device);
    cu::DeviceBuffer<std::int32_t> sel(static_cast<std::size_t>(blocks * kHeads * kS), device);
    cu::Stream stream(device);

    // 2. BSA's local branch (Erwin's ball attention with the distance bias).
    cu::BallAttentionLaunch ball;
    ball.rows = n;
    ball.ball = kBall;
    ball.heads = kHeads;
    ball.E = kE;
    ball.q = u.data();
    ball.k = u.data() + kD;
    ball.v = u.data() + 2 * kD;
    ball.ld = 3 * kD;
    ball.scale = scale;
    ball.sigma = sigma.data();
    ball.positions = pos.data();
    ball.ld_pos = kDim;
    ball.dim = kDim;
    ball.out = out.data();
    ball.ldo = kD;
    double ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::ball_attention(ball, stream.get()); });
    print("ball_attention", n, ms, 4.0 * kE * kBall * static_cast<double>(n) * kHeads);
    // The same on the tensor cores (BallAttentionLaunch::precision), the rounding checked by the tests.
    for (const auto& [precision, name] : {std::pair{cu::MlpPrecision::tf32, "ball_attention_tf32"},
                                          std::pair{cu::MlpPrecision::bf16, "ball_attention_bf16"}}) {
      ball.precision = precision;
      ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::ball_attention(ball, stream.get()); });
      print(name, n, ms, 4.0 * kE * kBall * static_cast<double>(n) * kHeads);
    }

    // 3. The coarse branch: every block's compressed query against all compressed blocks.
    cu::CoarseAttentionArgs coarse;
    coarse.samples = 1;
    coarse.heads = kHeads;
    coarse.E = kE;
    coarse.q = qc.data();
    coarse.ldq = kD;
    coarse.queries = blocks;
    coarse.k = kc.data();
    coarse.v = vc.data();
    coarse.ldkv = kD;
    coarse.keys = blocks;
    coarse.scale = scale;
    coarse.out = out.data();
    coarse.ldo = kD;
    coarse.copies = kC;
    ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::coarse_attention(coarse, stream.get()); });
    print("coarse_attention", n, ms, 4.0 * kE * static_cast<double>(blocks) * blocks * kHeads);

    // 4. The top-S selection on the same blocks (the own ball masked), alone.
    cu::BlockSelectionArgs select;
    select.samples = 1;
    select.heads = kHeads;
    select.E = kE;
    select.q = qc.data();
    select.ldq = kD;
    select.rows = blocks;
    select.k = kc.data();
    select.ldk = kD;
    select.blocks = blocks;
    select.scale = scale;
    select.S = kS;
    select.ball_tokens = kBall;
    select.ball_blocks = kBall / kC;
    select.row_tokens = kC;
    select.sel = sel.data();
    ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::select_blocks(select, stream.get()); });
    print("select_blocks", n, ms, 2.0 * kE * static_cast<double>(blocks) * blocks * kHeads);

    // 5. Both in one pass (what the BSA forward launches for this configuration).
    ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::coarse_attention_and_select(coarse, select, stream.get()); });
    print("coarse_attention_and_select", n, ms, 6.0 * kE * static_cast<double>(blocks) * blocks * kHeads);

    // 6. The fine branch on the blocks just selected.
    cu::SelectedBlockAttentionArgs fine;
    fine.samples = 1;
    fine.n = n;
    fine.heads = kHeads;
    fine.E = kE;
    fine.q = u.data();
    fine.k = u.data() + kD;
    fine.v = u.data() + 2 * kD;
    fine.ld = 3 * kD;
    fine.scale = scale;
    fine.C = kC;
    fine.S = kS;
    fine.tokens_per_row = kC;
    fine.rows = blocks;
    fine.sel = sel.data();
    fine.out = out.data();
    fine.ldo = kD;
    ms = bench_gpu::best_ms(repeats, device, stream.get(), [&] { cu::selected_block_attention(fine, stream.get()); });
    print("selected_block_attention", n, ms, 4.0 * kE * kS * kC * static_cast<double>(n) * kHeads);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ball_kernels_gpu_bench: %s\n", e.what());
    return 1;
  }
}
