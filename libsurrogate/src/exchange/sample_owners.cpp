// SampleOwners (sample_owners.hpp): owners from the sample sizes, the rows' sources by an all-to-all of
// (sample, count, first row) per segment (collectives.hpp), then an exchange of the ids that orders each
// sample.
#include "sample_owners.hpp"

#include <algorithm>
#include <numeric>
#include <string>

#include "collectives.hpp"
#include "surrogate/error.hpp"

namespace surrogate::detail {

int SampleOwners::owner(index_t sample) const {
  const index_t total = first_point_.back();
  if (total == 0) return 0;
  const double share = static_cast<double>(first_point_[static_cast<std::size_t>(sample)]) / static_cast<double>(total);
  return std::min(ranks_ - 1, static_cast<int>(share * ranks_));
}

SampleOwners SampleOwners::build(const Comm& comm, const SampleLayout& layout, const std::int64_t* global_ids) {
  SampleOwners so;
  const int P = comm.size();
  so.ranks_ = P;
  const std::vector<index_t>& sizes = layout.sample_sizes();
  so.first_point_.assign(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), so.first_point_.begin() + 1);

  // Every segment (sample, rows, first working row) to the sample's owner; received grouped by rank.
  // Owners are increasing in the sample and segments come in sample order, so `send` is grouped by owner.
  std::vector<std::size_t> send_counts(static_cast<std::size_t>(P), 0);
  std::vector<index_t> send;
  for (const SampleLayout::Segment& seg : layout.segments()) {
    send.insert(send.end(), {seg.sample, seg.end - seg.begin, seg.begin});
    send_counts[static_cast<std::size_t>(so.owner(seg.sample))] += 3;
  }
  const std::vector<std::size_t> recv_counts = exchange_counts(comm, send_counts);
  const std::vector<std::size_t> recv_offsets = exclusive_offsets(recv_counts);
  std::vector<index_t> recv(recv_offsets.back());
  alltoallv_elements(comm, send.data(), send_counts, recv.data(), recv_counts, sizeof(index_t));

  // Owned samples in increasing order; within a sample, the segments of ranks 0, 1, ... (rank-major).
  struct Piece {
    index_t sample, rows, first;
    int rank;
  };
  std::vector<Piece> pieces;
  for (int r = 0; r < P; ++r)
    for (std::size_t i = recv_offsets[static_cast<std::size_t>(r)]; i + 3 <= recv_offsets[static_cast<std::size_t>(r) + 1]; i += 3)
      pieces.push_back({recv[i], recv[i + 1], recv[i + 2], r});
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.sample < b.sample; });
  std::vector<int> source_rank;
  std::vector<std::int64_t> source_key;
  for (const Piece& p : pieces) {
    if (so.owned_.empty() || so.owned_.back().sample != p.sample) {
      const index_t at = static_cast<index_t>(source_rank.size());
      so.owned_.push_back({p.sample, at, at});
    }
    for (index_t i = 0; i < p.rows; ++i) {
      source_rank.push_back(p.rank);
      source_key.push_back(p.first + i);
    }
    so.owned_.back().end = static_cast<index_t>(source_rank.size());
  }
  for (const Owned& o : so.owned_)
    if (o.end - o.begin != sizes[static_cast<std::size_t>(o.sample)])
      throw Error(ErrorCode::internal, "sample owners: sample " + std::to_string(o.sample) + " gathered " +
                                           std::to_string(o.end - o.begin) + " of its " +
                                           std::to_string(sizes[static_cast<std::size_t>(o.sample)]) + " points on rank " +
                                           std::to_string(comm.rank()));

  // The ids of the working rows (as doubles: exact below 2^53), gathered rank-major, fix the order.
  const index_t n = layout.local_points();
  const std::vector<std::int64_t> ids = working_ids(comm, layout, global_ids);
  std::vector<double> id_rows(ids.begin(), ids.end());
  const ExchangePlan rank_major = ExchangePlan::from_requests(comm, n, source_rank, source_key, {}, {});
  std::vector<double> gathered(source_rank.size());
  rank_major.forward(id_rows.data(), 1, gathered.data());

  // Each sample's rows by increasing id; the final plan requests them in that order.
  std::vector<int> sorted_rank(source_rank.size());
  std::vector<std::int64_t> sorted_key(source_key.size());
  so.ids_.resize(source_rank.size());
  std::vector<std::size_t> perm(source_rank.size());
  std::iota(perm.begin(), perm.end(), std::size_t{0});
  for (const Owned& o : so.owned_)
    std::stable_sort(perm.begin() + o.begin, perm.begin() + o.end,
                     [&](std::size_t a, std::size_t b) { return gathered[a] < gathered[b]; });
  std::string duplicate;  // a global id given twice within a sample would make the order partition-dependent
  for (const Owned& o : so.owned_)
    for (index_t t = o.begin + 1; t < o.end && duplicate.empty(); ++t)
      if (gathered[perm[static_cast<std::size_t>(t)]] == gathered[perm[static_cast<std::size_t>(t - 1)]])
        duplicate = "global id " + std::to_string(static_cast<std::int64_t>(gathered[perm[static_cast<std::size_t>(t)]])) +
                    " is given to two points of sample " + std::to_string(o.sample) + " (ids must be unique)";
  comm.agree_or_throw(duplicate.empty() ? Status{} : Status{ErrorCode::input, duplicate});
  for (std::size_t t = 0; t < perm.size(); ++t) {
    sorted_rank[t] = source_rank[perm[t]];
    sorted_key[t] = source_key[perm[t]];
    so.ids_[t] = static_cast<std::int64_t>(gathered[perm[t]]);
  }
  so.rows_ = ExchangePlan::from_requests(comm, n, sorted_rank, sorted_key, {}, {});
  so.samples_ = ExchangePlan::all_gather(comm, static_cast<std::int64_t>(so.owned_.size()));
  return so;
}

std::vector<std::int64_t> SampleOwners::working_ids(const Comm& comm, const SampleLayout& layout,
                                                   const std::int64_t* global_ids) {
  // An empty rank's null ids do not make the ids absent: they are given when any rank gives them.
  const index_t n = layout.local_points();
  const bool given = comm.allreduce<int>(global_ids != nullptr ? 1 : 0, ReduceOp::max) == 1;
  comm.agree_or_throw(given && n > 0 && !global_ids
                          ? Status{ErrorCode::invalid_argument, "sample owners: rank " + std::to_string(comm.rank()) +
                                                                    " gives no global ids for its " + std::to_string(n) +
                                                                    " points while other ranks do"}
                          : Status{});
  std::vector<std::int64_t> ids(static_cast<std::size_t>(n));
  if (given) {
    std::copy(global_ids, global_ids + n, ids.begin());
  } else {
    std::vector<index_t> counts(static_cast<std::size_t>(comm.size()));
    comm.allgather(&n, sizeof n, counts.data());
    const index_t offset = std::accumulate(counts.begin(), counts.begin() + comm.rank(), index_t{0});
    const std::vector<index_t>& order = layout.order();
    for (index_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = offset + (order.empty() ? i : order[static_cast<std::size_t>(i)]);
  }
  return ids;
}

void SampleOwners::rebind(const Comm& comm) {
  rows_.rebind(comm);
  samples_.rebind(comm);
}

}  // namespace surrogate::detail
