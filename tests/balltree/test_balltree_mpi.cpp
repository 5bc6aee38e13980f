// Distributed ball tree (run by ctest at 1, 2, 3 and 4 ranks): the tree order, masks, rank ranges and
// rotated orders must equal (integer equality) the single-process balltree::build /
// build_with_rotations of the gathered points, which every rank computes itself; the redistribution
// plans must move rows bitwise (solver -> tree -> solver round trip, padding duplicates filled from their
// original). Clouds: random and grid coordinates with many ties and exact duplicate points, several
// samples spread over the ranks in random local order, unequal per-rank counts, a rank with no point;
// serial thresholds 0 (every selection spread over ranks replayed distributed down to 3 elements) to
// 4096; 1-D inputs that drive introselect to its depth limit; 100k points with a bound on the storage.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>

#include "surrogate/balltree.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/error.hpp"
#include "surrogate/mpi_comm.hpp"

namespace bt = surrogate::balltree;
using surrogate::Error;
using surrogate::ErrorCode;

namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

enum class Spread { random_skewed, last_rank_empty, all_on_rank0, blocks };

struct Cloud {
  int dim = 0;
  std::vector<Index> offsets{0};     // serial sample offsets
  std::vector<double> serial;        // serial order: sample by sample, rank by rank, local order
  std::vector<double> local;         // this rank's points, local order
  std::vector<Index> local_samples;  // sample of each local point
  std::vector<Index> local_serial;   // serial index of each local point
};

/// Every rank draws the same cloud and the same assignment, then keeps its own points.
Cloud make_cloud(int dim, std::vector<Index> sizes, Spread spread, unsigned seed, int rank, int ranks) {
  std::mt19937_64 gen(seed);
  auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); };
  struct Point { Index sample; std::vector<double> x; int rank; };
  std::vector<Point> points;
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    for (Index i = 0; i < sizes[b]; ++i) {
      Point p{static_cast<Index>(b), std::vector<double>(sz(dim)), 0};
      const int kind = static_cast<int>(gen() % 4);
      if (kind == 0 && !points.empty() && points.back().sample == p.sample) {
        p.x = points[points.size() - 1 - gen() % std::min<std::size_t>(points.size(), sz(i))].x;  // exact duplicate
      } else {
        for (auto& v : p.x) v = kind == 1 ? static_cast<double>(gen() % 4) : uniform(-1.0, 3.0);  // grid ties or random
      }
      points.push_back(std::move(p));
    }
  }
  std::shuffle(points.begin(), points.end(), gen);  // samples interleaved in the local orders
  for (std::size_t i = 0; i < points.size(); ++i) {
    int r = 0;
    switch (spread) {
      case Spread::random_skewed: {  // rank r gets a share proportional to r + 1
        const Index total = Index{ranks} * (ranks + 1) / 2;
        Index pick = static_cast<Index>(gen() % static_cast<std::uint64_t>(total));
        while (pick >= r + 1) pick -= ++r;
        break;
      }
      case Spread::last_rank_empty: r = ranks > 1 ? static_cast<int>(gen() % static_cast<std::uint64_t>(ranks - 1)) : 0; break;
      case Spread::all_on_rank0: r = 0; break;
      case Spread::blocks: r = static_cast<int>(i * static_cast<std::size_t>(ranks) / points.size()); break;
    }
    points[i].rank = r;
  }
  Cloud c;
  c.dim = dim;
  for (const auto& p : points)
    if (p.rank == rank) {
      c.local.insert(c.local.end(), p.x.begin(), p.x.end());
      c.local_samples.push_back(p.sample);
      c.local_serial.push_back(-1);
    }
  for (std::size_t b = 0; b < sizes.size(); ++b) {
    for (int r = 0; r < ranks; ++r) {
      Index local_pos = 0;
      for (const auto& p : points) {
        if (p.rank != r) continue;
        if (p.sample == static_cast<Index>(b)) {
          if (r == rank) c.local_serial[sz(local_pos)] = static_cast<Index>(c.serial.size()) / dim;
          c.serial.insert(c.serial.end(), p.x.begin(), p.x.end());
        }
        ++local_pos;
      }
    }
    c.offsets.push_back(c.offsets.back() + sizes[b]);
  }
  return c;
}

