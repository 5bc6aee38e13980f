// Stable sort of positions by float, double or int64 keys (HEPT's bucket sorts and geometry,
// share/docs/hept.md "Sorts"): an LSD radix sort of the keys' order-preserving bit images, 11 bits a
// pass, giving exactly the order of std::stable_sort with operator< on the positions in ascending order.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace surrogate::kernels {

namespace detail {

template <class T>
using SortBits = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;

/// The key's bits mapped so that unsigned order is the order of the keys: integers with the sign bit
/// flipped; floats NaN-free, -0 first becoming +0, so that the two zeros tie as they do under operator<.
template <class T>
SortBits<T> ordered_bits(T key) {
  using U = SortBits<T>;
  constexpr U sign = U(1) << (8 * sizeof(T) - 1);
  if constexpr (std::is_integral_v<T>) return static_cast<U>(key) ^ sign;
  key = key + T(0);  // -0 + 0 = +0 (round to nearest)
  U b;
  std::memcpy(&b, &key, sizeof b);
  return (b & sign) ? ~b : (b | sign);
}

template <class T>
struct SortItem {
  SortBits<T> key;
  std::uint32_t pos;
};

}  // namespace detail

/// Buffers of stable_key_sort, reused across calls (one per thread).
template <class T>
struct StableKeySortWork {
  std::vector<detail::SortItem<T>> a, b;
  std::vector<std::uint32_t> hist;
};

/// perm[i] = first + p_i, where p_0..p_{n-1} are the positions 0..n-1 ordered by key[p] ascending, ties by
/// position: what std::stable_sort(positions, key[a] < key[b]) gives. T float, double or std::int64_t;
/// floating keys NaN-free (+-inf allowed); n < 2^32.
template <class T>
void stable_key_sort(const T* key, std::int64_t n, std::int64_t first, std::int64_t* perm, StableKeySortWork<T>& work) {
  using U = detail::SortBits<T>;
  constexpr int kBits = 11, kDigits = (8 * static_cast<int>(sizeof(U)) + kBits - 1) / kBits;
  constexpr std::size_t kBuckets = std::size_t(1) << kBits;
  const auto count = static_cast<std::size_t>(n);
  work.a.resize(count);
  work.b.resize(count);
  std::vector<std::uint32_t>& hist = work.hist;
  hist.assign(kDigits * kBuckets, 0);
  for (std::size_t i = 0; i < count; ++i) {
    const U bits = detail::ordered_bits(key[i]);
    work.a[i] = {bits, static_cast<std::uint32_t>(i)};
    for (int d = 0; d < kDigits; ++d) ++hist[d * kBuckets + ((bits >> (d * kBits)) & (kBuckets - 1))];
  }
  auto* src = &work.a;
  auto* dst = &work.b;
  for (int d = 0; d < kDigits; ++d) {
    std::uint32_t* h = hist.data() + d * kBuckets;
    if (count == 0 || h[((*src)[0].key >> (d * kBits)) & (kBuckets - 1)] == count) continue;  // nothing would move
    std::uint32_t offset = 0;
    for (std::size_t c = 0; c < kBuckets; ++c) {
      const std::uint32_t size = h[c];
      h[c] = offset;
      offset += size;
    }
    for (const auto& item : *src) (*dst)[h[(item.key >> (d * kBits)) & (kBuckets - 1)]++] = item;
    std::swap(src, dst);
  }
  for (std::size_t i = 0; i < count; ++i) perm[i] = first + (*src)[i].pos;
}

}  // namespace surrogate::kernels
