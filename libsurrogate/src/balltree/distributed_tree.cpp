// The distributed ball tree and its rotated orders (share/docs/balltree.md, "Distributed tree"): input
// checks agreed over the ranks, the serial numbering of the points, the rank ranges of the tree order,
// the exact placement (distributed_placement.cpp) and the exchange plans (distributed_exchange.cpp).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "distributed_internal.hpp"
#include "surrogate/balltree_distributed.hpp"
#include "surrogate/error.hpp"

namespace surrogate::balltree {
namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }

template <class T>
Status check_local_input(std::span<const T> positions, int dim, std::span<const std::int64_t> sample_ids,
                         const DistributedOptions& options) {
  try {
    if (dim < 1) throw Error(ErrorCode::invalid_argument, "distributed ball tree: dim must be at least 1, found " + std::to_string(dim));
    if (options.granularity < 1)
      throw Error(ErrorCode::invalid_argument, "distributed ball tree: granularity must be at least 1, found " +
                                                   std::to_string(options.granularity));
    if (options.serial_threshold < 0)
      throw Error(ErrorCode::invalid_argument, "distributed ball tree: serial_threshold must be non-negative, found " +
                                                   std::to_string(options.serial_threshold));
    if (positions.size() != sample_ids.size() * sz(dim))
      throw Error(ErrorCode::input, "distributed ball tree: local_positions has " + std::to_string(positions.size()) +
                                        " values but local_sample_ids has " + std::to_string(sample_ids.size()) +
                                        " points of dim " + std::to_string(dim));
    for (std::size_t i = 0; i < sample_ids.size(); ++i)
      if (sample_ids[i] < 0)
        throw Error(ErrorCode::input, "distributed ball tree: local_sample_ids[" + std::to_string(i) + "] = " +
                                          std::to_string(sample_ids[i]) + " is negative");
    for (std::size_t i = 0; i < positions.size(); ++i)
      if (!std::isfinite(positions[i]))
        throw Error(ErrorCode::input, "distributed ball tree: local point " + std::to_string(i / sz(dim)) +
                                          " has a NaN/Inf coordinate (coordinate " + std::to_string(i % sz(dim)) + ")");
  } catch (...) {
    return Status::from_current_exception();
  }
  return {};
}

RankRanges cut_slots(Index total, Index granularity, int ranks) {
  const Index chunk = granularity % 2 == 0 ? granularity : 2 * granularity;
  const Index chunks = (total + chunk - 1) / chunk;
  RankRanges r;
  r.bounds.resize(sz(ranks) + 1);
  for (int k = 0; k <= ranks; ++k) r.bounds[sz(k)] = std::min(total, (chunks * k / ranks) * chunk);
  return r;
}