/// A row of `width` values that names point `id` bitwise (column c: a distinct float built from id).
template <class T>
T row_value(Index id, int c) {
  return static_cast<T>(static_cast<double>(id) * 16.0 + c + 0.5) * static_cast<T>(1.000001);
}

template <class T>
void check_tree(const surrogate::Comm& comm, const Cloud& c, Index granularity, const std::string& what,
                Index serial_threshold = 4096, bt::DistributedTree* keep = nullptr) {
  SCOPED_TRACE(what + ", serial threshold " + std::to_string(serial_threshold));
  std::vector<T> local(c.local.begin(), c.local.end());
  std::vector<T> serial(c.serial.begin(), c.serial.end());
  const bt::Tree ref = bt::build(std::span<const T>(serial), c.dim, bt::Batch::from_offsets(c.offsets));
  bt::DistributedTree t = bt::build_distributed(comm, std::span<const T>(local), c.dim, c.local_samples, {granularity, serial_threshold});

  // Rank ranges: cover the tree, in order, multiples of the chunk except at the end.
  const Index chunk = granularity % 2 == 0 ? granularity : 2 * granularity;
  ASSERT_EQ(t.slot_offsets, ref.slot_offsets);
  ASSERT_EQ(t.slots.bounds.size(), sz(comm.size()) + 1);
  EXPECT_EQ(t.slots.bounds.front(), 0);
  EXPECT_EQ(t.slots.bounds.back(), ref.slots());
  for (int r = 0; r < comm.size(); ++r) {
    EXPECT_LE(t.slots.begin(r), t.slots.end(r));
    EXPECT_TRUE(t.slots.begin(r) % chunk == 0 || t.slots.begin(r) == ref.slots());
  }
  ASSERT_EQ(t.slot_begin, t.slots.begin(comm.rank()));
  ASSERT_EQ(t.slot_end, t.slots.end(comm.rank()));

  // The tree: integer equality with the single-process build on this rank's range.
  EXPECT_EQ(t.local_point_index, c.local_serial);
  const std::vector<Index> ref_index(ref.index.begin() + t.slot_begin, ref.index.begin() + t.slot_end);
  const std::vector<std::uint8_t> ref_mask(ref.mask.begin() + t.slot_begin, ref.mask.begin() + t.slot_end);
  EXPECT_EQ(t.index, ref_index);
  EXPECT_EQ(t.mask, ref_mask);

  // Redistribution: solver rows -> tree rows (every slot, duplicates included) -> solver rows, bitwise.
  for (const int width : {1, 5}) {
    const Index n = static_cast<Index>(c.local_samples.size());
    std::vector<T> rows(sz(n * width)), back(rows.size(), T(-7)), tree_rows(sz(t.local_slots() * width), T(-9));
    for (Index i = 0; i < n; ++i)
      for (int k = 0; k < width; ++k) rows[sz(i * width + k)] = row_value<T>(c.local_serial[sz(i)], k);
    t.plan.to_tree(rows.data(), width, tree_rows.data());
    bool tree_ok = true;
    for (Index s = 0; s < t.local_slots(); ++s)
      for (int k = 0; k < width; ++k) {
        const T want = row_value<T>(ref_index[sz(s)], k);
        tree_ok = tree_ok && std::memcmp(&tree_rows[sz(s * width + k)], &want, sizeof(T)) == 0;
      }
    EXPECT_TRUE(tree_ok) << "to_tree, width " << width;
    t.plan.to_solver(tree_rows.data(), width, back.data());
    // (an empty rank's vectors have no data pointer: memcmp must not see it)
    EXPECT_TRUE(rows.empty() || std::memcmp(back.data(), rows.data(), rows.size() * sizeof(T)) == 0)
        << "to_solver, width " << width;
  }
  if (keep != nullptr) *keep = std::move(t);
}

std::vector<Spread> spreads() { return {Spread::random_skewed, Spread::last_rank_empty, Spread::all_on_rank0, Spread::blocks}; }
std::string name(Spread s) {
  switch (s) {
    case Spread::random_skewed: return "random-skewed";
    case Spread::last_rank_empty: return "last-rank-empty";
    case Spread::all_on_rank0: return "all-on-rank-0";
    case Spread::blocks: return "blocks";
  }
  return "?";
}

}  // namespace

