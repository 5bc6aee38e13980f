// The running top-S set of the block selection (TopKeysArgs, LatentEncodeArgs::select_S): the S best
// (score, key) pairs of one row and how a vector of W scores is offered to it. Shared by the top_keys
// kernel and the selecting latent encode, so both choose the same keys from the same scores.
#pragma once

#include "simd.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

/// The S best (score, key) pairs seen so far, best first; keys arrive in ascending order, so a later key
/// displaces an earlier one only with a strictly larger score (equal scores: the lower key stays ahead).
struct TopKeys {
  float score[kMaxTopKeys];
  std::int32_t key[kMaxTopKeys];
  int count = 0, S = 0;
  float next = -__builtin_inff();  // best score offered but not (or no longer) among the S best

  float threshold() const { return count == S ? score[S - 1] : -__builtin_inff(); }
  void offer(float s, std::int32_t g) {
    if (count == S) {
      if (!(s > score[S - 1])) {
        next = simd::fmaxf(next, s);
        return;
      }
      next = simd::fmaxf(next, score[S - 1]);  // displaced
    }
    int pos = count < S ? count : S - 1;
    while (pos > 0 && score[pos - 1] < s) {
      score[pos] = score[pos - 1];
      key[pos] = key[pos - 1];
      --pos;
    }
    score[pos] = s;
    key[pos] = g;
    if (count < S) ++count;
  }
  /// The chosen keys in ascending order.
  void write_sorted(std::int32_t* out) const {
    for (int j = 0; j < S; ++j) {
      const std::int32_t g = key[j];
      int pos = j;
      while (pos > 0 && out[pos - 1] > g) {
        out[pos] = out[pos - 1];
        --pos;
      }
      out[pos] = g;
    }
  }
};

/// The scores s of keys g0 .. g0 + W - 1 with those in [mask_begin, mask_end) set to -inf.
inline simd::vf masked(simd::vf s, index_t g0, index_t mask_begin, index_t mask_end) {
  using namespace simd;
  if (!(mask_begin < g0 + W && mask_end > g0)) return s;
  vi idx;
  for (int i = 0; i < W; ++i) idx[i] = static_cast<std::int32_t>(g0) + i;
  const vi inside =
      (idx >= splati(static_cast<std::int32_t>(mask_begin))) & (idx < splati(static_cast<std::int32_t>(mask_end)));
  return select(inside, splat(-__builtin_inff()), s);
}

/// Offers one vector of scores (keys g0 .. g0 + valid - 1; valid <= W, the other lanes ignored) to `top`.
/// Track: also keep the best rejected score per lane in `rejected` (for TopKeysArgs::next). While the set
/// fills, scores below `floor` (selection_floor) are not offered.
template <bool Track>
inline void offer_vector(simd::vf s, index_t g0, int valid, index_t mask_begin, index_t mask_end, TopKeys& top,
                         simd::vf& rejected, float floor = -__builtin_inff()) {
  using namespace simd;
  s = masked(s, g0, mask_begin, mask_end);
  if (top.count < top.S) {  // filling: every key at or above the floor is a candidate
    float lanes[W];
    store(lanes, s);
    for (int i = 0; i < valid; ++i)
      if (!(lanes[i] < floor)) top.offer(lanes[i], static_cast<std::int32_t>(g0 + i));  // (NaN: offered)
    return;
  }
  vi pass = s > splat(top.score[top.S - 1]);
  if (valid < W) {
    const vi inside = first_lanes(valid);
    pass &= inside;
    if constexpr (Track) rejected = vmax(rejected, select(pass | ~inside, splat(-__builtin_inff()), s));
  } else if constexpr (Track) {
    rejected = vmax(rejected, select(pass, splat(-__builtin_inff()), s));
  }
  // Only the passing lanes, in ascending order (pass is clear beyond `valid`).
  unsigned bits = lane_bits(pass);
  if (!bits) return;
  float lanes[W];
  store(lanes, s);
  do {
    const int i = __builtin_ctz(bits);
    bits &= bits - 1;
    top.offer(lanes[i], static_cast<std::int32_t>(g0 + i));
  } while (bits);
}

