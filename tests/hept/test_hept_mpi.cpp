// HEPT across ranks (label mpi, hept): bitwise equal to one process in fp32 and fp64 for spreads of whole
// graphs over the ranks (unequal shares, empty ranks), graphs split over the ranks (gathered on owners),
// fewer graphs than ranks (split by buckets: both layouts, identical hits, a graph below the block size).
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/mpi_comm.hpp"

using surrogate::PointGeometry;
using surrogate::Precision;
using surrogate::RunOptions;
using surrogate::SampleLayout;
using surrogate::testing::read_array;

namespace {

const std::string kPath = std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_example_small.h5";

/// Four graphs: the golden batch (300 and 224 hits) twice, the copy's features and coordinates shifted;
/// or its first `graphs` graphs (of another file's golden batch).
struct Batch {
  std::vector<float> x, coords;
  std::vector<std::int64_t> graph;
  int in = 5, cd = 4;
  explicit Batch(std::int64_t graphs = 4, const std::string& path = kPath) {
    const auto gx = surrogate::testing::to_float(read_array(path, "/golden/x").values);
    const auto gc = surrogate::testing::to_float(read_array(path, "/golden/coords").values);
    const auto gb = read_array(path, "/golden/batch").values;
    const auto in_file = static_cast<std::int64_t>(*std::max_element(gb.begin(), gb.end())) + 1;
    for (int copy = 0; copy < 2; ++copy) {
      for (std::size_t i = 0; i < gb.size(); ++i) {
        for (int c = 0; c < in; ++c) x.push_back(gx[i * 5 + static_cast<std::size_t>(c)] * (copy ? 0.75f : 1.0f));
        for (int c = 0; c < cd; ++c) coords.push_back(gc[i * 4 + static_cast<std::size_t>(c)] + (copy ? 0.125f : 0.0f));
        graph.push_back(static_cast<std::int64_t>(gb[i]) + in_file * copy);
      }
    }
    const auto keep = static_cast<std::size_t>(std::find(graph.begin(), graph.end(), graphs) - graph.begin());
    x.resize(keep * static_cast<std::size_t>(in));
    coords.resize(keep * static_cast<std::size_t>(cd));
    graph.resize(keep);
  }
  std::int64_t n() const { return static_cast<std::int64_t>(graph.size()); }
};

/// Predicts with the points i whose owner(i) is this rank, in reversed order, with global ids.
std::vector<float> predict(const surrogate::Comm& comm, surrogate::Model& model, const Batch& b,
                           const std::function<int(std::int64_t)>& owner, Precision p, std::vector<std::int64_t>& mine) {
  mine.clear();
  for (std::int64_t i = b.n() - 1; i >= 0; --i)
    if (owner(i) == comm.rank()) mine.push_back(i);
  std::vector<float> x, coords;
  std::vector<std::int64_t> graph;
  for (const std::int64_t i : mine) {
    x.insert(x.end(), b.x.begin() + i * b.in, b.x.begin() + (i + 1) * b.in);
    coords.insert(coords.end(), b.coords.begin() + i * b.cd, b.coords.begin() + (i + 1) * b.cd);
    graph.push_back(b.graph[static_cast<std::size_t>(i)]);
  }
  const auto n = static_cast<std::int64_t>(mine.size());
  PointGeometry g;
  g.positions = coords.data();
  g.ld_positions = b.cd;
  g.global_ids = mine.data();
  RunOptions o;
  o.precision = p;
  std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(n, 1) * model.out_channels()));
  model.predict(comm, SampleLayout::build(comm, n, graph.data()), g, x.data(), b.in, out.data(), model.out_channels(),
                o);
  return out;
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
  for (std::size_t r = 0; r < mine.size(); ++r)
    for (int k = 0; k < od; ++k)
      ASSERT_EQ(out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)],
                reference[static_cast<std::size_t>(b.n() - 1 - mine[r]) * static_cast<std::size_t>(od) +
                          static_cast<std::size_t>(k)])
          << "rank " << comm.rank() << " point " << mine[r];
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

// The src layout (one graph, zero pads with +inf keys) over 1-4 ranks: bitwise the one-process result.
TEST(HeptMpi, SrcLayoutSplitByBucketsMatchesOneProcess) {
  const std::string path = std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_src_small.h5";
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(surrogate::ModelFile::read(path));
  const int od = model->out_channels(), size = comm.size();
  const Batch b(1, path);
  for (const Precision p : {Precision::fp32, Precision::fp64}) {
    std::vector<std::int64_t> all, mine;
    const auto reference = predict(self, *model, b, [](std::int64_t) { return 0; }, p, all);
    const auto out = predict(comm, *model, b, [size](std::int64_t i) { return i < 250 ? 0 : size - 1; }, p, mine);
    for (std::size_t r = 0; r < mine.size(); ++r)
      for (int k = 0; k < od; ++k)
        ASSERT_EQ(out[r * static_cast<std::size_t>(od) + static_cast<std::size_t>(k)],
                  reference[static_cast<std::size_t>(b.n() - 1 - mine[r]) * static_cast<std::size_t>(od) +
                            static_cast<std::size_t>(k)])
            << "rank " << comm.rank() << " point " << mine[r] << " precision " << surrogate::precision_name(p);
  }
}

}  // namespace
