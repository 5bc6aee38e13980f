// The checks of BSA's block selection kernels (cuda::select_blocks, cuda::coarse_attention_and_select in
// surrogate/kernels/cuda_ball_attention.hpp), run by test_gpu_ball_attention.cpp on the host backend and on a
// GPU. Beyond ball_attention_checks.hpp's backend calls, a backend has
//   std::vector<std::int32_t> selection(const BlockSelectionArgs&),
//   std::pair<std::vector<float>, std::vector<std::int32_t>> coarse_select(const CoarseAttentionArgs&,
//                                                                          const BlockSelectionArgs&)
// (the chosen blocks; the coarse output rows and the chosen blocks). What is checked: the chosen blocks
// bitwise against a naive selection (a stable sort of the scores) and BSA's CPU select_blocks /
// coarse_and_select, ties (values on a grid of quarters) and NaN included; the one-pass output within the
// float32 bound of ball_attention_checks.hpp; windows of rows (row0) bitwise the whole launch's rows.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ball_attention_checks.hpp"

namespace surrogate::testing::ball_attention_checks {

/// The naive block selection of one row (cu::BlockSelectionArgs): float scores, the first product rounded
/// and then std::fma in e order, times scale, the group's scores added in order and divided; -inf inside
/// the mask; the S best by a stable sort (equal scores: the lower block), returned in ascending order.
inline std::vector<std::int32_t> naive_selection(const float* q, index_t ldq, int group, const float* k, index_t ldk,
                                                 index_t blocks, int E, float scale, int S, index_t mask_begin,
                                                 index_t mask_end) {
  std::vector<float> score(static_cast<std::size_t>(blocks));
  for (index_t g = 0; g < blocks; ++g) {
    float sum = 0.0f;
    for (int t = 0; t < group; ++t) {
      const float* qt = q + t * ldq;
      const float* kg = k + g * ldk;
      const volatile float first = qt[0] * kg[0];  // (volatile: never fused with what follows)
      float l = first;
      for (int e = 1; e < E; ++e) l = std::fma(qt[e], kg[e], l);
      const volatile float part = l * scale;
      sum = t == 0 ? part : sum + part;
    }
    if (group > 1) sum = sum / static_cast<float>(group);
    score[static_cast<std::size_t>(g)] = g >= mask_begin && g < mask_end ? -std::numeric_limits<float>::infinity() : sum;
  }
  std::vector<std::int32_t> order(static_cast<std::size_t>(blocks));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int32_t a, std::int32_t b) {
    return score[static_cast<std::size_t>(a)] > score[static_cast<std::size_t>(b)];
  });
  order.resize(static_cast<std::size_t>(S));
  std::sort(order.begin(), order.end());
  return order;
}

/// Rows of values on a grid of quarters in [-1, 1] (many equal scores), unused columns NaN.
inline std::vector<float> grid_rows(index_t rows, index_t ld, int width, std::mt19937& gen) {
  std::uniform_int_distribution<int> dist(-4, 4);
  std::vector<float> v(static_cast<std::size_t>(rows * ld), kNaN);
  for (index_t r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) v[r * ld + c] = 0.25f * static_cast<float>(dist(gen));
  return v;
}

