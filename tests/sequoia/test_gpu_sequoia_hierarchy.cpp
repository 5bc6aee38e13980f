// Sequoia's voxel hierarchy built on the device (device::VoxelHierarchies, what a plan for a CUDA device
// uses) against the host's (sequoia::collate of sequoia::build_sample_hierarchies, itself tested against
// the official builder in test_sequoia_hierarchy), on the host backend (cuda.*) and on a GPU (gpu.*,
// skipped without one): every field, floats bit for bit; batches of surfaces, boxes, lattices, tiny and
// one-point samples, the official default (3, 3) and deeper trees; points where float32 truncation puts a
// fine voxel under two coarse ones (a child listed twice); and the host builder's errors, unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "device/voxel_hierarchy.hpp"
#include "gpu_test.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/sequoia.hpp"

namespace {

namespace sq = surrogate::sequoia;
namespace cu = surrogate::kernels::cuda;

std::vector<std::uint32_t> bits(const std::vector<float>& v) {
  std::vector<std::uint32_t> b(v.size());
  if (!v.empty()) std::memcpy(b.data(), v.data(), v.size() * sizeof(float));
  return b;
}

void expect_same(const sq::Hierarchy& got, const sq::Hierarchy& want) {
  EXPECT_EQ(got.depth, want.depth);
  EXPECT_EQ(got.point_offsets, want.point_offsets);
  EXPECT_EQ(got.offset, want.offset);
  EXPECT_EQ(got.sample_ids, want.sample_ids);
  EXPECT_EQ(bits(got.coords), bits(want.coords));
  EXPECT_EQ(got.mapping, want.mapping);
  EXPECT_EQ(got.mapping_local, want.mapping_local);
  EXPECT_EQ(got.level_ids, want.level_ids);
  EXPECT_EQ(got.level_batch, want.level_batch);
  EXPECT_EQ(got.pool_parent, want.pool_parent);
  ASSERT_EQ(got.level_positions.size(), want.level_positions.size());
  for (std::size_t i = 0; i < want.level_positions.size(); ++i)
    EXPECT_EQ(bits(got.level_positions[i]), bits(want.level_positions[i])) << "level " << i;
  EXPECT_EQ(got.parent_edges, want.parent_edges);
  EXPECT_EQ(got.child_edges, want.child_edges);
}

struct Batch {
  std::vector<float> points;
  std::vector<std::int64_t> first{0};
  void add(const std::vector<float>& sample) {
    points.insert(points.end(), sample.begin(), sample.end());
    first.push_back(first.back() + static_cast<std::int64_t>(sample.size() / 3));
  }
  std::vector<sq::SamplePoints> samples() const {
    std::vector<sq::SamplePoints> s;
    for (std::size_t b = 0; b + 1 < first.size(); ++b)
      s.push_back({points.data() + first[b] * 3, first[b + 1] - first[b], "sample " + std::to_string(b)});
    return s;
  }
};

std::vector<float> surface(int n, unsigned seed) {  // a bumpy ellipsoid
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> p;
  for (int i = 0; i < n; ++i) {
    const double z = 2.0 * unit(gen) - 1.0, phi = 6.283185307179586 * unit(gen), s = std::sqrt(1.0 - z * z);
    const double r = 1.0 + 0.1 * std::sin(5.0 * phi) * s;
    p.insert(p.end(), {static_cast<float>(2.0 * r * s * std::cos(phi)), static_cast<float>(r * s * std::sin(phi)),
                       static_cast<float>(0.7 * r * z)});
  }
  return p;
}

std::vector<float> box(int n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> unit(0.0f, scale);
  std::vector<float> p(static_cast<std::size_t>(n) * 3);
  for (float& x : p) x = unit(gen);
  return p;
}

/// Points on a lattice of 1/9 (voxel faces at divide 3), with repeats: many ties of hashes and positions.
std::vector<float> lattice(int n, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> cell(0, 9);
  std::vector<float> p(static_cast<std::size_t>(n) * 3);
  for (float& x : p) x = static_cast<float>(cell(gen)) / 9.0f;
  return p;
}

/// The corners (0, 0, 0) and (1, 1, 1), then points where float32 truncation disagrees between levels
/// (divide 3: a level-3 voxel whose index / 3 is not the level-2 voxel of the same coordinate), each with
/// a neighbour just below it in the same level-3 voxel: that voxel gets two parents.
std::vector<float> two_parents() {
  const float lo = 0.0f - 1e-6f, hi = 1.0f + 1e-6f, extent = hi - lo;
  const float s2 = extent / 9.0f, s3 = extent / 27.0f;
  std::vector<float> p = {0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f};
  for (int m = 1; m < 27; ++m) {
    float y = lo + static_cast<float>(m) * s3;
    for (int step = 0; step < 64; ++step, y = std::nextafter(y, 2.0f)) {
      const float shifted = y - lo;
      if (static_cast<int>(std::trunc(shifted / s3)) / 3 == static_cast<int>(std::trunc(shifted / s2))) continue;
      float below = y;
      for (int t = 0; t < 24; ++t) below = std::nextafter(below, -1.0f);
      p.insert(p.end(), {y, 0.5f, 0.5f, below, 0.5f, 0.5f});
      break;
    }
  }
  return p;
}

class GpuSequoiaHierarchy : public ::testing::Test {
 protected:
  void SetUp() override {
    SURROGATE_SKIP_WITHOUT_GPU();
    stream_.emplace(device_);
  }
  sq::Hierarchy on_device(const Batch& batch, int divide, int depth, std::vector<std::int64_t> ids = {}) {
    return build_(device_, stream_->get(), batch.samples(), divide, depth, std::move(ids));
  }
  void check(const Batch& batch, int divide, int depth, std::vector<std::int64_t> ids = {}) {
    SCOPED_TRACE("divide " + std::to_string(divide) + ", depth " + std::to_string(depth));
    const sq::Hierarchy want = sq::collate(sq::build_sample_hierarchies(batch.samples(), divide, depth), ids);
    expect_same(on_device(batch, divide, depth, ids), want);
  }
  int device_ = surrogate::testing::test_device();
  std::optional<cu::Stream> stream_;
  surrogate::device::VoxelHierarchies build_;
};

TEST_F(GpuSequoiaHierarchy, ABatchIsTheHosts) {
  Batch batch;
  batch.add(surface(12000, 5));
  batch.add(box(4000, 6));
  batch.add(box(40, 7, 1e-3f));
  batch.add(lattice(3000, 8));
  batch.add({0.25f, -0.5f, 3.0f});  // one point
  batch.add(box(2, 9));
  for (const auto& [divide, depth] : std::vector<std::pair<int, int>>{{3, 3}, {2, 5}, {3, 2}, {4, 4}, {2, 8}})
    check(batch, divide, depth);
  check(batch, 3, 3, {11, 3, 7, 2, 40, 5});  // the samples' ids in a caller's batch
}

// A plan's hierarchy (node_arrays false, as a Sequoia plan for a CUDA device asks for it): coords, mapping
// and mapping_local left empty, every other field the host's.
TEST_F(GpuSequoiaHierarchy, APlansHierarchyLeavesOutTheCollationsRows) {
  Batch batch;
  batch.add(surface(5000, 12));
  batch.add(box(700, 13));
  const sq::Hierarchy want = sq::collate(sq::build_sample_hierarchies(batch.samples(), 3, 3));
  sq::Hierarchy got = build_(device_, stream_->get(), batch.samples(), 3, 3, {}, false);
  EXPECT_TRUE(got.coords.empty());
  EXPECT_TRUE(got.mapping.empty());
  EXPECT_TRUE(got.mapping_local.empty());
  got.coords = want.coords;
  got.mapping = want.mapping;
  got.mapping_local = want.mapping_local;
  expect_same(got, want);
}

TEST_F(GpuSequoiaHierarchy, OneLargeSampleIsTheHosts) {
  Batch batch;
  batch.add(surface(60000, 11));
  check(batch, 3, 3);
  check(batch, 2, 6);
}

TEST_F(GpuSequoiaHierarchy, AVoxelUnderTwoParentsIsPooledOnce) {
  Batch batch;
  batch.add(two_parents());
  batch.add(box(500, 12));
  batch.add(two_parents());
  const sq::Hierarchy want = sq::collate(sq::build_sample_hierarchies(batch.samples(), 3, 4));
  std::set<std::int64_t> children;
  std::size_t repeated = 0;
  for (std::size_t r = 0; r < want.mapping.size(); r += 4) repeated += children.insert(want.mapping[r + 1]).second ? 0 : 1;
  ASSERT_GT(repeated, 0u) << "the construction no longer gives a voxel two parents";
  expect_same(on_device(batch, 3, 4), want);
}

TEST_F(GpuSequoiaHierarchy, RefusedInputGivesTheHostBuildersError) {
  const auto message = [&](const Batch& batch, int divide, int depth, bool device) {
    try {
      if (device) on_device(batch, divide, depth);
      else sq::collate(sq::build_sample_hierarchies(batch.samples(), divide, depth));
    } catch (const surrogate::Error& e) {
      return std::to_string(static_cast<int>(e.code())) + ": " + e.what();
    }
    return std::string("no error");
  };
  Batch nan, wide, flat, empty, fine;
  nan.add(box(50, 1));
  nan.add(box(60, 2));
  nan.points[50 * 3 + 7 * 3 + 1] = std::nanf("");  // sample 1, point 7
  wide.add({0.0f, 0.0f, 0.0f, 3e7f, 1.0f, 1.0f});  // several root voxels
  flat.add({1e30f, 0.1f, 0.2f, 1e30f, 0.5f, 0.7f});  // no extent where float32 cannot add the margin
  empty.add(box(10, 3));
  empty.first.push_back(empty.first.back());  // a sample without points
  fine.add(box(10, 4));
  for (const Batch* b : {&nan, &wide, &flat, &empty}) {
    const std::string host = message(*b, 3, 3, false);
    EXPECT_NE(host, "no error");
    EXPECT_EQ(message(*b, 3, 3, true), host);
  }
  EXPECT_EQ(message(fine, 1, 3, true), message(fine, 1, 3, false));     // divide below 2
  EXPECT_EQ(message(fine, 1024, 5, true), message(fine, 1024, 5, false));  // 2^40 voxels per axis
  EXPECT_NE(message(fine, 1024, 5, true), "no error");
}

}  // namespace
