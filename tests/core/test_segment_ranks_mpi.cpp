// ranks_in_segments and sort_segments (libsurrogate/src/exchange/segment_ranks.hpp) under mpirun (1-4
// ranks): every record's rank in its segment against std::stable_sort of the whole set, which every rank
// computes; keys with many ties, both zeros, infinities and int64 extremes; shares unequal, empty, or all
// on one rank; a segment no rank holds; pieces of about 1/P whatever the spread; sort_segments_by_group cutting
// between groups, and falling back to samples where groups overlap or a piece would be too large.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "exchange/segment_ranks.hpp"
#include "surrogate/error.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using surrogate::detail::order_image;
using surrogate::detail::RankRecord;

struct Record {
  std::uint64_t segment;
  double key;
  std::int64_t tie;
};

/// Every segment's records in stable key order (ties by `tie`, the index in the segment): the reference.
std::vector<std::int64_t> reference_ranks(const std::vector<Record>& all) {
  std::vector<std::size_t> order(all.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (all[a].segment != all[b].segment) return all[a].segment < all[b].segment;
    if (all[a].key < all[b].key || all[b].key < all[a].key) return all[a].key < all[b].key;
    return all[a].tie < all[b].tie;
  });
  std::vector<std::int64_t> rank(all.size());
  std::uint64_t segment = ~std::uint64_t{0};
  std::int64_t first = 0;
  for (std::size_t i = 0; i < order.size(); ++i) {
    if (all[order[i]].segment != segment) {
      segment = all[order[i]].segment;
      first = static_cast<std::int64_t>(i);
    }
    rank[order[i]] = static_cast<std::int64_t>(i) - first;
  }
  return rank;
}

TEST(SegmentRanks, MatchStableSortForAnySpread) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  std::mt19937 gen(11);
  // Five segments (segment 3 empty), keys from a small set (many ties) plus both zeros and infinities.
  const std::vector<double> values = {-std::numeric_limits<double>::infinity(), -2.5, -0.0, 0.0, 1e-310, 1.0, 1.0 + 1e-15,
                                      std::numeric_limits<double>::infinity()};
  std::vector<Record> all;
  std::vector<std::int64_t> next_tie(5, 0);
  for (int i = 0; i < 2000; ++i) {
    const std::uint64_t segment = std::vector<std::uint64_t>{0, 1, 2, 4, 4}[gen() % 5];
    all.push_back({segment, values[gen() % values.size()], next_tie[segment]++});
  }
  const std::vector<std::int64_t> expected = reference_ranks(all);
  // Spreads: round robin, the first tenth on rank 0 and the rest on the last, everything on the last.
  const std::vector<std::function<int(std::size_t)>> spreads = {
      [P](std::size_t i) { return static_cast<int>(i % static_cast<std::size_t>(P)); },
      [P](std::size_t i) { return i < 200 ? 0 : P - 1; }, [P](std::size_t) { return P - 1; }};
  for (std::size_t k = 0; k < spreads.size(); ++k) {
    std::vector<RankRecord> mine;
    std::vector<std::size_t> index;
    for (std::size_t i = all.size(); i-- > 0;)  // reversed: the input order must not matter
      if (spreads[k](i) == me) {
        mine.push_back({all[i].segment, order_image(all[i].key), all[i].tie});
        index.push_back(i);
      }
    const std::vector<std::int64_t> got = surrogate::detail::ranks_in_segments(comm, mine, 5);
    ASSERT_EQ(got.size(), mine.size());
    for (std::size_t r = 0; r < got.size(); ++r)
      ASSERT_EQ(got[r], expected[index[r]]) << "rank " << me << " of " << P << ", spread " << k << ", record "
                                            << index[r] << " (segment " << all[index[r]].segment << ")";
  }
}

TEST(SegmentRanks, IntegerImagesOrderAsIntegers) {
  const std::vector<std::int64_t> v = {std::numeric_limits<std::int64_t>::min(), -5, -1, 0, 1, 7,
                                       std::numeric_limits<std::int64_t>::max()};
  for (std::size_t i = 1; i < v.size(); ++i) EXPECT_LT(order_image(v[i - 1]), order_image(v[i])) << v[i];
  EXPECT_EQ(order_image(-0.0), order_image(0.0));
  EXPECT_LT(order_image(-1e-310), order_image(0.0));
  EXPECT_LT(order_image(std::nextafter(1.0, 0.0)), order_image(1.0));
}

