// HEPT across ranks (label mpi, hept): bitwise equal to one process in fp32 and fp64 for spreads of whole
// graphs over the ranks (unequal shares, empty ranks), graphs split over the ranks (gathered on owners),
// fewer graphs than ranks (split by buckets: both layouts, identical hits, a graph below the block size);
// the bucket sorts cut between regions (the plan's profile says so).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "hept_batch.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

using surrogate::PointGeometry;
using surrogate::Precision;
using surrogate::RunOptions;
using surrogate::SampleLayout;
using surrogate::testing::read_array;

namespace {

using namespace hept_batch;  // NOLINT: the shared batch

/// Every local row (point mine[r]) equals the one-process row of that point (reference rows in reversed
/// order, as predict() lays them out on one rank).
void expect_rows_of_one_process(const std::vector<float>& out, const std::vector<float>& reference,
                                const std::vector<std::int64_t>& mine, std::int64_t n, int od, const std::string& what) {
  const auto w = static_cast<std::size_t>(od);
  for (std::size_t r = 0; r < mine.size(); ++r)
    for (std::size_t k = 0; k < w; ++k)
      ASSERT_EQ(out[r * w + k], reference[static_cast<std::size_t>(n - 1 - mine[r]) * w + k])
          << what << ", point " << mine[r] << " channel " << k;
}

/// predict() in precision p.
std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const Batch& b,
                           const std::function<int(std::int64_t)>& owner, Precision p, std::vector<std::int64_t>& mine) {
  RunOptions o;
  o.precision = p;
  return hept_batch::predict(comm, model, b, owner, o, mine);
}

TEST(HeptMpi, WholeGraphsOnAnyRanksMatchOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const Batch b;
  const int od = model->out_channels(), size = comm.size();
  // Spreads of the four graphs: all on the last rank, round robin, three on rank 0 and one on the last.
  const std::vector<std::vector<int>> spreads = {
      {size - 1, size - 1, size - 1, size - 1}, {0, 1 % size, 2 % size, 3 % size}, {0, 0, size - 1, 0}};
  for (const Precision p : {Precision::fp32, Precision::fp64}) {
    std::vector<std::int64_t> all;
    const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, p, all);
    for (const auto& spread : spreads) {
      std::vector<std::int64_t> mine;
      const auto out = predict(
          comm, *model, b, [&](std::int64_t i) { return spread[static_cast<std::size_t>(b.graph[static_cast<std::size_t>(i)])]; },
          p, mine);
      for (std::size_t r = 0; r < mine.size(); ++r) {
        // `all` holds the points in reversed order: point i at row n-1-i.
        const std::size_t ref_row = static_cast<std::size_t>(b.n() - 1 - mine[r]);
        for (int k = 0; k < od; ++k)
          ASSERT_EQ(out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)],
                    reference[ref_row * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)])
              << "rank " << comm.rank() << " point " << mine[r] << " precision " << surrogate::precision_name(p);
      }
    }
  }
}

// Graphs split over the ranks (point i on rank i % P, and a spread where only some ranks hold points,
// both in reversed order with global ids): gathered on their owners, bitwise the one-process result.
TEST(HeptMpi, SplitGraphsMatchOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const Batch b;
  const int od = model->out_channels(), size = comm.size();
  for (const Precision p : {Precision::fp32, Precision::fp64}) {
    std::vector<std::int64_t> all;
    const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, p, all);
    const std::vector<std::function<int(std::int64_t)>> spreads = {
        [size](std::int64_t i) { return static_cast<int>(i % size); },
        [size](std::int64_t i) { return i < 700 ? 0 : size - 1; }};
    for (const auto& owner : spreads) {
      std::vector<std::int64_t> mine;
      const auto out = predict(comm, *model, b, owner, p, mine);
      for (std::size_t r = 0; r < mine.size(); ++r) {
        const std::size_t ref_row = static_cast<std::size_t>(b.n() - 1 - mine[r]);
        for (int k = 0; k < od; ++k)
          ASSERT_EQ(out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)],
                    reference[ref_row * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)])
              << "rank " << comm.rank() << " point " << mine[r] << " precision " << surrogate::precision_name(p);
      }
    }
  }
}

