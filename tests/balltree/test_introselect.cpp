// The introselect replica of the distributed ball tree (libsurrogate/src/balltree/introselect.hpp)
// against libstdc++'s std::nth_element: the whole array after the call, compared element for element,
// where every element carries its original position (so ties in the key are told apart and any wrong swap
// shows). Inputs: random keys with many ties ({0,1,2}), distinct keys, sorted, reverse-sorted, organ-pipe
// and all-equal arrays of 1..5000 elements, every nth for the small sizes; both the Hoare partition and
// the stop-count formulation the distributed rounds use; the heap selection at depth limit 0 directly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "balltree/introselect.hpp"

namespace detail = surrogate::balltree::detail;

namespace {

struct Item {
  double key;
  int origin;
  bool operator==(const Item&) const = default;
};
auto by_key = [](const Item& a, const Item& b) { return a.key < b.key; };

enum class Shape { ties, distinct, sorted, reversed, organ_pipe, equal };

std::vector<Item> make(Shape shape, int n, std::mt19937_64& gen) {
  std::vector<Item> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    double k = 0;
    switch (shape) {
      case Shape::ties: k = static_cast<double>(gen() % 3); break;
      case Shape::distinct: k = std::uniform_real_distribution<double>(-1, 1)(gen); break;
      case Shape::sorted: k = i / 3; break;  // sorted with runs of equal keys
      case Shape::reversed: k = n - i; break;
      case Shape::organ_pipe: k = std::min(i, n - 1 - i); break;
      case Shape::equal: k = 1.5; break;
    }
    v[static_cast<std::size_t>(i)] = {k, i};
  }
  return v;
}

const char* name(Shape s) {
  switch (s) {
    case Shape::ties: return "ties";
    case Shape::distinct: return "distinct";
    case Shape::sorted: return "sorted";
    case Shape::reversed: return "reversed";
    case Shape::organ_pipe: return "organ-pipe";
    case Shape::equal: return "equal";
  }
  return "?";
}

/// Runs std::nth_element, the replica and the replica with the stop-count partition; compares all three.
void check(const std::vector<Item>& input, int nth, const std::string& what) {
  std::vector<Item> expected = input, replica = input, counted = input;
  std::nth_element(expected.begin(), expected.begin() + nth, expected.end(), by_key);
  detail::nth_element_replica(replica.begin(), replica.begin() + nth, replica.end(), by_key);
  using It = std::vector<Item>::iterator;
  if (!counted.empty() && nth < static_cast<int>(counted.size()))
    detail::introselect_from(counted.begin(), counted.begin() + nth, counted.end(),
                             detail::introselect_depth_limit(static_cast<std::int64_t>(counted.size())), by_key,
                             [](It f, It l, decltype(by_key) c) { return detail::partition_by_stop_counts(f, l, c); });
  ASSERT_TRUE(replica == expected) << "replica, " << what << ", nth " << nth;
  ASSERT_TRUE(counted == expected) << "stop-count partition, " << what << ", nth " << nth;
}

}  // namespace

TEST(Introselect, DepthLimitIsTwiceFloorLog2) {
  EXPECT_EQ(detail::introselect_depth_limit(1), 0);
  EXPECT_EQ(detail::introselect_depth_limit(3), 2);
  EXPECT_EQ(detail::introselect_depth_limit(4), 4);
  EXPECT_EQ(detail::introselect_depth_limit(1023), 18);
  EXPECT_EQ(detail::introselect_depth_limit(1024), 20);
}

TEST(Introselect, EveryNthOfSmallArrays) {
  std::mt19937_64 gen(1);
  for (const Shape shape : {Shape::ties, Shape::distinct, Shape::sorted, Shape::reversed, Shape::organ_pipe, Shape::equal})
    for (int n = 1; n <= 70; ++n)
      for (int trial = 0; trial < (shape == Shape::ties || shape == Shape::distinct ? 6 : 1); ++trial) {
        const auto v = make(shape, n, gen);
        for (int nth = 0; nth <= n; ++nth) check(v, nth, std::string(name(shape)) + ", n " + std::to_string(n));
      }
}