TEST(DistributedBallTree, EqualsTheSingleProcessTree) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const std::vector<std::vector<Index>> batches = {{2}, {3}, {37}, {200}, {64, 65, 5, 129}, {300, 17, 2, 90}};
  unsigned seed = 11;
  for (const int dim : {2, 3})
    for (const auto& sizes : batches)
      for (const Spread spread : spreads())
        for (const Index granularity : {Index{1}, Index{2}, Index{8}, Index{64}}) {
          const Cloud c = make_cloud(dim, sizes, spread, ++seed, comm.rank(), comm.size());
          const std::string what = "dim " + std::to_string(dim) + ", " + std::to_string(sizes.size()) + " sample(s) of " +
                                   std::to_string(sizes[0]) + ".., " + name(spread) + ", granularity " +
                                   std::to_string(granularity) + ", seed " + std::to_string(seed);
          // Threshold 0: every selection spread over ranks runs distributed down to 3 elements; the
          // default gathers these small clouds' ranges on one rank.
          check_tree<float>(comm, c, granularity, "float32 " + what, seed % 2 ? 0 : 5);
          check_tree<double>(comm, c, granularity, "float64 " + what, seed % 3 ? 4096 : 0);
        }
}

TEST(DistributedBallTree, LargerCloudWithManyTies) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Cloud c = make_cloud(3, {5000, 3001}, Spread::random_skewed, 99, comm.rank(), comm.size());
  check_tree<float>(comm, c, 128, "8001 points, granularity 128");
  check_tree<double>(comm, c, 6, "8001 points, granularity 6");
  check_tree<float>(comm, c, 128, "8001 points, granularity 128", 0);
  check_tree<double>(comm, c, 6, "8001 points, granularity 6", 100);
}

namespace {

/// Coordinates (one dimension) that drive std::nth_element at the median to its depth limit: McIlroy's
/// adversary ("A killer adversary for quicksort", 1999), its lazily fixed values kept as the input.
std::vector<double> adversarial_keys(Index n) {
  std::vector<Index> value(sz(n), n);  // n = not fixed yet, above every fixed value
  Index fixed = 0, candidate = 0;
  auto less = [&](Index x, Index y) {
    Index& vx = value[sz(x)];
    Index& vy = value[sz(y)];
    if (vx == n && vy == n) (x == candidate ? vx : vy) = fixed++;
    if (vx == n) candidate = x;
    else if (vy == n) candidate = y;
    return vx < vy;
  };
  std::vector<Index> order(sz(n));
  std::iota(order.begin(), order.end(), Index{0});
  std::nth_element(order.begin(), order.begin() + n / 2, order.end(), less);
  return {value.begin(), value.end()};
}

/// A 1-D cloud of one sample from given serial coordinates, cut into contiguous blocks per rank.
Cloud blocks_of(const std::vector<double>& keys, int rank, int ranks) {
  Cloud c;
  c.dim = 1;
  const Index n = static_cast<Index>(keys.size());
  c.offsets = {0, n};
  c.serial = keys;
  for (Index i = n * rank / ranks; i < n * (rank + 1) / ranks; ++i) {
    c.local.push_back(keys[sz(i)]);
    c.local_samples.push_back(0);
    c.local_serial.push_back(i);
  }
  return c;
}

}  // namespace

TEST(DistributedBallTree, DepthLimitAndSortedInputs) {
  // The root selection reaches introselect's depth limit (heap selection on the gathered range).
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const Cloud killer = blocks_of(adversarial_keys(3000), comm.rank(), comm.size());
  check_tree<double>(comm, killer, 16, "adversarial 1-D, 3000 points", 0);
  check_tree<float>(comm, killer, 64, "adversarial 1-D, 3000 points", 50);
  std::vector<double> pipe(2500);
  for (std::size_t i = 0; i < pipe.size(); ++i) pipe[i] = static_cast<double>(std::min(i, pipe.size() - 1 - i) / 2);
  check_tree<double>(comm, blocks_of(pipe, comm.rank(), comm.size()), 8, "organ pipe 1-D, 2500 points", 0);
  std::vector<double> sorted(2049);
  for (std::size_t i = 0; i < sorted.size(); ++i) sorted[i] = static_cast<double>(i / 3);
  check_tree<float>(comm, blocks_of(sorted, comm.rank(), comm.size()), 2, "sorted 1-D, 2049 points", 0);
}

