// The registered HEPT model on one event split over MPI ranks by phi wedges (buckets distributed), side by
// side with the same model in one process on rank 0, outputs compared bitwise first:
//   mpirun -np P hept_mpi_steps MODEL.h5 DIR [CALLS] [THREADS] [fp32|fp64] [phi|file]
// DIR/features.f32, DIR/coords.f32 as hept_bench reads them; global ids by phi (default) or file order.
// Not run by CI; share/docs/hept.md, "Plan and ranks".
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <numbers>
#include <numeric>
#include <string>
#include <vector>

#include "bench_io.hpp"
#include "mpi_steps.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using surrogate::index_t;

struct Run {
  std::vector<float> out;
  mpi_steps::Times times;
};

/// Plans once and predicts `calls` times on the points `ids`.
Run run(const surrogate::Comm& comm, surrogate::Model& model, const std::vector<float>& x,
        const std::vector<float>& coords, const std::vector<std::int64_t>& ids, int in, int cd, int calls,
        const surrogate::RunOptions& options) {
  std::vector<float> my_x, my_coords;
  for (const std::int64_t i : ids) {
    my_x.insert(my_x.end(), x.begin() + i * in, x.begin() + (i + 1) * in);
    my_coords.insert(my_coords.end(), coords.begin() + i * cd, coords.begin() + (i + 1) * cd);
  }
  const auto n = static_cast<index_t>(ids.size());
  surrogate::PointGeometry g;
  g.positions = my_coords.data();
  g.ld_positions = cd;
  g.global_ids = ids.data();
  Run r;
  r.out.resize(static_cast<std::size_t>(std::max<index_t>(n, 1) * model.out_channels()));
  r.times = mpi_steps::time_steps(
      comm, calls, [&] { return model.plan(comm, surrogate::SampleLayout::build(comm, n, nullptr), g); },
      [&](surrogate::Plan& plan) {
        model.predict(comm, plan, my_x.data(), in, r.out.data(), model.out_channels(), options);
      });
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    if (argc < 3)
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument,
                             "usage: hept_mpi_steps MODEL.h5 DIR [CALLS] [THREADS] [fp32|fp64] [phi|file]");
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const surrogate::SelfComm self;
    const std::string dir = argv[2], precision = argc > 5 ? argv[5] : "fp32", order = argc > 6 ? argv[6] : "phi";
    if (order != "phi" && order != "file")
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument, "hept_mpi_steps: ORDER must be phi or file, got " + order);
    const int calls = argc > 3 ? std::atoi(argv[3]) : 3;
    surrogate::RunOptions options;
    options.threads = argc > 4 ? std::atoi(argv[4]) : 1;
    options.precision = surrogate::parse_precision(precision);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(argv[1]));
    const int in = model->in_channels(), cd = model->position_dim(), od = model->out_channels();
    std::vector<float> x = bench_io::read_array<float>(dir + "/features.f32");
    std::vector<float> coords = bench_io::read_array<float>(dir + "/coords.f32");
    const auto points = static_cast<std::int64_t>(coords.size()) / cd;
    if (order == "phi") {  // hits numbered by increasing phi, as a solver numbers its mesh coherently
      std::vector<std::int64_t> by_phi(static_cast<std::size_t>(points));
      std::iota(by_phi.begin(), by_phi.end(), std::int64_t{0});
      std::stable_sort(by_phi.begin(), by_phi.end(), [&](std::int64_t a, std::int64_t b) {
        return coords[static_cast<std::size_t>(a * cd + 1)] < coords[static_cast<std::size_t>(b * cd + 1)];
      });
      std::vector<float> sx, sc;
      for (const std::int64_t i : by_phi) {
        sx.insert(sx.end(), x.begin() + i * in, x.begin() + (i + 1) * in);
        sc.insert(sc.end(), coords.begin() + i * cd, coords.begin() + (i + 1) * cd);
      }
      x = std::move(sx);
      coords = std::move(sc);
    }
    // 1. Rank 0 alone: the reference output and its time.
    Run one;
    std::vector<std::int64_t> all(static_cast<std::size_t>(points));
    for (std::int64_t i = 0; i < points; ++i) all[static_cast<std::size_t>(i)] = i;
    if (comm.rank() == 0) one = run(self, *model, x, coords, all, in, cd, calls, options);
    std::vector<float> reference(static_cast<std::size_t>(points * od));
    if (comm.rank() == 0) reference = one.out;
    comm.broadcast(reference.data(), reference.size() * sizeof(float), 0);
    // 2. Every rank its phi wedge (coordinate 1), then the same calls over all ranks.
    std::vector<std::int64_t> mine;
    for (std::int64_t i = 0; i < points; ++i) {
      const double phi = coords[static_cast<std::size_t>(i * cd + 1)];
      const int wedge = static_cast<int>((phi + std::numbers::pi) / (2 * std::numbers::pi) * comm.size());
      if (std::clamp(wedge, 0, comm.size() - 1) == comm.rank()) mine.push_back(i);
    }
    const Run split = run(comm, *model, x, coords, mine, in, cd, calls, options);
    std::int64_t differ = 0;
    for (std::size_t r = 0; r < mine.size(); ++r)
      for (int k = 0; k < od; ++k)
        differ += split.out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)] !=
                  reference[static_cast<std::size_t>(mine[r] * od + k)];
    differ = comm.allreduce(differ, surrogate::ReduceOp::sum);
    if (comm.rank() == 0) {
      std::printf("HEPT, %lld hits, one event, %s, %d thread(s) per process, best of %d calls, ids in %s order\n",
                  static_cast<long long>(points), precision.c_str(), options.threads, calls, order.c_str());
      std::printf("  outputs of %d ranks vs one process: %s (%lld values differ)\n", comm.size(),
                  differ == 0 ? "bitwise identical" : "DIFFERENT", static_cast<long long>(differ));
      std::printf("  %-22s plan %7.3f s   forward %7.3f s\n", "one process", one.times.plan_s, one.times.best_s);
      std::printf("  %-22s plan %7.3f s   forward %7.3f s   (%.2fx), %.1f MB between ranks per forward\n",
                  (std::to_string(comm.size()) + " ranks").c_str(), split.times.plan_s, split.times.best_s,
                  one.times.best_s / split.times.best_s, split.times.sent_mb);
    }
    if (differ != 0) rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hept_mpi_steps: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
