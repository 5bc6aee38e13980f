// The device's exact k-nearest lists (surrogate/kernels/cuda_nearest.hpp), on the host backend (cuda.*) and
// on a GPU (gpu.*, skipped without one), against a brute force written here: every pair's squared distance
// in double, sorted by (distance, node). Clouds that stress a uniform grid: random, lattice points with
// repeats (ties everywhere), a plane, a line, a sphere's surface, identical points, tight clusters far
// apart, a far outlier, samples of different sizes with an empty one, samples of fewer than k nodes; k from
// 1 to 32, all nodes or a subset of queries in any order; the arguments it refuses.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_nearest.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

struct Cloud {
  std::vector<float> positions;
  std::vector<std::int64_t> first{0, 0};  // sample offsets: one empty sample to begin with
  void add(float x, float y, float z) {
    positions.insert(positions.end(), {x, y, z});
    ++first.back();
  }
  void next_sample() { first.push_back(first.back()); }
  std::int64_t nodes() const { return static_cast<std::int64_t>(positions.size() / 3); }
};

/// The reference: for node a, every node of its sample by (squared distance, node), the first k, then the
/// first repeated.
std::vector<std::int64_t> brute_force(const Cloud& c, int k, const std::vector<std::int64_t>& queries) {
  std::vector<std::int64_t> lists;
  for (const std::int64_t a : queries) {
    const auto s = std::upper_bound(c.first.begin(), c.first.end(), a) - c.first.begin() - 1;
    std::vector<std::pair<double, std::int64_t>> d;
    for (std::int64_t j = c.first[static_cast<std::size_t>(s)]; j < c.first[static_cast<std::size_t>(s) + 1]; ++j) {
      double sum = 0.0;
      for (int x = 0; x < 3; ++x) {
        const double t = static_cast<double>(c.positions[static_cast<std::size_t>(a * 3 + x)]) -
                         static_cast<double>(c.positions[static_cast<std::size_t>(j * 3 + x)]);
        sum += t * t;
      }
      d.emplace_back(sum, j);
    }
    std::sort(d.begin(), d.end());
    for (std::size_t t = 0; t < static_cast<std::size_t>(k); ++t) lists.push_back(d[t < d.size() ? t : 0].second);
  }
  return lists;
}

std::vector<std::int64_t> on_device(const Cloud& c, int k, const std::vector<std::int64_t>* queries) {
  const int device = surrogate::testing::test_device();
  const auto pos = to_device(c.positions);
  const auto first = to_device(c.first);
  const std::vector<std::int64_t> ids = queries ? *queries : std::vector<std::int64_t>{0};
  const auto query_ids = to_device(ids);
  const std::int64_t count = queries ? static_cast<std::int64_t>(queries->size()) : c.nodes();
  cu::DeviceBuffer<std::int64_t> lists(static_cast<std::size_t>(std::max<std::int64_t>(count * k, 1)), device);
  cu::NearestListsWork work;
  cu::NearestListsArgs a;
  a.nodes = c.nodes();
  a.positions = pos.data();
  a.samples = static_cast<int>(c.first.size()) - 1;
  a.first = first.data();
  a.queries = count;
  a.query_ids = queries ? query_ids.data() : nullptr;
  a.k = k;
  a.lists = lists.data();
  a.work = &work;
  cu::nearest_lists(a, nullptr);
  return to_host(lists.data(), static_cast<std::size_t>(count * k));
}

void expect_lists(const Cloud& c, const std::string& what) {
  std::vector<std::int64_t> all(static_cast<std::size_t>(c.nodes()));
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<std::int64_t>(i);
  for (const int k : {1, 8, 16, 32}) {
    const auto want = brute_force(c, k, all);
    const auto got = on_device(c, k, nullptr);
    ASSERT_EQ(got.size(), want.size()) << what;
    const auto differ = std::mismatch(want.begin(), want.end(), got.begin()).first - want.begin();
    EXPECT_EQ(differ, static_cast<std::ptrdiff_t>(want.size()))
        << what << ", k " << k << ": first difference in the list of node " << differ / k;
  }
}

