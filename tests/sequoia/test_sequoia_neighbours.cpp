// The grid search of the neighbour lists (libsurrogate/src/sequoia/neighbours.cpp, grid_nearest.hpp; for
// k above 32 surrogate::graph::knn_graph's k-d tree on double coordinates) gives exactly the brute force's
// lists — same nodes, same order, ties by index — on clouds that stress it: random, lattice points with repeats (ties
// everywhere), a plane, a line, a sphere's surface, identical points, tight clusters far apart, a far
// outlier, several samples of different sizes, samples of fewer than k nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sequoia/neighbours.hpp"
#include "surrogate/kernels/grid_nearest.hpp"

namespace sq = surrogate::sequoia;

namespace {

struct Cloud {
  std::vector<float> positions;
  std::vector<std::int64_t> batch;
  void add(std::int64_t sample, float x, float y, float z) {
    positions.insert(positions.end(), {x, y, z});
    batch.push_back(sample);
  }
};

void expect_same(const Cloud& c, const std::string& what) {
  for (const int k : {8, 16, 40}) {  // 40: above the grid's 32, through the k-d tree
    const auto brute = sq::nearest_lists(c.positions, c.batch, k, 1 << 30);
    const auto tree = sq::nearest_lists(c.positions, c.batch, k, 0);  // every sample on the grid (or tree)
    ASSERT_EQ(brute.size(), tree.size());
    std::size_t first = brute.size();
    for (std::size_t i = 0; i < brute.size() && first == brute.size(); ++i)
      if (brute[i] != tree[i]) first = i;
    EXPECT_EQ(first, brute.size()) << what << ", k " << k << ": first difference in the list of node " << first / k;
  }
}

TEST(SequoiaNeighbours, GridEqualsBruteForce) {
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> cell(0, 9);
  Cloud random, lattice, plane, line, sphere, identical, clusters, outlier, samples, tiny;
  for (int i = 0; i < 3000; ++i) random.add(0, normal(gen), normal(gen), normal(gen));
  for (int i = 0; i < 2500; ++i) lattice.add(0, 0.1f * cell(gen), 0.1f * cell(gen), 0.1f * cell(gen));
  for (int i = 0; i < 2000; ++i) plane.add(0, normal(gen), normal(gen), 0.25f);
  for (int i = 0; i < 1500; ++i) line.add(0, 0.5f, normal(gen), -1.0f);
  for (int i = 0; i < 2000; ++i) {
    const float x = normal(gen), y = normal(gen), z = normal(gen), r = std::sqrt(x * x + y * y + z * z);
    sphere.add(0, x / r, y / r, z / r);
  }
  for (int i = 0; i < 700; ++i) identical.add(0, 0.3f, 0.3f, 0.3f);
  for (int i = 0; i < 1000; ++i) outlier.add(0, normal(gen), normal(gen), normal(gen));
  outlier.add(0, 1e4f, -1e4f, 3.0f);
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < 3 + 6 * s; ++i) tiny.add(s, normal(gen), normal(gen), normal(gen));  // 3, 9, 15 nodes
  for (int i = 0; i < 2000; ++i) {
    const float at = i % 2 ? 50.0f : -50.0f;
    clusters.add(0, at + 1e-3f * normal(gen), at + 1e-3f * normal(gen), 1e-3f * normal(gen));
  }
  for (int s = 0; s < 4; ++s)
    for (int i = 0; i < 300 + 700 * s; ++i) samples.add(s, normal(gen) + 3.0f * s, normal(gen), normal(gen));
  expect_same(random, "random");
  expect_same(lattice, "lattice with repeats");
  expect_same(plane, "plane");
  expect_same(line, "line");
  expect_same(sphere, "sphere surface");
  expect_same(identical, "identical points");
  expect_same(clusters, "two tight clusters");
  expect_same(outlier, "far outlier");
  expect_same(samples, "four samples");
  expect_same(tiny, "samples of fewer than k nodes");
}

// The grid is made finer where the nodes crowd few of its cells (a surface), never beyond 8 cells a node,
// and kept where they fill the box (a cube): the lists above are the same on any grid, this is the speed.
TEST(SequoiaNeighbours, GridRefinedWhereNodesCrowdFewCells) {
  namespace gn = surrogate::kernels::grid_nearest;
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  const auto refined = [](const std::vector<float>& p) {
    const long long n = static_cast<long long>(p.size() / 3);
    float mn[3] = {p[0], p[1], p[2]}, mx[3] = {p[0], p[1], p[2]};
    for (long long j = 0; j < n; ++j)
      for (int c = 0; c < 3; ++c) {
        mn[c] = std::fmin(mn[c], p[j * 3 + c]);
        mx[c] = std::fmax(mx[c], p[j * 3 + c]);
      }
    const gn::Grid g = gn::make_grid(mn, mx, n);
    std::vector<char> used(static_cast<std::size_t>(g.cells()), 0);
    for (long long j = 0; j < n; ++j) used[static_cast<std::size_t>(gn::cell_of(g, &p[j * 3]))] = 1;
    const long long occupied = std::count(used.begin(), used.end(), 1);
    return std::pair{g, gn::refine_grid(g, mx, n, occupied)};
  };
  std::vector<float> surface, cube;
  for (int i = 0; i < 20000; ++i) {
    const float x = normal(gen), y = normal(gen), z = normal(gen), r = std::sqrt(x * x + y * y + z * z);
    surface.insert(surface.end(), {x / r, y / r, z / r});
    cube.insert(cube.end(), {uniform(gen), uniform(gen), uniform(gen)});
  }
  const auto [coarse, fine] = refined(surface);
  EXPECT_LT(fine.h, 0.6 * coarse.h);
  EXPECT_LE(fine.cells(), gn::kMaxCellsPerNode * 20000LL);
  EXPECT_GT(fine.cells(), coarse.cells());
  const auto [kept, same] = refined(cube);
  EXPECT_EQ(same.h, kept.h);
  EXPECT_EQ(same.cells(), kept.cells());
}

}  // namespace
