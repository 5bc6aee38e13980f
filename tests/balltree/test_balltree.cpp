// Ball tree (surrogate/balltree.hpp): bit-for-bit against the official balltree-erwin (golden file
// tests/data/balltree/balltree.h5, see its README.md), invariants on random clouds, and bad input.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/error.hpp"

#ifdef _OPENMP
#include <omp.h>
#endif

namespace bt = surrogate::balltree;
using surrogate::Error;
using surrogate::ErrorCode;

namespace {

const std::string kGolden = std::string(SURROGATE_TEST_DATA_DIR) + "/balltree/balltree.h5";

// ---------------------------------------------------------------------------------------------------
// Minimal HDF5 reading.
class H5File {
 public:
  explicit H5File(const std::string& path) : id_(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT)) {
    if (id_ < 0) throw std::runtime_error("cannot open " + path);
  }
  ~H5File() { H5Fclose(id_); }
  H5File(const H5File&) = delete;
  H5File& operator=(const H5File&) = delete;
  hid_t id() const { return id_; }

  std::vector<std::string> children(const std::string& group) const {
    std::vector<std::string> names;
    const hid_t g = H5Gopen2(id_, group.c_str(), H5P_DEFAULT);
    if (g < 0) throw std::runtime_error("no group " + group);
    H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, &H5File::collect, &names);
    H5Gclose(g);
    return names;
  }
  bool exists(const std::string& path) const { return H5Lexists(id_, path.c_str(), H5P_DEFAULT) > 0; }

  /// Reads a dataset converted to T; `shape` receives its dimensions.
  template <typename T>
  std::vector<T> read(const std::string& path, hid_t memtype, std::vector<hsize_t>* shape = nullptr) const {
    const hid_t d = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
    if (d < 0) throw std::runtime_error("no dataset " + path);
    const hid_t s = H5Dget_space(d);
    std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(s)));
    H5Sget_simple_extent_dims(s, dims.data(), nullptr);
    hsize_t n = 1;
    for (auto x : dims) n *= x;
    std::vector<T> v(static_cast<std::size_t>(n));
    if (n > 0 && H5Dread(d, memtype, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0) throw std::runtime_error("cannot read " + path);
    H5Sclose(s);
    H5Dclose(d);
    if (shape) *shape = dims;
    return v;
  }
  std::vector<std::int64_t> ints(const std::string& path) const { return read<std::int64_t>(path, H5T_NATIVE_INT64); }
  std::vector<float> floats(const std::string& path, std::vector<hsize_t>* shape = nullptr) const {
    return read<float>(path, H5T_NATIVE_FLOAT, shape);
  }
  std::vector<double> doubles(const std::string& path, std::vector<hsize_t>* shape = nullptr) const {
    return read<double>(path, H5T_NATIVE_DOUBLE, shape);
  }
  std::size_t element_size(const std::string& path) const {
    const hid_t d = H5Dopen2(id_, path.c_str(), H5P_DEFAULT);
    const hid_t t = H5Dget_type(d);
    const std::size_t size = H5Tget_size(t);
    H5Tclose(t);
    H5Dclose(d);
    return size;
  }
  double attribute(const std::string& object, const std::string& name) const {
    const hid_t a = H5Aopen_by_name(id_, object.c_str(), name.c_str(), H5P_DEFAULT, H5P_DEFAULT);
    if (a < 0) throw std::runtime_error("no attribute " + name + " on " + object);
    double v = 0;
    H5Aread(a, H5T_NATIVE_DOUBLE, &v);
    H5Aclose(a);
    return v;
  }

 private:
  static herr_t collect(hid_t, const char* name, const H5L_info_t*, void* data) {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  }
  hid_t id_;
};

/// Points of a golden case and their dimension.
struct Cloud {
  std::vector<float> f32;
  std::vector<double> f64;
  bool is_double = false;
  int dim = 0;
};

Cloud read_cloud(const H5File& f, const std::string& path) {
  Cloud c;
  std::vector<hsize_t> shape;
  c.is_double = f.element_size(path) == 8;
  if (c.is_double)
    c.f64 = f.doubles(path, &shape);
  else
    c.f32 = f.floats(path, &shape);
  c.dim = static_cast<int>(shape.at(1));
  return c;
}

