// The checks of the ball-tree attention kernels (surrogate/kernels/cuda_ball_attention.hpp), written once
// against host arrays and run by test_gpu_ball_attention.cpp (host -> device copies, the library's
// launchers) on the host backend and on a GPU.
// A backend has
//   std::vector<float> ball(const BallAttentionLaunch&), coarse(const CoarseAttentionArgs&),
//   selected(const SelectedBlockAttentionArgs&)
// which run the kernel on the args' HOST arrays (a.out holds the initial output, sentinels) and return the
// whole output array (its rows x ldo floats). The block selection's checks: block_selection_checks.hpp.
//
// What is checked: the ball attention (and the CPU kernel) against a naive attention in double, several ball
// sizes, heads, head widths (specialised and generic buckets), position dimensions, with and without the
// distance bias, padding duplicates, row strides with NaN in the unused columns (never read) and sentinel
// output columns (never written); the coarse and selected-block kernels against the naive reference and
// BSA's CPU branches (bsa::detail::coarse_branch / fine_branch: the same layouts and selection
// conventions); run-to-run determinism and independence of a row's result from the rows launched with it
// (bitwise).
//
// Error bound against the double reference (u = 2^-24, first order): the kernel's logit of key j differs
// from the exact one by at most
//   d_j = (E + 2) u sum_e |fl(scale q_e) k_je|   (the scaled query and the FMA chain)
//       + (dim + 4) u |sigma| dist_ij             (the float distance and the bias product)
//       + u |l_j|                                 (the bias FMA)
// and its exp term has a relative error of at most 8u (the CPU kernels' polynomial, an exact power of
// two); the double sums add ~N 2^-53. A softmax average whose weights carry relative errors eps_j <= D
// moves by at most 2 D max_j |v_j|; the output is rounded to float once (u |out|). So
//   |kernel - ref| <= 2 (max_j d_j + 8u) max_j |v_j| + 2u |ref|.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "bsa/branches.hpp"  // the CPU branches (libsurrogate internal)
#include "surrogate/kernels/cpu.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace surrogate::testing::ball_attention_checks {

namespace k = surrogate::kernels;
namespace cu = surrogate::kernels::cuda;
using k::index_t;

inline constexpr double kU = 0x1p-24;
inline constexpr float kSentinel = 12345.0f;
inline const float kNaN = std::numeric_limits<float>::quiet_NaN();

inline std::vector<float> random_rows(index_t rows, index_t ld, int width, float scale, std::mt19937& gen) {
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(rows * ld), kNaN);  // unused columns: NaN
  for (index_t r = 0; r < rows; ++r)
    for (int c = 0; c < width; ++c) v[r * ld + c] = dist(gen);
  return v;
}

/// The float distance of the CPU's ball_distances (components in order, no contraction).
inline float float_distance(const float* a, const float* b, int dim) {
  volatile float sum = 0.0f;  // volatile: no contraction by the host compiler either
  for (int c = 0; c < dim; ++c) {
    const float diff = a[c] - b[c];
    const volatile float square = diff * diff;
    sum = sum + square;
  }
  return std::sqrt(static_cast<float>(sum));
}

/// One query of one head against a list of key rows (with an optional additive bias per key), in double,
/// and the error bound of the header comment per component.
struct Reference {
  std::vector<double> out;
  double spread = 0;  // 2 (max_j d_j + 8u) max_j |v_j|
  double worst = 0;   // max_j d_j
  double max_logit = 0, max_v = 0;
};

inline Reference naive_attention(const float* q, const float* K, const float* V, index_t ld,
                                 const std::vector<index_t>& keys, int E, float scale, const std::vector<double>& bias,
                                 const std::vector<double>& bias_error) {
  const std::size_t n = keys.size();
  std::vector<double> l(n);
  double worst = 0, max_l = -std::numeric_limits<double>::infinity(), max_v = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const float* kj = K + keys[j] * ld;
    double dot = 0, dot_abs = 0;
    for (int e = 0; e < E; ++e) {
      dot += static_cast<double>(q[e]) * scale * kj[e];
      dot_abs += std::abs(static_cast<double>(q[e] * scale) * kj[e]);
    }
    l[j] = dot + (bias.empty() ? 0.0 : bias[j]);
    worst = std::max(worst, (E + 2) * kU * dot_abs + (bias_error.empty() ? 0.0 : bias_error[j]) + kU * std::abs(l[j]));
    max_l = std::max(max_l, l[j]);
    for (int e = 0; e < E; ++e) max_v = std::max(max_v, std::abs(static_cast<double>(V[keys[j] * ld + e])));
  }
  Reference r;
  r.out.assign(static_cast<std::size_t>(E), 0.0);
  double sum = 0;
  for (std::size_t j = 0; j < n; ++j) {
    const double w = std::exp(l[j] - max_l);
    sum += w;
    for (int e = 0; e < E; ++e) r.out[e] += w * V[keys[j] * ld + e];
  }
  for (auto& o : r.out) o /= sum;
  r.spread = 2 * (worst + 8 * kU) * max_v;
  r.worst = worst;
  for (std::size_t j = 0; j < n; ++j) r.max_logit = std::max(r.max_logit, std::abs(l[j]));
  r.max_v = max_v;
  return r;
}