/// The storage bound of a rank (share/docs/balltree.md, "Distributed tree", costs): its part of the
/// work array, h = [n r / P, n (r + 1) / P), and the run of serial positions of its slots' points (every
/// rank's points of mask 1, counted and summed over the ranks before it), r of them; the transient
/// storage of the selection rounds, X = max(2 (max(threshold, ceil(n / P) / 8, 4096) + P), threshold).
/// One buffer over the union of the two runs, held throughout: union + X; two buffers (the work part
/// during the rounds, both parts while the subtrees travel): h + max(X, r). The build takes one buffer
/// where that bound is not larger (always where the run lies within the work part).
struct StorageBound {
  Index bound = 0, union_span = 0;
  bool one_buffer = false;
};
StorageBound storage_bound(const surrogate::Comm& comm, const bt::DistributedTree& t, Index n, Index threshold) {
  const int p = comm.size(), me = comm.rank();
  const Index mine = std::count(t.mask.begin(), t.mask.end(), std::uint8_t{1});
  std::vector<Index> points(sz(p));
  comm.allgather(&mine, sizeof(Index), points.data());
  const Index recv_first = std::accumulate(points.begin(), points.begin() + me, Index{0}), recv_end = recv_first + mine;
  const Index work_first = n * me / p, work_end = n * (me + 1) / p, h = work_end - work_first;
  const Index share = (n + p - 1) / p;
  const Index x = std::max(2 * (std::max({threshold, share / 8, Index{4096}}) + p), threshold);
  StorageBound s;
  s.union_span = mine == 0 ? h : h == 0 ? mine : std::max(work_end, recv_end) - std::min(work_first, recv_first);
  s.one_buffer = s.union_span + x <= h + std::max(x, mine);
  s.bound = s.one_buffer ? s.union_span + x : h + std::max(x, mine);
  return s;
}

TEST(DistributedBallTree, HundredThousandPointsWithBoundedStorage) {
  // 100k points (ties and duplicates), skewed per-rank counts, two samples; then one sample with the
  // last rank empty. The build's own storage must stay within storage_bound: the work array (or the
  // buffer spanning it and the rank's received run) plus the larger of a batch of a round's swaps, sent
  // and received (2 (max(serial_threshold, ceil(n / P) / 8, 4096) + P)), and a range gathered on one
  // rank (serial_threshold). (The gathering build held every point of a sample on one rank.)
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int p = comm.size();
  for (const Spread spread : {Spread::random_skewed, Spread::last_rank_empty}) {
    const std::vector<Index> sizes = spread == Spread::random_skewed ? std::vector<Index>{70000, 30000} : std::vector<Index>{100000};
    const Cloud c = make_cloud(3, sizes, spread, 4242, comm.rank(), p);
    const Index threshold = 1000;
    bt::DistributedTree t;
    check_tree<float>(comm, c, 256, "100k points, " + name(spread), threshold, &t);
    const Index n = c.offsets.back(), share = (n + p - 1) / p;
    // The delivery keeps the positions the work part and the received run share in one buffer: the
    // storage is their union (about n / P plus the boundary shifts), not both (up to 2 n / P; the
    // former delivery held 93,750 > 62,504 points on rank 0 at 2 ranks here).
    const StorageBound b = storage_bound(comm, t, n, threshold);
    const Index bound = b.bound, span = b.union_span;
    EXPECT_LE(t.peak_points, bound) << "rank " << comm.rank() << " held " << t.peak_points << " points, delivery span " << span;
    EXPECT_GT(t.peak_points, 0);
    // From 3 ranks on that is less than the whole cloud.
    if (p >= 3) {
      EXPECT_LT(t.peak_points, n) << "rank " << comm.rank();
    }
    std::printf("rank %d: %s, peak points held %lld (share %lld, slots %lld, delivery span %lld%s, bound %lld)\n", comm.rank(),
                name(spread).c_str(), static_cast<long long>(t.peak_points), static_cast<long long>(share),
                static_cast<long long>(t.local_slots()), static_cast<long long>(span), b.one_buffer ? ", one buffer" : ", two buffers",
                static_cast<long long>(bound));
  }
  // One sample of 2^16 points in rank blocks: no padding, and where every rank's slots are exactly its
  // part of the work array (1, 2 and 4 ranks) the subtrees stay in place, so the peak is the work array
  // plus one batch of a round's swaps (sending all of a round's swaps at once reached about
  // 1.8 ceil(n / P) at 2 ranks).
  {
    const Cloud c = make_cloud(3, {65536}, Spread::blocks, 4343, comm.rank(), p);
    const Index threshold = 1000;
    bt::DistributedTree t;
    check_tree<float>(comm, c, 256, "65,536 points in blocks", threshold, &t);
    const Index n = c.offsets.back(), share = (n + p - 1) / p;
    bool in_place = t.total_slots() == n;
    for (int r = 0; r <= p; ++r) in_place = in_place && t.slots.bounds[sz(r)] == n * r / p;
    const Index swap_batch = std::max({threshold, share / 8, Index{4096}});
    if (in_place) {
      EXPECT_LE(t.peak_points, share + std::max(2 * (swap_batch + p), threshold)) << "rank " << comm.rank();
    } else {
      // At 3 ranks: the delivery buffer's span (the former delivery held about 43,600 > 30,000 here).
      EXPECT_LE(t.peak_points, storage_bound(comm, t, n, threshold).bound) << "rank " << comm.rank();
    }
    std::printf("rank %d: 65,536 points in blocks, peak points held %lld (share %lld, subtrees in place: %s)\n", comm.rank(),
                static_cast<long long>(t.peak_points), static_cast<long long>(share), in_place ? "yes" : "no");
  }
}