/// "" when equal, else where they first differ.
template <typename T, typename U>
std::string first_difference(const std::vector<T>& got, const std::vector<U>& want) {
  if (got.size() != want.size()) return "size " + std::to_string(got.size()) + ", expected " + std::to_string(want.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    if (static_cast<std::int64_t>(got[i]) != static_cast<std::int64_t>(want[i]))
      return "slot " + std::to_string(i) + ": " + std::to_string(static_cast<std::int64_t>(got[i])) + ", expected " +
             std::to_string(static_cast<std::int64_t>(want[i]));
  return "";
}

/// The batch of a golden case: its sample sizes (the official code was given batch_idx 0,0,..,1,1,..).
bt::Batch golden_batch(const H5File& f, const std::string& group) {
  std::vector<std::int64_t> offsets{0};
  for (auto n : f.ints(group + "/sample_sizes")) offsets.push_back(offsets.back() + n);
  return bt::Batch::from_batch_idx(bt::Batch::from_offsets(offsets).batch_idx());
}

std::vector<std::uint8_t> as_u8(const std::vector<std::int64_t>& v) { return {v.begin(), v.end()}; }

// ---------------------------------------------------------------------------------------------------
// Golden: the official package.
TEST(BallTreeGolden, FileRecordsTheOfficialPackage) {
  H5File f(kGolden);
  const hid_t a = H5Aopen(f.id(), "balltree_erwin_version", H5P_DEFAULT);
  ASSERT_GE(a, 0);
  H5Aclose(a);
  EXPECT_GE(f.children("/build").size(), 20u);
  EXPECT_GE(f.children("/partition").size(), 5u);
  EXPECT_GE(f.children("/rotations").size(), 5u);
}

TEST(BallTreeGolden, BuildMatchesOfficialBitForBit) {
  H5File f(kGolden);
  int cases = 0;
  for (const std::string& name : f.children("/build")) {
    SCOPED_TRACE(name);
    const std::string g = "/build/" + name;
    const Cloud c = read_cloud(f, g + "/points");
    const bt::Batch batch = golden_batch(f, g);
    const bt::Tree t = c.is_double ? bt::build(c.f64, c.dim, batch) : bt::build(c.f32, c.dim, batch);
    EXPECT_EQ(first_difference(t.index, f.ints(g + "/tree_idx")), "") << "tree_idx";
    EXPECT_EQ(first_difference(t.mask, as_u8(f.ints(g + "/tree_mask"))), "") << "tree_mask";
    ++cases;
  }
  EXPECT_GE(cases, 20);
}

TEST(BallTreeGolden, WorkedExamplesOfTheSpecification) {
  // reference-models.md §1.2.2: n = 3 -> [a, a, b, c], mask [1,0,1,1]; n = 5 -> mask [1,0,1,0,1,0,1,1].
  H5File f(kGolden);
  const bt::Tree t3 = bt::build(f.floats("/build/worked_n3/points"), 2, bt::Batch::single(3));
  EXPECT_EQ(t3.index, (std::vector<std::int64_t>{0, 0, 1, 2}));
  EXPECT_EQ(t3.mask, (std::vector<std::uint8_t>{1, 0, 1, 1}));
  // Points x = 4, 0, 3, 1, 2 on a line: leaves (0,0) (1,1) (2,2) (3,4) in the official slot order.
  const bt::Tree t5 = bt::build(f.floats("/build/worked_n5/points"), 2, bt::Batch::single(5));
  EXPECT_EQ(t5.index, (std::vector<std::int64_t>{1, 1, 3, 3, 4, 4, 2, 0}));
  EXPECT_EQ(t5.mask, (std::vector<std::uint8_t>{1, 0, 1, 0, 1, 0, 1, 1}));
  const bt::Tree big = bt::build(f.floats("/build/shapenet_n3586_grid12/points"), 3, bt::Batch::single(3586));
  EXPECT_EQ(big.slots(), 4096);
  EXPECT_EQ(std::count(big.mask.begin(), big.mask.end(), 0), 510);
}

TEST(BallTreeGolden, PartitionMatchesOfficialBitForBit) {
  H5File f(kGolden);
  int cases = 0;
  for (const std::string& name : f.children("/partition")) {
    SCOPED_TRACE(name);
    const std::string g = "/partition/" + name;
    const Cloud c = read_cloud(f, g + "/points");
    const bt::Batch batch = golden_batch(f, g);
    const int target = static_cast<int>(f.attribute(g, "target_level"));
    const auto perm = c.is_double ? bt::partition(c.f64, c.dim, batch, target) : bt::partition(c.f32, c.dim, batch, target);
    EXPECT_EQ(first_difference(perm, f.ints(g + "/perm")), "");
    ++cases;
  }
  EXPECT_GE(cases, 5);
}

TEST(BallTreeGolden, RotatedTreesMatchOfficialBitForBit) {
  H5File f(kGolden);
  int cases = 0;
  for (const std::string& name : f.children("/rotations")) {
    SCOPED_TRACE(name);
    const std::string g = "/rotations/" + name;
    const Cloud c = read_cloud(f, g + "/points");
    ASSERT_FALSE(c.is_double);
    const bt::Batch batch = golden_batch(f, g);
    const auto strides64 = f.ints(g + "/strides");
    const auto balls64 = f.ints(g + "/ball_sizes");
    const std::vector<int> strides(strides64.begin(), strides64.end()), balls(balls64.begin(), balls64.end());
    const double angle = f.attribute(g, "angle");
    const bt::RotatedTrees r = bt::build_with_rotations(c.f32, c.dim, batch, strides, balls, angle);
    const bt::Tree t = bt::build(c.f32, c.dim, batch);  // checked against the official in BuildMatches...
    EXPECT_EQ(r.tree.index, t.index);
    EXPECT_EQ(r.tree.mask, t.mask);
    if (angle <= 0) {
      EXPECT_TRUE(r.rotated.empty());
      EXPECT_FALSE(f.exists(g + "/rot_0"));
    } else {
      ASSERT_EQ(r.rotated.size(), balls.size());
      for (std::size_t i = 0; i < balls.size(); ++i)
        EXPECT_EQ(first_difference(r.rotated[i], f.ints(g + "/rot_" + std::to_string(i))), "") << "rot_" << i;
    }
    ++cases;
  }
  EXPECT_GE(cases, 8);
}

TEST(BallTreeGolden, RotationMatrixMatmulAndMeanPoolRoundLikeTorch) {
  H5File f(kGolden);
  for (const std::string& name : f.children("/rotation_matrix")) {
    SCOPED_TRACE(name);
    const std::string g = "/rotation_matrix/" + name;
    const int dim = static_cast<int>(f.attribute(g, "dim"));
    const auto want = f.floats(g + "/matrix");
    const auto r = bt::rotation_matrix(f.attribute(g, "angle"), dim);
    for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(r[i], want[i]) << "entry " << i;
  }
  for (const std::string& name : f.children("/matmul")) {
    SCOPED_TRACE(name);
    const std::string g = "/matmul/" + name;
    std::vector<hsize_t> shape;
    const auto x = f.floats(g + "/x", &shape);
    const auto y = bt::rotate(x, static_cast<int>(shape[1]), f.attribute(g, "angle"));
    const auto want = f.floats(g + "/y");
    ASSERT_EQ(y.size(), want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < y.size(); ++i) differ += y[i] != want[i] ? 1 : 0;
    EXPECT_EQ(differ, 0u);
  }
  for (const std::string& name : f.children("/mean_pool")) {
    SCOPED_TRACE(name);
    const std::string g = "/mean_pool/" + name;
    std::vector<hsize_t> shape;
    const auto x = f.floats(g + "/x", &shape);
    const auto y = bt::mean_pool(x, static_cast<int>(shape[1]), static_cast<int>(f.attribute(g, "stride")));
    const auto want = f.floats(g + "/y");
    ASSERT_EQ(y.size(), want.size());
    std::size_t differ = 0;
    for (std::size_t i = 0; i < y.size(); ++i) differ += y[i] != want[i] ? 1 : 0;
    EXPECT_EQ(differ, 0u);
  }
}

// ---------------------------------------------------------------------------------------------------
// Invariants on random clouds.

std::vector<double> random_cloud(std::mt19937_64& rng, std::int64_t n, int dim, int distinct = 0) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  std::vector<double> base(static_cast<std::size_t>((distinct > 0 ? distinct : n) * dim));
  for (auto& v : base) v = u(rng);
  if (distinct <= 0) return base;
  std::vector<double> x(static_cast<std::size_t>(n * dim));
  std::uniform_int_distribution<int> pick(0, distinct - 1);
  for (std::int64_t i = 0; i < n; ++i) {
    const int p = pick(rng);
    std::copy_n(base.begin() + p * dim, dim, x.begin() + i * dim);
  }
  return x;
}

