// Times the registered Erwin model distributed over MPI ranks, call after call on one plan (the first
// call builds it: canonical blocks, graph, tree, exchange plans; later calls only predict on it):
//   mpirun -np P erwin_mpi_steps POINTS [CALLS] [ORDER]
// The model has random weights (fixed seed) and the configuration below (3-D, c_hidden [64, 128], balls
// [128, 64], stride 2, rotate 45 degrees, 2 message-passing steps on the kNN 8 graph it builds); POINTS
// random points in the unit cube, one sample, split evenly over the ranks; ORDER = random (default: global
// ids in generation order, so every rank's block is spread over the whole cube) or slabs (ids by
// increasing x, as a solver's mesh numbering is spatially coherent: every rank's block is a slab). Prints, per call and rank,
// wall time, the rank's CPU time and its peak RSS (the MPI runtime and this program's own copy of all
// points included). Not run by CI. Docs: share/docs/balltree.md ("Running Erwin", multi-rank).
#include <mpi.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

double cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

surrogate::ModelFile random_model() {
  surrogate::ModelFile f;
  f.architecture = "erwin";
  f.source = "benchmarks/erwin_mpi_steps.cpp (random weights)";
  using L = std::vector<std::int64_t>;
  f.config.set("c_in", std::int64_t{3});
  f.config.set("c_hidden", L{64, 128});
  f.config.set("ball_sizes", L{128, 64});
  f.config.set("enc_num_heads", L{4, 8});
  f.config.set("enc_depths", L{2, 2});
  f.config.set("dec_num_heads", L{4});
  f.config.set("dec_depths", L{2});
  f.config.set("strides", L{2});
  f.config.set("rotate", 45.0);
  f.config.set("mlp_ratio", std::int64_t{4});
  f.config.set("dimensionality", std::int64_t{3});
  f.config.set("mp_steps", std::int64_t{2});
  f.config.set("graph", std::string("knn"));
  f.config.set("graph_k", std::int64_t{8});
  std::mt19937 gen(0);
  std::normal_distribution<float> normal;
  for (const auto& [key, shape] : surrogate::erwin::expected_shapes(surrogate::erwin::Config::from_attributes(f.config))) {
    surrogate::Tensor32 t;
    t.shape = shape;
    t.values.resize(static_cast<std::size_t>(t.numel()));
    const float scale = 0.3f / std::sqrt(static_cast<float>(shape.size() > 1 ? shape.back() : 16));
    const bool positive = key.find("running_var") != std::string::npos;
    const bool around_one = key.find("norm1.weight") != std::string::npos || key.find("norm2.weight") != std::string::npos;
    for (float& v : t.values) v = positive ? 1.0f + std::abs(scale * normal(gen)) : (around_one ? 1.0f : 0.0f) + scale * normal(gen);
    f.weights[key] = std::move(t);
  }
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    if (argc < 2)
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "usage: erwin_mpi_steps POINTS [CALLS] [random|slabs]");
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const long total = std::atol(argv[1]);
    const int calls = argc > 2 ? std::atoi(argv[2]) : 3;
    const std::string order = argc > 3 ? argv[3] : "random";
    if (order != "random" && order != "slabs")
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "erwin_mpi_steps: ORDER must be random or slabs, got " + order);
    const auto model = surrogate::make_model(random_model());
    const int rank = comm.rank(), ranks = comm.size();
    const long begin = total * rank / ranks, end = total * (rank + 1) / ranks, n = end - begin;
    std::mt19937 gen(1);
    std::uniform_real_distribution<float> uniform;
    std::vector<float> positions(static_cast<std::size_t>(total * 3)), features(positions.size());
    for (float& v : positions) v = uniform(gen);
    if (order == "slabs") {  // global id = rank of the point's x coordinate
      std::vector<long> by_x(static_cast<std::size_t>(total));
      for (long i = 0; i < total; ++i) by_x[static_cast<std::size_t>(i)] = i;
      std::sort(by_x.begin(), by_x.end(), [&](long a, long b) {
        return positions[static_cast<std::size_t>(a * 3)] < positions[static_cast<std::size_t>(b * 3)];
      });
      std::vector<float> sorted(positions.size());
      for (long i = 0; i < total; ++i)
        std::copy_n(positions.begin() + by_x[static_cast<std::size_t>(i)] * 3, 3, sorted.begin() + i * 3);
      positions = std::move(sorted);
    }
    for (float& v : features) v = uniform(gen) - 0.5f;
    std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = begin + i;
    const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, nullptr);
    surrogate::PointGeometry g;
    g.positions = positions.data() + begin * 3;
    g.ld_positions = 3;
    g.global_ids = ids.data();
    std::vector<float> out(static_cast<std::size_t>(std::max(1L, n) * model->out_channels()));
    std::unique_ptr<surrogate::Plan> plan;  // built by the first call
    for (int call = 0; call < calls; ++call) {
      MPI_Barrier(MPI_COMM_WORLD);
      const double w0 = MPI_Wtime(), c0 = cpu_seconds();
      if (!plan) plan = model->plan(comm, layout, g);
      model->predict(comm, *plan, features.data() + begin * 3, 3, out.data(), model->out_channels());
      const double wall = MPI_Wtime() - w0, cpu = cpu_seconds() - c0;
      rusage usage{};
      getrusage(RUSAGE_SELF, &usage);
      std::printf("ranks %d rank %d call %d: wall %.3f s, cpu %.3f s, peak rss %ld MB\n", ranks, rank, call, wall, cpu,
                  usage.ru_maxrss / 1024);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "erwin_mpi_steps: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