TEST(DistributedBallTree, SelfCommEqualsTheSingleProcessTree) {
  surrogate::SelfComm self;
  const Cloud c = make_cloud(3, {100, 33}, Spread::all_on_rank0, 5, 0, 1);
  check_tree<float>(self, c, 16, "SelfComm");
}

TEST(DistributedBallTree, RotatedOrdersEqualTheSingleProcessOnes) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  struct Case { int dim; std::vector<Index> sizes; std::vector<int> strides, balls; Index granularity; double angle; };
  const std::vector<Case> cases = {
      {3, {200}, {2, 2}, {8, 8, 4}, 4, 45.0},
      {2, {90, 33, 140}, {2}, {16, 4}, 2, 30.0},
      {3, {300, 17, 64}, {2, 2, 2}, {4, 4, 4, 2}, 32, 45.0},
      {3, {1000}, {4}, {32, 8}, 128, 60.0},
  };
  unsigned seed = 500;
  for (const auto& k : cases)
    for (const Spread spread : spreads()) {
      const Cloud c = make_cloud(k.dim, k.sizes, spread, ++seed, comm.rank(), comm.size());
      SCOPED_TRACE("rotated, dim " + std::to_string(k.dim) + ", first sample " + std::to_string(k.sizes[0]) + ", " +
                   name(spread) + ", granularity " + std::to_string(k.granularity));
      std::vector<float> local(c.local.begin(), c.local.end()), serial(c.serial.begin(), c.serial.end());
      const bt::RotatedTrees ref = bt::build_with_rotations(serial, k.dim, bt::Batch::from_offsets(c.offsets), k.strides, k.balls, k.angle);
      // Alternate between distributed selections down to 3 elements and the default threshold.
      const Index threshold = seed % 2 ? 0 : 4096;
      const bt::DistributedRotatedTrees d = bt::build_distributed_with_rotations(comm, local, k.dim, c.local_samples, k.strides, k.balls,
                                                                                 k.angle, {k.granularity, threshold});
      const bt::DistributedTree& t = d.tree;
      EXPECT_EQ(t.index, std::vector<Index>(ref.tree.index.begin() + t.slot_begin, ref.tree.index.begin() + t.slot_end));
      ASSERT_EQ(d.rotations.target_levels, ref.target_levels);
      // Every level's placement holds at least this rank's share of the level's nodes.
      const Index level0_nodes = ref.tree.slots();
      EXPECT_GE(d.rotations.peak_points, level0_nodes / comm.size());
      ASSERT_EQ(d.rotations.rotated.size(), ref.rotated.size());
      Index per_node = 1;
      for (std::size_t i = 0; i < ref.rotated.size(); ++i) {
        const Index begin = t.slot_begin / per_node, end = t.slot_end / per_node;
        ASSERT_EQ(d.rotations.node_begin[i], begin);
        EXPECT_EQ(d.rotations.rotated[i], std::vector<Index>(ref.rotated[i].begin() + begin, ref.rotated[i].begin() + end))
            << "level " << i;
        // Exchange: tree-order node rows -> rotated rows -> back, bitwise.
        const int width = 3;
        std::vector<double> rows(sz((end - begin) * width)), rotated_rows(rows.size()), back(rows.size());
        for (Index j = 0; j < end - begin; ++j)
          for (int q = 0; q < width; ++q) rows[sz(j * width + q)] = row_value<double>(begin + j, q);
        d.rotations.exchange[i].forward(rows.data(), width, rotated_rows.data());
        bool ok = true;
        for (Index j = 0; j < end - begin; ++j)
          for (int q = 0; q < width; ++q) ok = ok && rotated_rows[sz(j * width + q)] == row_value<double>(ref.rotated[i][sz(begin + j)], q);
        EXPECT_TRUE(ok) << "forward, level " << i;
        d.rotations.exchange[i].backward(rotated_rows.data(), width, back.data());
        EXPECT_EQ(back, rows) << "backward, level " << i;
        if (i < k.strides.size()) per_node *= k.strides[i];
      }
    }
}

