// ExchangePlan on host rows under mpirun (1-4 ranks): every builder (from_requests with repeats and copies,
// from_ranges, all_gather) against a naive reference computed by every rank from the same global
// arrangement, with unequal shares and an empty rank; strided rows leave the padding alone; backward
// returns rows to their sources; the Traffic counters balance over the ranks; errors are agreed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <string>
#include <vector>

#include "exchange_cases.hpp"
#include "surrogate/error.hpp"
#include "surrogate/exchange.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using exchange_cases::Index;
using exchange_cases::value;
using surrogate::ExchangePlan;
using surrogate::MpiComm;
using surrogate::RowRange;
using surrogate::Traffic;

std::uint64_t sum_over_ranks(const MpiComm& comm, std::uint64_t v) {
  return static_cast<std::uint64_t>(comm.allreduce<std::int64_t>(static_cast<std::int64_t>(v), surrogate::ReduceOp::sum));
}

TEST(ExchangePlanHost, RequestsMatchTheReference) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  for (const unsigned seed : {1u, 2u, 3u}) {
    for (const int empty_rank : {-1, P - 1}) {
      const Index total = 37 + 11 * seed;
      const auto deal = exchange_cases::deal(total, P, seed, empty_rank);
      const std::vector<Index>& mine = deal.rows[static_cast<std::size_t>(me)];
      const Index count = me == 0 && seed == 2 ? 0 : 5 + 7 * me + seed;  // rank 0 asks nothing once
      const auto q = exchange_cases::requests(deal, total, count, seed * 31 + static_cast<unsigned>(me));
      const ExchangePlan plan = ExchangePlan::from_requests(comm, static_cast<Index>(mine.size()), q.source_rank,
                                                            q.source_key, {}, q.copy_from);
      EXPECT_EQ(plan.target_rows(), count);
      for (const int width : {1, 3, 8}) {
        // Dense rows.
        const std::vector<float> source = exchange_cases::rows_of(mine, width, width);
        std::vector<float> target(static_cast<std::size_t>(std::max<Index>(count, 1) * width), -1.0f);
        plan.forward(source.data(), width, target.data());
        for (Index t = 0; t < count; ++t)
          for (int c = 0; c < width; ++c)
            ASSERT_EQ(target[static_cast<std::size_t>(t * width + c)], value(q.expected[static_cast<std::size_t>(t)], c))
                << "rank " << me << " seed " << seed << " target " << t;
        // Strided rows: the same values, the padding untouched.
        const Index ld_in = width + 2, ld_out = width + 5;
        const std::vector<float> strided = exchange_cases::rows_of(mine, width, ld_in);
        std::vector<float> out(static_cast<std::size_t>(std::max<Index>(count, 1) * ld_out), -1.0f);
        plan.forward(strided.data(), ld_in, out.data(), ld_out, width);
        for (Index t = 0; t < count; ++t)
          for (Index c = 0; c < ld_out; ++c)
            ASSERT_EQ(out[static_cast<std::size_t>(t * ld_out + c)],
                      c < width ? value(q.expected[static_cast<std::size_t>(t)], static_cast<int>(c)) : -1.0f);
      }
    }
  }
}