TEST(GpuNearest, ListsAreTheBruteForcesOnHardClouds) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> cell(0, 9);
  Cloud random, lattice, plane, line, sphere, identical, clusters, outlier, samples, tiny;
  for (int i = 0; i < 1500; ++i) random.add(normal(gen), normal(gen), normal(gen));
  for (int i = 0; i < 1200; ++i) lattice.add(0.1f * cell(gen), 0.1f * cell(gen), 0.1f * cell(gen));
  for (int i = 0; i < 1000; ++i) plane.add(normal(gen), normal(gen), 0.25f);
  for (int i = 0; i < 800; ++i) line.add(0.5f, normal(gen), -1.0f);
  for (int i = 0; i < 1000; ++i) {
    const float x = normal(gen), y = normal(gen), z = normal(gen), r = std::sqrt(x * x + y * y + z * z);
    sphere.add(x / r, y / r, z / r);
  }
  for (int i = 0; i < 300; ++i) identical.add(0.3f, 0.3f, 0.3f);
  for (int i = 0; i < 600; ++i) outlier.add(normal(gen), normal(gen), normal(gen));
  outlier.add(1e4f, -1e4f, 3.0f);
  for (int i = 0; i < 800; ++i) {
    const float at = i % 2 ? 50.0f : -50.0f;
    clusters.add(at + 1e-3f * normal(gen), at + 1e-3f * normal(gen), 1e-3f * normal(gen));
  }
  for (int s = 0; s < 4; ++s) {  // 200, 550, an empty sample, 1250
    if (s > 0) samples.next_sample();
    if (s == 2) continue;
    for (int i = 0; i < 200 + 350 * s; ++i) samples.add(normal(gen) + 3.0f * s, normal(gen), normal(gen));
  }
  for (int s = 0; s < 4; ++s) {  // 1, 3, 9, 15 nodes
    if (s > 0) tiny.next_sample();
    for (int i = 0; i < (s == 0 ? 1 : 3 + 6 * (s - 1)); ++i) tiny.add(normal(gen), normal(gen), normal(gen));
  }
  expect_lists(random, "random");
  expect_lists(lattice, "lattice with repeats");
  expect_lists(plane, "plane");
  expect_lists(line, "line");
  expect_lists(sphere, "sphere surface");
  expect_lists(identical, "identical points");
  expect_lists(clusters, "two tight clusters");
  expect_lists(outlier, "far outlier");
  expect_lists(samples, "three samples and an empty one");
  expect_lists(tiny, "samples of fewer than k nodes");
}

TEST(GpuNearest, QueriesInAnyOrderGetTheirOwnLists) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  Cloud c;
  for (int s = 0; s < 3; ++s) {
    if (s > 0) c.next_sample();
    for (int i = 0; i < 400 + 300 * s; ++i) c.add(unit(gen) + 10.0f * s, unit(gen), 0.01f * unit(gen));
  }
  std::vector<std::int64_t> queries;
  std::uniform_int_distribution<std::int64_t> pick(0, c.nodes() - 1);
  for (int t = 0; t < 500; ++t) queries.push_back(pick(gen));
  queries.push_back(queries.front());  // a repeated query
  for (const int k : {5, 16}) EXPECT_EQ(on_device(c, k, &queries), brute_force(c, k, queries)) << "k " << k;
  const std::vector<std::int64_t> none;
  EXPECT_TRUE(on_device(c, 4, &none).empty());
}

TEST(GpuNearest, RefusesArgumentsItDoesNotTake) {
  SURROGATE_SKIP_WITHOUT_GPU();
  Cloud c;
  for (int i = 0; i < 10; ++i) c.add(static_cast<float>(i), 0.0f, 0.0f);
  const int device = surrogate::testing::test_device();
  const auto pos = to_device(c.positions);
  const auto first = to_device(c.first);
  cu::DeviceBuffer<std::int64_t> lists(10 * cu::kMaxNearest, device);
  cu::NearestListsWork work;
  const auto args = [&](int k) {
    cu::NearestListsArgs a;
    a.nodes = c.nodes();
    a.positions = pos.data();
    a.samples = 1;
    a.first = first.data();
    a.queries = c.nodes();
    a.k = k;
    a.lists = lists.data();
    a.work = &work;
    return a;
  };
  EXPECT_THROW(cu::nearest_lists(args(0), nullptr), std::invalid_argument);
  EXPECT_THROW(cu::nearest_lists(args(cu::kMaxNearest + 1), nullptr), std::invalid_argument);
  auto no_ids = args(4);
  no_ids.queries = 3;  // fewer queries than nodes but no ids
  EXPECT_THROW(cu::nearest_lists(no_ids, nullptr), std::invalid_argument);
  auto no_first = args(4);
  no_first.first = nullptr;
  EXPECT_THROW(cu::nearest_lists(no_first, nullptr), std::invalid_argument);
  auto no_samples = args(4);
  no_samples.samples = 0;
  EXPECT_THROW(cu::nearest_lists(no_samples, nullptr), std::invalid_argument);
  EXPECT_NO_THROW(cu::nearest_lists(args(cu::kMaxNearest), nullptr));
  const auto got = to_host(lists.data(), static_cast<std::size_t>(10 * cu::kMaxNearest));
  EXPECT_EQ(got[0], 0);  // node 0's nearest is itself; ten nodes, so the list repeats it from the 11th on
  EXPECT_EQ(got[10], 0);
}

}  // namespace
