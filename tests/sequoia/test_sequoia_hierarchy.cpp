// The voxel hierarchy (surrogate/sequoia.hpp) against the official builder, integer-exactly and bitwise:
// tests/data/sequoia/sequoia_hierarchy.h5 (made by share/tools/golden/sequoia_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "h5_golden.hpp"
#include "surrogate/error.hpp"
#include "surrogate/sequoia.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace sq = surrogate::sequoia;
using sequoia_test::H5;

namespace {

std::vector<std::uint32_t> bits(const float* v, std::size_t n) {
  std::vector<std::uint32_t> b(n);
  std::memcpy(b.data(), v, n * sizeof(float));
  return b;
}
std::vector<std::uint32_t> bits(const std::vector<float>& v) { return bits(v.data(), v.size()); }

struct Golden {
  H5 f{sequoia_test::data_path("hierarchy")};
};

/// Every sample of a case, compared dataset by dataset; returns the hierarchies.
std::vector<sq::SampleHierarchy> check_samples(const H5& f, const std::string& c, int divide, int depth) {
  const auto sizes = f.i64(c + "/sample_sizes");
  std::vector<sq::SampleHierarchy> out;
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    const std::string g = c + "/sample_" + std::to_string(b) + "/";
    SCOPED_TRACE(g);
    const auto points = f.f32(g + "points");
    const auto s = sq::build_sample_hierarchy(points.data(), static_cast<std::int64_t>(sizes[b]), divide, depth);
    EXPECT_EQ(bits(s.lo, 3), bits(f.f32(g + "bbox_lo")));
    EXPECT_EQ(bits(s.hi, 3), bits(f.f32(g + "bbox_hi")));
    EXPECT_EQ(bits(s.steps), bits(f.f32(g + "steps")));
    EXPECT_EQ(s.voxel_coords, f.i32(g + "voxel_coords"));
    EXPECT_EQ(s.voxel_hashes, f.u64(g + "voxel_hashes"));
    EXPECT_EQ(s.voxel_rows, f.i32(g + "voxel_rows"));
    EXPECT_EQ(bits(s.virtual_positions), bits(f.f32(g + "virtual_positions")));
    EXPECT_EQ(s.pair_hashes.size(), static_cast<std::size_t>(depth - 2));
    for (int l = 1; l + 1 < depth && s.pair_hashes.size() == static_cast<std::size_t>(depth - 2); ++l)
      EXPECT_EQ(s.pair_hashes[static_cast<std::size_t>(l - 1)], f.u64(g + "pair_hashes_" + std::to_string(l)));
    EXPECT_EQ(s.mapping, f.i64(g + "mapping"));
    out.push_back(s);
  }
  return out;
}

void check_batch(const H5& f, const std::string& c, const std::vector<sq::SampleHierarchy>& samples) {
  const std::string g = c + "/batch/";
  const sq::Hierarchy h = sq::collate(samples);
  EXPECT_EQ(bits(h.coords), bits(f.f32(g + "coords")));
  EXPECT_EQ(h.offset, f.i64(g + "offset"));
  EXPECT_EQ(h.mapping, f.i64(g + "mapping"));
  EXPECT_EQ(h.mapping_local, f.i64(g + "mapping_local"));
  for (int i = 0; i <= h.depth; ++i) {
    const std::string li = std::to_string(i);
    EXPECT_EQ(h.level_ids[static_cast<std::size_t>(i)], f.i64(g + "level_ids_" + li)) << li;
    EXPECT_EQ(h.level_batch[static_cast<std::size_t>(i)], f.i64(g + "level_batch_" + li)) << li;
    if (i < h.depth) {
      EXPECT_EQ(h.pool_parent[static_cast<std::size_t>(i)], f.i64(g + "pool_parent_" + li)) << li;
    }
  }
}

struct CaseSpec {
  const char* name;
  int divide, depth;
};
void PrintTo(const CaseSpec& c, std::ostream* os) { *os << c.name << " (divide " << c.divide << ", depth " << c.depth << ")"; }

class Hierarchy : public ::testing::TestWithParam<CaseSpec> {};

TEST_P(Hierarchy, MatchesOfficialBuilder) {
  const Golden g;
  const CaseSpec spec = GetParam();
  const std::string c = std::string("/golden/") + spec.name;
  const auto samples = check_samples(g.f, c, spec.divide, spec.depth);
  if (g.f.exists(c + "/batch")) check_batch(g.f, c, samples);
}

INSTANTIATE_TEST_SUITE_P(Official, Hierarchy,
                         ::testing::Values(CaseSpec{"random_1024", 3, 3}, CaseSpec{"mixed_batch", 3, 3},
                                           CaseSpec{"divide2_depth4", 2, 4}, CaseSpec{"depth2", 3, 2}),
                         [](const auto& param_info) { return std::string(param_info.param.name); });

