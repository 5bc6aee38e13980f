// The introselect replica (surrogate/kernels/introselect.hpp: libstdc++ 12's std::nth_element, shared with
// the device tree) as the distributed ball tree uses it, plus the formulation of the Hoare partition from
// the stop positions alone, which lets the distributed tree run a round over several ranks and finish any
// remaining range from any state (first, nth, last, depth limit) with exactly the element order
// std::nth_element would leave. Checked bit for bit against std::nth_element by
// tests/balltree/test_introselect.cpp (share/docs/balltree.md, "Distributed tree").
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "surrogate/kernels/introselect.hpp"

namespace surrogate::balltree::detail {

namespace replica = surrogate::kernels::introselect;

/// The depth limit std::nth_element starts with for n >= 1 elements: 2 * floor(log2(n)).
inline std::int64_t introselect_depth_limit(std::int64_t n) { return replica::depth_limit(n); }

using replica::heap_select;
using replica::hoare_partition;
using replica::median_of_three;

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

/// The rest of introselect from any state with `partition` (hoare_partition or partition_by_stop_counts)
/// as each round's partition.
template <class It, class Less, class Partition>
void introselect_from(It first, It nth, It last, std::int64_t depth_limit, Less less, Partition partition) {
  replica::introselect_from(first, nth, last, depth_limit, less, partition);
}

template <class It, class Less>
void introselect_from(It first, It nth, It last, std::int64_t depth_limit, Less less) {
  replica::introselect_from(first, nth, last, depth_limit, less, replica::Hoare{});
}

/// std::nth_element(first, nth, last, less) as libstdc++ 12 performs it.
template <class It, class Less>
void nth_element_replica(It first, It nth, It last, Less less) {
  replica::nth_element(first, nth, last, less);
}

}  // namespace surrogate::balltree::detail
