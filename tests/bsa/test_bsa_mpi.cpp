// Distributed BSA (run by ctest at 1, 2, 3 and 4 ranks): the registered model runs on the distributed
// ball tree (every rank its slots; rotated layers through exchanges, compressed blocks all-gathered,
// selected blocks fetched from their owners); its output must equal bit for bit bsa::Network::forward of
// the whole batch in one process, which every rank computes itself. The golden cases of tests/data/bsa
// (sparse with every option family, ball, global), the ShapeNet-Car wrapper, global attention with rotated
// layers and on samples that straddle ranks (keys and values of the whole sample fetched), a batch of four
// samples of random points and samples so small that ranks hold no slot; points spread
// evenly, unevenly at random (local orders shuffled, 3 threads per rank), all on rank 0, none on the last
// rank; a plan kept for new features and a new one when the points change; a NaN feature on one rank is
// an agreed error.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "shapenet_wrapped.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

namespace bt = surrogate::balltree;
namespace bsa = surrogate::bsa;
namespace st = surrogate::testing;
using surrogate::ModelFile;
using surrogate::PointGeometry;
using surrogate::SampleLayout;

namespace {

/// A batch in canonical order (samples in order; the global id of a point is its index).
struct Batch {
  ModelFile file;
  std::vector<float> features, positions;  // features empty for the wrapper (positions only)
  std::vector<std::int64_t> batch_idx;
  std::int64_t n() const { return static_cast<std::int64_t>(batch_idx.size()); }
};

std::string path_of(const std::string& name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/bsa/bsa_" + name + ".h5"; }

std::vector<std::int64_t> batch_of(const std::vector<double>& sizes) {
  std::vector<std::int64_t> b;
  for (std::size_t s = 0; s < sizes.size(); ++s) b.insert(b.end(), static_cast<std::size_t>(sizes[s]), static_cast<std::int64_t>(s));
  return b;
}

Batch golden(const std::string& name) {
  const std::string p = path_of(name);
  return Batch{ModelFile::read(p), st::to_float(st::read_array(p, "/golden/features").values),
               st::to_float(st::read_array(p, "/golden/positions").values),
               batch_of(st::read_array(p, "/golden/sample_sizes").values)};
}

/// Random points and features for a golden model's weights.
Batch random_batch(const std::string& name, const std::vector<double>& sizes, unsigned seed) {
  Batch c{ModelFile::read(path_of(name)), {}, {}, batch_of(sizes)};
  const bsa::Network net(c.file);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  c.positions.resize(static_cast<std::size_t>(c.n() * net.config().dimensionality));
  c.features.resize(static_cast<std::size_t>(c.n() * net.in_channels()));
  for (float& v : c.positions) v = normal(gen);
  for (float& v : c.features) v = normal(gen);
  return c;
}

/// What one process computes: bsa::Network on the whole batch (the wrapper: forward_shapenet).
std::vector<float> single_process(const Batch& c) {
  const bsa::Network net(c.file);
  const bt::Batch batch = bt::Batch::from_batch_idx(c.batch_idx);
  if (net.config().wrapper == bsa::Wrapper::shapenet_car) return net.forward_shapenet(c.positions, batch, 1);
  return net.forward(c.features, c.positions, batch, 1);
}

enum class Spread { even, random_skewed, all_on_rank0, last_rank_empty };

/// Model::predict over MPI_COMM_WORLD with the points spread as asked (local orders shuffled, global ids
/// = canonical index), `threads` OpenMP threads per rank (0: the default); every rank's rows are
/// gathered back into canonical order on every rank. `kept_plan` (with `reused_model`): the plan of the
/// points, built by the call that finds it empty and used by the next ones.
std::vector<float> distributed(const Batch& c, Spread spread, unsigned seed, int threads = 0,
                               surrogate::Model* reused_model = nullptr,
                               std::unique_ptr<surrogate::Plan>* kept_plan = nullptr) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank(), ranks = comm.size();
  const std::int64_t n = c.n();
  std::mt19937 gen(seed);
  std::vector<std::int64_t> mine;
  for (std::int64_t i = 0; i < n; ++i) {
    int r = 0;
    switch (spread) {
      case Spread::even: r = static_cast<int>(i * ranks / n); break;
      case Spread::random_skewed: {  // the last rank gets about 55 %, the others share the rest at random
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
  const auto own_model = reused_model ? nullptr : surrogate::make_model(c.file);
  surrogate::Model* model = reused_model ? reused_model : own_model.get();
  const int dim = model->position_dim(), cin = model->in_channels(), cout = model->out_channels();
  const auto local = static_cast<std::int64_t>(mine.size());
  std::vector<float> f(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cin))), p(static_cast<std::size_t>(local * dim));
  std::vector<std::int64_t> samples(mine.size());
  for (std::int64_t r = 0; r < local; ++r) {
    const auto i = static_cast<std::size_t>(mine[static_cast<std::size_t>(r)]);
    std::copy_n(c.features.begin() + static_cast<std::ptrdiff_t>(i) * cin, cin, f.begin() + r * cin);
    std::copy_n(c.positions.begin() + static_cast<std::ptrdiff_t>(i) * dim, dim, p.begin() + r * dim);
    samples[static_cast<std::size_t>(r)] = c.batch_idx[i];
  }
  PointGeometry g;
  g.positions = p.data();
  g.ld_positions = dim;
  g.global_ids = mine.data();
  const SampleLayout layout = SampleLayout::build(comm, local, samples.data());
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cout)));
  surrogate::RunOptions options;
  options.threads = threads;
  std::unique_ptr<surrogate::Plan> own_plan;
  std::unique_ptr<surrogate::Plan>& plan = kept_plan ? *kept_plan : own_plan;
  if (!plan) plan = model->plan(comm, layout, g, options);
  model->predict(comm, *plan, cin > 0 ? f.data() : nullptr, cin, out.data(), cout, options);
  // Back to canonical order on every rank.
  std::vector<int> counts(static_cast<std::size_t>(ranks)), displs(static_cast<std::size_t>(ranks));
  const int mine_count = static_cast<int>(local);
  MPI_Allgather(&mine_count, 1, MPI_INT, counts.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::partial_sum(counts.begin(), counts.end() - 1, displs.begin() + 1);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  MPI_Allgatherv(mine.data(), mine_count, MPI_INT64_T, ids.data(), counts.data(), displs.data(), MPI_INT64_T, MPI_COMM_WORLD);
  for (int& x : counts) x *= cout;
  for (int& x : displs) x *= cout;
  std::vector<float> rows(static_cast<std::size_t>(n * cout)), all(rows.size());
  MPI_Allgatherv(out.data(), mine_count * cout, MPI_FLOAT, rows.data(), counts.data(), displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
  for (std::int64_t r = 0; r < n; ++r)
    std::copy_n(rows.begin() + r * cout, cout, all.begin() + ids[static_cast<std::size_t>(r)] * cout);
  return all;
}

void expect_all_spreads_equal(const Batch& c, const std::string& name) {
  const std::vector<float> want = single_process(c);
  for (const Spread s : {Spread::even, Spread::random_skewed, Spread::all_on_rank0, Spread::last_rank_empty}) {
    // The skewed spread also with 3 threads per rank (the other spreads with OMP_NUM_THREADS, 1 in ctest).
    const std::vector<float> got = distributed(c, s, 17u + static_cast<unsigned>(s), s == Spread::random_skewed ? 3 : 0);
    ASSERT_EQ(got.size(), want.size()) << name;
    std::size_t first = got.size();
    for (std::size_t i = 0; i < got.size() && first == got.size(); ++i)
      if (got[i] != want[i]) first = i;
    EXPECT_EQ(first, got.size()) << name << ", spread " << static_cast<int>(s) << ": first difference at value " << first
                                 << " (" << (first < got.size() ? got[first] : 0.0f) << " vs "
                                 << (first < got.size() ? want[first] : 0.0f) << ")";
  }
}

TEST(BsaMpi, GoldenModelsBitwiseEqualToOneProcess) {
  for (const char* name : {"sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball", "global"})
    expect_all_spreads_equal(golden(name), name);
}

TEST(BsaMpi, ShapenetWrapperBitwiseEqualToOneProcess) {
  // sparse_rot inside the wrapper with random Fourier and head weights (inputs: positions only).
  Batch c = golden("sparse_rot");
  c.file = bsa_testing::shapenet_wrapped(c.file, 3);
  c.features.clear();
  expect_all_spreads_equal(c, "sparse_rot in the ShapeNet-Car wrapper");
}

TEST(BsaMpi, SeveralSamplesAndFewPoints) {
  // Four samples that all pad to 1024 slots: rank ranges (granularity 128) start and end inside samples.
  expect_all_spreads_equal(random_batch("sparse_rot", {600, 1000, 513, 1024}, 5u), "sparse_rot, 4 random samples");
  expect_all_spreads_equal(random_batch("token_groups_2d", {700, 900, 1000}, 6u), "token_groups_2d, 3 random samples");
  // One sample of 200 points (256 slots, two chunks of 128): ranks 2 and 3 hold no slot.
  expect_all_spreads_equal(random_batch("sparse_rot", {200}, 9u), "sparse_rot, 200 points");
}

/// The batch's model with rotated odd layers (should_rotate = 1; the golden global model has none).
Batch with_rotation(Batch c) {
  c.file.config.set("should_rotate", std::int64_t{1});
  return c;
}

TEST(BsaMpi, GlobalAttentionOnTheTreeBitwiseEqualToOneProcess) {
  // Rank ranges (granularity 2 for global attention) cut samples anywhere: a rank's queries attend to
  // the keys and values of the whole sample, fetched in tree order (rotated order in the odd layers).
  expect_all_spreads_equal(with_rotation(golden("global")), "global, rotated odd layers");
  expect_all_spreads_equal(random_batch("global", {600, 1000, 513, 1024}, 21u), "global, 4 random samples");
  expect_all_spreads_equal(with_rotation(random_batch("global", {300, 500, 400}, 22u)), "global rotated, 3 random samples");
  // One sample of 3 points (4 slots, two leaves of 2): at 3 and 4 ranks, ranks hold no slot.
  expect_all_spreads_equal(random_batch("global", {3}, 23u), "global, 3 points");
}

/// One model object, several calls (each with a new communicator object): new features on the same
/// points reuse the plan; moved points and another spread of the same points get a new one. Every result
/// equals the one-process forward of its inputs.
void expect_plan_kept_and_rebuilt(Batch c, const std::string& name) {
  const auto model = surrogate::make_model(c.file);
  std::unique_ptr<surrogate::Plan> plan;
  EXPECT_EQ(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan), single_process(c)) << name << ", first call";
  std::mt19937 gen(11u);
  std::normal_distribution<float> normal;
  for (float& v : c.features) v = normal(gen);
  EXPECT_EQ(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan), single_process(c)) << name << ", new features";
  for (float& v : c.positions) v += 0.01f * normal(gen);
  plan.reset();
  EXPECT_EQ(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan), single_process(c)) << name << ", moved points";
  plan.reset();
  EXPECT_EQ(distributed(c, Spread::even, 3u, 0, model.get(), &plan), single_process(c)) << name << ", another spread";
}