TEST(HierarchyErrors, ExtentBeyondTheMarginsIsAnInputError) {
  // The official builder raises ValueError here (several level-0 voxels); the library says why.
  const Golden g;
  const auto points = g.f.f32("/golden/large_coords/sample_0/points");
  try {
    sq::build_sample_hierarchy(points.data(), static_cast<std::int64_t>(points.size() / 3), 3, 3, "sample 0");
    FAIL() << "no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("root voxels"), std::string::npos) << e.what();
  }
}

TEST(HierarchyErrors, NonFiniteCoordinateIsAnInputError) {
  // The official builder hashes NaN as INT32_MIN voxel coordinates without complaint; the library refuses.
  const Golden g;
  const auto points = g.f.f32("/golden/nan/sample_0/points");
  EXPECT_THROW(sq::build_sample_hierarchy(points.data(), static_cast<std::int64_t>(points.size() / 3), 3, 3),
               surrogate::Error);
  EXPECT_THROW(sq::build_sample_hierarchy(points.data(), 0, 3, 3), surrogate::Error);
}

TEST(HierarchyErrors, NoExtentAtALargeMagnitudeIsAnInputError) {
  // Found by the fuzzer: every x at 1e30, where float32 cannot add the 1e-6 margin, gave a zero step and
  // NaN voxel coordinates (undefined behaviour converting them to int32; the official code hashes garbage).
  const std::vector<float> points = {1e30f, 0.1f, 0.2f, 1e30f, 0.5f, 0.7f, 1e30f, 0.9f, 0.3f};
  try {
    sq::build_sample_hierarchy(points.data(), 3, 3, 3, "sample 0");
    FAIL() << "no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("sample 0: the points span no extent along axis 0"), std::string::npos)
        << e.what();
  }
}

TEST(HierarchyErrors, MoreVoxelsPerAxisThanInt32IsRefused) {
  const std::vector<float> points = {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f};
  EXPECT_NO_THROW(sq::build_sample_hierarchy(points.data(), 2, 2, 31));  // 2^30 voxels per axis
  try {
    sq::build_sample_hierarchy(points.data(), 2, 1024, 5);  // 2^40
    FAIL() << "no error";
  } catch (const surrogate::Error& e) {
    EXPECT_NE(std::string(e.what()).find("1024^4 voxels per axis exceed int32 coordinates"), std::string::npos)
        << e.what();
  }
}

TEST(HierarchyBatch, SamplesBuiltOnManyThreadsGiveTheSerialHierarchyAndError) {
#ifndef _OPENMP
  GTEST_SKIP() << "built without OpenMP";
#else
  // Seven samples of different sizes (Gaussian clouds): the collated hierarchy of build_hierarchy
  // (samples on the threads) is that of the samples built one after another and collated.
  std::mt19937 gen(23u);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t n : {300, 2, 2048, 77, 1000, 5, 129}) offsets.push_back(offsets.back() + n);
  std::vector<float> points(static_cast<std::size_t>(offsets.back()) * 3);
  for (float& v : points) v = normal(gen);
  std::vector<sq::SampleHierarchy> serial;
  for (std::size_t b = 0; b + 1 < offsets.size(); ++b)
    serial.push_back(sq::build_sample_hierarchy(points.data() + offsets[b] * 3, offsets[b + 1] - offsets[b], 3, 4));
  const sq::Hierarchy expected = sq::collate(serial);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(4);
  const sq::Hierarchy h = sq::build_hierarchy(points.data(), offsets, 3, 4);
  EXPECT_EQ(bits(h.coords), bits(expected.coords));
  EXPECT_EQ(h.mapping, expected.mapping);
  EXPECT_EQ(h.offset, expected.offset);
  EXPECT_EQ(h.level_ids, expected.level_ids);
  EXPECT_EQ(h.pool_parent, expected.pool_parent);
  EXPECT_EQ(h.parent_edges, expected.parent_edges);
  EXPECT_EQ(h.child_edges, expected.child_edges);
  // Samples 2 and 5 are bad: the error is sample 2's, as one after another.
  points[static_cast<std::size_t>(offsets[2] * 3 + 4)] = std::numeric_limits<float>::quiet_NaN();
  points[static_cast<std::size_t>(offsets[5] * 3)] = std::numeric_limits<float>::infinity();
  for (int attempt = 0; attempt < 5; ++attempt) {
    try {
      sq::build_hierarchy(points.data(), offsets, 3, 4);
      ADD_FAILURE() << "no error";
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
      EXPECT_NE(std::string(e.what()).find("sample 2, point 1: non-finite coordinate 1"), std::string::npos) << e.what();
    }
  }
  omp_set_num_threads(saved);
#endif
}

TEST(Fnv, MultiplyThenXorSignExtended) {
  // h = ((basis * prime) ^ -1) computed by hand in unsigned 64-bit arithmetic.
  const std::int64_t col[1] = {-1};
  const std::uint64_t expected = (14695981039346656037ull * 1099511628211ull) ^ 0xffffffffffffffffull;
  EXPECT_EQ(sq::fnv64(col, 1), expected);
}

}  // namespace
