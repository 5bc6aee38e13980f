// sort_segments, sort_segments_by_group and ranks_in_segments (segment_ranks.hpp): per-segment cuts from
// weighted regular samples or from group counts, one all-to-all of the elements, per-segment merges of the
// received runs, offsets by an all-gather.
#include "segment_ranks.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <numeric>
#include <optional>
#include <string>

#include "collectives.hpp"
#include "surrogate/error.hpp"

namespace surrogate::detail {
namespace {

std::size_t sz(std::int64_t v) { return static_cast<std::size_t>(v); }

bool before(const SortElement& a, const SortElement& b) { return a.bits != b.bits ? a.bits < b.bits : a.tie < b.tie; }

}  // namespace

std::uint64_t order_image(double value) {
  if (value == 0.0) value = 0.0;  // -0 ties with +0
  const auto bits = std::bit_cast<std::uint64_t>(value);
  return (bits >> 63) != 0 ? ~bits : bits | (std::uint64_t{1} << 63);
}

std::uint64_t order_image(std::int64_t value) { return static_cast<std::uint64_t>(value) ^ (std::uint64_t{1} << 63); }

namespace {

// Where every segment's local run is cut: elements cut[s * (P + 1) + q] .. cut[s * (P + 1) + q + 1] of
// `local` go to rank q.
using Cuts = std::vector<std::int64_t>;

// Splitters from K regular samples of every segment's local run, each standing for n / K of its elements
// (the weight in `payload`; tie -1: no sample), gathered by every rank; splitter q is the first sample
// whose cumulative weight reaches q / P of the segment (the same on every rank), each run cut by binary
// search.
Cuts sampled_cuts(const Comm& comm, std::span<const SortElement> local, std::span<const std::int64_t> local_first) {
  const auto Pu = static_cast<std::size_t>(comm.size());
  const auto S = static_cast<std::int64_t>(local_first.size()) - 1;
  const std::size_t K = std::min<std::size_t>(4 * Pu, 128);
  std::vector<SortElement> samples(sz(S) * K, SortElement{0, -1, 0, 0, 0}), all(samples.size() * Pu);
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t n = local_first[sz(s) + 1] - local_first[sz(s)];
    const std::int64_t k_n = std::min<std::int64_t>(static_cast<std::int64_t>(K), n);
    for (std::int64_t k = 0; k < k_n; ++k) {
      SortElement e = local[sz(local_first[sz(s)] + (2 * k + 1) * n / (2 * k_n))];  // the middles of K slices
      e.payload = std::bit_cast<std::int64_t>(static_cast<double>(n) / static_cast<double>(k_n));
      samples[sz(s) * K + sz(k)] = e;
    }
  }
  comm.allgather(samples.data(), samples.size() * sizeof(SortElement), all.data());
  Cuts cut(sz(S) * (Pu + 1));
  std::vector<SortElement> seg_samples;
  for (std::int64_t s = 0; s < S; ++s) {
    seg_samples.clear();
    double total = 0;
    for (std::size_t r = 0; r < Pu; ++r)
      for (std::size_t k = 0; k < K; ++k)
        if (const SortElement& e = all[(r * sz(S) + sz(s)) * K + k]; e.tie >= 0) {
          seg_samples.push_back(e);
          total += std::bit_cast<double>(e.payload);
        }
    std::sort(seg_samples.begin(), seg_samples.end(), before);
    const auto b0 = local.begin() + static_cast<std::ptrdiff_t>(local_first[sz(s)]),
               b1 = local.begin() + static_cast<std::ptrdiff_t>(local_first[sz(s) + 1]);
    std::int64_t* c = cut.data() + sz(s) * (Pu + 1);
    c[0] = local_first[sz(s)];
    double cumulative = 0;
    std::size_t at = 0;
    for (std::size_t q = 1; q < Pu; ++q) {
      const double target = total * static_cast<double>(q) / static_cast<double>(Pu);
      while (at < seg_samples.size() && cumulative + std::bit_cast<double>(seg_samples[at].payload) / 2 < target)
        cumulative += std::bit_cast<double>(seg_samples[at++].payload);
      c[q] = at == seg_samples.size() ? local_first[sz(s) + 1]
                                      : std::lower_bound(b0, b1, seg_samples[at], before) - local.begin();
    }
    c[Pu] = local_first[sz(s) + 1];
  }
  return cut;
}

// The order images as signed integers (the same order), for MIN / MAX reductions.
std::int64_t signed_image(std::uint64_t bits) { return static_cast<std::int64_t>(bits ^ (std::uint64_t{1} << 63)); }
std::uint64_t unsigned_image(std::int64_t v) { return static_cast<std::uint64_t>(v) ^ (std::uint64_t{1} << 63); }

// Cuts between groups (sort_segments_by_group), or nothing when a segment's groups overlap in key order
// or would leave a piece unbalanced: the same decision on every rank (it reads reduced counts and bounds).
std::optional<Cuts> group_cuts(const Comm& comm, std::span<const SortElement> local,
                               std::span<const std::int64_t> local_first, std::span<const std::int64_t> group,
                               std::int64_t groups) {
  const auto Pu = static_cast<std::size_t>(comm.size());
  const auto S = static_cast<std::int64_t>(local_first.size()) - 1;
  const std::size_t R = sz(groups), cells = sz(S) * R;
  // Per segment and group: the count, the smallest key and (complemented) the largest, over all ranks.
  std::vector<std::int64_t> count(cells, 0), bounds(2 * cells, std::numeric_limits<std::int64_t>::max());
  for (std::int64_t s = 0; s < S; ++s)
    for (std::int64_t i = local_first[sz(s)]; i < local_first[sz(s) + 1]; ++i) {
      const std::size_t cell = sz(s) * R + sz(group[sz(i)]);
      const std::int64_t key = signed_image(local[sz(i)].bits);
      ++count[cell];
      bounds[cell] = std::min(bounds[cell], key);
      bounds[cells + cell] = std::min(bounds[cells + cell], ~key);
    }
  comm.allreduce(std::span<std::int64_t>(count), ReduceOp::sum);
  comm.allreduce(std::span<std::int64_t>(bounds), ReduceOp::min);
  Cuts cut(sz(S) * (Pu + 1));
  std::vector<std::int64_t> prefix(R + 1), below_max(R + 1), above_min(R + 1);
  for (std::int64_t s = 0; s < S; ++s) {
    const std::int64_t* n = count.data() + sz(s) * R;
    const std::int64_t *lo = bounds.data() + sz(s) * R, *nhi = bounds.data() + cells + sz(s) * R;
    // Boundary b (before group b): the elements below it, the largest key below, the smallest at or above.
    prefix[0] = 0;
    below_max[0] = std::numeric_limits<std::int64_t>::min();
    for (std::size_t g = 0; g < R; ++g) {
      prefix[g + 1] = prefix[g] + n[g];
      below_max[g + 1] = n[g] > 0 ? std::max(below_max[g], ~nhi[g]) : below_max[g];
    }
    above_min[R] = std::numeric_limits<std::int64_t>::max();
    for (std::size_t g = R; g-- > 0;) above_min[g] = n[g] > 0 ? std::min(above_min[g + 1], lo[g]) : above_min[g + 1];
    // Boundary q: the one nearest q / P of the segment; it must separate the keys, and no piece may exceed
    // 1/P of the segment by more than a quarter (or by one group of a single element).
    const std::int64_t total = prefix[R], limit = total / static_cast<std::int64_t>(Pu) +
                                                  std::max<std::int64_t>(total / static_cast<std::int64_t>(4 * Pu), 1);
    const auto b0 = local.begin() + static_cast<std::ptrdiff_t>(local_first[sz(s)]),
               b1 = local.begin() + static_cast<std::ptrdiff_t>(local_first[sz(s) + 1]);
    std::int64_t* c = cut.data() + sz(s) * (Pu + 1);
    c[0] = local_first[sz(s)];
    std::size_t b = 0, previous = 0;
    for (std::size_t q = 1; q <= Pu; ++q) {
      const double target = static_cast<double>(total) * static_cast<double>(q) / static_cast<double>(Pu);
      if (q == Pu) {
        b = R;
      } else {
        while (b < R && static_cast<double>(prefix[b + 1]) <= target) ++b;
        if (b < R && static_cast<double>(prefix[b + 1]) - target < target - static_cast<double>(prefix[b])) ++b;
      }
      const bool none_below = prefix[b] == 0, none_above = prefix[b] == total;
      if (prefix[b] - prefix[previous] > limit || (!none_below && !none_above && below_max[b] >= above_min[b]))
        return std::nullopt;
      previous = b;
      // Every key of the groups from b on is at or above the smallest of them, every key below is under it.
      const std::uint64_t splitter = unsigned_image(above_min[b]);
      c[q] = none_above ? local_first[sz(s) + 1]
             : none_below
                 ? local_first[sz(s)]
                 : std::lower_bound(b0, b1, splitter, [](const SortElement& e, std::uint64_t v) { return e.bits < v; }) -
                       local.begin();
    }
  }
  return cut;
}

// Each rank's cut runs to their ranks (one all-to-all), grouped by segment and merged, then the pieces'
// sizes gathered.
void exchange_cut_runs(const Comm& comm, std::span<const SortElement> local, std::span<const std::int64_t> local_first,
                       const Cuts& cut, int threads, SortedPiece& piece) {
  const auto Pu = static_cast<std::size_t>(comm.size());
  const auto S = static_cast<std::int64_t>(local_first.size()) - 1;
  std::vector<std::size_t> send_counts(Pu, 0);
  for (std::int64_t s = 0; s < S; ++s)
    for (std::size_t q = 0; q < Pu; ++q) send_counts[q] += sz(cut[sz(s) * (Pu + 1) + q + 1] - cut[sz(s) * (Pu + 1) + q]);
  std::vector<SortElement>& send = piece.sent;
  send.clear();
  for (std::size_t q = 0; q < Pu; ++q)
    for (std::int64_t s = 0; s < S; ++s)
      send.insert(send.end(), local.begin() + static_cast<std::ptrdiff_t>(cut[sz(s) * (Pu + 1) + q]),
                  local.begin() + static_cast<std::ptrdiff_t>(cut[sz(s) * (Pu + 1) + q + 1]));
  const std::vector<std::size_t> recv_counts = exchange_counts(comm, send_counts);
  std::vector<SortElement>& got = piece.received;
  got.resize(std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t{0}));
  alltoallv_elements(comm, send.data(), send_counts, got.data(), recv_counts, sizeof(SortElement));
  // Grouped by segment (stably: the runs of ranks 0, 1, ... in order), each segment's runs merged.
  piece.first.assign(sz(S) + 1, 0);
  std::vector<std::int64_t> run(sz(S) * Pu, 0);
  std::string bad;
  for (const SortElement& e : got)
    if (e.segment < 0 || e.segment >= S) {
      bad = "sort_segments: rank " + std::to_string(comm.rank()) + " received segment " + std::to_string(e.segment) +
            " of " + std::to_string(S);
      break;
    }
  comm.agree_or_throw(bad.empty() ? Status{} : Status{ErrorCode::internal, bad});
  std::size_t at = 0;
  for (std::size_t r = 0; r < Pu; ++r)
    for (std::size_t i = 0; i < recv_counts[r]; ++i, ++at) ++run[sz(got[at].segment) * Pu + r];
  for (std::int64_t s = 0; s < S; ++s)
    piece.first[sz(s) + 1] = piece.first[sz(s)] + std::accumulate(run.begin() + static_cast<std::ptrdiff_t>(sz(s) * Pu),
                                                                  run.begin() + static_cast<std::ptrdiff_t>(sz(s + 1) * Pu),
                                                                  std::int64_t{0});
  piece.held.resize(got.size());
  std::vector<std::int64_t> next(piece.first.begin(), piece.first.end() - 1);
  for (const SortElement& e : got) piece.held[sz(next[sz(e.segment)]++)] = e;
#pragma omp parallel for num_threads(threads) schedule(dynamic)
  for (std::int64_t s = 0; s < S; ++s) {
    const auto first = piece.held.begin() + static_cast<std::ptrdiff_t>(piece.first[sz(s)]);
    auto middle = first;
    for (std::size_t r = 0; r < Pu; ++r) {
      const auto end = middle + static_cast<std::ptrdiff_t>(run[sz(s) * Pu + r]);
      std::inplace_merge(first, middle, end, before);
      middle = end;
    }
  }
  // This rank's piece of segment s follows the pieces of the ranks before it.
  std::vector<std::int64_t> count(sz(S));
  piece.counts.resize(sz(S) * Pu);
  for (std::int64_t s = 0; s < S; ++s) count[sz(s)] = piece.first[sz(s) + 1] - piece.first[sz(s)];
  comm.allgather(count.data(), count.size() * sizeof(std::int64_t), piece.counts.data());
  piece.offset.assign(sz(S), 0);
  for (std::int64_t s = 0; s < S; ++s)
    for (int r = 0; r < comm.rank(); ++r) piece.offset[sz(s)] += piece.counts[sz(r) * sz(S) + sz(s)];
}

}  // namespace