// Moves of 4 MiB and more are copied in chunks over the OpenMP threads where their destinations are distinct
// (forward; packing): the same rows as the reference, with repeats and copies, forward and backward; a
// backward onto a source row requested several times leaves one target's row whole.
TEST(ExchangePlanHost, LargeMovesMatchTheReference) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const int width = 64;       // 256-byte rows
  const Index total = 60000;  // 15 MiB of rows over the ranks
  const auto deal = exchange_cases::deal(total, P, 4, P > 1 ? P - 1 : -1);
  const std::vector<Index>& mine = deal.rows[static_cast<std::size_t>(me)];
  const Index count = 50000 + 1000 * me;
  const auto q = exchange_cases::requests(deal, total, count, 97u + static_cast<unsigned>(me));
  const ExchangePlan plan =
      ExchangePlan::from_requests(comm, static_cast<Index>(mine.size()), q.source_rank, q.source_key, {}, q.copy_from);
  const std::vector<float> source = exchange_cases::rows_of(mine, width, width);
  std::vector<float> target(static_cast<std::size_t>(count * width), -1.0f);
  plan.forward(source.data(), width, target.data());
  for (Index t = 0; t < count; ++t)
    for (int c = 0; c < width; ++c)
      ASSERT_EQ(target[static_cast<std::size_t>(t * width + c)], value(q.expected[static_cast<std::size_t>(t)], c))
          << "rank " << me << " target " << t;
  // Backward: every target row not a copy goes back to its source row (repeats write the same values).
  std::vector<float> back(std::max<std::size_t>(source.size(), 1), -1.0f);
  plan.backward(target.data(), width, back.data());
  std::vector<char> requested(mine.size(), 0);
  std::vector<Index> local_of(static_cast<std::size_t>(total), -1);
  for (std::size_t r = 0; r < mine.size(); ++r) local_of[static_cast<std::size_t>(mine[r])] = static_cast<Index>(r);
  for (int r = 0; r < P; ++r)  // every rank's requests, recomputed here from its seed
    for (const Index g : exchange_cases::requests(deal, total, 50000 + 1000 * r, 97u + static_cast<unsigned>(r)).expected)
      if (local_of[static_cast<std::size_t>(g)] >= 0) requested[static_cast<std::size_t>(local_of[static_cast<std::size_t>(g)])] = 1;
  for (std::size_t r = 0; r < mine.size(); ++r)
    for (int c = 0; c < width; ++c)
      ASSERT_EQ(back[r * width + static_cast<std::size_t>(c)], requested[r] ? value(mine[r], c) : -1.0f)
          << "rank " << me << " source row " << r;
  // Targets that differ: a source row requested several times receives one of them whole (never a mix).
  const auto id = [](int rank, Index t) { return static_cast<float>(rank * 100000 + t); };
  for (Index t = 0; t < count; ++t) std::fill_n(target.begin() + t * width, width, id(me, t));
  std::fill(back.begin(), back.end(), -1.0f);
  plan.backward(target.data(), width, back.data());
  std::vector<std::vector<Index>> expected_of(static_cast<std::size_t>(P));  // every rank's targets' rows
  for (int r = 0; r < P; ++r)
    expected_of[static_cast<std::size_t>(r)] =
        exchange_cases::requests(deal, total, 50000 + 1000 * r, 97u + static_cast<unsigned>(r)).expected;
  for (std::size_t r = 0; r < mine.size(); ++r) {
    if (!requested[r]) continue;
    const float got = back[r * width];
    for (int c = 1; c < width; ++c) ASSERT_EQ(back[r * width + static_cast<std::size_t>(c)], got) << "a torn row " << r;
    const int rank = static_cast<int>(got) / 100000;
    const Index t = static_cast<Index>(got) % 100000;
    ASSERT_TRUE(rank >= 0 && rank < P) << "source row " << r << " holds " << got;
    ASSERT_EQ(expected_of[static_cast<std::size_t>(rank)][static_cast<std::size_t>(t)], mine[r])
        << "source row " << r << " took target " << t;
  }
}

TEST(ExchangePlanHost, BackwardReturnsEveryRowToItsSource) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const Index total = 101;
  // Sources dealt one way, targets another: every global row is requested exactly once.
  const auto sources = exchange_cases::deal(total, P, 7, P - 1);
  const auto targets = exchange_cases::deal(total, P, 8, 0);
  const std::vector<Index>& wanted = targets.rows[static_cast<std::size_t>(me)];
  std::vector<int> rank;
  std::vector<Index> key;
  for (const Index g : wanted) {
    rank.push_back(sources.owner[static_cast<std::size_t>(g)]);
    key.push_back(sources.local_row[static_cast<std::size_t>(g)]);
  }
  const std::vector<Index>& mine = sources.rows[static_cast<std::size_t>(me)];
  const ExchangePlan plan = ExchangePlan::from_requests(comm, static_cast<Index>(mine.size()), rank, key, {}, {});
  const int width = 4;
  std::vector<float> target = exchange_cases::rows_of(wanted, width, width);
  for (float& v : target) v += 0.5f;  // what the targets computed
  std::vector<double> back(std::max<std::size_t>(mine.size(), 1) * width, -1.0);
  std::vector<double> target_d(target.begin(), target.end());
  plan.backward(target_d.data(), width, back.data());
  for (std::size_t i = 0; i < mine.size(); ++i)
    for (int c = 0; c < width; ++c)
      ASSERT_EQ(back[i * width + static_cast<std::size_t>(c)], static_cast<double>(value(mine[i], c)) + 0.5)
          << "rank " << me << " source row " << i;
}