/// A floor under the S best scores of a stored row (keys g0 .. g0 + n - 1 at s, padded to whole vectors with
/// -inf; the mask's keys excluded): the least of P >= S group maxima (lane i in group i mod P, P a power of
/// two up to W), so at least S keys score at or above it and none below it is among the S best. -inf
/// (no floor) where S > W, where the row holds a NaN or `top` does (the set's NaN rule is order-dependent).
inline float selection_floor(const float* s, index_t n, index_t g0, index_t mask_begin, index_t mask_end,
                             const TopKeys& top) {
  using namespace simd;
  constexpr float kNone = -__builtin_inff();
  if (top.S > W) return kNone;
  for (int j = 0; j < top.count; ++j)
    if (top.score[j] != top.score[j]) return kNone;
  vf best = splat(kNone);
  vi nan = splati(0);
  for (index_t i = 0; i < n; i += W) {
    const vf v = masked(load(s + i), g0 + i, mask_begin, mask_end);
    nan |= v != v;
    best = vmax(best, v);
  }
  if (lane_bits(nan)) return kNone;
  int P = 1;
  while (P < top.S) P *= 2;
  float lanes[W], group[W];
  store(lanes, best);
  for (int g = 0; g < P; ++g) group[g] = kNone;
  for (int l = 0; l < W; ++l) group[l % P] = fmaxf(group[l % P], lanes[l]);
  float floor = group[0];
  for (int g = 1; g < P; ++g) floor = group[g] < floor ? group[g] : floor;
  return floor;
}

/// Offers a stored row of scores (keys g0 .. g0 + n - 1 at s, padded to whole vectors) to `top` vector
/// by vector, as offer_vector would, skipping scores below `floor` (selection_floor: none of them is among
/// the S best, so the chosen set is the same): a vector is looked at only where a lane beats the larger
/// of the floor and the set's S-th best score (masked and NaN lanes never do), kept in a register.
inline void offer_scores(const float* s, index_t n, index_t g0, index_t mask_begin, index_t mask_end, TopKeys& top,
                         float floor = -__builtin_inff()) {
  using namespace simd;
  vf unused = splat(-__builtin_inff());
  const auto valid = [&](index_t i) { return static_cast<int>(imin(W, n - i)); };
  const bool floored = floor != -__builtin_inff();
  const float below_floor = __builtin_nextafterf(floor, -__builtin_inff());  // s > below_floor: s >= floor
  index_t i = 0;
  for (; i < n && top.count < top.S; i += W) {
    const vf v = load(s + i);
    if (!floored || greater_bits(v, splat(below_floor)))
      offer_vector<false>(v, g0 + i, valid(i), mask_begin, mask_end, top, unused, floor);
  }
  if (i >= n) return;
  // (with a floor the set holds no NaN; without one a NaN S-th best stops every offer, as in offer_vector)
  const auto threshold_of = [&] {
    const float t = top.score[top.S - 1];
    return splat(floored ? fmaxf(t, below_floor) : t);
  };
  vf threshold = threshold_of();
  const auto offer_if_beaten = [&](index_t j) {
    const vf v = load(s + j);
    if (!greater_bits(v, threshold)) return;
    offer_vector<false>(v, g0 + j, valid(j), mask_begin, mask_end, top, unused);
    threshold = threshold_of();
  };
  for (; i + 4 * W <= n; i += 4 * W)  // four vectors a test: one branch where most vectors offer nothing
    if (greater_bits(load(s + i), threshold) | greater_bits(load(s + i + W), threshold) |
        greater_bits(load(s + i + 2 * W), threshold) | greater_bits(load(s + i + 3 * W), threshold))
      for (int j = 0; j < 4; ++j) offer_if_beaten(i + j * W);
  for (; i < n; i += W) offer_if_beaten(i);
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
