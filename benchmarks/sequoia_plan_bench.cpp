// Times the parts of a Sequoia plan on the CPU, the work a solver pays for every new point set before a
// forward (share/docs/sequoia.md, "Hierarchy", "Across ranks"):
//   sequoia_plan_bench MODEL.h5 POINTS REPEATS [THREADS]
// One sample of POINTS points on a bumpy ellipsoid (the sample of gpu/sequoia_gpu_bench). One JSON line,
// best of REPEATS (ms): samples_ms (build_sample_hierarchies), collate_ms, share_ms (Share::whole), of it
// lists_ms (the neighbour lists) and share_other_ms (the rest: the key lists and their renumbering).
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "bench_io.hpp"
#include "sequoia_sample.hpp"
#include "sequoia/neighbours.hpp"
#include "sequoia/share.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sequoia.hpp"

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s MODEL.h5 POINTS REPEATS [THREADS]\n", argv[0]);
    return 2;
  }
  namespace sq = surrogate::sequoia;
  using clock = std::chrono::steady_clock;
  try {
    const surrogate::ModelFile file = surrogate::ModelFile::read(argv[1]);
    const sq::Config cfg = sq::Config::from_file(file);
    const long points = std::atol(argv[2]);
    const int repeats = std::max(1, std::atoi(argv[3]));
    omp_set_num_threads(argc > 4 ? std::atoi(argv[4]) : omp_get_max_threads());
    // 1. The sample.
    const std::vector<float> positions = bench_sequoia::bumpy_ellipsoid(points);
    // 2. The hierarchy: every sample's, then the collation.
    const std::vector<sq::SamplePoints> sample{{positions.data(), points, "sample 0"}};
    std::vector<sq::SampleHierarchy> built;
    const double samples_ms =
        bench_io::best_ms(repeats, [&] { built = sq::build_sample_hierarchies(sample, cfg.divide, cfg.depth); });
    sq::Hierarchy h;
    const double collate_ms = bench_io::best_ms(repeats, [&] { h = sq::collate(built); });
    // 3. The share of one process: the neighbour lists, timed apart, and the rest.
    double lists_ms = 0.0;
    const sq::NearestFinder timed = [&](const std::vector<float>& p, const std::vector<std::int64_t>& b, int k,
                                        const std::vector<std::int64_t>& q) {
      const auto t0 = clock::now();
      std::vector<std::int64_t> lists = sq::nearest_lists(p, b, k, q);
      lists_ms += 1e3 * std::chrono::duration<double>(clock::now() - t0).count();
      return lists;
    };
    double share_ms = 1e300, best_lists_ms = 0.0;
    for (int r = 0; r < repeats; ++r) {
      lists_ms = 0.0;
      const auto t0 = clock::now();
      const sq::Share share = sq::Share::whole(h, cfg, nullptr, timed);
      const double ms = 1e3 * std::chrono::duration<double>(clock::now() - t0).count();
      if (ms < share_ms) {
        share_ms = ms;
        best_lists_ms = lists_ms;
      }
    }
    std::printf("{\"points\": %ld, \"threads\": %d, \"divide\": %d, \"depth\": %d, \"nodes\": %lld, \"samples_ms\": %.3f, "
                "\"collate_ms\": %.3f, \"share_ms\": %.3f, \"lists_ms\": %.3f, \"share_other_ms\": %.3f}\n",
                points, omp_get_max_threads(), cfg.divide, cfg.depth, static_cast<long long>(h.coords.size() / 3),
                samples_ms, collate_ms, share_ms, best_lists_ms, share_ms - best_lists_ms);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sequoia_plan_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
