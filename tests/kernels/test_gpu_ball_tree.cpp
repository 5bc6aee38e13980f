// The device's ball trees (surrogate/kernels/cuda_ball_tree.hpp), on the host backend (cuda.*) and on a
// GPU (gpu.*, skipped without one), against the CPU's balltree::build and balltree::partition (which run
// libstdc++'s std::nth_element itself, checked against the official package by the golden tests): the
// slots, masks and partitions element for element. Clouds that stress the selection: random points in 1 to
// 5 dimensions, lattice points with many equal coordinates (ties in every partition), identical points, a
// line, sorted and organ-pipe coordinates, samples of 2 and 3 points next to large ones; with the default
// split between block and thread nodes and with blocks down to nodes of 2 or 3 points and of 40; nodes split
// by many blocks (ball_tree_wide.cuh) down to 20 and 100 points, and over up to ten tiles of 20,000-point
// samples; a root selection that reaches introselect's depth limit (the heap selection); the arguments it
// refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "host_backend_hooks.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_tree.hpp"
#include "surrogate/kernels/introselect.hpp"

namespace {

namespace bt = surrogate::balltree;
namespace cu = surrogate::kernels::cuda;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

struct Cloud {
  int dim = 3;
  std::vector<float> positions;
  std::vector<std::int64_t> first{0};
  std::int64_t points() const { return first.back(); }
  /// Appends a sample of n points, coordinate d of point i given by f(i, d).
  template <class F>
  void sample(int n, F f) {
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < dim; ++d) positions.push_back(f(i, d));
    first.push_back(first.back() + n);
  }
  bt::Batch batch() const { return bt::Batch::from_offsets(first); }
};

struct DeviceTree {
  std::vector<std::int64_t> index;
  std::vector<std::uint8_t> mask;
};

/// How the levels are split: nodes above `wide` points by many blocks, above `serial` by a block, the
/// rest by a thread (0: the defaults).
struct Split {
  int serial = 0, wide = 0;
  std::string name() const { return "serial_points " + std::to_string(serial) + ", wide_points " + std::to_string(wide); }
};
/// The defaults, blocks down to nodes of 3 and of 40 points, many blocks down to 20 and to 100.
const Split kSplits[] = {{0, 0}, {3, 0}, {40, 0}, {3, 20}, {40, 100}};

/// Launches of the wide nodes' steps so far (host backend; 0 on a GPU).
int wide_launches() {
  return surrogate::testing::on_host_backend() ? static_cast<int>(host_backend::NamedLaunches{"wide node"}) : 0;
}

/// The tree (target_level < 0) or partition on the device.
DeviceTree on_device(const Cloud& c, int target_level, Split split) {
  const int device = surrogate::testing::test_device();
  const auto positions = to_device(c.positions);
  const int samples = static_cast<int>(c.first.size()) - 1;
  const std::int64_t outputs = target_level < 0 ? cu::ball_tree_slots(c.first.data(), samples) : c.points();
  cu::DeviceBuffer<std::int64_t> index(static_cast<std::size_t>(outputs), device);
  cu::DeviceBuffer<std::uint8_t> mask(static_cast<std::size_t>(outputs), device);
  cu::BallTreeWork work;
  cu::BallTreeArgs a;
  a.points = c.points();
  a.dim = c.dim;
  a.positions = positions.data();
  a.samples = samples;
  a.first = c.first.data();
  a.target_level = target_level;
  a.index = index.data();
  a.mask = target_level < 0 ? mask.data() : nullptr;
  a.serial_points = split.serial;
  a.wide_points = split.wide;
  a.work = &work;
  cu::ball_tree(a, nullptr);
  DeviceTree t;
  t.index = to_host(index.data(), static_cast<std::size_t>(outputs));
  if (target_level < 0) t.mask = to_host(mask.data(), static_cast<std::size_t>(outputs));
  return t;
}

template <class V>
std::ptrdiff_t first_difference(const V& want, const V& got) {
  if (want.size() != got.size()) return -1;
  return std::mismatch(want.begin(), want.end(), got.begin()).first - want.begin();
}

void expect_tree(const Cloud& c, const bt::Tree& want, Split split, const std::string& what) {
  const DeviceTree got = on_device(c, -1, split);
  const auto size = static_cast<std::ptrdiff_t>(want.index.size());
  EXPECT_EQ(first_difference(want.index, got.index), size) << what << ", " << split.name() << ": slots";
  EXPECT_EQ(first_difference(want.mask, got.mask), size) << what << ", " << split.name() << ": masks";
}

void expect_trees(const Cloud& c, const std::string& what) {
  const bt::Tree want = bt::build(std::span<const float>(c.positions), c.dim, c.batch());
  for (const Split split : kSplits) expect_tree(c, want, split, what);
}

void expect_partition(const Cloud& c, int level, Split split, const std::string& what) {
  const auto want = bt::partition(std::span<const float>(c.positions), c.dim, c.batch(), level);
  const DeviceTree got = on_device(c, level, split);
  EXPECT_EQ(first_difference(want, got.index), static_cast<std::ptrdiff_t>(want.size()))
      << what << ", target level " << level << ", " << split.name();
}

