// The ball trees of a new point set, as Erwin's and BSA's plans build them (the tree and its rotated
// partitions, balltree::build_distributed_with_rotations on one process), with the nodes finished on the
// host (every OpenMP thread) and on a CUDA device (device::BallTrees), side by side, the device with its
// top levels' large nodes split by many blocks each (the default) and by one block each:
//   ball_tree_gpu_bench POINTS REPEATS [DEVICE]
// POINTS float32 points drawn uniformly in the unit cube, one sample; Erwin's ShapeNet-Car configuration
// (ball sizes 256 and 256, stride 1, rotation 45 degrees, granularity 256). The device's trees are
// compared with the host's first (integer equality), then one JSON line: the best of REPEATS wall times
// of each (the device's with its upload and download; `device_one_block_ms`: no node split by many
// blocks), their ratio. DEVICE: a CUDA device index (0 by
// default) or cuda-emulated (the host backend: a check, not a timing).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

#include "device/ball_trees.hpp"
#include "device_arg.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace {

namespace bt = surrogate::balltree;

bool same(const bt::DistributedRotatedTrees& a, const bt::DistributedRotatedTrees& b) {
  return a.tree.index == b.tree.index && a.tree.mask == b.tree.mask && a.rotations.rotated == b.rotations.rotated;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s POINTS REPEATS [DEVICE]\n", argv[0]);
    return 2;
  }
  try {
    const long points = std::atol(argv[1]);
    const int repeats = std::max(1, std::atoi(argv[2]));
    const int device = bench_gpu::device_arg(argc, argv, 3);
    std::mt19937_64 gen(7);
    std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
    std::vector<float> positions(static_cast<std::size_t>(points) * 3);
    for (float& v : positions) v = uniform(gen);
    const std::vector<std::int64_t> samples(static_cast<std::size_t>(points), 0);
    const std::vector<int> strides{1}, balls{256, 256};
    surrogate::SelfComm comm;
    const surrogate::kernels::cuda::Stream stream(device);
    surrogate::device::BallTrees on_device(device, stream.get()), one_block(device, stream.get());
    one_block.set_wide_points(2147483647);
    auto build = [&](bt::NodeFinisher* finisher) {
      bt::DistributedOptions options{256};
      options.finisher = finisher;
      return bt::build_distributed_with_rotations(comm, positions, 3, samples, strides, balls, 45.0, options);
    };
    using clock = std::chrono::steady_clock;
    auto best_ms = [&](bt::NodeFinisher* finisher) {
      double best = 1e300;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = clock::now();
        const bt::DistributedRotatedTrees t = build(finisher);
        best = std::min(best, std::chrono::duration<double, std::milli>(clock::now() - t0).count());
      }
      return best;
    };
    // Outputs first: the device's trees must be the host's.
    const bt::DistributedRotatedTrees host = build(nullptr);
    const bool identical = same(host, build(&on_device)) && same(host, build(&one_block));
    if (!identical) {
      std::fprintf(stderr, "ball_tree_gpu_bench: the device's trees differ from the host's\n");
      return 1;
    }
    const double host_ms = best_ms(nullptr), device_ms = best_ms(&on_device), one_block_ms = best_ms(&one_block);
    std::printf("{\"points\": %ld, \"host_threads\": %d, \"host_ms\": %.3f, \"device_ms\": %.3f, "
                "\"device_one_block_ms\": %.3f, \"host_over_device\": %.2f, \"trees_identical\": true}\n",
                points, omp_get_max_threads(), host_ms, device_ms, one_block_ms, host_ms / device_ms);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ball_tree_gpu_bench: %s\n", e.what());
    return 1;
  }
}