template <class Backend>
void check_block_selection(Backend& backend) {
  std::mt19937 gen(17);
  enum class Rows { blocks, groups, tokens };
  struct Case {
    int samples, heads, E;
    index_t n;
    int C, S;
    Rows rows;
    int G, P;
    bool mask, ties;
  };
  // S in each of the kernel's three list sizes (<= 8, <= 32, beyond); block-level importance, group
  // selection, per-token selection; balls of one to several blocks, a ball larger than the sample.
  const Case cases[] = {{2, 2, 8, 256, 4, 3, Rows::blocks, 4, 32, true, true},
                        {1, 3, 16, 512, 4, 12, Rows::blocks, 4, 64, true, false},
                        {2, 1, 4, 512, 4, 40, Rows::blocks, 4, 128, true, true},
                        {2, 2, 8, 128, 8, 4, Rows::groups, 4, 32, true, true},
                        {1, 2, 16, 96, 4, 6, Rows::groups, 3, 24, true, false},
                        {1, 2, 12, 96, 4, 5, Rows::tokens, 1, 16, true, false},
                        {1, 1, 64, 64, 8, 2, Rows::tokens, 1, 128, true, true},
                        {1, 2, 32, 256, 8, 20, Rows::blocks, 8, 64, false, true}};
  namespace bd = surrogate::bsa::detail;
  const bool cpu_fma = k::cpu().isa != k::Isa::generic;  // the CPU scores are one FMA chain where it has FMA
  for (const Case& t : cases) {
    const int H = t.heads, E = t.E, Cw = H * E;
    const index_t ld = Cw + 3, nb = t.n / t.C;
    const bool block_level = t.rows == Rows::blocks;
    const int group = t.rows == Rows::groups ? t.G : 1;
    const int row_tokens = block_level ? t.C : group;
    const index_t rows = t.n / row_tokens;
    const index_t q_rows = t.samples * (block_level ? nb : t.n);
    std::vector<float> q = t.ties ? grid_rows(q_rows, ld, Cw, gen) : random_rows(q_rows, ld, Cw, 1.0f, gen);
    const std::vector<float> kk = t.ties ? grid_rows(t.samples * nb, ld, Cw, gen) : random_rows(t.samples * nb, ld, Cw, 1.0f, gen);
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    cu::BlockSelectionArgs a;
    a.samples = t.samples;
    a.heads = H;
    a.E = E;
    a.q = q.data();
    a.ldq = ld;
    a.group = group;
    a.rows = rows;
    a.k = kk.data();
    a.ldk = ld;
    a.blocks = nb;
    a.scale = scale;
    a.S = t.S;
    if (t.mask) {
      a.ball_tokens = t.P;
      a.ball_blocks = t.P / t.C;
    }
    a.row_tokens = row_tokens;
    std::vector<std::int32_t> init(static_cast<std::size_t>(t.samples * H * rows * t.S), -7);
    a.sel = init.data();
    const std::vector<std::int32_t> sel = backend.selection(a);

    const auto text = [&] {
      return "n " + std::to_string(t.n) + " C " + std::to_string(t.C) + " S " + std::to_string(t.S) + " E " +
             std::to_string(E) + " rows of " + std::to_string(row_tokens) + " tokens";
    };
    for (index_t s = 0; s < t.samples; ++s)
      for (int h = 0; h < H; ++h)
        for (index_t r = 0; r < rows; ++r) {
          index_t mb = 0, me = 0;
          if (t.mask) {
            const index_t first = r * row_tokens / t.P, last = (r * row_tokens + row_tokens - 1) / t.P;
            mb = first * (t.P / t.C);
            me = std::min((last + 1) * (t.P / t.C), nb);
          }
          const std::vector<std::int32_t> want = naive_selection(&q[((s * rows + r) * group) * ld + h * E], ld, group,
                                                                 &kk[s * nb * ld + h * E], ld, nb, E, scale, t.S, mb, me);
          const auto got = sel.begin() + ((s * H + h) * rows + r) * t.S;
          ASSERT_TRUE(std::equal(want.begin(), want.end(), got)) << text() << " sample " << s << " head " << h << " row " << r;
        }

    // BSA's CPU selection on the same arrays.
    bd::Tokens tok;
    tok.q = q.data();
    tok.ld = ld;
    tok.samples = t.samples;
    tok.n = t.n;
    tok.heads = H;
    tok.E = E;
    bd::Blocks blk;
    blk.q = block_level ? q.data() : nullptr;
    blk.k = kk.data();
    blk.ld = ld;
    blk.nb = nb;
    bd::SparseShape shape;
    shape.P = t.P;
    shape.C = t.C;
    shape.S = t.S;
    shape.G = block_level ? t.C : t.G;
    shape.group_selection = t.rows != Rows::tokens;
    shape.mask_own_ball = t.mask;
    shape.coarse_q_attn = block_level;
    shape.block_level = block_level;
    ASSERT_EQ(shape.selection_rows(t.n), rows);
    std::vector<std::int32_t> cpu(init.size(), -7);
    if (cpu_fma) {
      bd::select_blocks(k::cpu(), tok, blk, shape, cpu.data(), 2);
      EXPECT_EQ(sel, cpu) << "CPU select_blocks, " << text();
    }
    EXPECT_EQ(backend.selection(a), sel) << "run to run, " << text();

    // A window of the last sample's rows launched alone (row0: the own-ball mask moves with it).
    const index_t last = t.samples - 1, r0 = rows / 3, r1 = std::max(r0 + 1, 2 * rows / 3);
    cu::BlockSelectionArgs w = a;
    w.samples = 1;
    w.rows = r1 - r0;
    w.row0 = r0;
    w.q = q.data() + ((last * rows + r0) * group) * ld;
    w.k = kk.data() + last * nb * ld;
    std::vector<std::int32_t> window_init(static_cast<std::size_t>(H * (r1 - r0) * t.S), -7);
    w.sel = window_init.data();
    const std::vector<std::int32_t> window = backend.selection(w);
    for (int h = 0; h < H; ++h) {
      const auto own = sel.begin() + ((last * H + h) * rows + r0) * t.S;
      EXPECT_TRUE(std::equal(own, own + (r1 - r0) * t.S, window.begin() + h * (r1 - r0) * t.S))
          << "a window of rows " << r0 << ".." << r1 << ", head " << h << ", " << text();
    }

    // NaN scores (one query row of NaN; its blocks then follow the CPU's order of offers).
    if (cpu_fma) {
      std::vector<float> qn = q;
      for (int c = 0; c < Cw; ++c) qn[static_cast<std::size_t>(c)] = kNaN;
      for (index_t g = 0; g < nb; g += 3) qn[static_cast<std::size_t>(ld + g % Cw)] = kNaN;
      cu::BlockSelectionArgs an = a;
      an.q = qn.data();
      tok.q = qn.data();
      blk.q = block_level ? qn.data() : nullptr;
      std::vector<std::int32_t> cpu_nan(init.size(), -7);
      bd::select_blocks(k::cpu(), tok, blk, shape, cpu_nan.data(), 2);
      EXPECT_EQ(backend.selection(an), cpu_nan) << "NaN queries, " << text();
    }
  }
}