/// Checks one node of a complete tree: its slots [lo, hi) split in halves; the real points of the left half
/// are floor(count/2) and lie at or below the right half's along the dimension of largest spread.
void check_node(const std::vector<double>& x, int dim, const bt::Tree& t, std::int64_t lo, std::int64_t hi, std::string& err) {
  if (hi - lo <= 2 || !err.empty()) return;
  const std::int64_t mid = (lo + hi) / 2;
  auto real = [&](std::int64_t a, std::int64_t b) {
    std::vector<std::int64_t> p;
    for (std::int64_t s = a; s < b; ++s)
      if (t.mask[static_cast<std::size_t>(s)]) p.push_back(t.index[static_cast<std::size_t>(s)]);
    return p;
  };
  const auto left = real(lo, mid), right = real(mid, hi), all = real(lo, hi);
  if (static_cast<std::int64_t>(left.size()) != static_cast<std::int64_t>(all.size()) / 2) {
    err = "node [" + std::to_string(lo) + "," + std::to_string(hi) + "): left has " + std::to_string(left.size()) + " of " +
          std::to_string(all.size()) + " points";
    return;
  }
  int best = 0;
  double best_spread = 0;
  for (int c = 0; c < dim; ++c) {
    double mn = std::numeric_limits<double>::infinity(), mx = -mn;
    for (auto p : all) mn = std::min(mn, x[static_cast<std::size_t>(p * dim + c)]), mx = std::max(mx, x[static_cast<std::size_t>(p * dim + c)]);
    if (mx - mn > best_spread) best_spread = mx - mn, best = c;
  }
  double left_max = -std::numeric_limits<double>::infinity(), right_min = -left_max;
  for (auto p : left) left_max = std::max(left_max, x[static_cast<std::size_t>(p * dim + best)]);
  for (auto p : right) right_min = std::min(right_min, x[static_cast<std::size_t>(p * dim + best)]);
  if (left_max > right_min) {
    err = "node [" + std::to_string(lo) + "," + std::to_string(hi) + "): left reaches " + std::to_string(left_max) +
          " beyond the right's " + std::to_string(right_min) + " along dimension " + std::to_string(best);
    return;
  }
  check_node(x, dim, t, lo, mid, err);
  check_node(x, dim, t, mid, hi, err);
}