// One graph and two graphs over 1-4 ranks (fewer graphs than ranks from 2 ranks on: the padded rows cut
// evenly over the ranks, sorts and buckets distributed): points round robin, in halves on the first and
// last rank, all on the last rank (shares unequal or empty), bitwise the one-process result.
TEST(HeptMpi, FewerGraphsThanRanksSplitByBucketsMatchOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int od = model->out_channels(), size = comm.size();
  for (const std::int64_t graphs : {1, 2}) {
    const Batch b(graphs);
    for (const Precision p : {Precision::fp32, Precision::fp64}) {
      std::vector<std::int64_t> all;
      const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, p, all);
      const std::int64_t n = b.n();
      const std::vector<std::function<int(std::int64_t)>> spreads = {
          [size](std::int64_t i) { return static_cast<int>(i % size); },
          [size, n](std::int64_t i) { return i < n / 3 ? 0 : size - 1; },
          [size](std::int64_t) { return size - 1; }};
      for (const auto& owner : spreads) {
        std::vector<std::int64_t> mine;
        const auto out = predict(comm, *model, b, owner, p, mine);
        for (std::size_t r = 0; r < mine.size(); ++r) {
          const std::size_t ref_row = static_cast<std::size_t>(n - 1 - mine[r]);
          for (int k = 0; k < od; ++k)
            ASSERT_EQ(out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)],
                      reference[ref_row * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)])
                << "rank " << comm.rank() << " of " << size << ", " << graphs << " graph(s), point " << mine[r]
                << " precision " << surrogate::precision_name(p);
        }
      }
    }
  }
}

// One plan, several predicts, as in a solver's time loop: the plan keeps the CPU forward's work arrays
// between calls (hept.md, "Memory"). Features changing every call, fp32 and fp64 alternating, four graphs
// (whole graphs) and one graph (split by buckets), a third of the points on rank 0 and the rest on the
// last (middle ranks empty): every call bitwise the one-shot one-process result of its features.
TEST(HeptMpi, RepeatedPredictsOnOnePlanMatchOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int od = model->out_channels(), size = comm.size();
  for (const std::int64_t graphs : {4, 1}) {
    Batch b(graphs);
    const std::int64_t n = b.n();
    const std::function<int(std::int64_t)> owner = [size, n](std::int64_t i) { return i < n / 3 ? 0 : size - 1; };
    const LocalPoints points(comm, b, owner);
    const auto plan = model->plan(comm, points.layout(comm), points.geometry());
    const std::vector<float> x0 = b.x;
    for (int step = 0; step < 4; ++step) {
      for (std::size_t i = 0; i < b.x.size(); ++i) b.x[i] = x0[i] * (1.0f + 0.25f * static_cast<float>(step));
      RunOptions o;
      o.precision = step == 2 ? Precision::fp64 : Precision::fp32;
      std::vector<std::int64_t> all;
      const auto reference = hept_batch::predict(self, *model, b, [](std::int64_t) { return 0; }, o, all);
      const LocalPoints now(comm, b, owner);
      std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(now.n(), 1) * od));
      model->predict(comm, *plan, now.x.data(), b.in, out.data(), od, o);
      expect_rows_of_one_process(out, reference, now.mine, n, od,
                                 "rank " + std::to_string(comm.rank()) + ", " + std::to_string(graphs) +
                                     " graph(s), call " + std::to_string(step));
    }
  }
}

// Identical hits (every key tied: the buckets follow the positions alone) and features varying per hit,
// one graph over the ranks: bitwise the one-process result.
TEST(HeptMpi, IdenticalHitsSplitByBucketsMatchOneProcess) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int od = model->out_channels(), size = comm.size();
  Batch b(1);
  for (std::int64_t i = 0; i < b.n(); ++i)
    std::copy_n(b.coords.begin(), b.cd, b.coords.begin() + i * b.cd);
  std::vector<std::int64_t> all, mine;
  const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, Precision::fp32, all);
  const auto out = predict(comm, *model, b, [size](std::int64_t i) { return static_cast<int>(i * 7 % size); },
                           Precision::fp32, mine);
  expect_rows_of_one_process(out, reference, mine, b.n(), od, "rank " + std::to_string(comm.rank()));
}

