// Exact distributed selection of the distributed ball tree (share/docs/balltree.md, "Distributed tree",
// "Exactness argument"): the split dimension and libstdc++'s std::nth_element (introselect) run on a
// range of positions spread over the ranks, each rank working on its own piece, with the same
// comparisons and the same element moves as the serial code on the concatenated array.
//
// One round on [first, last): the three median-of-three candidates are read with one all-reduce and the
// chosen one is swapped into `first`; then the Hoare partition is computed from stop counts (see
// introselect.hpp, partition_by_stop_counts): every rank counts its left stops (value not less than the
// pivot, in (first, last)) and right stops (pivot not less than the value, in [first, last)), one
// all-gather of the 2P counts ranks them globally, the number of swaps K is the all-reduced maximum over
// boundaries of min(lefts before, rights at or after), swap k pairs the k-th left stop with the k-th
// right stop (one all-to-all), and the cut is min(l_{K+1}, r_K) (one all-reduce). Ranges inside one rank,
// ranges of at most `serial_threshold` elements (gathered on the rank holding `first`) and the heap
// selection at depth limit 0 finish with the serial replica (introselect.hpp).
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>

#include "distributed_internal.hpp"
#include "introselect.hpp"

namespace surrogate::balltree::detail {
namespace {

using Index = std::int64_t;
std::size_t sz(Index i) { return static_cast<std::size_t>(i); }
constexpr double lowest = -std::numeric_limits<double>::infinity();

/// Runs the remaining introselect loop on m elements (ids, coords rows) held contiguously, as libstdc++,
/// and applies the resulting order in place, cycle by cycle (no copy of the m elements).
template <class T>
void select_rows(Index* ids, T* coords, int dim, Index m, Index nth, Index depth_limit, int c) {
  std::vector<Index> order(sz(m));
  std::iota(order.begin(), order.end(), Index{0});
  const auto less = [coords, dim, c](Index a, Index b) {
    return static_cast<double>(coords[a * dim + c]) < static_cast<double>(coords[b * dim + c]);
  };
  introselect_from(order.begin(), order.begin() + nth, order.end(), depth_limit, less);
  // Element i receives element order[i]: each cycle i <- order[i] <- order[order[i]] ... is rotated with
  // one saved element, its entries marked done (-1).
  std::vector<T> row(sz(dim));
  for (Index start = 0; start < m; ++start) {
    if (order[sz(start)] < 0 || order[sz(start)] == start) continue;
    const Index saved_id = ids[start];
    std::copy_n(coords + start * dim, dim, row.begin());
    Index at = start;
    for (Index from = order[sz(at)]; from != start; from = order[sz(at)]) {
      ids[at] = ids[from];
      std::copy_n(coords + from * dim, dim, coords + at * dim);
      order[sz(at)] = -1;
      at = from;
    }
    ids[at] = saved_id;
    std::copy_n(row.begin(), dim, coords + at * dim);
    order[sz(at)] = -1;
  }
}

}  // namespace

template <class T>
void DistributedSelection<T>::swap_local(Index a, Index b) {
  const Index i = a - work_.begin, j = b - work_.begin;
  std::swap(work_.ids[sz(i)], work_.ids[sz(j)]);
  std::swap_ranges(work_.coords.begin() + i * work_.dim, work_.coords.begin() + (i + 1) * work_.dim,
                   work_.coords.begin() + j * work_.dim);
}

template <class T>
Index DistributedSelection<T>::swap_batch() const {
  // At least 4096 elements (about 80 KB of ids and 3-D coordinates): small ranges swap in one batch.
  return swap_batch_size(work_.layout.total(), comm_.size(), threshold_);
}

template <class T>
void DistributedSelection<T>::swap_with_peers(const std::vector<std::vector<Index>>& peer_positions, Index batches) {
  const int p = comm_.size();
  const int dim = work_.dim;
  std::vector<std::size_t> counts(sz(p));
  std::vector<Index> ids, in_ids;
  std::vector<T> coords, in_coords;
  // Batch b of a list of length L: elements [b L / batches, (b + 1) L / batches).
  const auto cut = [batches](std::size_t length, Index b) { return sz(static_cast<Index>(length) * b / batches); };
  for (Index b = 0; b < batches; ++b) {
    ids.clear();
    coords.clear();
    for (int q = 0; q < p; ++q) {
      const auto& list = peer_positions[sz(q)];
      const std::size_t from = cut(list.size(), b), to = cut(list.size(), b + 1);
      counts[sz(q)] = to - from;
      for (std::size_t i = from; i < to; ++i) {
        const Index k = list[i] - work_.begin;
        ids.push_back(work_.ids[sz(k)]);
        coords.insert(coords.end(), work_.coords.begin() + k * dim, work_.coords.begin() + (k + 1) * dim);
      }
    }
    // Every pair is listed on both sides and cut alike, so the counts received equal the counts sent.
    const auto n = static_cast<Index>(ids.size());
    held_.add(2 * n);
    in_ids.resize(ids.size());
    in_coords.resize(coords.size());
    alltoallv_elements(comm_, ids.data(), counts, in_ids.data(), counts, sizeof(Index));
    alltoallv_elements(comm_, coords.data(), counts, in_coords.data(), counts, sizeof(T) * sz(dim));
    std::size_t at = 0;
    for (int q = 0; q < p; ++q) {
      const auto& list = peer_positions[sz(q)];
      for (std::size_t i = cut(list.size(), b), to = cut(list.size(), b + 1); i < to; ++i) {
        const Index k = list[i] - work_.begin;
        work_.ids[sz(k)] = in_ids[at];
        std::copy_n(in_coords.begin() + static_cast<std::ptrdiff_t>(at * sz(dim)), dim, work_.coords.begin() + k * dim);
        ++at;
      }
    }
    held_.remove(2 * n);
  }
}

template <class T>
int DistributedSelection<T>::split_dimension(Index first, Index last) {
  if (last - first <= 1) return 0;
  const int dim = work_.dim;
  const auto [lo, hi] = overlap(work_.layout, comm_.rank(), first, last);
  // bounds[c] = -min, bounds[dim + c] = max of coordinate c over this rank's part (negation is exact).
  std::vector<double> bounds(sz(2 * dim), lowest);
  if (lo < hi)
    for (int c = 0; c < dim; ++c) {
      double mn = key(lo, c), mx = mn;
      for (Index x = lo + 1; x < hi; ++x) {
        const double v = key(x, c);
        mn = std::min(mn, v);
        mx = std::max(mx, v);
      }
      bounds[sz(c)] = -mn;
      bounds[sz(dim + c)] = mx;
    }
  if (work_.layout.owner(first) != work_.layout.owner(last - 1)) comm_.allreduce(std::span<double>(bounds), ReduceOp::max);
  else if (lo == hi) return 0;  // another rank's range: only its owner uses the result
  // As Splitter::split_dimension: the strictly largest max - min, the earlier dimension on ties.
  int best = 0;
  double best_spread = 0;
  for (int c = 0; c < dim; ++c) {
    const double spread = bounds[sz(dim + c)] - (-bounds[sz(c)]);
    if (spread > best_spread) {
      best_spread = spread;
      best = c;
    }
  }
  return best;
}

template <class T>
void DistributedSelection<T>::nth_element(Index first, Index nth, Index last, int c) {
  if (first == last || nth == last) return;
  const RankRanges& layout = work_.layout;
  Index depth_limit = introselect_depth_limit(last - first);
  while (last - first > 3 && depth_limit > 0 && last - first > threshold_ && layout.owner(first) != layout.owner(last - 1)) {
    --depth_limit;
    const Index cut = round(first, last, c);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  finish(first, nth, last, depth_limit, c);
}

template <class T>
void DistributedSelection<T>::finish(Index first, Index nth, Index last, Index depth_limit, int c) {
  const RankRanges& layout = work_.layout;
  const int p = comm_.size(), me = comm_.rank(), dim = work_.dim;
  const int root = layout.owner(first);
  if (root == layout.owner(last - 1)) {
    if (me == root) {
      const Index k = first - work_.begin;
      select_rows(work_.ids.data() + k, work_.coords.data() + k * dim, dim, last - first, nth - first, depth_limit, c);
    }
    return;
  }
  // Gather [first, last) on `root` (ranks in order are positions in order), select there, send back.
  std::vector<std::size_t> to_root(sz(p), 0), at_root(sz(p), 0);
  for (int r = 0; r < p; ++r) {
    const auto [lo, hi] = overlap(layout, r, first, last);
    if (me == root) at_root[sz(r)] = sz(hi - lo);
    if (r == me) to_root[sz(root)] = sz(hi - lo);
  }
  const auto [lo, hi] = overlap(layout, me, first, last);
  const Index m = me == root ? last - first : 0;
  held_.add(m);
  std::vector<Index> ids(sz(m));
  std::vector<T> coords(sz(m * dim));
  const Index k = hi > lo ? lo - work_.begin : 0;
  alltoallv_elements(comm_, work_.ids.data() + k, to_root, ids.data(), at_root, sizeof(Index));
  alltoallv_elements(comm_, work_.coords.data() + k * dim, to_root, coords.data(), at_root, sizeof(T) * sz(dim));
  if (me == root) select_rows(ids.data(), coords.data(), dim, m, nth - first, depth_limit, c);
  alltoallv_elements(comm_, ids.data(), at_root, work_.ids.data() + k, to_root, sizeof(Index));
  alltoallv_elements(comm_, coords.data(), at_root, work_.coords.data() + k * dim, to_root, sizeof(T) * sz(dim));
  held_.remove(m);
}

template <class T>
Index DistributedSelection<T>::round(Index first, Index last, int c) {
  const RankRanges& layout = work_.layout;
  const int p = comm_.size(), me = comm_.rank();
  const auto owns = [&](Index pos) { return pos >= layout.begin(me) && pos < layout.end(me); };

  // Median of three into `first`.
  const Index candidates[3] = {first + 1, first + (last - first) / 2, last - 1};
  double keys[3];
  for (int i = 0; i < 3; ++i) keys[i] = owns(candidates[i]) ? key(candidates[i], c) : lowest;
  comm_.allreduce(std::span<double>(keys, 3), ReduceOp::max);
  const int chosen = median_of_three(keys[0], keys[1], keys[2], std::less<double>());
  const double pivot = keys[chosen];
  const Index other = candidates[chosen];
  if (layout.owner(first) == layout.owner(other)) {
    if (owns(first)) swap_local(first, other);
  } else {
    std::vector<std::vector<Index>> peers(sz(p));
    if (owns(first)) peers[sz(layout.owner(other))].push_back(first);
    if (owns(other)) peers[sz(layout.owner(first))].push_back(other);
    swap_with_peers(peers, 1);
  }

  // Stops of this rank's part: lefts ascending, rights descending (the pivot at `first` is a right stop).
  const auto [lo, hi] = overlap(layout, me, first, last);
  std::vector<Index> lefts, rights;
  for (Index x = std::max(lo, first + 1); x < hi; ++x)
    if (!(key(x, c) < pivot)) lefts.push_back(x);
  for (Index x = hi - 1; x >= lo; --x)
    if (!(pivot < key(x, c))) rights.push_back(x);
  Index mine[2] = {static_cast<Index>(lefts.size()), static_cast<Index>(rights.size())};
  std::vector<Index> all(sz(2 * p));
  comm_.allgather(mine, sizeof(mine), all.data());
  // lefts_before[r]: left stops on ranks before r; rights_after[r]: right stops on ranks after r.
  std::vector<Index> lefts_before(sz(p) + 1, 0), rights_after(sz(p) + 1, 0);
  for (int r = 0; r < p; ++r) lefts_before[sz(r) + 1] = lefts_before[sz(r)] + all[sz(2 * r)];
  for (int r = p - 1; r >= 0; --r) rights_after[sz(r)] = rights_after[sz(r) + 1] + all[sz(2 * r + 1)];
  const Index my_lefts_before = lefts_before[sz(me)], my_rights_after = rights_after[sz(me) + 1];

  // K = max over boundaries x in (first, last) of min(lefts before x, rights at or after x).
  Index pairs = 0;
  {
    Index f = my_lefts_before;
    Index g = my_rights_after + static_cast<Index>(rights.size()) - (lo == first && lo < hi ? 1 : 0);
    for (Index x = std::max(lo, first + 1); x < hi; ++x) {
      pairs = std::max(pairs, std::min(f, g));
      const double v = key(x, c);
      if (!(v < pivot)) ++f;
      if (!(pivot < v)) --g;
    }
  }
  pairs = comm_.allreduce(pairs, ReduceOp::max);

  // The cut: min(l_{K+1}, r_K), positions fixed before the swaps.
  Index cut = last;
  if (const Index i = pairs - my_lefts_before; i >= 0 && i < static_cast<Index>(lefts.size())) cut = lefts[sz(i)];
  if (const Index i = pairs - 1 - my_rights_after; pairs > 0 && i >= 0 && i < static_cast<Index>(rights.size()))
    cut = std::min(cut, rights[sz(i)]);
  cut = comm_.allreduce(cut, ReduceOp::min);

  // Swap k (k < K) pairs left stop k with right stop k: lower ranks hold the left ones.
  if (pairs > 0) {
    std::vector<std::vector<Index>> peers(sz(p));
    const auto rank_of = [](const std::vector<Index>& starts, Index k) {  // last r with starts[r] <= k
      return static_cast<int>(std::upper_bound(starts.begin(), starts.end() - 1, k) - starts.begin()) - 1;
    };
    // Ranks by their first right stop counted from the right: rights_after[r + 1] .. rights_after[r].
    std::vector<Index> right_starts(sz(p) + 1);
    for (int r = 0; r < p; ++r) right_starts[sz(r)] = rights_after[sz(p - 1 - r) + 1];  // rank p-1-r
    right_starts[sz(p)] = rights_after[0];
    for (Index i = 0; i < static_cast<Index>(lefts.size()) && my_lefts_before + i < pairs; ++i) {
      const Index k = my_lefts_before + i;
      const int q = p - 1 - rank_of(right_starts, k);
      if (q == me) swap_local(lefts[sz(i)], rights[sz(k - my_rights_after)]);
      else peers[sz(q)].push_back(lefts[sz(i)]);
    }
    for (Index i = 0; i < static_cast<Index>(rights.size()) && my_rights_after + i < pairs; ++i) {
      const Index k = my_rights_after + i;
      const int q = rank_of(lefts_before, k);
      if (q != me) peers[sz(q)].push_back(rights[sz(i)]);
    }
    // Batches: every rank knows every rank's stops, so the largest number of elements a rank exchanges
    // with others is known without communication. Rank r's swaps k < K are its lefts, k in
    // [lefts_before[r], lefts_before[r + 1]), and its rights, k in [rights_after[r + 1], rights_after[r]);
    // a k in both is a swap inside r.
    const auto below_pairs = [pairs](Index a, Index b) { return std::max<Index>(0, std::min(b, pairs) - a); };
    Index most = 0;
    for (int r = 0; r < p; ++r) {
      const Index la = lefts_before[sz(r)], lb = lefts_before[sz(r) + 1];
      const Index ra = rights_after[sz(r) + 1], rb = rights_after[sz(r)];
      const Index both = below_pairs(std::max(la, ra), std::max(std::max(la, ra), std::min(lb, rb)));
      most = std::max(most, below_pairs(la, std::max(la, lb)) + below_pairs(ra, std::max(ra, rb)) - 2 * both);
    }
    swap_with_peers(peers, (most + swap_batch() - 1) / swap_batch());
  }
  return cut;
}

template class DistributedSelection<float>;
template class DistributedSelection<double>;

}  // namespace surrogate::balltree::detail
