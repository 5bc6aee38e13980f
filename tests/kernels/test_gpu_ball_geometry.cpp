// The ball-tree geometry on the device (surrogate/kernels/cuda_ball_geometry.hpp), on the host backend
// (cuda.*) and on a GPU (gpu.*, skipped without one), against the CPU functions the forwards use:
// balltree::mean_pool, erwin::program::relative_to_group and erwin::program::order_edges, compared bit for
// bit (NaN, infinities and signed zeros included). Group sizes from 1 to 4,096 rows reach every branch of
// PyTorch's cascaded sum; edge lists with duplicates, receivers without edges, halo sources, no edges at
// all and edges out of range; the arguments the launchers refuse.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "erwin/program.hpp"
#include "gpu_test.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_geometry.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace program = surrogate::erwin::program;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

/// The index of the first value whose bits differ, or -1.
std::int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return 0;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (std::bit_cast<std::uint32_t>(a[i]) != std::bit_cast<std::uint32_t>(b[i])) return static_cast<std::int64_t>(i);
  return -1;
}

/// n x d values of wide magnitudes, with signed zeros, infinities and NaN among them when `special`.
std::vector<float> rows_of(std::int64_t n, int d, bool special, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> scale(-20, 20), pick(0, 99);
  std::vector<float> v(static_cast<std::size_t>(n * d));
  for (float& x : v) {
    x = std::ldexp(normal(gen), scale(gen));
    if (!special) continue;
    switch (pick(gen)) {
      case 0: x = -0.0f; break;
      case 1: x = 0.0f; break;
      case 2: x = std::numeric_limits<float>::infinity(); break;
      case 3: x = std::numeric_limits<float>::quiet_NaN(); break;
      default: break;
    }
  }
  return v;
}

std::vector<float> device_means(const std::vector<float>& rows, int d, int group) {
  const auto in = to_device(rows);
  const std::int64_t groups = static_cast<std::int64_t>(rows.size()) / d / group;
  cu::DeviceBuffer<float> out(static_cast<std::size_t>(std::max<std::int64_t>(groups * d, 1)), surrogate::testing::test_device());
  cu::group_means({in.data(), groups, d, group, out.data()}, nullptr);
  return to_host(out.data(), static_cast<std::size_t>(groups * d));
}

std::vector<float> device_offsets(const std::vector<float>& rows, int d, int group, const std::vector<float>& centres) {
  const auto in = to_device(rows);
  const auto c = to_device(centres);
  const std::int64_t n = static_cast<std::int64_t>(rows.size()) / d;
  cu::DeviceBuffer<float> rel(std::max<std::size_t>(rows.size(), 1), surrogate::testing::test_device());
  cu::group_offsets({in.data(), n, d, group, group == 1 ? in.data() : c.data(), rel.data()}, nullptr);
  return to_host(rel.data(), rows.size());
}

TEST(GpuBallGeometry, GroupMeansAndOffsetsAreTheCpusBits) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const int d : {1, 2, 3})
    for (const int group : {1, 2, 3, 4, 5, 7, 8, 16, 63, 64, 100, 256, 1024, 4096})
      for (const bool special : {false, true}) {
        const std::int64_t groups = group >= 1024 ? 3 : 37;
        std::vector<float> rows = rows_of(groups * group, d, special, static_cast<unsigned>(d * 7919 + group));
        if (special)  // a group of signed zeros: centre +0, offsets -0 - +0 = -0 and +0
          for (std::int64_t r = 0; r < group * d; ++r) rows[static_cast<std::size_t>(r)] = r % 3 ? -0.0f : 0.0f;
        const std::string what =
            "d " + std::to_string(d) + ", group " + std::to_string(group) + (special ? ", special values" : "");
        const std::vector<float> means = surrogate::balltree::mean_pool(rows, d, group);
        EXPECT_EQ(first_difference(device_means(rows, d, group), means), -1) << what;
        EXPECT_EQ(first_difference(device_offsets(rows, d, group, means), program::relative_to_group(rows, d, group, d)), -1)
            << what;
      }
}

struct Edges {
  std::int64_t receivers = 0, sources = 0;
  std::vector<std::int64_t> index;  // 2 x E
  std::int64_t count() const { return static_cast<std::int64_t>(index.size() / 2); }
};

/// E random edges into `receivers` receivers from `sources` sources, every `quiet`-th receiver without edges.
Edges random_edges(std::int64_t receivers, std::int64_t sources, std::int64_t E, int quiet, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> src(0, sources - 1), dst(0, std::max<std::int64_t>(receivers - 1, 0));
  Edges e{receivers, sources, std::vector<std::int64_t>(static_cast<std::size_t>(2 * E))};
  for (std::int64_t k = 0; k < E; ++k) {
    std::int64_t r = dst(gen);
    while (quiet > 0 && r % quiet == 0 && receivers > 1) r = dst(gen);
    e.index[static_cast<std::size_t>(k)] = src(gen);
    e.index[static_cast<std::size_t>(E + k)] = r;
  }
  return e;
}

struct DeviceOrder {
  std::int64_t bad = 0;
  std::vector<std::int64_t> start, src, dst;
  std::vector<float> rel;
};

