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

/// Offers one vector of scores (keys g0 .. g0 + valid - 1; valid <= W, the other lanes ignored) to `top`.
/// Track: also keep the best rejected score per lane in `rejected` (for TopKeysArgs::next).
template <bool Track>
inline void offer_vector(simd::vf s, index_t g0, int valid, index_t mask_begin, index_t mask_end, TopKeys& top,
                         simd::vf& rejected) {
  using namespace simd;
  if (mask_begin < g0 + W && mask_end > g0) {
    vi idx;
    for (int i = 0; i < W; ++i) idx[i] = static_cast<std::int32_t>(g0) + i;
    const vi masked = (idx >= splati(static_cast<std::int32_t>(mask_begin))) & (idx < splati(static_cast<std::int32_t>(mask_end)));
    s = select(masked, splat(-__builtin_inff()), s);
  }
  if (top.count < top.S) {  // filling: every key is a candidate
    float lanes[W];
    store(lanes, s);
    for (int i = 0; i < valid; ++i) top.offer(lanes[i], static_cast<std::int32_t>(g0 + i));
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

/// Offers a stored row of scores (keys g0 .. g0 + n - 1 at s, padded to whole vectors) to `top` vector
/// by vector, as offer_vector would: once `top` is full, a vector is looked at only where a lane beats
/// its S-th best score (masked and NaN lanes never do), with that threshold kept in a register.
inline void offer_scores(const float* s, index_t n, index_t g0, index_t mask_begin, index_t mask_end, TopKeys& top) {
  using namespace simd;
  vf unused = splat(-__builtin_inff());
  const auto valid = [&](index_t i) { return static_cast<int>(imin(W, n - i)); };
  index_t i = 0;
  for (; i < n && top.count < top.S; i += W)
    offer_vector<false>(load(s + i), g0 + i, valid(i), mask_begin, mask_end, top, unused);
  if (i >= n) return;
  vf threshold = splat(top.score[top.S - 1]);
  for (; i < n; i += W) {
    const vf v = load(s + i);
    if (!greater_bits(v, threshold)) continue;
    offer_vector<false>(v, g0 + i, valid(i), mask_begin, mask_end, top, unused);
    threshold = splat(top.score[top.S - 1]);
  }
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
