// Times balltree::build_distributed over MPI ranks:
//   mpirun -np P balltree_distributed_bench POINTS [REPEATS] [SERIAL_THRESHOLD]
// POINTS uniform random float32 points in the unit cube (3-D), one sample, each rank drawing its own
// share (POINTS / P, the remainder on the first ranks) from a per-rank seed, granularity 256. Prints, per
// repeat, the slowest rank's wall time; then per rank the peak RSS (getrusage, the MPI runtime and the
// rank's own input included), the RSS before the first build and the largest number of points the build
// held at once (DistributedTree::peak_points). Not run by CI. Docs: share/docs/balltree.md
// ("Distributed tree", costs).
#include <mpi.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <vector>

#include "surrogate/balltree_distributed.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

long peak_rss_kib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss;
}

int run(int argc, char** argv) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int p = comm.size(), me = comm.rank();
  if (argc < 2) {
    if (me == 0) std::fprintf(stderr, "usage: balltree_distributed_bench POINTS [REPEATS] [SERIAL_THRESHOLD]\n");
    return 2;
  }
  const long long points = std::atoll(argv[1]);
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  surrogate::balltree::DistributedOptions options;
  options.granularity = 256;
  if (argc > 3) options.serial_threshold = std::atoll(argv[3]);
  const long long mine = points / p + (me < points % p ? 1 : 0);
  std::mt19937_64 gen(1234 + static_cast<unsigned>(me));
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> positions(static_cast<std::size_t>(mine) * 3);
  for (auto& v : positions) v = uniform(gen);
  const std::vector<std::int64_t> samples(static_cast<std::size_t>(mine), 0);
  const long rss_before = peak_rss_kib();

  std::int64_t held = 0;
  for (int r = 0; r < repeats; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    const auto tree = surrogate::balltree::build_distributed(comm, positions, 3, samples, options);
    const double local = MPI_Wtime() - t0;
    double slowest = 0;
    MPI_Reduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    held = tree.peak_points;
    if (me == 0) std::printf("ranks %d points %lld threshold %lld build %.3f s\n", p, points,
                             static_cast<long long>(options.serial_threshold), slowest);
  }
  const long rss = peak_rss_kib();
  for (int r = 0; r < p; ++r) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (r == me)
      std::printf("rank %d: local points %lld, peak RSS %.1f MiB (before the builds %.1f MiB), peak points held %lld\n", me, mine,
                  static_cast<double>(rss) / 1024.0, static_cast<double>(rss_before) / 1024.0, static_cast<long long>(held));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 1;
  try {
    rc = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "balltree_distributed_bench: %s\n", e.what());
  }
  MPI_Finalize();
  return rc;
}