DeviceOrder device_order(const Edges& e, const std::vector<float>& positions, int d) {
  const int device = surrogate::testing::test_device();
  const std::int64_t E = e.count();
  const auto index = to_device(e.index.empty() ? std::vector<std::int64_t>{0} : e.index);
  const auto pos = to_device(positions.empty() ? std::vector<float>{0.0f} : positions);
  const auto at_least_one = [](std::int64_t n) { return static_cast<std::size_t>(std::max<std::int64_t>(n, 1)); };
  cu::DeviceBuffer<std::int64_t> bad(1, device), start(at_least_one(e.receivers + 1), device), src(at_least_one(E), device),
      dst(at_least_one(E), device);
  cu::DeviceBuffer<float> rel(at_least_one(E * d), device);
  cu::EdgeOrderWork work;
  cu::EdgeOrderArgs a;
  a.edges = E;
  a.edge_index = index.data();
  a.receivers = e.receivers;
  a.sources = e.sources;
  a.positions = pos.data();
  a.dim = d;
  a.first_bad = bad.data();
  a.start = start.data();
  a.src = src.data();
  a.dst = dst.data();
  a.rel = rel.data();
  a.work = &work;
  cu::edges_by_receiver(a, nullptr);
  DeviceOrder o;
  o.bad = to_host(bad.data(), 1)[0];
  if (o.bad >= 0) return o;
  o.start = to_host(start.data(), static_cast<std::size_t>(e.receivers + 1));
  o.src = to_host(src.data(), static_cast<std::size_t>(E));
  o.dst = to_host(dst.data(), static_cast<std::size_t>(E));
  o.rel = to_host(rel.data(), static_cast<std::size_t>(E * d));
  return o;
}

void expect_order(const Edges& e, int d, const std::string& what) {
  const std::vector<float> positions = rows_of(e.sources, d, true, static_cast<unsigned>(e.count() + d));
  const program::EdgeOrder want = program::order_edges(e.index, positions, d, e.receivers, e.sources, 64, 1);
  const DeviceOrder got = device_order(e, positions, d);
  ASSERT_EQ(got.bad, want.bad_edge) << what;
  if (want.bad_edge >= 0) return;
  EXPECT_EQ(got.start, want.start) << what;
  EXPECT_TRUE(std::equal(want.src.begin(), want.src.end(), got.src.begin(), got.src.end())) << what;
  EXPECT_TRUE(std::equal(want.dst.begin(), want.dst.end(), got.dst.begin(), got.dst.end())) << what;
  EXPECT_EQ(first_difference(got.rel, std::vector<float>(want.rel.begin(), want.rel.end())), -1) << what;
  EXPECT_EQ(program::receiver_chunks(got.start, e.receivers, 64), want.chunks) << what;
}

TEST(GpuBallGeometry, EdgesByReceiverAreTheCpusOrder) {
  SURROGATE_SKIP_WITHOUT_GPU();
  expect_order(random_edges(500, 500, 4000, 0, 1), 3, "500 points, 8 edges each on average");
  expect_order(random_edges(300, 420, 5000, 7, 2), 2, "a halo of 120 sources, every 7th receiver without edges");
  expect_order(random_edges(5, 5, 3000, 0, 3), 3, "few receivers, many duplicate edges");
  expect_order(random_edges(1, 40, 200, 0, 4), 1, "one receiver");
  expect_order(random_edges(2000, 2000, 1, 0, 5), 3, "one edge");
  expect_order(Edges{50, 50, {}}, 3, "no edges");
  expect_order(Edges{0, 10, {}}, 3, "no receivers");
  // The knn graph's shape: k consecutive edges per receiver, receivers in order.
  Edges knn{400, 400, std::vector<std::int64_t>(2 * 400 * 8)};
  for (std::int64_t i = 0; i < 400 * 8; ++i) {
    knn.index[static_cast<std::size_t>(i)] = (i * 37) % 400;
    knn.index[static_cast<std::size_t>(400 * 8 + i)] = i / 8;
  }
  expect_order(knn, 3, "a kNN graph's edges");
}

TEST(GpuBallGeometry, AnEdgeOutOfRangeIsTheFirstBadEdge) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const auto& [slot, value] : std::vector<std::pair<std::int64_t, std::int64_t>>{
           {10, -1}, {10, 420}, {1000 + 10, 300}, {1000 + 10, -5}, {999, 1 << 30}}) {
    Edges e = random_edges(300, 420, 1000, 0, 6);
    e.index[static_cast<std::size_t>(slot)] = value;
    e.index[static_cast<std::size_t>(1000 + 900)] = 300;  // a later bad receiver: the first one is reported
    expect_order(e, 3, "edge entry " + std::to_string(slot) + " = " + std::to_string(value));
  }
}

TEST(GpuBallGeometry, ArgumentsItDoesNotTakeAreRefused) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const auto rows = to_device(std::vector<float>(30, 1.0f));
  cu::DeviceBuffer<float> out(30, surrogate::testing::test_device());
  EXPECT_THROW(cu::group_offsets({rows.data(), 10, 3, 4, rows.data(), out.data()}, nullptr), std::invalid_argument);
  EXPECT_THROW(cu::group_means({rows.data(), 2, 0, 5, out.data()}, nullptr), std::invalid_argument);
  EXPECT_THROW(cu::group_means({nullptr, 2, 3, 5, out.data()}, nullptr), std::invalid_argument);
  cu::EdgeOrderArgs a;
  a.edges = 4;
  a.receivers = 5;
  a.sources = 4;  // fewer sources than receivers
  a.dim = 3;
  EXPECT_THROW(cu::edges_by_receiver(a, nullptr), std::invalid_argument);
}

}  // namespace
