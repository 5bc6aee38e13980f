// Times the BSA forward (surrogate/bsa.hpp) on one sample of random points in the unit cube:
//   bsa_bench MODEL.h5 POINTS THREADS REPEATS [SEED]
// Prints one JSON line: {"points": N, "threads": T, "best_s": ..., "median_s": ...}. The ball trees are
// built inside each timed forward, as the official Transformer.forward does. Used by
// benchmarks/bsa_cpu_vs_pytorch.py.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s MODEL.h5 POINTS THREADS REPEATS [SEED]\n", argv[0]);
    return 2;
  }
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const surrogate::bsa::Network net(file);
    const long points = std::atol(argv[2]);
    const int threads = std::atoi(argv[3]), repeats = std::atoi(argv[4]);
    const unsigned seed = argc > 5 ? static_cast<unsigned>(std::atoi(argv[5])) : 0u;
    const int d = net.config().dimensionality, cin = net.in_channels();
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(0.0f, 1.0f);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> pos(static_cast<std::size_t>(points * d)), feat(static_cast<std::size_t>(points * cin));
    for (float& p : pos) p = uni(rng);
    for (float& f : feat) f = normal(rng);
    const auto batch = surrogate::balltree::Batch::single(points);
    (void)net.forward(feat, pos, batch, threads);  // warm-up
    std::vector<double> times;
    for (int r = 0; r < repeats; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const std::vector<float> y = net.forward(feat, pos, batch, threads);
      times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (y.empty()) return 1;
    }
    std::sort(times.begin(), times.end());
    std::printf("{\"points\": %ld, \"threads\": %d, \"best_s\": %.6f, \"median_s\": %.6f}\n", points, threads,
                times.front(), times[times.size() / 2]);
  } catch (const surrogate::Error& e) {
    std::fprintf(stderr, "bsa_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
