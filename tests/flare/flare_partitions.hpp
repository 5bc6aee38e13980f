// Partitions of a FLARE golden case over MPI ranks, shared by the CPU and device MPI tests
// (share/docs/reproducibility.md): which rows each rank owns, and its inputs gathered.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "golden.hpp"

struct Partition {
  std::string name;
  std::vector<std::int64_t> rows;  // global rows owned by this rank, in local order
};

/// Contiguous shares, a shuffled one (every rank draws the same permutation and random cut points, then
/// keeps its part in a random local order: samples straddle ranks, local rows are not grouped by sample),
/// and everything on the first or on the last rank (empty shares elsewhere).
inline std::vector<Partition> partitions(std::int64_t n, int rank, int size) {
  std::vector<Partition> result;
  Partition contiguous{"contiguous", {}};
  for (std::int64_t i = n * rank / size; i < n * (rank + 1) / size; ++i) contiguous.rows.push_back(i);
  result.push_back(contiguous);
  std::mt19937 gen(1234);
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), gen);
  std::vector<std::int64_t> cuts = {0, n};
  std::uniform_int_distribution<std::int64_t> cut(0, n);
  for (int r = 1; r < size; ++r) cuts.push_back(cut(gen));
  std::sort(cuts.begin(), cuts.end());
  result.push_back({"shuffled", {perm.begin() + cuts[rank], perm.begin() + cuts[rank + 1]}});
  Partition first{"all-on-rank-0", {}}, last{"all-on-last-rank", {}};
  for (std::int64_t i = 0; i < n; ++i) {
    if (rank == 0) first.rows.push_back(i);
    if (rank == size - 1) last.rows.push_back(i);
  }
  result.push_back(first);
  result.push_back(last);
  return result;
}

/// The inputs (rows x in_dim) and sample ids of `rows` of the case, in that order (appended).
inline void gather(const surrogate::testing::GoldenCase& c, const std::vector<std::int64_t>& rows,
                   std::vector<float>& in, std::vector<std::int64_t>& ids) {
  for (std::int64_t g : rows) {
    ids.push_back(c.sample_ids[static_cast<std::size_t>(g)]);
    for (int j = 0; j < c.in_dim; ++j) in.push_back(c.features[static_cast<std::size_t>(g * c.in_dim + j)]);
  }
}
