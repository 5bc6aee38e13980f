// Block selection (BSA's importance scores and top-S, TopKeysArgs in cpu.hpp): the scores of a few rows
// are formed W keys at a time in registers (the rows share the key loads), and a vector of scores is
// handed to the scalar top-S only for the lanes that beat the current S-th best score. No score row is
// stored. Rows are independent: a row's selection never depends on the other rows of the call.
#pragma once

#include "latent_impl.hpp"
#include "simd.hpp"
#include "top_set_impl.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

/// Scores of R rows (group 1) for the W keys at kt: one FMA chain in e order per row, times scale.
template <int EC, int R>
inline void row_scores(const float* const* q, int E, const float* kt, index_t ldk, float scale, simd::vf* out) {
  using namespace simd;
  const int n = EC ? EC : E;
  vf acc[R];
  const vf k0 = load(kt);
  for (int r = 0; r < R; ++r) acc[r] = splat(q[r][0]) * k0;
#pragma GCC unroll 16
  for (int e = 1; e < n; ++e) {
    const vf ke = load(kt + e * ldk);
    for (int r = 0; r < R; ++r) acc[r] += splat(q[r][e]) * ke;
  }
  for (int r = 0; r < R; ++r) out[r] = acc[r] * splat(scale);
}

/// R rows of one query each (a.group == 1), starting at row r0.
template <int EC, int R, bool Track>
inline void top_keys_rows(const TopKeysArgs& a, index_t r0, TopKeys* top) {
  using namespace simd;
  const float* q[R];
  simd::vf rejected[R];
  index_t mb[R], me[R];
  for (int r = 0; r < R; ++r) {
    q[r] = a.q + (r0 + r) * a.ldq;
    rejected[r] = splat(-__builtin_inff());
    mb[r] = a.mask_begin ? a.mask_begin[r0 + r] : 0;
    me[r] = a.mask_begin ? a.mask_end[r0 + r] : 0;
  }
  index_t g0 = 0;
  for (; g0 + W <= a.keys; g0 += W) {
    vf s[R];
    row_scores<EC, R>(q, a.E, a.kt + g0, a.ldk, a.scale, s);
    for (int r = 0; r < R; ++r) offer_vector<Track>(s[r], g0, W, mb[r], me[r], top[r], rejected[r]);
  }
  if (g0 < a.keys) {
    vf s[R];
    row_scores<EC, R>(q, a.E, a.kt + g0, a.ldk, a.scale, s);
    const int valid = static_cast<int>(a.keys - g0);
    for (int r = 0; r < R; ++r) offer_vector<Track>(s[r], g0, valid, mb[r], me[r], top[r], rejected[r]);
  }
  if constexpr (Track)
    for (int r = 0; r < R; ++r) top[r].next = fmaxf(top[r].next, hmax(rejected[r]));
}

/// One row of a.group queries: the mean of their scaled scores.
template <int EC, bool Track>
inline void top_keys_group(const TopKeysArgs& a, index_t r, TopKeys& top) {
  using namespace simd;
  vf rejected = splat(-__builtin_inff());
  const index_t mb = a.mask_begin ? a.mask_begin[r] : 0, me = a.mask_begin ? a.mask_end[r] : 0;
  const float group_size = static_cast<float>(a.group);
  for (index_t g0 = 0; g0 < a.keys; g0 += W) {
    vf s = splat(0.0f);
    for (int t = 0; t < a.group; ++t) {
      const float* q = a.q + (r * a.group + t) * a.ldq;
      vf part;
      row_scores<EC, 1>(&q, a.E, a.kt + g0, a.ldk, a.scale, &part);
      s = t == 0 ? part : s + part;
    }
    s = s / splat(group_size);
    offer_vector<Track>(s, g0, static_cast<int>(imin(W, a.keys - g0)), mb, me, top, rejected);
  }
  if constexpr (Track) top.next = fmaxf(top.next, hmax(rejected));
}

template <int EC, bool Track>
inline void top_keys_impl(const TopKeysArgs& a) {
  constexpr int R = 4;
  TopKeys top[R];
  auto finish = [&](index_t r, const TopKeys& t) {
    t.write_sorted(a.sel + r * a.S);
    if (a.kth) a.kth[r] = t.score[a.S - 1];
    if (a.next) a.next[r] = t.next;
  };
  auto reset = [&](TopKeys& t) {
    t.count = 0;
    t.S = a.S;
    t.next = -__builtin_inff();
  };
  index_t r = 0;
  if (a.group == 1) {
    for (; r + R <= a.rows; r += R) {
      for (int i = 0; i < R; ++i) reset(top[i]);
      top_keys_rows<EC, R, Track>(a, r, top);
      for (int i = 0; i < R; ++i) finish(r + i, top[i]);
    }
    for (; r < a.rows; ++r) {
      reset(top[0]);
      top_keys_rows<EC, 1, Track>(a, r, top);
      finish(r, top[0]);
    }
    return;
  }
  for (; r < a.rows; ++r) {
    reset(top[0]);
    top_keys_group<EC, Track>(a, r, top[0]);
    finish(r, top[0]);
  }
}

template <int EC>
inline void top_keys_tracked(const TopKeysArgs& a) {
  if (a.next) top_keys_impl<EC, true>(a);
  else top_keys_impl<EC, false>(a);
}

inline void top_keys(const TopKeysArgs& a) {
  switch (a.E) {
    case 8: top_keys_tracked<8>(a); break;
    case 16: top_keys_tracked<16>(a); break;
    default: top_keys_tracked<0>(a); break;
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