void sort_segments(const Comm& comm, std::span<const SortElement> local, std::span<const std::int64_t> local_first,
                   int threads, SortedPiece& piece) {
  exchange_cut_runs(comm, local, local_first, sampled_cuts(comm, local, local_first), threads, piece);
}

bool sort_segments_by_group(const Comm& comm, std::span<const SortElement> local,
                            std::span<const std::int64_t> local_first, std::span<const std::int64_t> group,
                            std::int64_t groups, int threads, SortedPiece& piece) {
  const auto S = static_cast<std::int64_t>(local_first.size()) - 1;
  std::string bad;
  if (group.size() != local.size())
    bad = "sort_segments_by_group: rank " + std::to_string(comm.rank()) + " has " + std::to_string(group.size()) +
          " groups for " + std::to_string(local.size()) + " elements";
  for (std::size_t i = 0; i < group.size() && bad.empty(); ++i)
    if (group[i] < 0 || group[i] >= groups)
      bad = "sort_segments_by_group: rank " + std::to_string(comm.rank()) + " has an element of group " +
            std::to_string(group[i]) + " of " + std::to_string(groups);
  comm.agree_or_throw(bad.empty() ? Status{} : Status{ErrorCode::internal, bad});
  std::optional<Cuts> cut;
  if (groups <= kMaxSortGroupCells / std::max<std::int64_t>(S, 1)) cut = group_cuts(comm, local, local_first, group, groups);
  const bool by_group = cut.has_value();
  exchange_cut_runs(comm, local, local_first, by_group ? *cut : sampled_cuts(comm, local, local_first), threads, piece);
  return by_group;
}