TEST(DistributedBallTree, ErrorsAreAgreedOnEveryRank) {
  surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int last = comm.size() - 1;
  // A sample of one point in total.
  {
    const Cloud c = make_cloud(2, {10, 1}, Spread::blocks, 3, comm.rank(), comm.size());
    try {
      bt::build_distributed(comm, std::span<const double>(c.local), 2, c.local_samples);
      ADD_FAILURE() << "a 1-point sample was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::input);
      EXPECT_NE(std::string(e.what()).find("sample 1 has 1 point"), std::string::npos) << e.what();
    }
  }
  // NaN on the last rank only: every rank throws the same error, naming that rank.
  {
    Cloud c = make_cloud(3, {40}, Spread::blocks, 4, comm.rank(), comm.size());
    if (comm.rank() == last && !c.local.empty()) c.local[1] = std::numeric_limits<double>::quiet_NaN();
    try {
      bt::build_distributed(comm, std::span<const double>(c.local), 3, c.local_samples);
      ADD_FAILURE() << "NaN was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::input);
      EXPECT_NE(std::string(e.what()).find("NaN/Inf"), std::string::npos) << e.what();
      if (comm.size() > 1) {  // one process: the error is not prefixed with a rank
        EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(last)), std::string::npos) << e.what();
      }
    }
  }
  // A negative serial threshold on the last rank only.
  {
    const Cloud c = make_cloud(2, {40}, Spread::blocks, 7, comm.rank(), comm.size());
    bt::DistributedOptions options;
    if (comm.rank() == last) options.serial_threshold = -1;
    try {
      bt::build_distributed(comm, std::span<const double>(c.local), 2, c.local_samples, options);
      ADD_FAILURE() << "a negative serial_threshold was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("serial_threshold"), std::string::npos) << e.what();
    }
  }
  // Sizes that do not match on rank 0.
  {
    const Cloud c = make_cloud(2, {40}, Spread::blocks, 5, comm.rank(), comm.size());
    std::span<const double> pos(c.local);
    if (comm.rank() == 0 && !pos.empty()) pos = pos.first(pos.size() - 1);
    EXPECT_THROW(bt::build_distributed(comm, pos, 2, c.local_samples), Error);
  }
  // Rotations: a granularity that would split a pooling group.
  {
    const Cloud c = make_cloud(3, {64}, Spread::blocks, 6, comm.rank(), comm.size());
    std::vector<float> local(c.local.begin(), c.local.end());
    const std::vector<int> strides = {4}, balls = {8, 4};
    try {
      bt::build_distributed_with_rotations(comm, local, 3, c.local_samples, strides, balls, 45.0, {2});
      ADD_FAILURE() << "granularity 2 with stride 4 was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("granularity"), std::string::npos) << e.what();
    }
  }
}
