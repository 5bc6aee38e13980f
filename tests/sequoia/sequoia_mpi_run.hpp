// The registered Sequoia model under mpirun with the points of a batch spread over the ranks in one of four
// ways; every point's outputs gathered by global id (test_sequoia_mpi, test_gpu_sequoia_mpi).
#pragma once

#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "sequoia_batches.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace sequoia_test::mpi {

enum class Spread { even, random_skewed, all_on_rank0, last_rank_empty };

struct Outputs {
  std::vector<float> per_point, per_sample;
};

/// Runs the registered model with the points spread over the ranks; returns every point's outputs (by
/// global id) and the per-sample outputs of this rank.
/// `inspect` (optional) sees the plan after the predicts; `check` (optional) also this rank's input rows
/// (cin wide), the per-point outputs predict() wrote (cout wide) and the per-sample arrays it took (their
/// outputs written).
using Check = std::function<void(const surrogate::Comm&, surrogate::Model&, surrogate::Plan&, const std::vector<float>&,
                                 const std::vector<float>&, const surrogate::Model::SampleArrays&)>;
inline Outputs distributed(const Batch& c, Spread spread, unsigned seed, int repeats = 1, const float* sample_in = nullptr,
                           const std::function<void(surrogate::Plan&)>& inspect = {},
                           const surrogate::RunOptions& options = {}, const Check& check = {}) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), ranks = comm.size();
  const std::int64_t n = c.n();
  std::mt19937 gen(seed);
  std::vector<std::int64_t> mine;
  for (std::int64_t i = 0; i < n; ++i) {
    int r = 0;
    switch (spread) {
      case Spread::even: r = static_cast<int>(i * ranks / n); break;
      case Spread::random_skewed: {
        const unsigned u = gen() % 100u;
        r = ranks == 1 ? 0 : (u < 55u ? ranks - 1 : static_cast<int>(u % static_cast<unsigned>(ranks - 1)));
        break;
      }
      case Spread::all_on_rank0: r = 0; break;
      case Spread::last_rank_empty: r = ranks > 1 ? static_cast<int>(gen() % static_cast<unsigned>(ranks - 1)) : 0; break;
    }
    if (r == rank) mine.push_back(i);
  }
  std::shuffle(mine.begin(), mine.end(), gen);
  const auto model = surrogate::make_model(c.file);
  const int cin = model->in_channels(), cout = model->out_channels();
  const int s_in = model->sample_in_channels(), s_out = model->sample_out_channels();
  const auto local = static_cast<std::int64_t>(mine.size());
  std::vector<float> f(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cin))), p(static_cast<std::size_t>(std::max<std::int64_t>(1, local * 3)));
  std::vector<std::int64_t> samples(mine.size());
  for (std::int64_t r = 0; r < local; ++r) {
    const auto i = static_cast<std::size_t>(mine[static_cast<std::size_t>(r)]);
    std::copy_n(c.features.begin() + static_cast<std::ptrdiff_t>(i) * cin, cin, f.begin() + r * cin);
    std::copy_n(c.positions.begin() + static_cast<std::ptrdiff_t>(i) * 3, 3, p.begin() + r * 3);
    samples[static_cast<std::size_t>(r)] = c.batch_idx[i];
  }
  surrogate::PointGeometry g;
  g.positions = p.data();
  g.ld_positions = 3;
  g.global_ids = mine.data();
  const auto layout = surrogate::SampleLayout::build(comm, local, samples.data());
  const auto B = static_cast<std::int64_t>(c.sizes.size());
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cout)));
  Outputs run;
  run.per_sample.assign(static_cast<std::size_t>(B * s_out), 0.0f);
  surrogate::Model::SampleArrays sa;
  sa.in = sample_in ? sample_in : (s_in > 0 && !c.sample_features.empty() ? c.sample_features.data() : nullptr);
  sa.ld_in = s_in;
  sa.out = s_out > 0 ? run.per_sample.data() : nullptr;
  sa.ld_out = s_out;
  const auto plan = model->plan(comm, layout, g, options);
  for (int t = 0; t < repeats; ++t)
    model->predict(comm, *plan, f.data(), cin, cout > 0 ? out.data() : nullptr, cout, sa, options);
  if (check) check(comm, *model, *plan, f, out, sa);
  if (inspect) inspect(*plan);
  // Every point's outputs by global id.
  std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
  const int mine_count = static_cast<int>(local);
  MPI_Allgather(&mine_count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  MPI_Allgatherv(mine.data(), mine_count, MPI_INT64_T, ids.data(), counts.data(), displs.data(), MPI_INT64_T, MPI_COMM_WORLD);
  if (cout > 0) {
    for (int& x : counts) x *= cout;
    for (int& x : displs) x *= cout;
    std::vector<float> rows(static_cast<std::size_t>(n * cout));
    MPI_Allgatherv(out.data(), mine_count * cout, MPI_FLOAT, rows.data(), counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
    run.per_point = rows;
    for (std::int64_t r = 0; r < n; ++r)
      std::copy_n(rows.begin() + r * cout, cout, run.per_point.begin() + ids[static_cast<std::size_t>(r)] * cout);
  }
  return run;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::memcmp(&x, &y, sizeof x) == 0;
         });
}

/// The per-sample outputs of every rank, compared with rank 0's.
inline bool same_on_every_rank(const std::vector<float>& v) {
  std::vector<float> root = v;
  MPI_Bcast(root.data(), static_cast<int>(root.size()), MPI_FLOAT, 0, MPI_COMM_WORLD);
  int same = bitwise_equal(root, v) ? 1 : 0, all = 0;
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  return all == 1;
}

}  // namespace sequoia_test::mpi
