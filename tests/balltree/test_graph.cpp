// kNN and radius graphs (surrogate/graph.hpp) against an independent brute-force O(N^2) reference that
// implements the documented rule literally (all candidates, squared distances in the coordinates' type
// without FMA, sorted by (distance, index)); clouds with many ties (lattices, duplicates), batches,
// thread independence, the kNN graphs of the Erwin golden files, bad input.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/graph.hpp"

namespace bt = surrogate::balltree;
namespace gr = surrogate::graph;
using surrogate::Error;
using surrogate::ErrorCode;

namespace {

template <class Real>
Real squared(const std::vector<Real>& p, int dim, std::int64_t i, std::int64_t j) {
  Real sum = 0;
  for (int c = 0; c < dim; ++c) {
    const Real d = p[static_cast<std::size_t>(i * dim + c)] - p[static_cast<std::size_t>(j * dim + c)];
    sum += d * d;
  }
  return sum;
}

/// Brute force: for every receiver i (in order) the sorted candidates of its sample, then `keep` decides.
template <class Real, class Keep>
std::vector<std::int64_t> brute(const std::vector<Real>& p, int dim, const bt::Batch& batch, bool loop, Keep keep) {
  std::vector<std::int64_t> src, dst;
  for (std::int64_t b = 0; b < batch.samples(); ++b)
    for (std::int64_t i = batch.begin(b); i < batch.end(b); ++i) {
      std::vector<std::pair<Real, std::int64_t>> all;
      for (std::int64_t j = batch.begin(b); j < batch.end(b); ++j)
        if (loop || j != i) all.push_back({squared(p, dim, i, j), j});
      std::sort(all.begin(), all.end());
      for (const auto& c : keep(all)) {
        src.push_back(c.second);
        dst.push_back(i);
      }
    }
  src.insert(src.end(), dst.begin(), dst.end());
  return src;
}

template <class Real>
std::vector<std::int64_t> brute_knn(const std::vector<Real>& p, int dim, const bt::Batch& batch, int k, bool loop) {
  return brute(p, dim, batch, loop, [&](std::vector<std::pair<Real, std::int64_t>> all) {
    if (static_cast<int>(all.size()) > k) all.resize(static_cast<std::size_t>(k));
    return all;
  });
}

template <class Real>
std::vector<std::int64_t> brute_radius(const std::vector<Real>& p, int dim, const bt::Batch& batch, double r, int max_n,
                                       bool loop) {
  const Real r2 = static_cast<Real>(r * r);
  return brute(p, dim, batch, loop, [&](std::vector<std::pair<Real, std::int64_t>> all) {
    std::vector<std::pair<Real, std::int64_t>> in;
    for (const auto& c : all)
      if (c.first < r2 && static_cast<int>(in.size()) < max_n) in.push_back(c);
    return in;
  });
}

std::vector<float> random_cloud(std::int64_t n, int dim, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> p(static_cast<std::size_t>(n * dim));
  for (auto& v : p) v = normal(rng);
  return p;
}

/// Integer lattice (every point has many neighbours at equal distances) plus exact duplicates.
std::vector<float> lattice_with_duplicates(int side, int dim, int duplicates) {
  std::vector<float> p;
  const int n = static_cast<int>(std::pow(side, dim));
  for (int i = 0; i < n; ++i) {
    int rest = i;
    for (int c = 0; c < dim; ++c) {
      p.push_back(static_cast<float>(rest % side));
      rest /= side;
    }
  }
  for (int d = 0; d < duplicates; ++d)
    for (int c = 0; c < dim; ++c) p.push_back(p[static_cast<std::size_t>((d * 7 % n) * dim + c)]);
  return p;
}

bt::Batch two_samples(std::int64_t a, std::int64_t b) { return bt::Batch::from_offsets(std::vector<std::int64_t>{0, a, a + b}); }

TEST(KnnGraph, RandomCloudsMatchBruteForce) {
  for (const int dim : {2, 3}) {
    const auto p = random_cloud(357, dim, 11u + static_cast<unsigned>(dim));
    const bt::Batch batch = two_samples(300, 57);
    for (const int k : {1, 8, 16})
      for (const bool loop : {true, false}) {
        const gr::Edges e = gr::knn_graph(p, dim, batch, k, loop);
        EXPECT_EQ(e.index, brute_knn(p, dim, batch, k, loop)) << "dim " << dim << " k " << k << " loop " << loop;
      }
  }
}

TEST(KnnGraph, TiesOnLatticesAndDuplicatesFollowTheIndexRule) {
  for (const int dim : {2, 3}) {
    const auto p = lattice_with_duplicates(dim == 2 ? 13 : 6, dim, 20);
    const std::int64_t n = static_cast<std::int64_t>(p.size()) / dim;
    const bt::Batch batch = two_samples(n - 31, 31);
    for (const int k : {4, 7, 27})
      for (const bool loop : {true, false})
        EXPECT_EQ(gr::knn_graph(p, dim, batch, k, loop).index, brute_knn(p, dim, batch, k, loop))
            << "dim " << dim << " k " << k << " loop " << loop;
  }
  // Self is one of the k with loop = true; with duplicates of a point the smaller index comes first.
  const std::vector<float> dup = {0, 0, 0, 0, 1, 0};  // points 0 and 1 coincide
  const gr::Edges e = gr::knn_graph(dup, 2, bt::Batch::single(3), 1, true);
  EXPECT_EQ(e.index, (std::vector<std::int64_t>{0, 0, 2, 0, 1, 2}));
}

TEST(KnnGraph, DoublePrecisionAndSmallSamples) {
  const auto pf = random_cloud(200, 3, 5u);
  const std::vector<double> p(pf.begin(), pf.end());
  const bt::Batch batch = two_samples(197, 3);  // k above the sample size: all its points
  EXPECT_EQ(gr::knn_graph(p, 3, batch, 8, true).index, brute_knn(p, 3, batch, 8, true));
  EXPECT_EQ(gr::knn_graph(p, 3, batch, 8, false).index, brute_knn(p, 3, batch, 8, false));
}

TEST(KnnGraph, LargeCloudSampledReceiversMatchBruteForce) {
  const std::int64_t n = 60000;
  const auto p = random_cloud(n, 3, 17u);
  const gr::Edges e = gr::knn_graph(p, 3, bt::Batch::single(n), 8, true);
  ASSERT_EQ(e.count(), 8 * n);
  for (std::int64_t i = 0; i < n; i += 997) {
    std::vector<std::pair<float, std::int64_t>> all;
    for (std::int64_t j = 0; j < n; ++j) all.push_back({squared(p, 3, i, j), j});
    std::partial_sort(all.begin(), all.begin() + 8, all.end());
    for (int m = 0; m < 8; ++m) {
      EXPECT_EQ(e.index[static_cast<std::size_t>(8 * i + m)], all[static_cast<std::size_t>(m)].second) << "receiver " << i;
      EXPECT_EQ(e.index[static_cast<std::size_t>(e.count() + 8 * i + m)], i);
    }
  }
}

TEST(RadiusGraph, MatchesBruteForceWithTruncationAndStrictBoundary) {
  for (const int dim : {2, 3}) {
    const auto p = random_cloud(400, dim, 23u + static_cast<unsigned>(dim));
    const bt::Batch batch = two_samples(250, 150);
    for (const double r : {0.3, 0.8})
      for (const int max_n : {5, 32})
        for (const bool loop : {true, false})
          EXPECT_EQ(gr::radius_graph(p, dim, batch, r, max_n, loop).index, brute_radius(p, dim, batch, r, max_n, loop))
              << "dim " << dim << " r " << r << " max " << max_n << " loop " << loop;
  }
  // Lattice spacing 1 and r = 1: the axis neighbours at distance exactly 1 are excluded (strict <).
  const auto lat = lattice_with_duplicates(5, 2, 3);
  const std::int64_t n = static_cast<std::int64_t>(lat.size()) / 2;
  const gr::Edges at_one = gr::radius_graph(lat, 2, bt::Batch::single(n), 1.0, 32, true);
  EXPECT_EQ(at_one.index, brute_radius(lat, 2, bt::Batch::single(n), 1.0, 32, true));
  EXPECT_EQ(at_one.count(), n + 2 * 3);  // self loops plus each duplicate pair in both directions
  EXPECT_EQ(gr::radius_graph(lat, 2, bt::Batch::single(n), 1.5, 3, true).index,
            brute_radius(lat, 2, bt::Batch::single(n), 1.5, 3, true));
}

TEST(Graphs, IndependentOfThreadCount) {
  const auto p = random_cloud(3000, 3, 31u);
  const bt::Batch batch = two_samples(1800, 1200);
  const auto one = gr::knn_graph(p, 3, batch, 8, true, 1).index;
  const auto rone = gr::radius_graph(p, 3, batch, 0.4, 32, true, 1).index;
  for (const int t : {2, 3}) {
    EXPECT_EQ(gr::knn_graph(p, 3, batch, 8, true, t).index, one);
    EXPECT_EQ(gr::radius_graph(p, 3, batch, 0.4, 32, true, t).index, rone);
  }
}

std::vector<std::int64_t> read_ints(hid_t file, const char* name) {
  const hid_t d = H5Dopen2(file, name, H5P_DEFAULT);
  const hid_t s = H5Dget_space(d);
  std::vector<std::int64_t> v(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
  H5Dread(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(s);
  H5Dclose(d);
  return v;
}

// The golden files' edges were made by the generator with float64 distances and a stable argsort (ties
// by index): on these random clouds the float32 rule gives the same graph, edge for edge.
TEST(KnnGraph, ErwinGoldenGraphs) {
  for (const auto& [name, k] : {std::pair<const char*, int>{"mpnn_rot", 6}, {"mpnn_norot", 5}}) {
    const std::string path = std::string(SURROGATE_TEST_DATA_DIR) + "/erwin/erwin_" + name + ".h5";
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0) << path;
    const hid_t d = H5Dopen2(f, "/golden/positions", H5P_DEFAULT);
    const hid_t s = H5Dget_space(d);
    std::vector<float> pos(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
    H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, pos.data());
    H5Sclose(s);
    H5Dclose(d);
    const auto sizes = read_ints(f, "/golden/sample_sizes");
    const auto edges = read_ints(f, "/golden/edge_index");
    H5Fclose(f);
    std::vector<std::int64_t> offsets{0};
    for (const auto n : sizes) offsets.push_back(offsets.back() + n);
    EXPECT_EQ(gr::knn_graph(pos, 3, bt::Batch::from_offsets(offsets), k, true).index, edges) << name;
  }
}

TEST(Graphs, ReceiverRangesAreSlicesOfTheWholeGraph) {
  // A range lists exactly the whole graph's edges of its receivers, in the same order (ranges inside a
  // sample, across the sample boundary, empty, to the end); an invalid range is refused. Likewise a subset.
  const auto p = random_cloud(500, 3, 23u);
  const bt::Batch batch = two_samples(320, 180);
  const gr::Edges knn = gr::knn_graph(p, 3, batch, 7, true);
  const gr::Edges radius = gr::radius_graph(p, 3, batch, 0.3, 12, false);
  auto slice = [](const gr::Edges& g, std::int64_t first, std::int64_t last) {
    std::vector<std::int64_t> src, dst;
    for (std::int64_t e = 0; e < g.count(); ++e) {
      const std::int64_t i = g.index[static_cast<std::size_t>(g.count() + e)];
      if (i < first || i >= last) continue;
      src.push_back(g.index[static_cast<std::size_t>(e)]);
      dst.push_back(i);
    }
    src.insert(src.end(), dst.begin(), dst.end());
    return src;
  };
  for (const auto& [first, last] : std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 100}, {250, 400}, {320, 320}, {499, 500}, {0, 500}}) {
    EXPECT_EQ(gr::knn_graph(p, 3, batch, 7, true, 0, {first, last}).index, slice(knn, first, last)) << first << " " << last;
    EXPECT_EQ(gr::radius_graph(p, 3, batch, 0.3, 12, false, 0, {first, last}).index, slice(radius, first, last))
        << first << " " << last;
  }
  EXPECT_EQ(gr::knn_graph(p, 3, batch, 7, true, 0, {400, -1}).index, slice(knn, 400, 500));
  EXPECT_THROW(gr::knn_graph(p, 3, batch, 7, true, 0, {10, 5}), Error);
  EXPECT_THROW(gr::knn_graph(p, 3, batch, 7, true, 0, {0, 501}), Error);