// A graph below the block size (32) split over the ranks: the same Error(input) on every rank, naming it.
TEST(HeptMpi, SmallGraphIsRefusedOnEveryRank) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  Batch b(1);
  b.x.resize(20 * static_cast<std::size_t>(b.in));
  b.coords.resize(20 * static_cast<std::size_t>(b.cd));
  b.graph.resize(20);
  std::vector<std::int64_t> mine;
  const int size = comm.size();
  try {
    predict(comm, *model, b, [size](std::int64_t i) { return static_cast<int>(i % size); }, Precision::fp32, mine);
    FAIL() << "rank " << comm.rank() << ": no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("sample 0 has 20 points, fewer than the block size 32"), std::string::npos)
        << e.what();
  }
}

// The src layout (one graph, zero pads with +inf keys) over 1-4 ranks, tracking and pileup (the class
// embedding and the sigmoid per point): bitwise the one-process result; unequal shares (rank 0 most,
// the middle ranks none).
TEST(HeptMpi, SrcLayoutSplitByBucketsMatchesOneProcess) {
  for (const std::string name : {"src_small", "src_pileup"}) {
    const std::string path = std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_" + name + ".h5";
    const surrogate::MpiComm comm(MPI_COMM_WORLD);
    const surrogate::SelfComm self;
    const auto model = surrogate::make_model(surrogate::ModelFile::read(path));
    const int od = model->out_channels(), size = comm.size();
    const Batch b(1, path);
    for (const Precision p : {Precision::fp32, Precision::fp64}) {
      std::vector<std::int64_t> all, mine;
      const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, p, all);
      const auto out = predict(comm, *model, b, [size](std::int64_t i) { return i < 200 ? 0 : size - 1; }, p, mine);
      expect_rows_of_one_process(out, reference, mine, b.n(), od,
                                 name + " rank " + std::to_string(comm.rank()) + " precision " +
                                     surrogate::precision_name(p));
    }
  }
}

// A particle-id class outside the embedding on the last rank only: the same Error(input) on every rank.
TEST(HeptMpi, PileupClassOutOfRangeOnOneRankIsAnAgreedError) {
  const std::string path = std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_src_pileup.h5";
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const auto model = surrogate::make_model(surrogate::ModelFile::read(path));
  const int size = comm.size();
  Batch b(1, path);
  b.x[static_cast<std::size_t>((b.n() - 1) * b.in + b.in - 1)] = 9.0f;  // owned by the last rank
  std::vector<std::int64_t> mine;
  try {
    predict(comm, *model, b, [size](std::int64_t i) { return i < 200 ? 0 : size - 1; }, Precision::fp32, mine);
    FAIL() << "rank " << comm.rank() << ": no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
    EXPECT_NE(std::string(e.what()).find("(the particle-id class, pids_enc = Embedding(7, 10)) of local point"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("is 9; expected 0..6"), std::string::npos) << e.what();
  }
}

// One graph over several ranks (split by buckets): every hash table's bucket sort cuts the pieces between
// regions (the plan's profile counts the path of every sort: 3 tables x 2 layers; one rank runs whole
// graphs, no sort over ranks), with the one-process result.
TEST(HeptMpi, BucketSortsCutBetweenRegions) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(kPath));
  const int od = model->out_channels(), size = comm.size();
  const Batch b(1);
  std::vector<std::int64_t> all;
  const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, Precision::fp32, all);
  const hept_batch::LocalPoints p(comm, b, [size](std::int64_t i) { return static_cast<int>(i % size); });
  const auto plan = model->plan(comm, p.layout(comm), p.geometry());
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(p.n(), 1) * od));
  model->predict(comm, *plan, p.x.data(), b.in, out.data(), od);
  std::uint64_t by_region = 0, by_samples = 0;
  for (const auto& phase : plan->profile().phases()) {
    if (phase.name == "cut between regions") by_region = phase.calls;
    if (phase.name == "cut by samples") by_samples = phase.calls;
  }
  EXPECT_EQ(by_region, size > 1 ? 6U : 0U) << "rank " << comm.rank() << " of " << size;
  EXPECT_EQ(by_samples, 0U) << "rank " << comm.rank() << " of " << size;
  expect_rows_of_one_process(out, reference, p.mine, b.n(), od, "rank " + std::to_string(comm.rank()));
}

}  // namespace