TEST(BallTreeInvariants, RandomCloudsDuplicatesAndBatches) {
  std::mt19937_64 rng(12345);
  struct Case {
    std::vector<std::int64_t> sizes;
    int dim;
    int distinct;
  };
  const std::vector<Case> cases = {{{2}, 3, 0},           {{3}, 2, 0},      {{7}, 3, 0},        {{100}, 2, 0},
                                   {{1000}, 3, 0},        {{1025}, 3, 0},   {{4096}, 2, 0},     {{5000}, 3, 0},
                                   {{300}, 3, 5},         {{257}, 2, 1},    {{64}, 1, 0},       {{3, 7, 100, 2}, 3, 0},
                                   {{513, 2, 1000}, 2, 9}};
  for (const Case& c : cases) {
    std::int64_t n = 0;
    for (auto s : c.sizes) n += s;
    SCOPED_TRACE("points " + std::to_string(n) + ", dim " + std::to_string(c.dim) + ", distinct " + std::to_string(c.distinct));
    std::vector<std::int64_t> offsets{0};
    for (auto s : c.sizes) offsets.push_back(offsets.back() + s);
    const bt::Batch batch = bt::Batch::from_offsets(offsets);
    const auto x = random_cloud(rng, n, c.dim, c.distinct);
    const bt::Tree t = bt::build(x, c.dim, batch);

    ASSERT_EQ(t.slot_offsets.size(), c.sizes.size() + 1);
    std::vector<int> seen(static_cast<std::size_t>(n), 0);
    for (std::size_t b = 0; b < c.sizes.size(); ++b) {
      const std::int64_t lo = t.slot_offsets[b], hi = t.slot_offsets[b + 1], size = c.sizes[b];
      const std::int64_t p = hi - lo;
      // padded size: the next power of two >= size (size itself when it is one)
      EXPECT_TRUE((p & (p - 1)) == 0 && p >= size && p < 2 * size) << "sample " << b << ": " << p << " slots for " << size;
      EXPECT_EQ(p, bt::padded_size(size));
      EXPECT_EQ(std::count(t.mask.begin() + lo, t.mask.begin() + hi, 1), size) << "sample " << b;
      for (std::int64_t s = lo; s < hi; ++s) {
        const auto i = t.index[static_cast<std::size_t>(s)];
        ASSERT_GE(i, offsets[b]);
        ASSERT_LT(i, offsets[b + 1]);
        if (t.mask[static_cast<std::size_t>(s)]) {
          ++seen[static_cast<std::size_t>(i)];
        } else {
          // a duplicate is the second slot of a leaf and repeats the first
          ASSERT_EQ((s - lo) % 2, 1);
          EXPECT_EQ(i, t.index[static_cast<std::size_t>(s - 1)]);
          EXPECT_TRUE(t.mask[static_cast<std::size_t>(s - 1)]);
        }
      }
      std::string err;
      check_node(x, c.dim, t, lo, hi, err);
      EXPECT_EQ(err, "") << "sample " << b;
    }
    EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int k) { return k == 1; })) << "every point exactly once with mask 1";
    const auto where = t.slot_of_point();
    for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(t.index[static_cast<std::size_t>(where[static_cast<std::size_t>(i)])], i);

    // Samples are independent: each sample alone gives the same tree, shifted.
    if (c.sizes.size() > 1) {
      for (std::size_t b = 0; b < c.sizes.size(); ++b) {
        const std::vector<double> xb(x.begin() + offsets[b] * c.dim, x.begin() + offsets[b + 1] * c.dim);
        const bt::Tree tb = bt::build(xb, c.dim, bt::Batch::single(c.sizes[b]));
        for (std::int64_t s = 0; s < tb.slots(); ++s)
          ASSERT_EQ(tb.index[static_cast<std::size_t>(s)] + offsets[b], t.index[static_cast<std::size_t>(t.slot_offsets[b] + s)]);
      }
    }
    // float32 input is converted exactly to float64: same tree as the float64 of the same floats.
    const std::vector<float> xf(x.begin(), x.end());
    const std::vector<double> xfd(xf.begin(), xf.end());
    EXPECT_EQ(bt::build(xf, c.dim, batch).index, bt::build(xfd, c.dim, batch).index);
  }
}