// The pieces of sort_segments hold 1/P of a segment within 25 % however the elements are spread: all on the last
// rank, blocks of the sorted order on the ranks in reverse (a coherent partition), a tenth on rank 0, the
// lower half on rank 0 and the rest with the smallest key on the last rank.
TEST(SegmentRanks, PiecesAreBalancedForAnySpread) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const std::int64_t n = 20000;
  const std::vector<std::function<int(std::int64_t)>> spreads = {
      [P](std::int64_t) { return P - 1; },
      [P, n](std::int64_t i) { return P - 1 - static_cast<int>(i * P / n); },
      [P, n](std::int64_t i) { return i % 10 == 0 ? 0 : P - 1; },
      // Overlapping runs: the smallest key alone with the upper half (a minimum far from its run's bulk).
      [P, n](std::int64_t i) { return i > 0 && i <= n / 2 ? 0 : P - 1; }};
  for (std::size_t k = 0; k < spreads.size(); ++k) {
    std::vector<surrogate::detail::SortElement> local;
    for (std::int64_t i = 0; i < n; ++i)  // key i, in order: every rank's run is sorted
      if (spreads[k](i) == me) local.push_back({order_image(static_cast<double>(i)), i, i, 0, me});
    const std::vector<std::int64_t> first = {0, static_cast<std::int64_t>(local.size())};
    surrogate::detail::SortedPiece piece;
    surrogate::detail::sort_segments(comm, local, first, 1, piece);
    const std::int64_t held = piece.first[1] - piece.first[0];
    EXPECT_LE(held, n / P + n / (4 * P)) << "rank " << me << " of " << P << ", spread " << k;
    EXPECT_GE(held, n / P - n / (4 * P)) << "rank " << me << " of " << P << ", spread " << k;
    for (std::int64_t i = piece.first[0]; i < piece.first[1]; ++i)  // key i is the element of rank i
      ASSERT_EQ(piece.held[static_cast<std::size_t>(i)].tie, piece.offset[0] + i) << "rank " << me << ", spread " << k;
  }
}

// Elements with key i (0 <= i < n, one segment) spread over the ranks, and group group_of(i): every rank's
// piece holds the elements of its global ranks in order (key i is rank i). Returns whether the pieces were
// cut between groups; `held` gets this rank's piece size.
bool sort_by_group(const surrogate::Comm& comm, std::int64_t n, const std::function<int(std::int64_t)>& spread,
                   const std::function<std::int64_t(std::int64_t)>& group_of, std::int64_t groups, std::int64_t& held) {
  const int me = comm.rank();
  std::vector<surrogate::detail::SortElement> local;
  std::vector<std::int64_t> group;
  for (std::int64_t i = 0; i < n; ++i)
    if (spread(i) == me) {
      local.push_back({order_image(static_cast<double>(i)), i, i, 0, me});
      group.push_back(group_of(i));
    }
  const std::vector<std::int64_t> first = {0, static_cast<std::int64_t>(local.size())};
  surrogate::detail::SortedPiece piece;
  const bool by_group = surrogate::detail::sort_segments_by_group(comm, local, first, group, groups, 1, piece);
  held = piece.first[1] - piece.first[0];
  for (std::int64_t i = piece.first[0]; i < piece.first[1]; ++i)
    EXPECT_EQ(piece.held[static_cast<std::size_t>(i)].tie, piece.offset[0] + i) << "rank " << me << " element " << i;
  return by_group;
}

// Groups of 37 consecutive keys (as HEPT's regions follow its keys): the pieces are cut between groups, hold
// 1/P of the elements within a quarter, and the global order is the sort's, for every spread.
TEST(SegmentRanks, GroupsFollowingTheKeysCutThePieces) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const std::int64_t n = 20000;
  const std::vector<std::function<int(std::int64_t)>> spreads = {
      [P](std::int64_t i) { return static_cast<int>(i % P); }, [P](std::int64_t) { return P - 1; },
      [P, n](std::int64_t i) { return P - 1 - static_cast<int>(i * P / n); }};
  for (std::size_t k = 0; k < spreads.size(); ++k) {
    std::int64_t held = 0;
    EXPECT_TRUE(sort_by_group(comm, n, spreads[k], [](std::int64_t i) { return i / 37; }, n / 37 + 1, held))
        << "rank " << me << ", spread " << k;
    EXPECT_LE(held, n / P + n / (4 * P)) << "rank " << me << " of " << P << ", spread " << k;
    EXPECT_GE(held, n / P - n / (4 * P)) << "rank " << me << " of " << P << ", spread " << k;
  }
}

// Where the groups overlap in key order (every even key in the next group: rounding can interleave HEPT's
// neighbouring regions) or one group holds everything, more than one rank falls back to sampled
// splitters; the order is the sort's either way. One rank has no boundary to check.
TEST(SegmentRanks, OverlappingOrTooLargeGroupsFallBackToSamples) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const std::int64_t n = 5000;
  const auto round_robin = [P](std::int64_t i) { return static_cast<int>(i % P); };
  std::int64_t held = 0;
  EXPECT_EQ(sort_by_group(comm, n, round_robin, [](std::int64_t i) { return (i + i % 2 * 5) / 50; }, n / 50 + 1, held),
            P == 1)
      << "rank " << me;
  EXPECT_EQ(sort_by_group(comm, n, round_robin, [](std::int64_t) { return 0; }, 1, held), P == 1) << "rank " << me;
  EXPECT_LE(held, n / P + n / (4 * P)) << "rank " << me;
}

// A group out of range on one rank is the same internal error on every rank.
TEST(SegmentRanks, GroupOutOfRangeIsAnAgreedError) {
  const surrogate::MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  std::int64_t held = 0;
  try {
    sort_by_group(comm, 100, [P](std::int64_t i) { return static_cast<int>(i % P); },
                  [P](std::int64_t i) { return i == 100 - P ? 7 : 0; }, 5, held);
    FAIL() << "rank " << me << ": no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("group 7 of 5"), std::string::npos) << e.what();
  }
}

}  // namespace
