// The ball trees a new point set needs (Erwin and BSA plans: balltree::build_with_rotations), on one
// thread and on every thread, side by side:
//   balltree_build_bench [POINTS ...] [--repeats R] [--samples S] [--plan]
// POINTS (default 65536 262144) float32 points drawn uniformly in the unit cube, in S samples of equal
// size (default 1); Erwin's ShapeNet-Car configuration (ball sizes 256 and 256, stride 1, rotation 45°).
// --plan: the trees as Erwin's and BSA's plans build them (build_distributed_with_rotations on one process,
// granularity 256), checked equal to build_with_rotations first.
// The trees of both runs are compared before any time is printed (they must be identical: the task-
// parallel build gives the serial result), then one JSON line per size: the best of R (default 5) wall
// times in milliseconds on 1 thread and on omp_get_max_threads(), and their ratio. Not run by CI.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/comm.hpp"

namespace {

namespace bt = surrogate::balltree;

bool same(const bt::RotatedTrees& a, const bt::RotatedTrees& b) {
  return a.tree.index == b.tree.index && a.tree.mask == b.tree.mask && a.tree.slot_offsets == b.tree.slot_offsets &&
         a.rotated == b.rotated && a.target_levels == b.target_levels;
}

int run(int argc, char** argv) {
  std::vector<long> sizes;
  int repeats = 5;
  long samples = 1;
  bool plan = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--plan") {
      plan = true;
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--samples" && i + 1 < argc) {
      samples = std::max(1L, std::atol(argv[++i]));
    } else if (!a.empty() && a[0] != '-') {
      sizes.push_back(std::atol(a.c_str()));
    } else {
      std::fprintf(stderr, "usage: balltree_build_bench [POINTS ...] [--repeats R] [--samples S] [--plan]\n");
      return 2;
    }
  }
  if (sizes.empty()) sizes = {65536, 262144};
  const int threads = omp_get_max_threads();
  const std::vector<int> strides{1}, ball_sizes{256, 256};
  for (const long points : sizes) {
    // 1. The point set, in `samples` equal samples.
    std::mt19937 gen(11u);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    std::vector<float> pos(static_cast<std::size_t>(points) * 3);
    for (float& v : pos) v = unit(gen);
    std::vector<std::int64_t> offsets{0};
    for (long b = 1; b <= samples; ++b) offsets.push_back(points * b / samples);
    const bt::Batch batch = bt::Batch::from_offsets(offsets);
    std::vector<std::int64_t> sample_of(static_cast<std::size_t>(points));
    for (long b = 0; b < samples; ++b)
      std::fill(sample_of.begin() + offsets[static_cast<std::size_t>(b)], sample_of.begin() + offsets[static_cast<std::size_t>(b) + 1], b);
    const surrogate::SelfComm self;
    auto build = [&] {
      if (!plan) return bt::build_with_rotations(pos, 3, batch, strides, ball_sizes, 45.0);
      const bt::DistributedRotatedTrees d =
          bt::build_distributed_with_rotations(self, pos, 3, sample_of, strides, ball_sizes, 45.0, {256});
      bt::RotatedTrees r;
      r.tree.index = d.tree.index;
      r.tree.mask = d.tree.mask;
      r.tree.slot_offsets = d.tree.slot_offsets;
      r.rotated = d.rotations.rotated;
      r.target_levels = d.rotations.target_levels;
      return r;
    };
    // 2. The same trees on one thread and on all of them, before any timing.
    omp_set_num_threads(1);
    const bt::RotatedTrees serial = build();
    omp_set_num_threads(threads);
    const bt::RotatedTrees parallel = build();
    if (!same(serial, parallel) ||
        (plan && !same(parallel, bt::build_with_rotations(pos, 3, batch, strides, ball_sizes, 45.0)))) {
      std::fprintf(stderr, "balltree_build_bench: %ld points: the trees built on 1 and %d threads (or by the plan's "
                           "path and build_with_rotations) differ\n", points, threads);
      return 1;
    }
    // 3. Best wall times.
    auto best_ms = [&](int n) {
      omp_set_num_threads(n);
      double best = 1e300;
      for (int r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        const bt::RotatedTrees t = build();
        best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
        if (t.tree.index.empty()) std::abort();  // keeps the build
      }
      return best;
    };
    const double one = best_ms(1), all = best_ms(threads);
    std::printf("{\"points\": %ld, \"samples\": %ld, \"path\": \"%s\", \"identical\": true, \"threads\": %d, "
                "\"ms_1_thread\": %.3f, \"ms_all_threads\": %.3f, \"speedup\": %.2f}\n",
                points, samples, plan ? "plan" : "build_with_rotations", threads, one, all, one / all);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "balltree_build_bench: %s\n", e.what());
    return 1;
  }
}
