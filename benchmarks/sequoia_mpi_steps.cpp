// The registered Sequoia model on one sample split over MPI ranks by x slabs (the plan splits it by lowest
// voxels), side by side with the same model in one process on rank 0, outputs compared bitwise first:
//   mpirun -np P sequoia_mpi_steps MODEL.h5 POINTS [CALLS] [THREADS]
// The sample: POINTS points on a bumpy ellipsoid (the same on every rank). Not run by CI;
// share/docs/sequoia.md, "Across ranks".
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "mpi_steps.hpp"
#include "sequoia_sample.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using surrogate::index_t;

struct Run {
  std::vector<float> out;  // per point (segmentation) or per sample (classification)
  mpi_steps::Times times;
};

/// Plans once and predicts `calls` times on the points `ids`.
Run run(const surrogate::Comm& comm, surrogate::Model& model, const std::vector<float>& positions,
        const std::vector<float>& features, const std::vector<std::int64_t>& ids, int calls,
        const surrogate::RunOptions& options) {
  const int in = model.in_channels(), out = model.out_channels();
  const int s_in = model.sample_in_channels(), s_out = model.sample_out_channels();
  std::vector<float> my_x, my_p;
  for (const std::int64_t i : ids) {
    my_x.insert(my_x.end(), features.begin() + i * in, features.begin() + (i + 1) * in);
    my_p.insert(my_p.end(), positions.begin() + i * 3, positions.begin() + (i + 1) * 3);
  }
  const auto n = static_cast<index_t>(ids.size());
  surrogate::PointGeometry g;
  g.positions = my_p.data();
  g.ld_positions = 3;
  g.global_ids = ids.data();
  std::vector<float> classes(static_cast<std::size_t>(std::max(s_in, 1)), 0.0f), per_point;
  classes[0] = 1.0f;  // segmentation: the first class
  per_point.resize(static_cast<std::size_t>(std::max<index_t>(n, 1) * std::max(out, 1)));
  Run r;
  r.out.resize(static_cast<std::size_t>(std::max(s_out, 1)));
  surrogate::Model::SampleArrays samples;
  samples.in = s_in > 0 ? classes.data() : nullptr;
  samples.ld_in = s_in;
  samples.out = s_out > 0 ? r.out.data() : nullptr;
  samples.ld_out = s_out;
  r.times = mpi_steps::time_steps(
      comm, calls, [&] { return model.plan(comm, surrogate::SampleLayout::build(comm, n, nullptr), g, options); },
      [&](surrogate::Plan& plan) {
        model.predict(comm, plan, my_x.data(), in, out > 0 ? per_point.data() : nullptr, out, samples, options);
      });
  if (out > 0) r.out = per_point;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rc = 0;
  try {
    if (argc < 3)
      throw surrogate::Error(surrogate::ErrorCode::invalid_argument,
                             "usage: sequoia_mpi_steps MODEL.h5 POINTS [CALLS] [THREADS]");
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const surrogate::SelfComm self;
    const std::int64_t points = std::atoll(argv[2]);
    const int calls = argc > 3 ? std::atoi(argv[3]) : 3;
    surrogate::RunOptions options;
    options.threads = argc > 4 ? std::atoi(argv[4]) : 1;
    const auto model = surrogate::make_model(surrogate::ModelFile::read(argv[1]));
    const int in = model->in_channels();
    // 1. The sample: a bumpy ellipsoid; the point features are the positions' coordinates, repeated.
    const std::vector<float> positions = bench_sequoia::bumpy_ellipsoid(points);
    const std::vector<float> features = bench_sequoia::coordinate_features(positions, in);
    // 2. Rank 0 alone: the reference output and its time.
    std::vector<std::int64_t> all(static_cast<std::size_t>(points));
    std::iota(all.begin(), all.end(), std::int64_t{0});
    Run one;
    if (comm.rank() == 0) one = run(self, *model, positions, features, all, calls, options);
    const bool per_point = model->out_channels() > 0;
    std::vector<float> reference(per_point ? static_cast<std::size_t>(points * model->out_channels())
                                           : static_cast<std::size_t>(model->sample_out_channels()));
    if (comm.rank() == 0) std::copy_n(one.out.begin(), reference.size(), reference.begin());
    comm.broadcast(reference.data(), reference.size() * sizeof(float), 0);
    // 3. Every rank an x slab of equal size (the solver's partition), then the same calls over all ranks.
    std::vector<std::int64_t> by_x = all, mine;
    std::stable_sort(by_x.begin(), by_x.end(), [&](std::int64_t a, std::int64_t b) { return positions[a * 3] < positions[b * 3]; });
    for (std::int64_t t = 0; t < points; ++t)
      if (t * comm.size() / points == comm.rank()) mine.push_back(by_x[static_cast<std::size_t>(t)]);
    const Run split = run(comm, *model, positions, features, mine, calls, options);
    std::int64_t differ = 0;
    const int od = model->out_channels();
    if (per_point) {
      for (std::size_t r = 0; r < mine.size(); ++r)
        for (int k = 0; k < od; ++k)
          differ += split.out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)] != reference[static_cast<std::size_t>(mine[r] * od + k)];
    } else {
      for (std::size_t k = 0; k < reference.size(); ++k) differ += split.out[k] != reference[k];
    }
    differ = comm.allreduce(differ, surrogate::ReduceOp::sum);
    if (comm.rank() == 0) {
      std::printf("Sequoia, one sample of %lld points, %d thread(s) per process, best of %d calls\n",
                  static_cast<long long>(points), options.threads, calls);
      std::printf("  outputs of %d ranks vs one process: %s (%lld values differ)\n", comm.size(),
                  differ == 0 ? "bitwise identical" : "DIFFERENT", static_cast<long long>(differ));
      std::printf("  %-10s plan %7.3f s   forward %7.3f s\n", "one", one.times.plan_s, one.times.best_s);
      std::printf("  %-10s plan %7.3f s   forward %7.3f s   (%.2fx), %.1f MB between ranks per forward\n",
                  (std::to_string(comm.size()) + " ranks").c_str(), split.times.plan_s, split.times.best_s,
                  one.times.best_s / split.times.best_s, split.times.sent_mb);
    }
    if (differ != 0) rc = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sequoia_mpi_steps: %s\n", e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}
