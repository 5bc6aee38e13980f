// Distributed kNN / radius graphs with a halo (surrogate/graph_distributed.hpp), run by ctest at 1, 2, 3
// and 4 ranks: every rank's edges must equal, edge for edge and in order, the one-process knn_graph /
// radius_graph of the whole batch restricted to its block's receivers (ReceiverRange), which every rank
// computes itself. Clouds: uniform and clustered, duplicates and lattices (ties at equal distances, at
// distance 0), several samples (some smaller than k), points numbered in random or spatial (x-sorted)
// order; blocks even, skewed, with empty ranks, all on one rank, a rank with 3 points of a sample that
// spans ranks (fetched whole). Plus the halo's size on a uniform cloud in slabs (far below the sample)
// and agreed errors.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"
#include "surrogate/graph_distributed.hpp"
#include "surrogate/mpi_comm.hpp"

namespace bt = surrogate::balltree;
namespace graph = surrogate::graph;
using Index = std::int64_t;

namespace {

enum class Cloud { uniform, clustered, duplicates, lattice };
enum class Numbering { random, slabs };
enum class Blocks { even, skewed, first_rank_empty, all_on_last };

struct Batch {
  int dim = 3;
  std::vector<float> positions;  // canonical order
  bt::Batch batch;
};

/// The same batch on every rank: samples of the given sizes, points in random or x-sorted order.
Batch make_batch(int dim, const std::vector<Index>& sizes, Cloud cloud, Numbering numbering, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::normal_distribution<float> normal(0.0f, 0.03f);
  Batch b;
  b.dim = dim;
  std::vector<Index> offsets{0};
  for (const Index size : sizes) {
    std::vector<float> p(static_cast<std::size_t>(size * dim));
    std::vector<float> centres(static_cast<std::size_t>(5 * dim));
    for (float& c : centres) c = uniform(gen);
    for (Index i = 0; i < size; ++i) {
      float* x = p.data() + i * dim;
      switch (cloud) {
        case Cloud::uniform:
          for (int c = 0; c < dim; ++c) x[c] = uniform(gen);
          break;
        case Cloud::clustered: {
          const float* centre = centres.data() + (gen() % 5) * static_cast<unsigned>(dim);
          for (int c = 0; c < dim; ++c) x[c] = centre[c] + normal(gen);
          break;
        }
        case Cloud::duplicates:  // a third of the points repeat an earlier one exactly
          if (i > 0 && gen() % 3 == 0)
            std::copy_n(p.data() + (gen() % static_cast<unsigned>(i)) * static_cast<unsigned>(dim), dim, x);
          else
            for (int c = 0; c < dim; ++c) x[c] = uniform(gen);
          break;
        case Cloud::lattice:  // integer coordinates in [0, 6): many equal distances and coincident points
          for (int c = 0; c < dim; ++c) x[c] = static_cast<float>(gen() % 6);
          break;
      }
    }
    if (numbering == Numbering::slabs) {
      std::vector<Index> order(static_cast<std::size_t>(size));
      std::iota(order.begin(), order.end(), Index{0});
      std::stable_sort(order.begin(), order.end(), [&](Index a, Index c) { return p[static_cast<std::size_t>(a * dim)] < p[static_cast<std::size_t>(c * dim)]; });
      std::vector<float> sorted(p.size());
      for (Index i = 0; i < size; ++i) std::copy_n(p.begin() + order[static_cast<std::size_t>(i)] * dim, dim, sorted.begin() + i * dim);
      p = std::move(sorted);
    }
    b.positions.insert(b.positions.end(), p.begin(), p.end());
    offsets.push_back(offsets.back() + size);
  }
  b.batch = bt::Batch::from_offsets(offsets);
  return b;
}

std::vector<Index> make_bounds(Index n, int P, Blocks blocks) {
  std::vector<Index> bounds(static_cast<std::size_t>(P) + 1, 0);
  for (int r = 0; r <= P; ++r) {
    Index v = n * r / P;
    switch (blocks) {
      case Blocks::even: break;
      case Blocks::skewed: v = r == P ? n : n * r * r / (static_cast<Index>(P) * P * 2); break;  // the last rank gets over half
      case Blocks::first_rank_empty: v = r == 0 ? 0 : (P == 1 ? n : n * (r - 1) / (P - 1)); break;
      case Blocks::all_on_last: v = r == P ? n : 0; break;
    }
    bounds[static_cast<std::size_t>(r)] = v;
  }
  return bounds;
}

struct Case {
  std::string name;
  Batch data;
  std::vector<Index> bounds;
};

graph::CanonicalBlocks blocks_of(const Case& c, int rank) {
  const Index begin = c.bounds[static_cast<std::size_t>(rank)], end = c.bounds[static_cast<std::size_t>(rank) + 1];
  graph::CanonicalBlocks b;
  b.block_positions = std::span<const float>(c.data.positions).subspan(static_cast<std::size_t>(begin * c.data.dim),
                                                                        static_cast<std::size_t>((end - begin) * c.data.dim));
  b.dim = c.data.dim;
  b.batch = &c.data.batch;
  b.block_bounds = c.bounds;
  return b;
}

/// Every rank's result equals the one-process graph of its block's receivers; returns the largest halo.
template <class Distributed, class Serial>
Index expect_equal(const Case& c, Distributed distributed, Serial serial) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int rank = comm.rank();
  graph::DistributedGraphStats stats;
  const graph::Edges got = distributed(comm, blocks_of(c, rank), &stats);
  const graph::Edges want = serial(graph::ReceiverRange{c.bounds[static_cast<std::size_t>(rank)], c.bounds[static_cast<std::size_t>(rank) + 1]});
  EXPECT_EQ(got.index, want.index) << c.name << " on rank " << rank << " (" << got.count() << " edges, want " << want.count() << ")";
  const Index block = c.bounds[static_cast<std::size_t>(rank) + 1] - c.bounds[static_cast<std::size_t>(rank)];
  EXPECT_LE(stats.foreign_points, c.data.batch.points() - block) << c.name;
  return comm.allreduce<Index>(stats.foreign_points, surrogate::ReduceOp::max);
}