void expect_partitions(const Cloud& c, const std::string& what) {
  for (const int level : {0, 1, 3, 6, 40})
    for (const Split split : {Split{0, 0}, Split{2, 0}, Split{40, 0}, Split{2, 20}, Split{40, 100}})
      expect_partition(c, level, split, what);
}

TEST(GpuBallTree, TreesAreTheHostsOnHardClouds) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(5);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> cell(0, 4);
  for (const int dim : {1, 2, 3, 4, 5}) {
    Cloud random;
    random.dim = dim;
    random.sample(1500, [&](int, int) { return normal(gen); });
    expect_trees(random, "random, dim " + std::to_string(dim));
  }
  Cloud lattice, identical, line, sorted, organ_pipe, samples;
  lattice.sample(1300, [&](int, int) { return 0.25f * static_cast<float>(cell(gen)); });
  identical.sample(700, [](int, int) { return 0.5f; });
  line.sample(900, [&](int i, int d) { return d == 1 ? static_cast<float>(i % 37) : -1.0f; });
  sorted.sample(1024, [](int i, int d) { return static_cast<float>(d == 0 ? i / 3 : 0); });
  organ_pipe.sample(1000, [](int i, int d) { return static_cast<float>(d == 2 ? std::min(i, 999 - i) : i % 2); });
  samples.sample(2, [&](int, int) { return normal(gen); });
  samples.sample(900, [&](int, int) { return normal(gen); });
  samples.sample(3, [&](int, int) { return normal(gen); });
  samples.sample(257, [&](int, int) { return static_cast<float>(cell(gen)); });
  samples.sample(2, [](int, int) { return 1.0f; });
  expect_trees(lattice, "lattice with repeats");
  expect_trees(identical, "identical points");
  expect_trees(line, "a line of repeated values");
  expect_trees(sorted, "sorted with runs");
  expect_trees(organ_pipe, "organ pipe");
  expect_trees(samples, "five samples of 2 to 900 points");
}

TEST(GpuBallTree, PartitionsAreTheHostsAtEveryTargetLevel) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(7);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> cell(0, 3);
  Cloud random, lattice, samples;
  random.dim = 2;
  random.sample(1200, [&](int, int) { return normal(gen); });
  lattice.sample(1000, [&](int, int) { return static_cast<float>(cell(gen)); });
  samples.sample(1, [](int, int) { return 2.0f; });
  samples.sample(700, [&](int, int) { return normal(gen); });
  samples.sample(5, [&](int, int) { return static_cast<float>(cell(gen)); });
  expect_partitions(random, "random, dim 2");
  expect_partitions(lattice, "lattice with repeats");
  expect_partitions(samples, "samples of 1, 700 and 5 points");
}

TEST(GpuBallTree, ALargeSampleGetsTheHostsTree) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  Cloud cube;
  cube.sample(20000, [&](int, int) { return uniform(gen); });
  const bt::Tree want = bt::build(std::span<const float>(cube.positions), cube.dim, cube.batch());
  const DeviceTree got = on_device(cube, -1, Split{});
  EXPECT_EQ(first_difference(want.index, got.index), static_cast<std::ptrdiff_t>(want.index.size()));
  EXPECT_EQ(first_difference(want.mask, got.mask), static_cast<std::ptrdiff_t>(want.mask.size()));
}

// Nodes split by many blocks over several tiles (20,000 points: ten tiles at the root, with the wide nodes
// down to 3,000 or 700 points), on clouds whose stops and ties cross the tiles: uniform, a lattice of five
// values per coordinate, sorted with runs, organ pipe, identical points, two samples of unequal size.
// On the host backend the wide nodes' steps are counted, so that the case cannot pass without them.
TEST(GpuBallTree, WideNodesOverManyTilesGetTheHostsTrees) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(13);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::uniform_int_distribution<int> cell(0, 4);
  Cloud cube, lattice, sorted, organ_pipe, identical, two;
  cube.sample(20000, [&](int, int) { return uniform(gen); });
  lattice.sample(20000, [&](int, int) { return 0.25f * static_cast<float>(cell(gen)); });
  sorted.sample(20000, [](int i, int d) { return static_cast<float>(d == 1 ? i / 7 : 0); });
  organ_pipe.sample(20000, [](int i, int d) { return static_cast<float>(d == 0 ? std::min(i, 19999 - i) : i % 3); });
  identical.sample(9000, [](int, int) { return -3.0f; });
  two.sample(20000, [&](int, int) { return uniform(gen); });
  two.sample(9000, [&](int, int) { return static_cast<float>(cell(gen)); });
  const std::pair<const Cloud*, const char*> clouds[] = {{&cube, "uniform"},       {&lattice, "lattice"},
                                                         {&sorted, "sorted"},      {&organ_pipe, "organ pipe"},
                                                         {&identical, "identical"}, {&two, "two samples"}};
  for (const auto& [cloud, name] : clouds) {
    const bt::Tree want = bt::build(std::span<const float>(cloud->positions), cloud->dim, cloud->batch());
    for (const Split split : {Split{0, 3000}, Split{40, 700}}) {
      const int before = wide_launches();
      expect_tree(*cloud, want, split, name);
      if (surrogate::testing::on_host_backend()) {
        EXPECT_GT(wide_launches(), before) << name << ": no wide node";
      }
    }
    expect_partition(*cloud, 2, Split{0, 3000}, name);
    expect_partition(*cloud, 5, Split{40, 700}, name);
  }
}