struct BallCase {
  int balls, ball, heads, E, dim;
  bool bias, duplicates;
  float q_scale;
};

// ---------------------------------------------------------------------------------------------------
/// Ball attention against the naive reference and the CPU kernel; determinism; launch independence.
template <class Backend>
void check_ball_attention(Backend& backend) {
  const k::CpuKernels& cpu = k::cpu();
  std::mt19937 gen(7);
  const BallCase cases[] = {
      {1, 2, 1, 4, 3, true, false, 1.0f},    {3, 16, 2, 8, 3, true, true, 1.0f},
      {5, 64, 3, 16, 2, true, true, 1.0f},   {2, 128, 4, 32, 3, true, true, 2.0f},
      {3, 48, 2, 64, 3, true, false, 1.0f},  {2, 256, 1, 16, 3, true, true, 1.0f},
      {4, 32, 2, 24, 2, true, true, 4.0f},   {7, 8, 5, 3, 1, true, false, 1.0f},
      {3, 64, 2, 16, 3, false, true, 1.0f},  {2, 100, 3, 12, 4, true, true, 1.0f},
      {1, 1, 2, 8, 3, true, false, 1.0f},
  };
  for (const BallCase& t : cases) {
    const index_t rows = static_cast<index_t>(t.balls) * t.ball;
    const int H = t.heads, E = t.E, C = H * E;
    const index_t ld = C + 3, ldo = C + 2, ld_pos = t.dim + 1;
    auto q = random_rows(rows, ld, C, t.q_scale, gen), kk = random_rows(rows, ld, C, 1.0f, gen);
    auto v = random_rows(rows, ld, C, 1.0f, gen);
    std::vector<float> pos(static_cast<std::size_t>(rows * ld_pos), kNaN);
    std::uniform_real_distribution<float> unit(0.0f, 1.0f);
    for (index_t r = 0; r < rows; ++r)
      for (int c = 0; c < t.dim; ++c) pos[r * ld_pos + c] = unit(gen);
    if (t.duplicates)  // padding duplicates: a copy of the row before (same leaf), as the ball tree makes them
      for (index_t r = 1; r < rows; r += 3) {
        if (r % t.ball == 0) continue;
        std::copy_n(q.begin() + (r - 1) * ld, ld, q.begin() + r * ld);
        std::copy_n(kk.begin() + (r - 1) * ld, ld, kk.begin() + r * ld);
        std::copy_n(v.begin() + (r - 1) * ld, ld, v.begin() + r * ld);
        std::copy_n(pos.begin() + (r - 1) * ld_pos, ld_pos, pos.begin() + r * ld_pos);
      }
    std::vector<float> sigma(static_cast<std::size_t>(H));
    std::normal_distribution<float> noise(0.0f, 0.3f);
    for (auto& s : sigma) s = -1.0f + noise(gen);
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));

    std::vector<float> init(static_cast<std::size_t>(rows * ldo), kSentinel);
    cu::BallAttentionLaunch g;
    g.rows = rows;
    g.ball = t.ball;
    g.heads = H;
    g.E = E;
    g.q = q.data();
    g.k = kk.data();
    g.v = v.data();
    g.ld = ld;
    g.scale = scale;
    g.sigma = t.bias ? sigma.data() : nullptr;
    g.positions = pos.data();
    g.ld_pos = ld_pos;
    g.dim = t.dim;
    g.out = init.data();
    g.ldo = ldo;
    const std::vector<float> out = backend.ball(g);

    // The CPU kernel, ball by ball, with the distance matrix of the Erwin/BSA forward.
    std::vector<float> cpu_out(static_cast<std::size_t>(rows * ldo), kSentinel);
    std::vector<float> dist(static_cast<std::size_t>(t.ball) * t.ball);
    for (int b = 0; b < t.balls; ++b) {
      const index_t r0 = static_cast<index_t>(b) * t.ball;
      for (int i = 0; i < t.ball; ++i)
        for (int j = 0; j < t.ball; ++j)
          dist[static_cast<std::size_t>(i) * t.ball + j] =
              float_distance(&pos[(r0 + i) * ld_pos], &pos[(r0 + j) * ld_pos], t.dim);
      k::BallAttentionArgs a;
      a.m = t.ball;
      a.heads = H;
      a.E = E;
      a.q = q.data() + r0 * ld;
      a.k = kk.data() + r0 * ld;
      a.v = v.data() + r0 * ld;
      a.ld = ld;
      a.scale = scale;
      a.sigma = t.bias ? sigma.data() : nullptr;
      a.bias = dist.data();
      a.ld_bias = t.ball;
      a.out = cpu_out.data() + r0 * ldo;
      a.ldo = ldo;
      cpu.ball_attention(a);
    }

    for (index_t i = 0; i < rows; ++i) {
      const index_t b0 = i - i % t.ball;
      std::vector<index_t> keys(static_cast<std::size_t>(t.ball));
      std::iota(keys.begin(), keys.end(), b0);
      for (int h = 0; h < H; ++h) {
        std::vector<double> bias, bias_error;
        if (t.bias)
          for (index_t j : keys) {
            double d2 = 0;  // the exact distance (the device's float one is within (dim + 2) u of it)
            for (int c = 0; c < t.dim; ++c) {
              const double diff = static_cast<double>(pos[i * ld_pos + c]) - pos[j * ld_pos + c];
              d2 += diff * diff;
            }
            const double d = std::sqrt(d2);
            bias.push_back(static_cast<double>(sigma[h]) * d);
            bias_error.push_back((t.dim + 4) * kU * std::abs(sigma[h]) * d);
          }
        const Reference ref = naive_attention(&q[i * ld + h * E], kk.data() + h * E, v.data() + h * E, ld, keys, E,
                                              scale, bias, bias_error);
        for (int e = 0; e < E; ++e) {
          const double got = out[i * ldo + h * E + e], want = ref.out[e];
          ASSERT_LE(std::abs(got - want), ref.spread + 2 * kU * std::abs(want))
              << "balls " << t.balls << " ball " << t.ball << " heads " << H << " E " << E << " row " << i
              << " head " << h << " channel " << e;
          // The CPU kernel (the latent decode: each query's exact maximum, terms exp(l - max) within
          // (3.3 + 0.225 |l - max|) u, |l - max| <= 2 max|l|, and float sums over the ball's keys in order,
          // at most (ball - 1) u of the weighted total each) against the same reference.
          const double cpu_value = cpu_out[i * ldo + h * E + e];
          const double cpu_terms = ref.worst + (3.3 + 0.45 * ref.max_logit) * kU + (t.ball - 1) * kU;
          const double cpu_bound = 2 * cpu_terms * ref.max_v + 2 * kU * std::abs(want);
          ASSERT_LE(std::abs(cpu_value - want), cpu_bound)
              << "CPU kernel: ball " << t.ball << " E " << E << " row " << i << " head " << h << " channel " << e;
        }
      }
      for (index_t c = C; c < ldo; ++c) ASSERT_EQ(out[i * ldo + c], kSentinel) << "row " << i << " column " << c;
    }

    // Run to run: the same bits. A row's result does not depend on the other balls of the launch.
    EXPECT_EQ(backend.ball(g), out) << "ball " << t.ball << " E " << E;
    if (t.balls > 1) {
      cu::BallAttentionLaunch tail = g;
      tail.rows = rows - t.ball;
      tail.q += t.ball * ld;
      tail.k += t.ball * ld;
      tail.v += t.ball * ld;
      tail.positions += t.ball * ld_pos;
      const std::vector<float> got = backend.ball(tail);  // tail.out: the first rows of init (sentinels)
      EXPECT_TRUE(std::equal(got.begin(), got.end(), out.begin() + t.ball * ldo)) << "ball " << t.ball << " E " << E;
    }
  }
}