TEST(ExchangePlanHost, RangesMatchTheReference) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  for (const int empty_rank : {-1, 0, P - 1}) {
    const Index total = 257;
    const auto held = exchange_cases::range_deal(total, P, me, empty_rank);
    const auto wanted = exchange_cases::wanted_ranges(total, 3 + me, 11 + static_cast<unsigned>(me + 5 * (empty_rank + 1)));
    const ExchangePlan plan = ExchangePlan::from_ranges(comm, static_cast<Index>(held.local_globals.size()), held.held,
                                                        held.first_row, wanted);
    std::vector<Index> expected;
    for (const RowRange& r : wanted)
      for (Index g = r.begin; g < r.end; ++g) expected.push_back(g);
    ASSERT_EQ(plan.target_rows(), static_cast<Index>(expected.size()));
    const int width = 5;
    const std::vector<float> source = exchange_cases::rows_of(held.local_globals, width, width);
    std::vector<float> target(std::max<std::size_t>(expected.size(), 1) * width, -1.0f);
    plan.forward(source.data(), width, target.data());
    for (std::size_t t = 0; t < expected.size(); ++t)
      for (int c = 0; c < width; ++c)
        ASSERT_EQ(target[t * width + static_cast<std::size_t>(c)], value(expected[t], c)) << "rank " << me << " row " << t;
  }
}

TEST(ExchangePlanHost, RangesHeldByNoRankAreTheSameErrorOnEveryRank) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const Index total = 40;
  const auto held = exchange_cases::range_deal(total, P, me, -1);
  std::vector<RowRange> wanted{{0, 3}};
  if (me == P - 1) wanted.push_back({total - 2, total + 1});  // one row beyond the array
  try {
    ExchangePlan::from_ranges(comm, static_cast<Index>(held.local_globals.size()), held.held, held.first_row, wanted);
    FAIL() << "rank " << me << ": no error";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal);
    EXPECT_NE(std::string(e.what()).find("rank " + std::to_string(P - 1) + " wants rows [38, 41)"), std::string::npos)
        << e.what();
  }
}

TEST(ExchangePlanHost, AllGatherConcatenatesTheRanksInOrder) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const auto deal = exchange_cases::deal(60, P, 3, P > 2 ? 1 : -1);
  const ExchangePlan plan = ExchangePlan::all_gather(comm, static_cast<Index>(deal.rows[static_cast<std::size_t>(me)].size()));
  EXPECT_TRUE(plan.is_all_gather());
  std::vector<Index> expected;
  for (const auto& rows : deal.rows) expected.insert(expected.end(), rows.begin(), rows.end());
  ASSERT_EQ(plan.target_rows(), 60);
  const int width = 3;
  const Index ld = 7;
  const std::vector<float> source = exchange_cases::rows_of(deal.rows[static_cast<std::size_t>(me)], width, width);
  std::vector<float> target(60 * ld, -1.0f);
  plan.forward(source.data(), width, target.data(), ld, width);
  for (std::size_t t = 0; t < expected.size(); ++t)
    for (Index c = 0; c < ld; ++c)
      ASSERT_EQ(target[t * ld + static_cast<std::size_t>(c)], c < width ? value(expected[t], static_cast<int>(c)) : -1.0f);
  // An all-gather moves one way only.
  EXPECT_THROW(plan.backward(target.data(), ld, std::vector<float>(std::max<std::size_t>(source.size(), 1)).data(), width, width),
               surrogate::Error);
}

TEST(ExchangePlanHost, TrafficBalancesOverTheRanks) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const Index total = 90;
  const auto deal = exchange_cases::deal(total, P, 5, P - 1);
  const auto q = exchange_cases::requests(deal, total, 20 + 3 * me, 40u + static_cast<unsigned>(me));
  const std::vector<Index>& mine = deal.rows[static_cast<std::size_t>(me)];
  ExchangePlan plan = ExchangePlan::from_requests(comm, static_cast<Index>(mine.size()), q.source_rank, q.source_key, {},
                                                  q.copy_from);
  Traffic sink;
  plan.count_into(&sink);
  const int width = 6;
  const std::vector<float> source = exchange_cases::rows_of(mine, width, width);
  std::vector<float> target(std::max<std::size_t>(q.expected.size(), 1) * width);
  plan.forward(source.data(), width, target.data());
  const Traffic once = plan.traffic();
  plan.forward(source.data(), width, target.data());
  const Traffic& t = plan.traffic();
  EXPECT_EQ(t.moves, 2u);
  EXPECT_EQ(t.sent, 2 * once.sent);
  EXPECT_EQ(t.received, 2 * once.received);
  EXPECT_EQ(sink.sent, t.sent);
  EXPECT_EQ(sink.received, t.received);
  EXPECT_EQ(sink.local, t.local);
  // Every row counted once, on this rank or on a link: received + local (targets and copies) = all targets.
  EXPECT_EQ(once.received + once.local, static_cast<std::uint64_t>(q.expected.size()) * width * sizeof(float));
  EXPECT_EQ(sum_over_ranks(comm, once.sent), sum_over_ranks(comm, once.received));
  if (P == 1) {
    EXPECT_EQ(once.sent, 0u);
  } else {
    EXPECT_GT(sum_over_ranks(comm, once.sent), 0u);
  }
}

}  // namespace
