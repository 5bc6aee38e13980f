// The graph step of the distributed Erwin alone (surrogate/graph_distributed.hpp) on one sample:
//   mpirun -np P graph_mpi_bench POINTS K ORDER [gather]
// Rank r makes its block of the canonical order, POINTS * r / P ... of a uniform cloud in the unit cube:
// ORDER = slabs (the block is the slab x in [r/P, (r+1)/P), points by increasing x: a spatially coherent
// numbering) or random (the block is spread over the whole cube). It resets its peak resident size
// (/proc/self/clear_refs 5), builds its receivers' kNN-K edges (loop on, one thread) and prints its peak
// resident size above the size before the step (VmHWM - VmRSS, kB), the halo (foreign points), what it
// sent, and the step's wall and process CPU time. `gather`: the former way instead, every block all-gathered (the whole sample on
// every rank) and knn_graph with the block's ReceiverRange (no halo statistics). Not run by CI.
// Docs: share/docs/balltree.md ("Graphs", distributed).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/graph_distributed.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// A "Vm...:" value of /proc/self/status in kB.
long status_kb(const std::string& key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key + ":", 0) == 0) return std::stol(line.substr(key.size() + 1));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    if (argc < 4) throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "usage: graph_mpi_bench POINTS K slabs|random [gather]");
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const std::int64_t total = std::stoll(argv[1]);
    const int k = std::stoi(argv[2]);
    const std::string order = argv[3];
    const bool gather = argc > 4 && std::string(argv[4]) == "gather";
    if (order != "slabs" && order != "random")
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "graph_mpi_bench: ORDER must be slabs or random");
    const int rank = comm.rank(), P = comm.size();
    std::vector<std::int64_t> bounds(static_cast<std::size_t>(P) + 1);
    for (int r = 0; r <= P; ++r) bounds[static_cast<std::size_t>(r)] = total * r / P;
    const std::int64_t n = bounds[static_cast<std::size_t>(rank) + 1] - bounds[static_cast<std::size_t>(rank)];
    std::vector<float> positions(static_cast<std::size_t>(3 * n));
    std::mt19937 gen(static_cast<unsigned>(rank) + 1u);
    std::uniform_real_distribution<float> uniform;
    for (std::int64_t i = 0; i < n; ++i) {
      float* p = positions.data() + 3 * i;
      for (int c = 0; c < 3; ++c) p[c] = uniform(gen);
      if (order == "slabs") p[0] = (static_cast<float>(rank) + p[0]) / static_cast<float>(P);
    }
    if (order == "slabs") {  // by increasing x within the slab
      std::vector<std::int64_t> by_x(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) by_x[static_cast<std::size_t>(i)] = i;
      std::sort(by_x.begin(), by_x.end(), [&](std::int64_t a, std::int64_t b) {
        return positions[static_cast<std::size_t>(3 * a)] < positions[static_cast<std::size_t>(3 * b)];
      });
      std::vector<float> sorted(positions.size());
      for (std::int64_t i = 0; i < n; ++i)
        std::copy_n(positions.begin() + 3 * by_x[static_cast<std::size_t>(i)], 3, sorted.begin() + 3 * i);
      positions = std::move(sorted);
    }
    const surrogate::balltree::Batch batch = surrogate::balltree::Batch::single(total);
    comm.barrier();
    { std::ofstream("/proc/self/clear_refs") << "5"; }
    const long before = status_kb("VmRSS");
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_seconds();
    surrogate::graph::DistributedGraphStats stats;
    std::int64_t edges = 0;
    if (gather) {
      std::vector<float> all(static_cast<std::size_t>(3 * total));
      std::vector<std::size_t> bytes(static_cast<std::size_t>(P)), at(static_cast<std::size_t>(P));
      for (int r = 0; r < P; ++r) {
        at[static_cast<std::size_t>(r)] = static_cast<std::size_t>(3 * bounds[static_cast<std::size_t>(r)]) * sizeof(float);
        bytes[static_cast<std::size_t>(r)] =
            static_cast<std::size_t>(3 * (bounds[static_cast<std::size_t>(r) + 1] - bounds[static_cast<std::size_t>(r)])) * sizeof(float);
      }
      comm.allgatherv(positions.data(), positions.size() * sizeof(float), all.data(), bytes, at);
      edges = surrogate::graph::knn_graph(all, 3, batch, k, true, 1,
                                          {bounds[static_cast<std::size_t>(rank)], bounds[static_cast<std::size_t>(rank) + 1]})
                  .count();
    } else {
      const surrogate::graph::CanonicalBlocks blocks{positions, 3, &batch, bounds};
      edges = surrogate::graph::knn_graph_distributed(comm, blocks, k, true, 1, &stats).count();
    }
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = cpu_seconds() - c0;
    const long peak = status_kb("VmHWM");
    std::printf("rank %d of %d (%s%s): %lld of %lld points, %lld edges, step peak above its start %ld kB, halo %lld, "
                "sent %lld, whole samples %lld, searched again %lld, wall %.3f s, cpu %.3f s\n",
                rank, P, order.c_str(), gather ? ", gathered" : "", static_cast<long long>(n), static_cast<long long>(total),
                static_cast<long long>(edges), peak - before, static_cast<long long>(stats.foreign_points),
                static_cast<long long>(stats.sent_points), static_cast<long long>(stats.whole_samples),
                static_cast<long long>(stats.requeried), seconds, cpu);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "graph_mpi_bench: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
