// A replica of the selection libstdc++ 12 performs in std::nth_element (introselect), written so that
// the distributed ball tree can run the same rounds over several ranks and finish any remaining range
// from any state (first, nth, last, depth limit) with exactly the element order std::nth_element would
// leave. Facts about libstdc++ this relies on (bits/stl_algo.h, bits/stl_heap.h of GCC 12):
//   * depth limit 2 * floor(log2(n)); rounds while more than 3 elements remain;
//   * a round puts the median of (first + 1, middle, last - 1) into first (a single swap), then runs a
//     Hoare partition of (first, last) around it and continues on the side holding nth;
//   * at depth limit 0 a heap selection of nth + 1 elements, then nth swapped with first;
//   * a final insertion sort (stable) of the remaining range.
// The exactness of the replica is checked bit-for-bit against std::nth_element by
// tests/balltree/test_introselect.cpp (share/docs/balltree.md, "Distributed tree").
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <utility>
#include <vector>

namespace surrogate::balltree::detail {

/// The depth limit std::nth_element starts with for n >= 1 elements: 2 * floor(log2(n)).
inline std::int64_t introselect_depth_limit(std::int64_t n) {
  return 2 * (static_cast<std::int64_t>(std::bit_width(static_cast<std::uint64_t>(n))) - 1);
}

/// The candidate libstdc++'s median-of-three moves into `first`: 0 for first + 1, 1 for the middle,
/// 2 for last - 1 (a, b, c are their values, compared with `less`).
template <class V, class Less>
int median_of_three(const V& a, const V& b, const V& c, Less less) {
  if (less(a, b)) {
    if (less(b, c)) return 1;
    return less(a, c) ? 2 : 0;
  }
  if (less(a, c)) return 0;
  return less(b, c) ? 2 : 1;
}

/// Hoare partition of (first, last) around the value at `first` (which stays in place): the left scan
/// stops at values not less than the pivot, the right scan at values the pivot is not less than; the
/// two stopped elements are swapped while the scans have not crossed. Returns where the left scan ended.
template <class It, class Less>
It hoare_partition(It first, It last, Less less) {
  It left = first + 1, right = last;
  for (;;) {
    while (less(*left, *first)) ++left;
    do --right;
    while (less(*first, *right));
    if (!(left < right)) return left;
    std::iter_swap(left, right);
    ++left;
  }
}

/// The same partition computed from the stop positions alone (the formulation the distributed tree
/// uses, share/docs/balltree.md): with l_1 < l_2 < ... the positions in (first, last) whose value is not
/// less than the pivot and r_1 > r_2 > ... those in [first, last) the pivot is not less than, the swaps
/// are (l_k, r_k) for k = 1..K, K = max over boundaries x of min(#l before x, #r at or after x), and the
/// result is min(l_{K+1}, r_K) (l_{K+1} absent: last; r_0: last).
template <class It, class Less>
It partition_by_stop_counts(It first, It last, Less less) {
  using Index = std::int64_t;
  const Index n = last - first;
  std::vector<Index> left_stops, right_stops;
  for (Index i = 1; i < n; ++i)
    if (!less(first[i], *first)) left_stops.push_back(i);
  for (Index i = n - 1; i >= 0; --i)
    if (!less(*first, first[i])) right_stops.push_back(i);
  // Sweep the boundaries x = 1 .. n-1: lefts before x, rights at or after x.
  Index lefts = 0, rights = static_cast<Index>(right_stops.size()) - 1;  // position 0 (the pivot) is a right stop
  Index pairs = 0;
  for (Index x = 1; x < n; ++x) {
    pairs = std::max(pairs, std::min(lefts, rights));
    if (!less(first[x], *first)) ++lefts;
    if (!less(*first, first[x])) --rights;
  }
  Index cut = pairs < static_cast<Index>(left_stops.size()) ? left_stops[static_cast<std::size_t>(pairs)] : n;
  if (pairs > 0) cut = std::min(cut, right_stops[static_cast<std::size_t>(pairs - 1)]);
  for (Index k = 0; k < pairs; ++k)
    std::iter_swap(first + left_stops[static_cast<std::size_t>(k)], first + right_stops[static_cast<std::size_t>(k)]);
  return first + cut;
}

/// libstdc++'s sift of `value` into the heap hole `hole` of the heap a[0..len): down to a leaf along the
/// larger children (the right one on ties), then up again.
template <class It, class V, class Less>
void heap_sift(It a, std::int64_t hole, std::int64_t len, V value, Less less) {
  const std::int64_t top = hole;
  std::int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * child + 2;
    if (less(a[child], a[child - 1])) --child;
    a[hole] = std::move(a[child]);
    hole = child;
  }
  if (len % 2 == 0 && child == (len - 2) / 2) {  // the one node with a left child only
    child = 2 * child + 1;
    a[hole] = std::move(a[child]);
    hole = child;
  }
  for (std::int64_t parent = (hole - 1) / 2; hole > top && less(a[parent], value); parent = (hole - 1) / 2) {
    a[hole] = std::move(a[parent]);
    hole = parent;
  }
  a[hole] = std::move(value);
}