std::vector<std::int64_t> ranks_in_segments(const Comm& comm, std::span<const RankRecord> records,
                                            std::uint64_t segments) {
  const int me = comm.rank();
  std::string bad;
  for (const RankRecord& r : records)
    if (r.segment >= segments) {
      bad = "ranks_in_segments: rank " + std::to_string(me) + " has a record of segment " + std::to_string(r.segment) +
            " of " + std::to_string(segments);
      break;
    }
  comm.agree_or_throw(bad.empty() ? Status{} : Status{ErrorCode::internal, bad});
  std::vector<SortElement> local(records.size());
  for (std::size_t i = 0; i < records.size(); ++i)
    local[i] = {records[i].key, records[i].tie, static_cast<std::int64_t>(i), static_cast<std::int32_t>(records[i].segment), me};
  std::sort(local.begin(), local.end(), [](const SortElement& a, const SortElement& b) {
    return a.segment != b.segment ? a.segment < b.segment : before(a, b);
  });
  std::vector<std::int64_t> first(segments + 1, 0);
  for (const SortElement& e : local) ++first[sz(e.segment) + 1];
  std::partial_sum(first.begin(), first.end(), first.begin());
  SortedPiece piece;
  sort_segments(comm, local, first, 1, piece);
  // The ranks back to the records' ranks as (row, rank) pairs.
  std::vector<std::int64_t> back;
  std::vector<int> dest;
  for (std::size_t s = 0; s < segments; ++s)
    for (std::int64_t i = piece.first[s]; i < piece.first[s + 1]; ++i) {
      back.insert(back.end(), {piece.held[sz(i)].payload, piece.offset[s] + i - piece.first[s]});
      dest.push_back(piece.held[sz(i)].origin);
    }
  PushedRecords returned;
  push_records(comm, back, 2, dest, returned);
  std::vector<std::int64_t> result(records.size());
  for (std::size_t i = 0; i < returned.source.size(); ++i) result[sz(returned.received[2 * i])] = returned.received[2 * i + 1];
  return result;
}

}  // namespace surrogate::detail