TEST(BallTreeInvariants, PartitionIsAPermutationThatSplitsAtTheMedian) {
  std::mt19937_64 rng(777);
  for (const std::int64_t n : {1, 2, 5, 64, 100, 1024}) {
    for (const int target : {0, 1, 3, 20}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", target " + std::to_string(target));
      const auto x = random_cloud(rng, n, 3, n > 50 ? 20 : 0);
      const auto perm = bt::partition(x, 3, bt::Batch::single(n), target);
      std::vector<std::int64_t> sorted = perm, ident(static_cast<std::size_t>(n));
      std::sort(sorted.begin(), sorted.end());
      std::iota(ident.begin(), ident.end(), 0);
      ASSERT_EQ(sorted, ident);
      if (target == 0) {
        EXPECT_EQ(perm, ident);
      }
      if (target >= 1 && n >= 2) {
        // first split: the left floor(n/2) lie at or below the right along the dimension of largest spread
        int best = 0;
        double best_spread = 0;
        for (int c = 0; c < 3; ++c) {
          double mn = 1e300, mx = -1e300;
          for (std::int64_t i = 0; i < n; ++i) mn = std::min(mn, x[static_cast<std::size_t>(i * 3 + c)]), mx = std::max(mx, x[static_cast<std::size_t>(i * 3 + c)]);
          if (mx - mn > best_spread) best_spread = mx - mn, best = c;
        }
        double lmax = -1e300, rmin = 1e300;
        for (std::int64_t s = 0; s < n; ++s) {
          const double v = x[static_cast<std::size_t>(perm[static_cast<std::size_t>(s)] * 3 + best)];
          if (s < n / 2) {
            lmax = std::max(lmax, v);
          } else {
            rmin = std::min(rmin, v);
          }
        }
        EXPECT_LE(lmax, rmin);
      }
    }
  }
}