TEST(BsaMpi, PlanReusedWhileTheGeometryStays) {
  expect_plan_kept_and_rebuilt(golden("sparse_rot"), "sparse_rot");
  // Global attention: the plan of the samples' rows is kept and rebuilt with the rest.
  expect_plan_kept_and_rebuilt(with_rotation(random_batch("global", {700, 1000}, 24u)), "global rotated");
}

/// The bytes the plan's exchanges move (Plan::traffic), per predict on the same plan: at one rank nothing
/// is sent or received; at several, the bytes sent over all ranks equal those received and are > 0; every
/// predict adds the same bytes again (the plan moves the same rows each time).
void expect_traffic_counted(const Batch& c, const std::string& name) {
  const auto model = surrogate::make_model(c.file);
  std::unique_ptr<surrogate::Plan> plan;
  std::vector<surrogate::Traffic> after;
  for (int call = 0; call < 3; ++call) {
    static_cast<void>(distributed(c, Spread::random_skewed, 3u, 0, model.get(), &plan));
    after.push_back(plan->traffic());
  }
  auto moved = [&](int call) {  // what predict `call` (1 or 2) added on this rank
    const surrogate::Traffic& a = after[static_cast<std::size_t>(call - 1)];
    const surrogate::Traffic& b = after[static_cast<std::size_t>(call)];
    return std::vector<std::uint64_t>{b.sent - a.sent, b.received - a.received, b.local - a.local, b.moves - a.moves};
  };
  const std::vector<std::uint64_t> once = moved(1);
  EXPECT_EQ(moved(2), once) << name << ": a second predict on the plan moved other bytes";
  EXPECT_GT(once[3], 0u) << name << ": no exchange counted";
  std::uint64_t totals[2] = {once[0], once[1]};
  MPI_Allreduce(MPI_IN_PLACE, totals, 2, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  int ranks = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  if (ranks == 1) {
    EXPECT_EQ(totals[0], 0u) << name;
    EXPECT_EQ(totals[1], 0u) << name;
  } else {
    EXPECT_EQ(totals[0], totals[1]) << name << ": bytes sent and received over all ranks differ";
    EXPECT_GT(totals[0], 0u) << name;
  }
}

TEST(BsaMpi, PlanTrafficCountsWhatMoves) {
  // Sparse attention (the compressed blocks all-gathered, the selected blocks fetched by a plan per layer)
  // with rotated layers, and global attention (the samples' rows).
  expect_traffic_counted(golden("sparse_rot"), "sparse_rot");
  expect_traffic_counted(with_rotation(random_batch("global", {700, 1000}, 24u)), "global rotated");
}

TEST(BsaMpi, ErrorsAreAgreed) {
  // A NaN feature on one rank only: every rank throws the same Error(input).
  Batch c = golden("sparse_rot");
  c.features[c.features.size() - 1] = std::numeric_limits<float>::quiet_NaN();
  try {
    distributed(c, Spread::even, 1u);
    FAIL() << "no error for a NaN feature";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("NaN/Inf"), std::string::npos) << e.what();
  }
}

}  // namespace