/// Heap selection of introselect at depth limit 0: a max-heap of [first, middle), then every later
/// element smaller than the top replaces it (the top moving to that element's place).
template <class It, class Less>
void heap_select(It first, It middle, It last, Less less) {
  const std::int64_t len = middle - first;
  if (len >= 2)
    for (std::int64_t parent = (len - 2) / 2; parent >= 0; --parent) heap_sift(first, parent, len, std::move(first[parent]), less);
  for (It i = middle; i < last; ++i) {
    if (!less(*i, *first)) continue;
    auto value = std::move(*i);
    *i = std::move(*first);
    heap_sift(first, std::int64_t{0}, len, std::move(value), less);
  }
}

/// Stable insertion sort (what libstdc++'s unguarded/guarded insertion leaves).
template <class It, class Less>
void insertion_sort(It first, It last, Less less) {
  if (first == last) return;
  for (It i = first + 1; i != last; ++i) {
    auto value = std::move(*i);
    It hole = i;
    for (; hole != first && less(value, *(hole - 1)); --hole) *hole = std::move(*(hole - 1));
    *hole = std::move(value);
  }
}

/// One introselect round on [first, last) (more than 3 elements): median-of-three into first, then
/// `partition` (hoare_partition or partition_by_stop_counts). Returns the cut.
template <class It, class Less, class Partition>
It introselect_round(It first, It last, Less less, Partition partition) {
  const It middle = first + (last - first) / 2;
  const It candidates[3] = {first + 1, middle, last - 1};
  std::iter_swap(first, candidates[median_of_three(*candidates[0], *candidates[1], *candidates[2], less)]);
  return partition(first, last, less);
}

/// The rest of introselect from any state: rounds while more than 3 elements remain, heap selection
/// when the depth limit reaches 0, insertion sort of what is left.
template <class It, class Less, class Partition>
void introselect_from(It first, It nth, It last, std::int64_t depth_limit, Less less, Partition partition) {
  while (last - first > 3) {
    if (depth_limit == 0) {
      heap_select(first, nth + 1, last, less);
      std::iter_swap(first, nth);
      return;
    }
    --depth_limit;
    const It cut = introselect_round(first, last, less, partition);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(first, last, less);
}

template <class It, class Less>
void introselect_from(It first, It nth, It last, std::int64_t depth_limit, Less less) {
  introselect_from(first, nth, last, depth_limit, less, [](It f, It l, Less c) { return hoare_partition(f, l, c); });
}

/// std::nth_element(first, nth, last, less) as libstdc++ 12 performs it.
template <class It, class Less>
void nth_element_replica(It first, It nth, It last, Less less) {
  if (first == last || nth == last) return;
  introselect_from(first, nth, last, introselect_depth_limit(last - first), less);
}

}  // namespace surrogate::balltree::detail