TEST(BallTreeInvariants, RotatedLevelsArePermutationsWithTheBatchTotalTargetLevel) {
  std::mt19937_64 rng(99);
  const std::vector<std::int64_t> offsets{0, 100, 160, 460};  // 128 + 64 + 512 = 704 slots
  const auto xd = random_cloud(rng, 460, 3);
  const std::vector<float> x(xd.begin(), xd.end());
  const std::vector<int> strides{2, 4}, balls{8, 8, 4};
  const auto r = bt::build_with_rotations(x, 3, bt::Batch::from_offsets(offsets), strides, balls, 45.0);
  ASSERT_EQ(r.tree.slots(), 704);
  // max(0, trunc(log2(704 / 8))) = 6 for every level: the total of the batch, not per sample or per level
  EXPECT_EQ(r.target_levels, (std::vector<int>{6, 6, 7}));
  const std::vector<std::int64_t> nodes{704, 352, 88};
  ASSERT_EQ(r.rotated.size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<std::int64_t> sorted = r.rotated[i], ident(static_cast<std::size_t>(nodes[i]));
    std::sort(sorted.begin(), sorted.end());
    std::iota(ident.begin(), ident.end(), 0);
    EXPECT_EQ(sorted, ident) << "level " << i;
  }
  // rotated partitions keep samples apart at level 0
  const auto sb = r.tree.slot_batch_idx();
  for (std::size_t s = 0; s < r.rotated[0].size(); ++s) EXPECT_EQ(sb[static_cast<std::size_t>(r.rotated[0][s])], sb[s]);
  EXPECT_EQ(bt::rotation_target_level(4096, 256), 4);
  EXPECT_EQ(bt::rotation_target_level(4096, 8192), 0);
  EXPECT_EQ(bt::rotation_target_level(3 * 4096, 256), 5);  // log2(48) = 5.58 -> 5
}

TEST(BallTreeInvariants, ThreadCountDoesNotChangeTheTrees) {
#ifndef _OPENMP
  GTEST_SKIP() << "built without OpenMP";
#else
  std::mt19937_64 rng(31);
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t n : {300, 2, 77, 1000, 5, 129}) offsets.push_back(offsets.back() + n);
  const auto xd = random_cloud(rng, offsets.back(), 3, 50);
  const std::vector<float> x(xd.begin(), xd.end());
  const bt::Batch batch = bt::Batch::from_offsets(offsets);
  const std::vector<int> strides{2}, balls{16, 16};
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = bt::build_with_rotations(x, 3, batch, strides, balls, 45.0);
  omp_set_num_threads(3);
  const auto three = bt::build_with_rotations(x, 3, batch, strides, balls, 45.0);
  omp_set_num_threads(saved);
  EXPECT_EQ(one.tree.index, three.tree.index);
  EXPECT_EQ(one.tree.mask, three.tree.mask);
  EXPECT_EQ(one.rotated, three.rotated);
#endif
}

TEST(BallTreeInvariants, LargeSubtreesBuiltAsTasksGiveTheSerialTrees) {
#ifndef _OPENMP
  GTEST_SKIP() << "built without OpenMP";
#else
  // Samples above the task threshold (8,192 points per subtree): one alone, then a batch where the large
  // samples start past 0 (their indices are shifted after every subtree task has finished). Coordinates
  // on a coarse grid, so that ties are split as std::nth_element splits them.
  std::mt19937_64 rng(47);
  for (const std::vector<std::int64_t>& sizes : {std::vector<std::int64_t>{40000},
                                                 std::vector<std::int64_t>{3, 20000, 17, 33000}}) {
    std::vector<std::int64_t> offsets{0};
    for (const std::int64_t n : sizes) offsets.push_back(offsets.back() + n);
    std::uniform_int_distribution<int> grid(0, 63);
    std::vector<float> x(static_cast<std::size_t>(offsets.back()) * 3);
    for (float& v : x) v = static_cast<float>(grid(rng)) / 64.0f;
    const bt::Batch batch = bt::Batch::from_offsets(offsets);
    const std::vector<int> strides{1}, balls{256, 256};
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    const auto one = bt::build_with_rotations(x, 3, batch, strides, balls, 45.0);
    const auto part_one = bt::partition(std::span<const float>(x), 3, batch, 9);
    omp_set_num_threads(4);
    const auto four = bt::build_with_rotations(x, 3, batch, strides, balls, 45.0);
    const auto part_four = bt::partition(std::span<const float>(x), 3, batch, 9);
    omp_set_num_threads(saved);
    EXPECT_EQ(one.tree.index, four.tree.index) << sizes.size() << " samples";
    EXPECT_EQ(one.tree.mask, four.tree.mask);
    EXPECT_EQ(one.rotated, four.rotated);
    EXPECT_EQ(part_one, part_four);
    // Every point once with mask 1.
    std::vector<int> seen(static_cast<std::size_t>(offsets.back()), 0);
    for (std::size_t s = 0; s < four.tree.index.size(); ++s)
      if (four.tree.mask[s]) ++seen[static_cast<std::size_t>(four.tree.index[s])];
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), offsets.back());
  }