/// The coarse branch with the selection in one pass (coarse_attention_and_select): the selection bitwise
/// the selection kernel's and the CPU's, the output within the float32 bound of the naive attention and of
/// the CPU's coarse_and_select, copied to the block's rows; a window of rows launched alone (row0) gives
/// the same rows.
template <class Backend>
void check_coarse_and_select(Backend& backend) {
  std::mt19937 gen(19);
  struct Case {
    int samples, heads, E, C, S, P;
    index_t n;
    bool ties;
  };
  const Case cases[] = {{2, 2, 8, 8, 4, 64, 512, false}, {1, 3, 16, 4, 12, 32, 256, true},
                        {2, 1, 4, 4, 3, 16, 128, true},  {1, 2, 64, 8, 2, 256, 256, false}};
  namespace bd = surrogate::bsa::detail;
  for (const Case& t : cases) {
    const int H = t.heads, E = t.E, Cw = H * E;
    const index_t ld = Cw + 3, ldo = Cw + 1, nb = t.n / t.C, nq = t.samples * nb;
    auto q = t.ties ? grid_rows(nq, ld, Cw, gen) : random_rows(nq, ld, Cw, 1.5f, gen);
    auto kk = t.ties ? grid_rows(nq, ld, Cw, gen) : random_rows(nq, ld, Cw, 1.0f, gen);
    auto v = random_rows(nq, ld, Cw, 1.0f, gen);
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    std::vector<float> init(static_cast<std::size_t>(t.samples * t.n * ldo), kSentinel);
    std::vector<std::int32_t> sel_init(static_cast<std::size_t>(nq * H * t.S), -7);
    cu::CoarseAttentionArgs c;
    c.samples = t.samples;
    c.heads = H;
    c.E = E;
    c.q = q.data();
    c.ldq = ld;
    c.queries = nb;
    c.k = kk.data();
    c.v = v.data();
    c.ldkv = ld;
    c.keys = nb;
    c.scale = scale;
    c.out = init.data();
    c.ldo = ldo;
    c.copies = t.C;
    cu::BlockSelectionArgs a;
    a.samples = t.samples;
    a.heads = H;
    a.E = E;
    a.q = q.data();
    a.ldq = ld;
    a.rows = nb;
    a.k = kk.data();
    a.ldk = ld;
    a.blocks = nb;
    a.scale = scale;
    a.S = t.S;
    a.ball_tokens = t.P;
    a.ball_blocks = t.P / t.C;
    a.row_tokens = t.C;
    a.sel = sel_init.data();
    const auto [out, sel] = backend.coarse_select(c, a);
    const std::string text = "n " + std::to_string(t.n) + " C " + std::to_string(t.C) + " S " + std::to_string(t.S) +
                             " E " + std::to_string(E);
    EXPECT_EQ(sel, backend.selection(a)) << "the selection kernel, " << text;

    // The CPU's one-pass coarse branch and selection on the same arrays.
    bd::Tokens tok;
    tok.ld = ld;
    tok.samples = t.samples;
    tok.n = t.n;
    tok.heads = H;
    tok.E = E;
    bd::Blocks blk;
    blk.q = q.data();
    blk.k = kk.data();
    blk.v = v.data();
    blk.ld = ld;
    blk.nb = nb;
    bd::SparseShape shape;
    shape.P = t.P;
    shape.C = t.C;
    shape.S = t.S;
    shape.G = t.C;
    std::vector<float> cpu_out(init.size(), kSentinel);
    std::vector<std::int32_t> cpu_sel(sel_init.size(), -7);
    bd::coarse_and_select(k::cpu(), tok, blk, shape, cpu_out.data(), ldo, cpu_sel.data(), 2);
    if (k::cpu().isa != k::Isa::generic) {
      EXPECT_EQ(sel, cpu_sel) << "CPU coarse_and_select, " << text;
    }
    for (index_t i = 0; i < nq; ++i) {
      const index_t s = i / nb;
      std::vector<index_t> keys(static_cast<std::size_t>(nb));
      std::iota(keys.begin(), keys.end(), s * nb);
      for (int h = 0; h < H; ++h) {
        const Reference ref = naive_attention(&q[i * ld + h * E], kk.data() + h * E, v.data() + h * E, ld, keys, E,
                                              scale, {}, {});
        for (int copy = 0; copy < t.C; ++copy)
          for (int e = 0; e < E; ++e) {
            const index_t at = (i * t.C + copy) * ldo + h * E + e;
            const double got = out[static_cast<std::size_t>(at)], want = ref.out[static_cast<std::size_t>(e)];
            ASSERT_LE(std::abs(got - want), ref.spread + 2 * kU * std::abs(want))
                << text << " block " << i << " head " << h << " copy " << copy << " channel " << e;
            ASSERT_LE(std::abs(got - cpu_out[static_cast<std::size_t>(at)]), 2 * ref.spread + 4 * kU * std::abs(want))
                << "CPU coarse_and_select, " << text << " block " << i << " head " << h << " channel " << e;
          }
      }
      for (int copy = 0; copy < t.C; ++copy)
        for (index_t col = Cw; col < ldo; ++col) ASSERT_EQ(out[static_cast<std::size_t>((i * t.C + copy) * ldo + col)], kSentinel);
    }
    EXPECT_EQ(backend.coarse_select(c, a), std::make_pair(out, sel)) << "run to run, " << text;

    // A window of the last sample's blocks launched alone.
    const index_t last = t.samples - 1, r0 = nb / 3, r1 = std::max(r0 + 1, 2 * nb / 3);
    cu::CoarseAttentionArgs cw = c;
    cu::BlockSelectionArgs w = a;
    cw.samples = w.samples = 1;
    cw.queries = w.rows = r1 - r0;
    w.row0 = r0;
    cw.q = w.q = q.data() + (last * nb + r0) * ld;
    cw.k = w.k = kk.data() + last * nb * ld;
    cw.v = v.data() + last * nb * ld;
    std::vector<float> window_init(static_cast<std::size_t>((r1 - r0) * t.C * ldo), kSentinel);
    std::vector<std::int32_t> window_sel(static_cast<std::size_t>(H * (r1 - r0) * t.S), -7);
    cw.out = window_init.data();
    w.sel = window_sel.data();
    const auto [wout, wsel] = backend.coarse_select(cw, w);
    const auto own = out.begin() + (last * nb + r0) * t.C * ldo;
    EXPECT_TRUE(std::equal(wout.begin(), wout.end(), own)) << "a window's output, " << text;
    for (int h = 0; h < H; ++h) {
      const auto from = sel.begin() + ((last * H + h) * nb + r0) * t.S;
      EXPECT_TRUE(std::equal(from, from + (r1 - r0) * t.S, wsel.begin() + h * (r1 - r0) * t.S))
          << "a window's selection, head " << h << ", " << text;
    }
  }
}

}  // namespace surrogate::testing::ball_attention_checks