std::vector<Case> cases(int P) {
  std::vector<Case> all;
  unsigned seed = 11;
  const std::vector<std::vector<Index>> sample_sets{{1500}, {700, 5, 900, 3, 400}, {2, 1, 1200}};
  for (const Cloud cloud : {Cloud::uniform, Cloud::clustered, Cloud::duplicates, Cloud::lattice})
    for (const Numbering numbering : {Numbering::slabs, Numbering::random})
      for (std::size_t s = 0; s < sample_sets.size(); ++s) {
        const int dim = (s == 1) ? 2 : 3;
        const Blocks blocks = static_cast<Blocks>((static_cast<int>(cloud) + static_cast<int>(numbering) + static_cast<int>(s)) % 4);
        Case c;
        c.name = "cloud " + std::to_string(static_cast<int>(cloud)) + " numbering " + std::to_string(static_cast<int>(numbering)) +
                 " samples " + std::to_string(s) + " blocks " + std::to_string(static_cast<int>(blocks));
        c.data = make_batch(dim, sample_sets[s], cloud, numbering, seed++);
        c.bounds = make_bounds(c.data.batch.points(), P, blocks);
        all.push_back(std::move(c));
      }
  return all;
}

TEST(DistributedGraph, KnnEqualsOneProcessEdgeForEdge) {
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  for (const Case& c : cases(P))
    for (const int k : {1, 8, 16})
      for (const bool loop : {true, false}) {
        Case named = c;
        named.name += " k " + std::to_string(k) + (loop ? " loop" : " no loop");
        expect_equal(
            named,
            [&](const surrogate::Comm& comm, const graph::CanonicalBlocks& b, graph::DistributedGraphStats* s) {
              return graph::knn_graph_distributed(comm, b, k, loop, 1, s);
            },
            [&](graph::ReceiverRange range) { return graph::knn_graph(c.data.positions, c.data.dim, c.data.batch, k, loop, 1, range); });
      }
}

TEST(DistributedGraph, RadiusEqualsOneProcessEdgeForEdge) {
  int P = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &P);
  for (const Case& c : cases(P)) {
    // About 10 neighbours on the uniform cloud of 1500 points; the lattice: the unit spacing (strict <).
    const bool lattice = c.name.rfind("cloud 3", 0) == 0;
    const double r = lattice ? 1.0 : (c.data.dim == 3 ? 0.12 : 0.05);
    for (const int max_neighbours : {64, 4})
      for (const bool loop : {true, false}) {
        Case named = c;
        named.name += " r " + std::to_string(r) + " max " + std::to_string(max_neighbours) + (loop ? " loop" : " no loop");
        expect_equal(
            named,
            [&](const surrogate::Comm& comm, const graph::CanonicalBlocks& b, graph::DistributedGraphStats* s) {
              return graph::radius_graph_distributed(comm, b, r, max_neighbours, loop, 1, s);
            },
            [&](graph::ReceiverRange range) {
              return graph::radius_graph(c.data.positions, c.data.dim, c.data.batch, r, max_neighbours, loop, 1, range);
            });
      }
  }
}