#endif
}

// Up to four coordinates the builder selects on records of the coordinates and the index (float32 ones
// for float32 input), above on the indices alone: a cloud in 3 coordinates padded with three zero ones
// (never the split dimension: their spread 0 is not strictly larger) takes the second path and must give
// the first path's trees, in float64 and float32.
TEST(BallTreeInvariants, IndexAndRecordSelectionGiveTheSameTrees) {
  std::mt19937_64 rng(53);
  std::uniform_int_distribution<int> grid(0, 31);  // a coarse grid: many ties
  const std::vector<std::int64_t> offsets{0, 5000, 5003, 12000};
  const std::size_t n = static_cast<std::size_t>(offsets.back());
  std::vector<double> x3(n * 3), x6(n * 6, 0.0);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t c = 0; c < 3; ++c) x3[i * 3 + c] = x6[i * 6 + c] = grid(rng) / 32.0;
  const bt::Batch batch = bt::Batch::from_offsets(offsets);
  const auto same_trees = [&](const auto& p3, const auto& p6, const char* type) {
    const bt::Tree records = bt::build(p3, 3, batch);
    const bt::Tree indices = bt::build(p6, 6, batch);
    EXPECT_EQ(records.index, indices.index) << type;
    EXPECT_EQ(records.mask, indices.mask) << type;
    for (const int level : {0, 4, 11})
      EXPECT_EQ(bt::partition(p3, 3, batch, level), bt::partition(p6, 6, batch, level)) << type << ", level " << level;
  };
  same_trees(std::span<const double>(x3), std::span<const double>(x6), "float64");
  // float32 records (with 32-bit indices) against the indices over float32 coordinates.
  const std::vector<float> f3(x3.begin(), x3.end()), f6(x6.begin(), x6.end());
  same_trees(std::span<const float>(f3), std::span<const float>(f6), "float32");
  EXPECT_EQ(bt::build(std::span<const float>(f3), 3, batch).index, bt::build(std::span<const double>(x3), 3, batch).index);
}

// ---------------------------------------------------------------------------------------------------
// Bad input: a surrogate::Error naming the argument.

template <typename F>
void expect_error(F&& f, ErrorCode code, const std::string& text) {
  try {
    f();
    ADD_FAILURE() << "no exception; expected one mentioning '" << text << "'";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << "message: " << e.what() << "\nexpected to contain: " << text;
  }
}

