// libstdc++ 12's std::nth_element (introselect), written once for the host and the device: the ball trees
// of Erwin and BSA are defined by the element order std::nth_element leaves behind (share/docs/balltree.md),
// so the distributed tree (libsurrogate/src/balltree/introselect.hpp adds its stop-count partition) and the
// device tree (kernels/cuda/ball_tree.cu) run this replica. Facts about libstdc++ it relies on
// (bits/stl_algo.h, bits/stl_heap.h of GCC 12):
//   * depth limit 2 * floor(log2(n)); rounds while more than 3 elements remain;
//   * a round puts the median of (first + 1, middle, last - 1) into first (a single swap), then runs a
//     Hoare partition of (first, last) around it and continues on the side holding nth;
//   * at depth limit 0 a heap selection of nth + 1 elements, then nth swapped with first;
//   * a final insertion sort (stable) of the remaining range.
// Elements are copied, not moved (trivially copyable values); iterators need *, [], +, - and <.
// Checked bit for bit against std::nth_element by tests/balltree/test_introselect.cpp.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define SURROGATE_INTROSELECT __host__ __device__ __forceinline__
#else
#define SURROGATE_INTROSELECT inline
#endif

namespace surrogate::kernels::introselect {

template <class It>
SURROGATE_INTROSELECT void swap_at(It a, It b) {
  auto t = *a;
  *a = *b;
  *b = t;
}

/// The depth limit std::nth_element starts with for n >= 1 elements: 2 * floor(log2(n)).
SURROGATE_INTROSELECT std::int64_t depth_limit(std::int64_t n) {
  std::int64_t floor_log2 = -1;
  for (auto v = static_cast<std::uint64_t>(n); v != 0; v >>= 1) ++floor_log2;
  return 2 * floor_log2;
}

/// The candidate libstdc++'s median-of-three moves into `first`: 0 for first + 1, 1 for the middle,
/// 2 for last - 1 (a, b, c are their values, compared with `less`).
template <class V, class Less>
SURROGATE_INTROSELECT int median_of_three(const V& a, const V& b, const V& c, Less less) {
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
SURROGATE_INTROSELECT It hoare_partition(It first, It last, Less less) {
  It left = first + 1, right = last;
  for (;;) {
    while (less(*left, *first)) ++left;
    do --right;
    while (less(*first, *right));
    if (!(left < right)) return left;
    swap_at(left, right);
    ++left;
  }
}

/// libstdc++'s sift of `value` into the heap hole `hole` of the heap a[0..len): down to a leaf along the
/// larger children (the right one on ties), then up again.
template <class It, class V, class Less>
SURROGATE_INTROSELECT void heap_sift(It a, std::int64_t hole, std::int64_t len, V value, Less less) {
  const std::int64_t top = hole;
  std::int64_t child = hole;
  while (child < (len - 1) / 2) {
    child = 2 * child + 2;
    if (less(a[child], a[child - 1])) --child;
    a[hole] = a[child];
    hole = child;
  }
  if (len % 2 == 0 && child == (len - 2) / 2) {  // the one node with a left child only
    child = 2 * child + 1;
    a[hole] = a[child];
    hole = child;
  }
  for (std::int64_t parent = (hole - 1) / 2; hole > top && less(a[parent], value); parent = (hole - 1) / 2) {
    a[hole] = a[parent];
    hole = parent;
  }
  a[hole] = value;
}

/// Heap selection of introselect at depth limit 0: a max-heap of [first, middle), then every later
/// element smaller than the top replaces it (the top moving to that element's place).
template <class It, class Less>
SURROGATE_INTROSELECT void heap_select(It first, It middle, It last, Less less) {
  const std::int64_t len = middle - first;
  if (len >= 2)
    for (std::int64_t parent = (len - 2) / 2; parent >= 0; --parent) heap_sift(first, parent, len, first[parent], less);
  for (It i = middle; i < last; ++i) {
    if (!less(*i, *first)) continue;
    auto value = *i;
    *i = *first;
    heap_sift(first, std::int64_t{0}, len, value, less);
  }
}

/// Stable insertion sort (what libstdc++'s unguarded/guarded insertion leaves).
template <class It, class Less>
SURROGATE_INTROSELECT void insertion_sort(It first, It last, Less less) {
  if (first == last) return;
  for (It i = first + 1; i != last; ++i) {
    auto value = *i;
    It hole = i;
    for (; hole != first && less(value, *(hole - 1)); --hole) *hole = *(hole - 1);
    *hole = value;
  }
}

/// The median-of-three step of a round on [first, last) (more than 3 elements): the chosen candidate
/// swapped into first.
template <class It, class Less>
SURROGATE_INTROSELECT void pivot_to_first(It first, It last, Less less) {
  const It middle = first + (last - first) / 2;
  const It candidates[3] = {first + 1, middle, last - 1};
  swap_at(first, candidates[median_of_three(*candidates[0], *candidates[1], *candidates[2], less)]);
}

/// The rest of introselect from any state: rounds (pivot_to_first, then `partition`, hoare_partition or
/// another formulation of it) while more than 3 elements remain, heap selection when the depth limit
/// reaches 0, insertion sort of what is left.
template <class It, class Less, class Partition>
SURROGATE_INTROSELECT void introselect_from(It first, It nth, It last, std::int64_t depth_limit, Less less,
                                            Partition partition) {
  while (last - first > 3) {
    if (depth_limit == 0) {
      heap_select(first, nth + 1, last, less);
      swap_at(first, nth);
      return;
    }
    --depth_limit;
    pivot_to_first(first, last, less);
    const It cut = partition(first, last, less);
    if (cut <= nth) first = cut;
    else last = cut;
  }
  insertion_sort(first, last, less);
}

/// The partition step of libstdc++'s rounds (a functor: device code cannot take a host lambda).
struct Hoare {
  template <class It, class Less>
  SURROGATE_INTROSELECT It operator()(It first, It last, Less less) const {
    return hoare_partition(first, last, less);
  }
};

/// std::nth_element(first, nth, last, less) as libstdc++ 12 performs it.
template <class It, class Less>
SURROGATE_INTROSELECT void nth_element(It first, It nth, It last, Less less) {
  if (first == last || nth == last) return;
  introselect_from(first, nth, last, depth_limit(last - first), less, Hoare{});
}

}  // namespace surrogate::kernels::introselect