template <class T>
DistributedTree build_impl(const Comm& comm, std::span<const T> positions, int dim, std::span<const std::int64_t> sample_ids,
                           const DistributedOptions& options) {
  comm.agree_or_throw(check_local_input(positions, dim, sample_ids, options));
  const int p = comm.size(), me = comm.rank();
  Index dims[2] = {dim, -dim};
  comm.allreduce(std::span<Index>(dims, 2), ReduceOp::max);
  if (dims[0] != -dims[1])
    throw Error(ErrorCode::invalid_argument, "distributed ball tree: the ranks pass different dim (" + std::to_string(-dims[1]) +
                                                 " .. " + std::to_string(dims[0]) + ")");
  Index local_max = -1;
  for (const auto id : sample_ids) local_max = std::max(local_max, id);
  const Index samples = comm.allreduce(local_max, ReduceOp::max) + 1;
  if (samples < 1) throw Error(ErrorCode::input, "distributed ball tree: no rank holds any point");

  // The count table (ranks x samples) and the serial numbering.
  std::vector<Index> local_counts(sz(samples), 0);
  for (const auto id : sample_ids) ++local_counts[sz(id)];
  std::vector<Index> counts(sz(p) * sz(samples));
  comm.allgather(local_counts.data(), sz(samples) * sizeof(Index), counts.data());
  auto count = [&](int r, Index b) { return counts[sz(r) * sz(samples) + sz(b)]; };

  DistributedTree t;
  t.sample_points.assign(sz(samples), 0);
  for (int r = 0; r < p; ++r)
    for (Index b = 0; b < samples; ++b) t.sample_points[sz(b)] += count(r, b);
  for (Index b = 0; b < samples; ++b)
    if (t.sample_points[sz(b)] < 2)
      throw Error(ErrorCode::input, "distributed ball tree: sample " + std::to_string(b) + " has " +
                                        std::to_string(t.sample_points[sz(b)]) +
                                        " point(s) over all ranks; every sample needs at least 2 (sample ids must be 0 .. " +
                                        std::to_string(samples - 1) + " without gaps)");
  std::vector<Index> point_offsets(sz(samples) + 1, 0);
  t.slot_offsets.assign(sz(samples) + 1, 0);
  for (Index b = 0; b < samples; ++b) {
    point_offsets[sz(b) + 1] = point_offsets[sz(b)] + t.sample_points[sz(b)];
    t.slot_offsets[sz(b) + 1] = t.slot_offsets[sz(b)] + padded_size(t.sample_points[sz(b)]);
  }
  t.slots = cut_slots(t.slot_offsets.back(), options.granularity, p);
  t.slot_begin = t.slots.begin(me);
  t.slot_end = t.slots.end(me);

  // rank_first[b * p + r]: serial position (inside sample b) of rank r's first point of b.
  std::vector<Index> rank_first(sz(samples) * sz(p), 0);
  for (Index b = 0; b < samples; ++b)
    for (int r = 1; r < p; ++r) rank_first[sz(b) * sz(p) + sz(r)] = rank_first[sz(b) * sz(p) + sz(r) - 1] + count(r - 1, b);
  // group_first[r * samples + b]: rank r's first point of sample b in its sample-grouped local order.
  std::vector<Index> group_first(sz(p) * sz(samples), 0);
  for (int r = 0; r < p; ++r)
    for (Index b = 1; b < samples; ++b)
      group_first[sz(r) * sz(samples) + sz(b)] = group_first[sz(r) * sz(samples) + sz(b) - 1] + count(r, b - 1);

  const Index n_local = static_cast<Index>(sample_ids.size());
  std::vector<Index> grouped(sz(n_local));  // grouped position -> local row
  std::iota(grouped.begin(), grouped.end(), 0);
  std::stable_sort(grouped.begin(), grouped.end(), [&](Index a, Index b) { return sample_ids[sz(a)] < sample_ids[sz(b)]; });

  detail::SpreadSamples<T> data;
  data.dim = dim;
  data.samples = samples;
  data.counts = counts;
  data.ids.resize(sz(n_local));
  data.coords.resize(sz(n_local * dim));
  t.local_point_index.resize(sz(n_local));
  for (Index g = 0; g < n_local; ++g) {
    const Index row = grouped[sz(g)], b = sample_ids[sz(row)];
    const Index gid = point_offsets[sz(b)] + rank_first[sz(b) * sz(p) + sz(me)] + (g - group_first[sz(me) * sz(samples) + sz(b)]);
    data.ids[sz(g)] = gid;
    t.local_point_index[sz(row)] = gid;
    std::copy_n(positions.begin() + row * dim, dim, data.coords.begin() + g * dim);
  }

  detail::PlacedRange placed = detail::place(comm, data, detail::Placement::tree, 0, t.slot_offsets, t.slots, options.serial_threshold,
                                                options.finisher);
  t.index = std::move(placed.ids);
  t.mask = std::move(placed.mask);
  t.peak_points = placed.peak_points;

  // The plan: every local slot with mask 1 asks the rank that holds its point; a duplicate copies the
  // slot before it (its original, in the same leaf and so on the same rank).
  const Index local_slots = t.local_slots();
  std::vector<int> source_rank(sz(local_slots), -1);
  std::vector<Index> source_key(sz(local_slots), -1), copy_from(sz(local_slots), -1);
  collectively(comm, [&] {
    for (Index k = 0; k < local_slots; ++k) {
      if (!t.mask[sz(k)]) {
        if (k == 0) throw Error(ErrorCode::internal, "distributed ball tree: a rank range starts with a padding duplicate");
        copy_from[sz(k)] = k - 1;
        continue;
      }
      const Index gid = t.index[sz(k)];
      const Index b = static_cast<Index>(std::upper_bound(point_offsets.begin(), point_offsets.end(), gid) - point_offsets.begin()) - 1;
      const Index q = gid - point_offsets[sz(b)];
      const Index* first = rank_first.data() + b * p;
      // The last rank whose first point of b is at or before q (ranks holding none of b are skipped).
      const int r = static_cast<int>(std::upper_bound(first, first + p, q) - first) - 1;
      source_rank[sz(k)] = r;
      source_key[sz(k)] = group_first[sz(r) * sz(samples) + sz(b)] + (q - first[r]);
    }
  });
  t.plan = RedistributionPlan(ExchangePlan::from_requests(comm, n_local, source_rank, source_key, grouped, copy_from));
  return t;
}

}  // namespace

DistributedTree build_distributed(const Comm& comm, std::span<const float> local_positions, int dim,
                                  std::span<const std::int64_t> local_sample_ids, const DistributedOptions& options) {
  return build_impl(comm, local_positions, dim, local_sample_ids, options);
}

DistributedTree build_distributed(const Comm& comm, std::span<const double> local_positions, int dim,
                                  std::span<const std::int64_t> local_sample_ids, const DistributedOptions& options) {
  return build_impl(comm, local_positions, dim, local_sample_ids, options);
}

}  // namespace surrogate::balltree