TEST(BallTreeErrors, BadInputIsRefusedWithAClearMessage) {
  const std::vector<double> x6{0, 0, 1, 1, 2, 2};  // 3 points in 2-D
  const std::vector<float> x6f(x6.begin(), x6.end());
  expect_error([&] { bt::build(x6, 0, bt::Batch::single(3)); }, ErrorCode::invalid_argument, "dim must be at least 1");
  expect_error([&] { bt::build(x6, 4, bt::Batch::single(1)); }, ErrorCode::input, "not a multiple of dim");
  expect_error([&] { bt::build(std::vector<double>{}, 2, bt::Batch::single(1)); }, ErrorCode::input, "points is empty");
  expect_error([&] { bt::build(x6, 2, bt::Batch::single(4)); }, ErrorCode::input, "points has 3 points");
  expect_error([&] { bt::Batch::single(0); }, ErrorCode::input, "at least one point");
  expect_error([&] { bt::Batch::from_batch_idx(std::vector<std::int64_t>{}); }, ErrorCode::input, "batch_idx is empty");
  expect_error([&] { bt::Batch::from_batch_idx(std::vector<std::int64_t>{1, 1, 2}); }, ErrorCode::input, "batch_idx must start at 0");
  expect_error([&] { bt::Batch::from_batch_idx(std::vector<std::int64_t>{0, 0, 2}); }, ErrorCode::input, "batch_idx[2] = 2 follows");
  expect_error([&] { bt::Batch::from_batch_idx(std::vector<std::int64_t>{0, 1, 0}); }, ErrorCode::input, "sample-major and contiguous");
  expect_error([&] { bt::Batch::from_offsets(std::vector<std::int64_t>{0, 2, 2}); }, ErrorCode::input, "no empty sample");
  // a 1-point sample (the official code fails on it: 1 << -1)
  expect_error([&] { bt::build(x6, 2, bt::Batch::from_batch_idx(std::vector<std::int64_t>{0, 0, 1})); }, ErrorCode::input,
               "sample 1 has 1 point");
  expect_error([&] { bt::build(std::vector<double>{0.5, 0.5}, 2, bt::Batch::single(1)); }, ErrorCode::input, "at least 2 points");
  expect_error([&] { bt::padded_size(1); }, ErrorCode::input, "at least 2 points");
  // NaN / Inf coordinates: which coordinate of which point of which sample
  std::vector<double> bad = x6;
  bad[5] = std::nan("");
  expect_error([&] { bt::build(bad, 2, bt::Batch::from_batch_idx(std::vector<std::int64_t>{0, 0, 1})); }, ErrorCode::input,
               "1 NaN/Inf coordinate(s); the first is coordinate 1 of point 2 (sample 1, local point 0)");
  std::vector<float> badf = x6f;
  badf[0] = std::numeric_limits<float>::infinity();
  expect_error([&] { bt::build(badf, 2, bt::Batch::single(3)); }, ErrorCode::input, "coordinate 0 of point 0");
  expect_error([&] { bt::partition(bad, 2, bt::Batch::single(3), 1); }, ErrorCode::input, "ball tree partition: points has 1 NaN");
  expect_error([&] { bt::partition(x6, 2, bt::Batch::single(3), -1); }, ErrorCode::invalid_argument, "target_level must be non-negative");
}

TEST(BallTreeErrors, RotatedTreeArgumentsAreChecked) {
  std::mt19937_64 rng(5);
  const auto xd = random_cloud(rng, 40, 3);
  const std::vector<float> x(xd.begin(), xd.end());
  const bt::Batch one = bt::Batch::single(40);  // 64 slots
  const std::vector<int> s1{2}, s2{2, 2}, b2{8, 8}, b0{8, 0};
  expect_error([&] { bt::build_with_rotations(x, 3, one, s2, b2, 45); }, ErrorCode::invalid_argument, "one entry fewer than ball_sizes");
  expect_error([&] { bt::build_with_rotations(x, 3, one, {}, {}, 45); }, ErrorCode::invalid_argument, "ball_sizes is empty");
  expect_error([&] { bt::build_with_rotations(x, 3, one, s1, b0, 45); }, ErrorCode::invalid_argument, "ball_sizes[1] must be positive");
  const std::vector<int> s0{0};
  expect_error([&] { bt::build_with_rotations(x, 3, one, s0, b2, 45); }, ErrorCode::invalid_argument, "strides[0] must be positive");
  const std::vector<int> s3{3};
  expect_error([&] { bt::build_with_rotations(x, 3, one, s3, b2, 45); }, ErrorCode::invalid_argument,
               "64 nodes, not divisible by strides[0] = 3");
  const std::vector<float> x4(160, 0.5f);
  expect_error([&] { bt::build_with_rotations(x4, 4, one, s1, b2, 45); }, ErrorCode::invalid_argument, "dim must be 2 or 3");
  // without rotation any dimension is fine and no rotated permutation is made
  const auto r = bt::build_with_rotations(x4, 4, one, s1, b2, 0);
  EXPECT_TRUE(r.rotated.empty());
  EXPECT_EQ(r.tree.slots(), 64);
  std::vector<float> nan = x;
  nan[7] = std::nanf("");
  expect_error([&] { bt::build_with_rotations(nan, 3, one, s1, b2, 45); }, ErrorCode::input, "coordinate 1 of point 2");
}

}  // namespace