// Blocks that leave a rank only 3 points of a sample spanning ranks (ids in x order, so round 1 runs):
// those receivers have fewer than k candidates in their block, that rank fetches the sample whole
// (whole_samples) and their second search finds more edges than the first (the merging path).
TEST(DistributedGraph, FewPointsOfASampleOnOneRank) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), rank = comm.rank();
  Case c;
  c.data = make_batch(3, {600, 600}, Cloud::uniform, Numbering::slabs, 17);
  c.bounds.assign(static_cast<std::size_t>(P) + 1, 1200);
  for (int r = 0; r < P; ++r) c.bounds[static_cast<std::size_t>(r)] = r == 0 ? 0 : std::min<Index>(1200, 600 * r - 3);
  for (const int k : {8, 16})
    for (const bool loop : {true, false}) {
      c.name = "few points, k " + std::to_string(k) + (loop ? " loop" : " no loop");
      graph::DistributedGraphStats stats;
      const graph::Edges got = graph::knn_graph_distributed(comm, blocks_of(c, rank), k, loop, 1, &stats);
      const graph::Edges want = graph::knn_graph(c.data.positions, 3, c.data.batch, k, loop, 1,
                                                 {c.bounds[static_cast<std::size_t>(rank)], c.bounds[static_cast<std::size_t>(rank) + 1]});
      EXPECT_EQ(got.index, want.index) << c.name << " on rank " << rank;
      // Rank r >= 1 holds the last 3 points of sample r - 1 (when it has any point).
      const bool few = rank >= 1 && rank <= 2 && c.bounds[static_cast<std::size_t>(rank)] < 1200;
      EXPECT_EQ(stats.whole_samples, few ? 1 : 0) << c.name << " on rank " << rank;
    }
  c.name = "few points, radius";
  expect_equal(
      c,
      [&](const surrogate::Comm& cm, const graph::CanonicalBlocks& b, graph::DistributedGraphStats* st) {
        return graph::radius_graph_distributed(cm, b, 0.15, 32, true, 1, st);
      },
      [&](graph::ReceiverRange range) { return graph::radius_graph(c.data.positions, 3, c.data.batch, 0.15, 32, true, 1, range); });
}

// One uniform sample in slabs (the blocks of a spatially coherent numbering): each rank holds its block
// plus a thin halo, far below the sample; the same with random numbering needs most of the sample.
TEST(DistributedGraph, HaloOfSlabsIsFarBelowTheSample) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size();
  Case c;
  c.data = make_batch(3, {40000}, Cloud::uniform, Numbering::slabs, 5);
  c.bounds = make_bounds(40000, P, Blocks::even);
  c.name = "uniform slabs, kNN 16";
  const Index knn_halo = expect_equal(
      c,
      [&](const surrogate::Comm& cm, const graph::CanonicalBlocks& b, graph::DistributedGraphStats* s) {
        return graph::knn_graph_distributed(cm, b, 16, true, 1, s);
      },
      [&](graph::ReceiverRange range) { return graph::knn_graph(c.data.positions, 3, c.data.batch, 16, true, 1, range); });
  c.name = "uniform slabs, radius 0.05";
  const Index radius_halo = expect_equal(
      c,
      [&](const surrogate::Comm& cm, const graph::CanonicalBlocks& b, graph::DistributedGraphStats* s) {
        return graph::radius_graph_distributed(cm, b, 0.05, 32, true, 1, s);
      },
      [&](graph::ReceiverRange range) { return graph::radius_graph(c.data.positions, 3, c.data.batch, 0.05, 32, true, 1, range); });
  if (comm.rank() == 0)
    std::printf("[ halo ] %d ranks, 40000 uniform points in slabs: largest halo %lld (kNN 16), %lld (radius 0.05)\n", P,
                static_cast<long long>(knn_halo), static_cast<long long>(radius_halo));
  // A slab of 40000 / P points has at most two faces; the kNN 16 distance is about 0.06 here, so the halo
  // is two layers of ~0.1 (rounding and the largest bound included): a fifth of the sample, not all of it.
  EXPECT_LE(knn_halo, 40000 / 5);
  EXPECT_LE(radius_halo, 40000 / 8);
  if (P == 1) {
    EXPECT_EQ(knn_halo, 0);
    EXPECT_EQ(radius_halo, 0);
  }
}

TEST(DistributedGraph, ErrorsAreAgreed) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), rank = comm.rank();
  Case c;
  c.data = make_batch(3, {200, 100}, Cloud::uniform, Numbering::random, 3);
  c.bounds = make_bounds(300, P, Blocks::even);
  // A NaN on the last rank only: the same Error(input) on every rank, naming that rank.
  Case bad = c;
  bad.data.positions[static_cast<std::size_t>(bad.bounds[static_cast<std::size_t>(P) - 1] * 3 + 1)] = std::nanf("");
  try {
    graph::knn_graph_distributed(comm, blocks_of(bad, rank), 8, true, 1);
    ADD_FAILURE() << "no error for a NaN position";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("NaN"), std::string::npos) << e.what();
    if (P > 1) {  // one rank: no rank prefix
      EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(P - 1)), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(graph::knn_graph_distributed(comm, blocks_of(c, rank), 0, true, 1), surrogate::Error);
  EXPECT_THROW(graph::radius_graph_distributed(comm, blocks_of(c, rank), -1.0, 32, true, 1), surrogate::Error);
  // Bounds that do not cover the batch.
  Case short_bounds = c;
  short_bounds.bounds.back() -= 1;
  EXPECT_THROW(graph::knn_graph_distributed(comm, blocks_of(short_bounds, rank), 8, true, 1), surrogate::Error);
}

}  // namespace