TEST(Introselect, LargerArraysAtMedianAndRandomNth) {
  std::mt19937_64 gen(2);
  for (const Shape shape : {Shape::ties, Shape::distinct, Shape::sorted, Shape::reversed, Shape::organ_pipe, Shape::equal})
    for (int trial = 0; trial < 60; ++trial) {
      const int n = 71 + static_cast<int>(gen() % 4930);
      const auto v = make(shape, n, gen);
      const std::string what = std::string(name(shape)) + ", n " + std::to_string(n);
      check(v, n / 2, what);
      check(v, static_cast<int>(gen() % static_cast<unsigned>(n)), what);
    }
  // The largest size, every shape, at the median and both ends.
  for (const Shape shape : {Shape::ties, Shape::distinct, Shape::sorted, Shape::reversed, Shape::organ_pipe, Shape::equal}) {
    const auto v = make(shape, 5000, gen);
    for (const int nth : {0, 2500, 4999}) check(v, nth, std::string(name(shape)) + ", n 5000");
  }
}

TEST(Introselect, HeapSelectionMatchesPartialSort) {
  // std::partial_sort runs the same heap selection on [first, middle) and then sorts only the heap: the
  // elements after `middle` are where the selection left them, and the heap holds the same elements.
  std::mt19937_64 gen(3);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 2 + static_cast<int>(gen() % 600);
    const auto v = make(trial % 2 ? Shape::ties : Shape::distinct, n, gen);
    const int middle = 1 + static_cast<int>(gen() % static_cast<unsigned>(n));
    auto heap = v, partial = v;
    detail::heap_select(heap.begin(), heap.begin() + middle, heap.end(), by_key);
    std::partial_sort(partial.begin(), partial.begin() + middle, partial.end(), by_key);
    for (int i = middle; i < n; ++i)
      ASSERT_EQ(heap[static_cast<std::size_t>(i)], partial[static_cast<std::size_t>(i)]) << "n " << n << ", middle " << middle << ", slot " << i;
    std::vector<int> a, b;
    for (int i = 0; i < middle; ++i) {
      a.push_back(heap[static_cast<std::size_t>(i)].origin);
      b.push_back(partial[static_cast<std::size_t>(i)].origin);
    }
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << "n " << n << ", middle " << middle;
  }
}

namespace {

/// Keys that drive introselect to its depth limit: McIlroy's adversary ("A killer adversary for
/// quicksort", 1999) run against std::nth_element, its lazily fixed values kept as the input.
std::vector<Item> adversarial(int n, int nth) {
  std::vector<int> value(static_cast<std::size_t>(n), n);  // n = "gas", above every fixed value
  int fixed = 0, candidate = 0;
  auto less = [&](int x, int y) {
    auto& vx = value[static_cast<std::size_t>(x)];
    auto& vy = value[static_cast<std::size_t>(y)];
    if (vx == n && vy == n) (x == candidate ? vx : vy) = fixed++;
    if (vx == n) candidate = x;
    else if (vy == n) candidate = y;
    return vx < vy;
  };
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::nth_element(order.begin(), order.begin() + nth, order.end(), less);
  std::vector<Item> v(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = {static_cast<double>(value[static_cast<std::size_t>(i)]), i};
  return v;
}

}  // namespace

TEST(Introselect, DepthLimitReachedOnAdversarialInput) {
  for (const int n : {16, 100, 257, 1000, 4999})
    for (const int nth : {0, n / 3, n / 2, n - 1}) {
      const auto v = adversarial(n, nth);
      check(v, nth, "adversarial, n " + std::to_string(n));
      // Count the rounds: reaching the depth limit with more than 3 elements left means heap selection ran.
      auto w = v;
      int rounds = 0;
      std::int64_t left = 0;
      using It = std::vector<Item>::iterator;
      const std::int64_t limit = detail::introselect_depth_limit(n);
      detail::introselect_from(w.begin(), w.begin() + nth, w.end(), limit, by_key, [&](It f, It l, decltype(by_key) c) {
        ++rounds;
        const It cut = detail::hoare_partition(f, l, c);
        left = (cut <= w.begin() + nth) ? l - cut : cut - f;
        return cut;
      });
      if (n >= 100 && nth == n / 2) {
        EXPECT_EQ(rounds, limit) << "the adversarial input did not reach the depth limit, n " << n;
        EXPECT_GT(left, 3) << "n " << n;
      }
    }
}