// ---------------------------------------------------------------------------------------------------
/// Coarse attention against the naive reference and BSA's CPU coarse branch; determinism.
template <class Backend>
void check_coarse_attention(Backend& backend) {
  std::mt19937 gen(11);
  struct Case {
    int samples, heads, E;
    index_t queries, keys;
    int copies;
  };
  // copies > 1 with queries == keys: BSA's coarse-q attention (also compared with the CPU branch).
  const Case cases[] = {{1, 1, 4, 5, 7, 1},     {2, 2, 16, 40, 64, 4},  {3, 1, 24, 17, 300, 8},
                        {2, 3, 32, 64, 64, 1},  {1, 2, 64, 130, 130, 2}, {2, 2, 8, 9, 1, 3},
                        {3, 2, 16, 33, 33, 8}};
  for (const Case& t : cases) {
    const int H = t.heads, E = t.E, C = H * E;
    const index_t ldq = C + 1, ldkv = C + 5, ldo = C + 2;
    const index_t nq = t.samples * t.queries, nk = t.samples * t.keys, nout = nq * t.copies;
    auto q = random_rows(nq, ldq, C, 1.5f, gen), kk = random_rows(nk, ldkv, C, 1.0f, gen);
    auto v = random_rows(nk, ldkv, C, 1.0f, gen);
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    std::vector<float> init(static_cast<std::size_t>(nout * ldo), kSentinel);
    cu::CoarseAttentionArgs g;
    g.samples = t.samples;
    g.heads = H;
    g.E = E;
    g.q = q.data();
    g.ldq = ldq;
    g.queries = t.queries;
    g.k = kk.data();
    g.v = v.data();
    g.ldkv = ldkv;
    g.keys = t.keys;
    g.scale = scale;
    g.out = init.data();
    g.ldo = ldo;
    g.copies = t.copies;
    const std::vector<float> out = backend.coarse(g);

    // BSA's CPU coarse branch on the same data: coarse-q attention (the block queries, rows of the
    // compressed blocks' stride) when copies > 1, token queries otherwise.
    const bool coarse_q = t.copies > 1;
    std::vector<float> qb;  // the queries at the compressed blocks' row stride
    for (index_t i = 0; i < nq; ++i)
      for (index_t c = 0; c < ldkv; ++c) qb.push_back(c < ldq ? q[i * ldq + c] : kNaN);
    namespace bd = surrogate::bsa::detail;
    bd::Tokens tok;
    tok.q = q.data();
    tok.ld = ldq;
    tok.samples = t.samples;
    tok.n = t.queries * t.copies;
    tok.heads = H;
    tok.E = E;
    bd::Blocks blk;
    blk.q = coarse_q ? qb.data() : nullptr;
    blk.k = kk.data();
    blk.v = v.data();
    blk.ld = ldkv;
    blk.nb = t.keys;
    bd::SparseShape shape;
    shape.C = t.copies;
    shape.coarse_q_attn = coarse_q;
    // (the CPU's coarse-q attention has the nb compressed blocks as its queries: queries == keys)
    const bool with_cpu = !coarse_q || t.queries == t.keys;
    std::vector<float> cpu_out(static_cast<std::size_t>(nout * ldo), kSentinel);
    if (with_cpu) bd::coarse_branch(k::cpu(), tok, blk, shape, cpu_out.data(), ldo, 2);
    for (index_t i = 0; i < nq; ++i) {
      const index_t s = i / t.queries;
      std::vector<index_t> keys(static_cast<std::size_t>(t.keys));
      std::iota(keys.begin(), keys.end(), s * t.keys);
      for (int h = 0; h < H; ++h) {
        const Reference ref = naive_attention(&q[i * ldq + h * E], kk.data() + h * E, v.data() + h * E, ldkv, keys, E,
                                              scale, {}, {});
        for (int c = 0; c < t.copies; ++c)
          for (int e = 0; e < E; ++e) {
            const index_t row = i * t.copies + c;
            const double got = out[row * ldo + h * E + e], want = ref.out[e];
            ASSERT_LE(std::abs(got - want), ref.spread + 2 * kU * std::abs(want))
                << "samples " << t.samples << " queries " << t.queries << " keys " << t.keys << " E " << E
                << " query " << i << " copy " << c << " head " << h << " channel " << e;
            ASSERT_EQ(out[row * ldo + h * E + e], out[i * t.copies * ldo + h * E + e]) << "copies differ";
            // Both within the bound of the reference (the CPU's logits are the same FMA chain, or
            // unfused on the generic ISA: within the same (E + 2) u bound).
            if (with_cpu) {
              ASSERT_LE(std::abs(got - cpu_out[row * ldo + h * E + e]), 2 * ref.spread + 4 * kU * std::abs(want))
                  << "CPU coarse branch: queries " << t.queries << " copies " << t.copies << " query " << i
                  << " copy " << c << " head " << h << " channel " << e;
            }
          }
      }
      for (int c = 0; c < t.copies; ++c)
        for (index_t col = C; col < ldo; ++col) ASSERT_EQ(out[(i * t.copies + c) * ldo + col], kSentinel);
    }
    EXPECT_EQ(backend.coarse(g), out) << "run to run, keys " << t.keys;
  }
}

