// SampleOwners (libsurrogate/src/exchange/sample_owners.hpp) under mpirun (1-4 ranks): every sample's rows
// gathered on one rank sorted by global id, whatever the partition (unequal shares, an empty rank, random
// local orders), against a naive reference every rank computes from the same global arrangement; rows
// return by backward; per-sample rows reach every rank in sample order; rank-major ids when none are given.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "exchange/sample_owners.hpp"
#include "exchange_cases.hpp"
#include "surrogate/error.hpp"
#include "surrogate/mpi_comm.hpp"

namespace {

using exchange_cases::Index;
using exchange_cases::value;
using surrogate::MpiComm;
using surrogate::SampleLayout;
using surrogate::detail::SampleOwners;

struct Arrangement {
  exchange_cases::Deal deal;
  std::vector<std::int64_t> sample, id;  // of every global point
  Index samples = 0;
};

Arrangement arrange(Index total, Index samples, int ranks, unsigned seed, int empty_rank) {
  Arrangement a;
  a.samples = samples;
  a.deal = exchange_cases::deal(total, ranks, seed, empty_rank);
  std::mt19937_64 gen(seed + 100);
  a.sample.resize(static_cast<std::size_t>(total));
  for (Index g = 0; g < total; ++g)  // every sample at least one point, the rest at random
    a.sample[static_cast<std::size_t>(g)] = g < samples ? g : static_cast<std::int64_t>(gen() % static_cast<std::uint64_t>(samples));
  a.id.resize(static_cast<std::size_t>(total));
  std::iota(a.id.begin(), a.id.end(), std::int64_t{0});
  std::shuffle(a.id.begin(), a.id.end(), gen);
  return a;
}

void check(const MpiComm& comm, const Arrangement& a, bool given_ids) {
  const int P = comm.size(), me = comm.rank();
  const std::vector<Index>& mine = a.deal.rows[static_cast<std::size_t>(me)];
  const Index n = static_cast<Index>(mine.size());
  std::vector<std::int64_t> sample_ids(mine.size());
  for (std::size_t i = 0; i < mine.size(); ++i) sample_ids[i] = a.sample[static_cast<std::size_t>(mine[i])];
  const SampleLayout layout = SampleLayout::build(comm, n, sample_ids.data());

  // The id of every point as the owners see it: the given one, or rank-major (rank, caller's local row).
  std::vector<std::int64_t> id_of(a.id.size());
  if (given_ids) {
    id_of = a.id;
  } else {
    std::int64_t next = 0;
    for (int r = 0; r < P; ++r)
      for (const Index g : a.deal.rows[static_cast<std::size_t>(r)]) id_of[static_cast<std::size_t>(g)] = next++;
  }
  std::vector<Index> point_of_working(static_cast<std::size_t>(n));
  std::vector<std::int64_t> working_ids(static_cast<std::size_t>(n));
  for (Index w = 0; w < n; ++w) {
    const Index caller = layout.order().empty() ? w : layout.order()[static_cast<std::size_t>(w)];
    point_of_working[static_cast<std::size_t>(w)] = mine[static_cast<std::size_t>(caller)];
    working_ids[static_cast<std::size_t>(w)] = id_of[static_cast<std::size_t>(point_of_working[static_cast<std::size_t>(w)])];
  }
  SampleOwners owners = SampleOwners::build(comm, layout, given_ids ? working_ids.data() : nullptr);

  // Reference: the owned samples' ids, sorted within each sample.
  std::vector<std::int64_t> expected;
  Index owned_samples = 0;
  for (Index s = 0; s < a.samples; ++s) {
    if (owners.owner(s) != me) continue;
    ++owned_samples;
    std::vector<std::int64_t> ids;
    for (std::size_t g = 0; g < a.sample.size(); ++g)
      if (a.sample[g] == s) ids.push_back(id_of[g]);
    std::sort(ids.begin(), ids.end());
    expected.insert(expected.end(), ids.begin(), ids.end());
  }
  ASSERT_EQ(static_cast<Index>(owners.owned().size()), owned_samples);
  ASSERT_EQ(std::vector<std::int64_t>(owners.ids().begin(), owners.ids().end()), expected);
  for (Index s = 1; s < a.samples; ++s) EXPECT_LE(owners.owner(s - 1), owners.owner(s)) << "owners not contiguous";
  EXPECT_EQ(comm.allreduce<std::int64_t>(owned_samples, surrogate::ReduceOp::sum), a.samples);

  const int width = 3;
  std::vector<float> rows(static_cast<std::size_t>(std::max<Index>(n, 1) * width));
  for (Index w = 0; w < n; ++w)
    for (int c = 0; c < width; ++c) rows[static_cast<std::size_t>(w * width + c)] = value(working_ids[static_cast<std::size_t>(w)], c);
  std::vector<float> gathered(static_cast<std::size_t>(std::max<Index>(owners.rows(), 1) * width), -1.0f);
  owners.rows_plan().forward(rows.data(), width, gathered.data());
  for (Index t = 0; t < owners.rows(); ++t)
    for (int c = 0; c < width; ++c)
      ASSERT_EQ(gathered[static_cast<std::size_t>(t * width + c)], value(expected[static_cast<std::size_t>(t)], c));
  for (float& v : gathered) v = -v;
  std::vector<float> back(rows.size(), 0.0f);
  owners.rows_plan().backward(gathered.data(), width, back.data());
  for (Index i = 0; i < n * width; ++i) ASSERT_EQ(back[static_cast<std::size_t>(i)], -rows[static_cast<std::size_t>(i)]);

  std::vector<float> per_sample(std::max<std::size_t>(owners.owned().size(), 1) * width);
  for (std::size_t k = 0; k < owners.owned().size(); ++k)
    for (int c = 0; c < width; ++c) per_sample[k * width + static_cast<std::size_t>(c)] = value(owners.owned()[k].sample, c);
  std::vector<float> all(static_cast<std::size_t>(a.samples * width), -1.0f);
  owners.samples_to_all().forward(per_sample.data(), width, all.data());
  for (Index s = 0; s < a.samples; ++s)
    for (int c = 0; c < width; ++c) ASSERT_EQ(all[static_cast<std::size_t>(s * width + c)], value(s, c)) << "sample " << s;
}

TEST(SampleOwners, GathersWholeSamplesInIdOrder) {
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size();
  for (const unsigned seed : {1u, 2u, 3u})
    for (const int empty_rank : {-1, P - 1})
      for (const Index samples : {Index{1}, Index{2}, Index{7}}) {
        SCOPED_TRACE("seed " + std::to_string(seed) + ", empty rank " + std::to_string(empty_rank) + ", " +
                     std::to_string(samples) + " samples");
        const Arrangement a = arrange(41 + 13 * seed, samples, P, seed, empty_rank);
        check(comm, a, true);
        check(comm, a, false);
      }
}

TEST(SampleOwners, OwnersDependOnSizesAndRanksOnly) {
  // Two partitions of the same samples: the same owner for every sample.
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size();
  const Arrangement a = arrange(60, 5, P, 4u, -1), b = arrange(60, 5, P, 4u, P - 1);
  auto owners_of = [&](const Arrangement& x) {
    const std::vector<Index>& mine = x.deal.rows[static_cast<std::size_t>(comm.rank())];
    std::vector<std::int64_t> sample_ids;
    for (const Index g : mine) sample_ids.push_back(x.sample[static_cast<std::size_t>(g)]);
    const SampleLayout layout = SampleLayout::build(comm, static_cast<Index>(mine.size()), sample_ids.data());
    const SampleOwners so = SampleOwners::build(comm, layout, nullptr);
    std::vector<int> o;
    for (Index s = 0; s < 5; ++s) o.push_back(so.owner(s));
    return o;
  };
  EXPECT_EQ(owners_of(a), owners_of(b));
}

TEST(SampleOwners, DuplicateIdsAreAnAgreedError) {
  // Two points of one sample with the same global id (on different ranks when there are several).
  MpiComm comm(MPI_COMM_WORLD);
  const int P = comm.size(), me = comm.rank();
  const Index n = me == 0 || me == P - 1 ? 2 : 0;
  std::vector<std::int64_t> samples(static_cast<std::size_t>(n), 0), ids;
  for (Index i = 0; i < n; ++i) ids.push_back(me == 0 ? i : 1 + i);  // id 1 on rank 0 and on rank P - 1
  if (P == 1) ids = {5, 5};
  const SampleLayout layout = SampleLayout::build(comm, n, samples.data());
  try {
    static_cast<void>(SampleOwners::build(comm, layout, ids.data()));
    ADD_FAILURE() << "duplicate ids accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("is given to two points of sample 0"), std::string::npos) << e.what();
  }
}

}  // namespace
