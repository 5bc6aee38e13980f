// stable_key_sort against std::stable_sort on the positions (the order HEPT documents: keys ascending,
// ties by position), float and double keys with many ties, both zeros, subnormals and +inf (src/ pads),
// int64 keys (HEPT's region codes) with ties, negatives and both extremes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "surrogate/kernels/stable_key_sort.hpp"

namespace {

template <class T>
void expect_stable_sort_order(const std::vector<T>& key, surrogate::kernels::StableKeySortWork<T>& work) {
  const std::int64_t first = 17, n = static_cast<std::int64_t>(key.size());
  std::vector<std::int64_t> want(key.size()), got(key.size(), -1);
  std::iota(want.begin(), want.end(), std::int64_t{0});
  std::stable_sort(want.begin(), want.end(), [&](std::int64_t a, std::int64_t b) {
    return key[static_cast<std::size_t>(a)] < key[static_cast<std::size_t>(b)];
  });
  for (auto& w : want) w += first;
  surrogate::kernels::stable_key_sort(key.data(), n, first, got.data(), work);
  EXPECT_EQ(got, want) << "n " << n << " sizeof " << sizeof(T);
}

template <class T>
void check_against_stable_sort(std::uint32_t seed) {
  std::mt19937 gen(seed);
  const T inf = std::numeric_limits<T>::infinity();
  const T tied[] = {T(-1.5), T(-0.0), T(0.0), T(0.25), T(3), inf, T(1e30), -std::numeric_limits<T>::denorm_min(),
                    std::numeric_limits<T>::denorm_min(), -std::numeric_limits<T>::max(), T(0.25) + T(1e-7)};
  std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(tied)) - 1), mode(0, 3);
  std::normal_distribution<T> normal(T(0), T(1e3));
  surrogate::kernels::StableKeySortWork<T> work;
  for (const std::int64_t n : {0, 1, 7, 100, 2049, 60000}) {
    std::vector<T> key(static_cast<std::size_t>(n));
    for (auto& k : key) {
      const int m = mode(gen);  // half from the tied set, a quarter rounded normals (more ties), a quarter normals
      k = m < 2 ? tied[pick(gen)] : m == 2 ? std::round(normal(gen) / T(100)) : normal(gen);
    }
    expect_stable_sort_order(key, work);
  }
}

TEST(StableKeySort, FloatKeysGiveTheStableSortOrder) { check_against_stable_sort<float>(1); }
TEST(StableKeySort, DoubleKeysGiveTheStableSortOrder) { check_against_stable_sort<double>(2); }

TEST(StableKeySort, Int64KeysGiveTheStableSortOrder) {
  std::mt19937_64 gen(3);
  const std::int64_t tied[] = {0, -1, 1, 5, std::numeric_limits<std::int64_t>::min(),
                               std::numeric_limits<std::int64_t>::max(), std::int64_t{1} << 40};
  std::uniform_int_distribution<int> pick(0, static_cast<int>(std::size(tied)) - 1), mode(0, 2);
  std::uniform_int_distribution<std::int64_t> small(0, 300), any(std::numeric_limits<std::int64_t>::min(),
                                                                std::numeric_limits<std::int64_t>::max());
  surrogate::kernels::StableKeySortWork<std::int64_t> work;
  for (const std::int64_t n : {0, 1, 7, 100, 2049, 60000}) {
    std::vector<std::int64_t> key(static_cast<std::size_t>(n));
    for (auto& k : key) {  // a third tied extremes, a third small codes (many ties), a third any 64 bits
      const int m = mode(gen);
      k = m == 0 ? tied[pick(gen)] : m == 1 ? small(gen) : any(gen);
    }
    expect_stable_sort_order(key, work);
  }
}

}  // namespace