// ---------------------------------------------------------------------------------------------------
/// Selected-block attention against the naive reference and BSA's CPU fine branch; determinism; the
/// blocks read from gathered rows (first_row), for the whole batch and a window of a sample, bitwise.
template <class Backend>
void check_selected_block_attention(Backend& backend) {
  std::mt19937 gen(13);
  struct Case {
    int samples, heads, E;
    index_t n;
    int C, S, tokens_per_row;
  };
  // tokens_per_row: C (block-level importance), G < C (group selection), 1 (per-token selection).
  const Case cases[] = {{1, 1, 4, 32, 4, 2, 4},  {2, 2, 16, 64, 8, 3, 8},  {2, 3, 8, 96, 4, 4, 2},
                        {1, 2, 32, 48, 8, 1, 1}, {3, 1, 64, 64, 16, 4, 16}, {2, 2, 12, 40, 4, 10, 4}};
  for (const Case& t : cases) {
    const int H = t.heads, E = t.E, Cw = H * E;
    const index_t ld = Cw + 3, ldo = Cw + 1, total = t.samples * t.n;
    const index_t rows = t.n / t.tokens_per_row, nb = t.n / t.C;
    auto q = random_rows(total, ld, Cw, 1.5f, gen), kk = random_rows(total, ld, Cw, 1.0f, gen);
    auto v = random_rows(total, ld, Cw, 1.0f, gen);
    // S distinct blocks per (sample, head, row), ascending (as select_blocks gives them).
    std::vector<std::int32_t> sel(static_cast<std::size_t>(t.samples * H * rows * t.S));
    std::vector<std::int32_t> all(static_cast<std::size_t>(nb));
    std::iota(all.begin(), all.end(), 0);
    for (std::size_t r = 0; r < sel.size() / t.S; ++r) {
      std::shuffle(all.begin(), all.end(), gen);
      std::sort(all.begin(), all.begin() + t.S);
      std::copy_n(all.begin(), t.S, sel.begin() + r * t.S);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(E));
    std::vector<float> init(static_cast<std::size_t>(total * ldo), kSentinel);
    cu::SelectedBlockAttentionArgs g;
    g.samples = t.samples;
    g.n = t.n;
    g.heads = H;
    g.E = E;
    g.q = q.data();
    g.k = kk.data();
    g.v = v.data();
    g.ld = ld;
    g.scale = scale;
    g.C = t.C;
    g.S = t.S;
    g.tokens_per_row = t.tokens_per_row;
    g.rows = rows;
    g.sel = sel.data();
    g.out = init.data();
    g.ldo = ldo;
    const std::vector<float> out = backend.selected(g);

    // BSA's CPU fine branch with the same selection: tokens_per_row C = block-level importance, G < C
    // group selection, 1 per-token selection.
    namespace bd = surrogate::bsa::detail;
    bd::Tokens tok;
    tok.q = q.data();
    tok.k = kk.data();
    tok.v = v.data();
    tok.ld = ld;
    tok.samples = t.samples;
    tok.n = t.n;
    tok.heads = H;
    tok.E = E;
    bd::SparseShape shape;
    shape.C = t.C;
    shape.S = t.S;
    shape.block_level = t.tokens_per_row == t.C;
    shape.group_selection = t.tokens_per_row > 1;
    shape.G = t.tokens_per_row;
    ASSERT_EQ(shape.selection_rows(t.n), rows);
    ASSERT_EQ(shape.tokens_per_row(), t.tokens_per_row);
    std::vector<float> cpu_out(static_cast<std::size_t>(total * ldo), kSentinel);
    bd::fine_branch(k::cpu(), tok, shape, sel.data(), cpu_out.data(), ldo, 2);
    for (index_t i = 0; i < total; ++i) {
      const index_t s = i / t.n, r = (i % t.n) / t.tokens_per_row;
      for (int h = 0; h < H; ++h) {
        std::vector<index_t> keys;
        const std::int32_t* chosen = &sel[static_cast<std::size_t>(((s * H + h) * rows + r) * t.S)];
        for (int j = 0; j < t.S; ++j)
          for (int c = 0; c < t.C; ++c) keys.push_back(s * t.n + static_cast<index_t>(chosen[j]) * t.C + c);
        const Reference ref =
            naive_attention(&q[i * ld + h * E], kk.data() + h * E, v.data() + h * E, ld, keys, E, scale, {}, {});
        for (int e = 0; e < E; ++e) {
          const double got = out[i * ldo + h * E + e], want = ref.out[e];
          ASSERT_LE(std::abs(got - want), ref.spread + 2 * kU * std::abs(want))
              << "n " << t.n << " C " << t.C << " S " << t.S << " tokens/row " << t.tokens_per_row << " E " << E
              << " token " << i << " head " << h << " channel " << e;
          ASSERT_LE(std::abs(got - cpu_out[i * ldo + h * E + e]), 2 * ref.spread + 4 * kU * std::abs(want))
              << "CPU fine branch: n " << t.n << " C " << t.C << " S " << t.S << " tokens/row " << t.tokens_per_row
              << " token " << i << " head " << h << " channel " << e;
        }
      }
      for (index_t col = Cw; col < ldo; ++col) ASSERT_EQ(out[i * ldo + col], kSentinel);
    }
    EXPECT_EQ(backend.selected(g), out) << "run to run, C " << t.C << " S " << t.S;

    // The blocks read from gathered rows instead (first_row, blocks, ldkv: the multi-rank fetch): every
    // block copied to a shuffled place in arrays of another stride; the whole launch, and a window of the
    // last sample's tokens launched alone, give the own-rows launch's bits.
    const index_t ldkv = Cw + 5, blocks = t.samples * nb;
    std::vector<index_t> place(static_cast<std::size_t>(blocks));
    std::iota(place.begin(), place.end(), index_t{0});
    std::shuffle(place.begin(), place.end(), gen);
    std::vector<float> kg(static_cast<std::size_t>(blocks * t.C * ldkv), kNaN), vg(kg.size(), kNaN);
    std::vector<std::int64_t> first_row(static_cast<std::size_t>(blocks));
    for (index_t b = 0; b < blocks; ++b) {  // block b of the batch = rows b C .. of k and v (n = nb C)
      const index_t at = place[static_cast<std::size_t>(b)] * t.C;
      first_row[static_cast<std::size_t>(b)] = at;
      for (int c = 0; c < t.C; ++c)
        for (int e = 0; e < Cw; ++e) {
          kg[static_cast<std::size_t>((at + c) * ldkv + e)] = kk[static_cast<std::size_t>((b * t.C + c) * ld + e)];
          vg[static_cast<std::size_t>((at + c) * ldkv + e)] = v[static_cast<std::size_t>((b * t.C + c) * ld + e)];
        }
    }
    cu::SelectedBlockAttentionArgs f = g;
    f.k = kg.data();
    f.v = vg.data();
    f.ldkv = ldkv;
    f.first_row = first_row.data();
    f.blocks = nb;
    EXPECT_EQ(backend.selected(f), out) << "gathered blocks, C " << t.C << " S " << t.S;
    const index_t last = t.samples - 1, r0 = rows / 3, r1 = std::max(r0 + 1, 2 * rows / 3);
    const index_t w0 = r0 * t.tokens_per_row, length = (r1 - r0) * t.tokens_per_row;
    std::vector<std::int32_t> window_sel;
    for (int h = 0; h < H; ++h)
      for (index_t r = r0; r < r1; ++r) {
        const auto from = sel.begin() + ((last * H + h) * rows + r) * t.S;
        window_sel.insert(window_sel.end(), from, from + t.S);
      }
    std::vector<float> window_init(static_cast<std::size_t>(length * ldo), kSentinel);
    f.samples = 1;
    f.n = length;
    f.q = q.data() + (last * t.n + w0) * ld;
    f.rows = r1 - r0;
    f.sel = window_sel.data();
    f.first_row = first_row.data() + last * nb;
    f.out = window_init.data();
    const std::vector<float> window = backend.selected(f);
    const auto own = out.begin() + (last * t.n + w0) * ldo;
    EXPECT_TRUE(std::equal(window.begin(), window.end(), own, own + length * ldo))
        << "a window of gathered blocks, C " << t.C << " S " << t.S << " tokens " << w0 << ".." << w0 + length;
  }
}

}  // namespace surrogate::testing::ball_attention_checks
