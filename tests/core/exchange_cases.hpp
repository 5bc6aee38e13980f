// Cases of the exchange-plan tests (test_exchange_mpi.cpp on host rows, test_exchange_device_mpi_emulated.cpp
// on device rows): every rank draws the same global arrangement from a seed and keeps its part, so each rank
// can compute every expected row itself (a naive reference: row value = f(global id, column)).
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "surrogate/exchange.hpp"

namespace exchange_cases {

using Index = std::int64_t;

/// The value of column c of global row g (exact in float).
inline float value(Index g, int c) { return static_cast<float>(g * 64 + c); }

/// Global rows 0..total-1 dealt to the ranks unequally (rank r gets about (r + 1) shares; with `empty_rank`
/// that rank gets none), each rank's rows in a random local order.
struct Deal {
  std::vector<int> owner;               // global row -> rank
  std::vector<Index> local_row;         // global row -> its row on the owner
  std::vector<std::vector<Index>> rows;  // rank -> its global rows in local order
};

inline Deal deal(Index total, int ranks, unsigned seed, int empty_rank) {
  std::mt19937_64 gen(seed);
  Deal d;
  d.owner.resize(static_cast<std::size_t>(total));
  d.local_row.resize(static_cast<std::size_t>(total));
  d.rows.resize(static_cast<std::size_t>(ranks));
  std::vector<Index> weights(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) weights[static_cast<std::size_t>(r)] = r == empty_rank && ranks > 1 ? 0 : r + 1;
  const Index weight_sum = std::accumulate(weights.begin(), weights.end(), Index{0});
  for (Index g = 0; g < total; ++g) {
    Index pick = static_cast<Index>(gen() % static_cast<std::uint64_t>(weight_sum));
    int r = 0;
    while (pick >= weights[static_cast<std::size_t>(r)]) pick -= weights[static_cast<std::size_t>(r++)];
    d.owner[static_cast<std::size_t>(g)] = r;
    d.rows[static_cast<std::size_t>(r)].push_back(g);
  }
  for (auto& rows : d.rows) {
    std::shuffle(rows.begin(), rows.end(), gen);
    for (std::size_t i = 0; i < rows.size(); ++i) d.local_row[static_cast<std::size_t>(rows[i])] = static_cast<Index>(i);
  }
  return d;
}

/// Rows of `width` values (row stride ld) of the given global rows.
inline std::vector<float> rows_of(const std::vector<Index>& globals, int width, Index ld) {
  std::vector<float> out(std::max<std::size_t>(globals.size(), 1) * static_cast<std::size_t>(ld), -1.0f);
  for (std::size_t i = 0; i < globals.size(); ++i)
    for (int c = 0; c < width; ++c) out[i * static_cast<std::size_t>(ld) + static_cast<std::size_t>(c)] = value(globals[i], c);
  return out;
}

/// A request list for one rank: `count` random global rows (repeats allowed), and every fifth target a
/// copy of an earlier received target. Returns the plan's arguments and the expected global row per target.
struct Requests {
  std::vector<int> source_rank;
  std::vector<Index> source_key, copy_from, expected;
};

inline Requests requests(const Deal& d, Index total, Index count, unsigned seed) {
  std::mt19937_64 gen(seed);
  Requests q;
  for (Index t = 0; t < count; ++t) {
    if (t > 0 && t % 5 == 0 && total > 0) {
      const Index from = static_cast<Index>(gen() % static_cast<std::uint64_t>(t));
      if (q.source_rank[static_cast<std::size_t>(from)] >= 0) {
        q.source_rank.push_back(-1);
        q.source_key.push_back(0);
        q.copy_from.push_back(from);
        q.expected.push_back(q.expected[static_cast<std::size_t>(from)]);
        continue;
      }
    }
    const Index g = total > 0 ? static_cast<Index>(gen() % static_cast<std::uint64_t>(total)) : 0;
    q.source_rank.push_back(d.owner[static_cast<std::size_t>(g)]);
    q.source_key.push_back(d.local_row[static_cast<std::size_t>(g)]);
    q.copy_from.push_back(-1);
    q.expected.push_back(g);
  }
  return q;
}

/// Contiguous global ranges per rank for the range plans: rank r holds [bounds[r], bounds[r+1]) split
/// into two pieces stored in reverse order in its buffer (so held_first_row is not the identity).
struct RangeDeal {
  std::vector<surrogate::RowRange> held;
  std::vector<Index> first_row;
  std::vector<Index> local_globals;  // the global row of every local source row
};

inline RangeDeal range_deal(Index total, int ranks, int rank, int empty_rank) {
  std::vector<Index> bounds(static_cast<std::size_t>(ranks) + 1, 0);
  Index weight_sum = 0;
  for (int r = 0; r < ranks; ++r) weight_sum += r == empty_rank && ranks > 1 ? 0 : r + 1;
  Index at = 0;
  for (int r = 0; r < ranks; ++r) {
    at += total * (r == empty_rank && ranks > 1 ? 0 : r + 1) / weight_sum;
    bounds[static_cast<std::size_t>(r) + 1] = r + 1 == ranks ? total : at;
  }
  RangeDeal d;
  const Index b = bounds[static_cast<std::size_t>(rank)], e = bounds[static_cast<std::size_t>(rank) + 1];
  const Index mid = b + (e - b) / 2;
  d.held = {{mid, e}, {b, mid}};
  d.first_row = {0, e - mid};
  for (Index g = mid; g < e; ++g) d.local_globals.push_back(g);
  for (Index g = b; g < mid; ++g) d.local_globals.push_back(g);
  return d;
}

/// Random wanted ranges (possibly empty, overlapping each other) inside [0, total).
inline std::vector<surrogate::RowRange> wanted_ranges(Index total, int count, unsigned seed) {
  std::mt19937_64 gen(seed);
  std::vector<surrogate::RowRange> w;
  for (int i = 0; i < count; ++i) {
    const Index a = static_cast<Index>(gen() % static_cast<std::uint64_t>(total + 1));
    const Index n = static_cast<Index>(gen() % 23);
    w.push_back({a, std::min(total, a + n)});
  }
  return w;
}

}  // namespace exchange_cases