  // A subset of a range (every third receiver of 250 ... 399, across the sample boundary): the whole
  // graph's edges of those receivers only, in the same order; a subset not increasing or outside the
  // range is refused.
  std::vector<std::int64_t> subset;
  for (std::int64_t i = 250; i < 400; i += 3) subset.push_back(i);
  auto select = [&](const gr::Edges& g) {
    std::vector<std::int64_t> src, dst;
    for (std::int64_t e = 0; e < g.count(); ++e) {
      const std::int64_t i = g.index[static_cast<std::size_t>(g.count() + e)];
      if (!std::binary_search(subset.begin(), subset.end(), i)) continue;
      src.push_back(g.index[static_cast<std::size_t>(e)]);
      dst.push_back(i);
    }
    src.insert(src.end(), dst.begin(), dst.end());
    return src;
  };
  EXPECT_EQ(gr::knn_graph(p, 3, batch, 7, true, 0, {250, 400, subset}).index, select(knn));
  EXPECT_EQ(gr::radius_graph(p, 3, batch, 0.3, 12, false, 0, {250, 400, subset}).index, select(radius));
  const std::vector<std::int64_t> unsorted{260, 255}, outside{240, 260};
  EXPECT_THROW(gr::knn_graph(p, 3, batch, 7, true, 0, {250, 400, unsorted}), Error);
  EXPECT_THROW(gr::knn_graph(p, 3, batch, 7, true, 0, {250, 400, outside}), Error);
}

TEST(Graphs, BadInput) {
  const std::vector<float> p = {0, 0, 1, 1, 2, 2};
  const bt::Batch one = bt::Batch::single(3);
  auto code = [](auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.code();
    }
    return ErrorCode::ok;
  };
  EXPECT_EQ(code([&] { gr::knn_graph(p, 2, one, 0); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code([&] { gr::knn_graph(p, 0, one, 2); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code([&] { gr::knn_graph(p, 3, one, 2); }), ErrorCode::input);
  EXPECT_EQ(code([&] { gr::radius_graph(p, 2, one, 0.0); }), ErrorCode::invalid_argument);
  EXPECT_EQ(code([&] { gr::radius_graph(p, 2, one, 1.0, 0); }), ErrorCode::invalid_argument);
  std::vector<float> bad = p;
  bad[3] = std::nanf("");
  EXPECT_EQ(code([&] { gr::knn_graph(bad, 2, one, 2); }), ErrorCode::input);
}

}  // namespace