/// Values on which std::nth_element at the middle of [0, n) spends its depth limit and ends in the heap
/// selection (McIlroy's adversary, run against the replica of libstdc++'s introselect): values are
/// frozen, lowest first, only when a comparison needs it, each time the one that is not the last pivot
/// candidate, so every partition splits off few elements. The values the comparisons never fixed are
/// equal and above all others; replaying the selection on the result takes the same path.
std::vector<float> depth_limit_killer(int n) {
  std::vector<int> value(static_cast<std::size_t>(n), n), order(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  int frozen = 0, candidate = -1;
  const auto less = [&](int x, int y) {
    int& vx = value[static_cast<std::size_t>(x)];
    int& vy = value[static_cast<std::size_t>(y)];
    if (vx == n && vy == n) (x == candidate ? vx : vy) = frozen++;
    if (vx == n) candidate = x;
    else if (vy == n) candidate = y;
    return vx < vy;
  };
  surrogate::kernels::introselect::nth_element(order.data(), order.data() + n / 2, order.data() + n, less);
  return {value.begin(), value.end()};
}

// A sample whose root selection reaches introselect's depth limit (the rounds split off few points each,
// so the heap selection finishes it), in one dimension and, as the first coordinate of the largest spread,
// in three: the device's trees and partitions equal the host's with the root by many blocks, by a block
// and by one thread's subtree. The replayed selection is checked to spend the whole depth limit.
TEST(GpuBallTree, ASelectionAtItsDepthLimitGetsTheHostsTree) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const int n = 3000;
  const std::vector<float> killer = depth_limit_killer(n);
  {
    namespace is = surrogate::kernels::introselect;
    std::vector<float> replay = killer;
    std::int64_t rounds = 0;
    const auto counted = [&](float* first, float* last, std::less<float> less) {
      ++rounds;
      return is::hoare_partition(first, last, less);
    };
    is::introselect_from(replay.data(), replay.data() + n / 2, replay.data() + n, is::depth_limit(n), std::less<float>{},
                         counted);
    ASSERT_EQ(rounds, is::depth_limit(n)) << "the input does not reach the depth limit";
  }
  Cloud line, space;
  line.dim = 1;
  line.sample(n, [&](int i, int) { return killer[static_cast<std::size_t>(i)]; });
  space.sample(n, [&](int i, int d) { return d == 0 ? killer[static_cast<std::size_t>(i)] : 0.001f * static_cast<float>(i % 7); });
  for (const auto& [cloud, name] : {std::pair<const Cloud*, const char*>{&line, "1-d"}, {&space, "3-d"}}) {
    const bt::Tree want = bt::build(std::span<const float>(cloud->positions), cloud->dim, cloud->batch());
    for (const Split split : {Split{0, 0}, Split{0, 100}, Split{4096, 0}}) {
      expect_tree(*cloud, want, split, name);
      expect_partition(*cloud, 1, split, name);
    }
  }
}

TEST(GpuBallTree, ArgumentsItRefuses) {
  SURROGATE_SKIP_WITHOUT_GPU();
  Cloud c;
  c.sample(10, [](int i, int) { return static_cast<float>(i); });
  c.sample(1, [](int, int) { return 0.0f; });
  const auto positions = to_device(c.positions);
  cu::DeviceBuffer<std::int64_t> index(64, surrogate::testing::test_device());
  cu::DeviceBuffer<std::uint8_t> mask(64, surrogate::testing::test_device());
  cu::BallTreeWork work;
  cu::BallTreeArgs a;
  a.points = c.points();
  a.dim = 3;
  a.positions = positions.data();
  a.samples = 2;
  a.first = c.first.data();
  a.index = index.data();
  a.mask = mask.data();
  a.work = &work;
  EXPECT_THROW(cu::ball_tree(a, nullptr), std::invalid_argument);  // a tree of a 1-point sample
  a.target_level = 2;
  EXPECT_NO_THROW(cu::ball_tree(a, nullptr));  // a partition takes it
  a.serial_points = 1;
  EXPECT_THROW(cu::ball_tree(a, nullptr), std::invalid_argument);
  a.serial_points = 0;
  a.wide_points = 2;
  EXPECT_THROW(cu::ball_tree(a, nullptr), std::invalid_argument);
  a.wide_points = 0;
  a.dim = 0;
  EXPECT_THROW(cu::ball_tree(a, nullptr), std::invalid_argument);
  a.dim = 3;
  const std::vector<std::int64_t> wrong_end{0, 10, 12};
  a.first = wrong_end.data();
  EXPECT_THROW(cu::ball_tree(a, nullptr), std::invalid_argument);
  cu::device_synchronize(surrogate::testing::test_device());
}

}  // namespace
