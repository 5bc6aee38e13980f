// sort_segments and ranks_in_segments (segment_ranks.hpp): per-segment splitters from weighted regular
// samples, one all-to-all of the elements, per-segment merges of the received runs, offsets by an
// all-gather.
#include "segment_ranks.hpp"

#include <algorithm>
#include <bit>
#include <numeric>
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

void sort_segments(const Comm& comm, std::span<const SortElement> local, std::span<const std::int64_t> local_first,
                   int threads, SortedPiece& piece) {
  const auto Pu = static_cast<std::size_t>(comm.size());
  const auto S = static_cast<std::int64_t>(local_first.size()) - 1;
  // 1. K regular samples of every segment's local run, each standing for n / K of its elements (the
  // weight in `payload`; tie -1: no sample), gathered by every rank.
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
  // 2. Rank q receives the elements of segment s in [splitter q-1, splitter q), splitter q the first
  // sample whose cumulative weight reaches q / P of the segment (the same splitters on every rank): each
  // local run cut by binary search.
  std::vector<std::size_t> send_counts(Pu, 0);
  std::vector<std::int64_t> cut(sz(S) * (Pu + 1));
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
    for (std::size_t q = 0; q < Pu; ++q) send_counts[q] += sz(c[q + 1] - c[q]);
  }
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
  // 3. Grouped by segment (stably: the runs of ranks 0, 1, ... in order), each segment's runs merged.
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
  // 4. This rank's piece of segment s follows the pieces of the ranks before it.
  std::vector<std::int64_t> count(sz(S));
  piece.counts.resize(sz(S) * Pu);
  for (std::int64_t s = 0; s < S; ++s) count[sz(s)] = piece.first[sz(s) + 1] - piece.first[sz(s)];
  comm.allgather(count.data(), count.size() * sizeof(std::int64_t), piece.counts.data());
  piece.offset.assign(sz(S), 0);
  for (std::int64_t s = 0; s < S; ++s)
    for (int r = 0; r < comm.rank(); ++r) piece.offset[sz(s)] += piece.counts[sz(r) * sz(S) + sz(s)];
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
