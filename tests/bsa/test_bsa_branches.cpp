// The branches of BSA's sparse attention (libsurrogate/src/bsa/branches.hpp) against naive float64
// references that form every score explicitly (O(n^2)), on random q/k/v: local (ball attention with
// distance bias), coarse (both query kinds), importance scores and top-S selection (block level, grouped
// and per-token token level, own-ball masking, the degenerate single-ball case), fine, global.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "bsa/branches.hpp"
#include "surrogate/kernels/cpu.hpp"

namespace bd = surrogate::bsa::detail;
using surrogate::kernels::index_t;

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

struct Data {
  int samples = 2, H = 2, E = 8;
  index_t n = 256, ld = 0;
  std::vector<float> u, pos;  // u: rows x ld holding q | k | v
  std::vector<float> qc, kc, vc;  // compressed: samples*nb rows x H*E
  index_t nb = 0;
  bd::Tokens tokens() const {
    bd::Tokens t;
    t.q = u.data();
    t.k = u.data() + H * E;
    t.v = u.data() + 2 * H * E;
    t.ld = ld;
    t.samples = samples;
    t.n = n;
    t.heads = H;
    t.E = E;
    return t;
  }
  bd::Blocks blocks() const {
    bd::Blocks b;
    b.q = qc.data();
    b.k = kc.data();
    b.v = vc.data();
    b.ld = H * E;
    b.nb = nb;
    return b;
  }
  double q(index_t row, int h, int e) const { return u[static_cast<std::size_t>(row * ld + h * E + e)]; }
  double k(index_t row, int h, int e) const { return u[static_cast<std::size_t>(row * ld + (H + h) * E + e)]; }
  double v(index_t row, int h, int e) const { return u[static_cast<std::size_t>(row * ld + (2 * H + h) * E + e)]; }
};

Data make_data(int C, unsigned seed, int E = 8, index_t n = 256) {
  Data d;
  d.E = E;
  d.n = n;
  d.ld = ((3 * d.H * d.E) + 15) / 16 * 16;
  d.nb = d.n / C;
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  d.u.assign(static_cast<std::size_t>(d.samples * d.n * d.ld), 0.0f);
  for (index_t r = 0; r < d.samples * d.n; ++r)
    for (int c = 0; c < 3 * d.H * d.E; ++c) d.u[static_cast<std::size_t>(r * d.ld + c)] = normal(rng);
  d.pos.resize(static_cast<std::size_t>(d.samples * d.n * 3));
  for (float& p : d.pos) p = uni(rng);
  for (auto* v : {&d.qc, &d.kc, &d.vc}) {
    v->resize(static_cast<std::size_t>(d.samples * d.nb * d.H * d.E));
    for (float& x : *v) x = normal(rng);
  }
  return d;
}

/// softmax_j(scale q.k_j + bias_j) v_j for one query over explicit key/value rows (double).
std::vector<double> naive_attention(const std::vector<double>& q, const std::vector<std::vector<double>>& keys,
                                    const std::vector<std::vector<double>>& values, const std::vector<double>& bias) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size()));
  std::vector<double> logit(keys.size());
  for (std::size_t j = 0; j < keys.size(); ++j) {
    logit[j] = std::inner_product(q.begin(), q.end(), keys[j].begin(), 0.0) * scale + (bias.empty() ? 0.0 : bias[j]);
  }
  const double mx = *std::max_element(logit.begin(), logit.end());
  std::vector<double> out(q.size(), 0.0);
  double sum = 0.0;
  for (std::size_t j = 0; j < keys.size(); ++j) {
    const double w = std::exp(logit[j] - mx);
    sum += w;
    for (std::size_t e = 0; e < q.size(); ++e) out[e] += w * values[j][e];
  }
  for (double& o : out) o /= sum;
  return out;
}

template <typename F>
std::vector<double> row_of(int E, F&& f) {
  std::vector<double> r(static_cast<std::size_t>(E));
  for (int e = 0; e < E; ++e) r[static_cast<std::size_t>(e)] = f(e);
  return r;
}

// Float32 q/k/v give logits with relative rounding ~1e-7; softmax outputs are averages of values of
// size ~1 with double sums: 2e-5 absolute is ~100x the observed error, far below any layout mistake.
constexpr double kTol = 2e-5;

bd::SparseShape shape(int P, int C, int S, int G, bool group, bool mask, bool coarse_q, bool block_level) {
  bd::SparseShape s;
  s.P = P;
  s.C = C;
  s.S = S;
  s.G = G;
  s.group_selection = group;
  s.mask_own_ball = mask;
  s.coarse_q_attn = coarse_q;
  s.block_level = block_level;
  return s;
}

/// The naive selection of one row: scores (double), own-ball mask, stable descending sort, first S
/// ascending; also the margin between the S-th and (S+1)-th score.
std::vector<std::int32_t> naive_select(std::vector<double> scores, int S, double* gap) {
  std::vector<std::int32_t> idx(scores.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](std::int32_t a, std::int32_t b) { return scores[a] > scores[b]; });
  if (gap) *gap = scores[idx[S - 1]] - scores[idx[S]];
  std::vector<std::int32_t> top(idx.begin(), idx.begin() + S);
  std::sort(top.begin(), top.end());
  return top;
}

/// The one-pass selection (coarse_and_select on `threads` threads, its coarse output into `out`) after
/// checking that it is bit for bit select_blocks'.
std::vector<std::int32_t> one_pass_selection(const surrogate::kernels::CpuKernels& table, const Data& d,
                                             const bd::SparseShape& s, std::vector<float>& out, int threads) {
  const std::size_t n_sel = static_cast<std::size_t>(d.samples * d.H * d.nb * s.S);
  std::vector<std::int32_t> sel(n_sel), sel_ref(n_sel);
  out.assign(static_cast<std::size_t>(d.samples * d.n * d.ld), 0.0f);
  bd::coarse_and_select(table, d.tokens(), d.blocks(), s, out.data(), d.ld, sel.data(), threads);
  bd::select_blocks(table, d.tokens(), d.blocks(), s, sel_ref.data(), 2);
  EXPECT_EQ(sel, sel_ref);
  return sel;
}

}  // namespace

TEST(Branches, LocalMatchesNaiveBallAttentionWithDistanceBias) {
  const Data d = make_data(8, 1);
  const int P = 64;
  const std::vector<float> sigma{-1.7f, 0.6f};
  std::vector<float> out(static_cast<std::size_t>(d.samples * d.n * d.ld), 0.0f);
  bd::local_branch(surrogate::kernels::cpu(), d.tokens(), d.pos.data(), 3, P, sigma.data(), out.data(), d.ld, 3);
  double err = 0.0;
  for (index_t i = 0; i < d.samples * d.n; i += 7)
    for (int h = 0; h < d.H; ++h) {
      const index_t b0 = i / P * P;
      std::vector<std::vector<double>> keys, values;
      std::vector<double> bias;
      for (index_t j = b0; j < b0 + P; ++j) {
        keys.push_back(row_of(d.E, [&](int e) { return d.k(j, h, e); }));
        values.push_back(row_of(d.E, [&](int e) { return d.v(j, h, e); }));
        double r2 = 0.0;
        for (int c = 0; c < 3; ++c) r2 += std::pow(double(d.pos[i * 3 + c]) - d.pos[j * 3 + c], 2);
        bias.push_back(sigma[static_cast<std::size_t>(h)] * std::sqrt(r2));
      }
      const auto want = naive_attention(row_of(d.E, [&](int e) { return d.q(i, h, e); }), keys, values, bias);
      for (int e = 0; e < d.E; ++e) err = std::max(err, std::abs(out[i * d.ld + h * d.E + e] - want[e]));
    }
  EXPECT_LE(err, kTol);
}

TEST(Branches, CoarseMatchesNaiveForBlockAndTokenQueries) {
  const Data d = make_data(8, 2);
  for (const bool coarse_q : {true, false}) {
    const auto s = shape(64, 8, 3, 8, true, true, coarse_q, true);
    std::vector<float> out(static_cast<std::size_t>(d.samples * d.n * d.ld), 0.0f);
    bd::coarse_branch(surrogate::kernels::cpu(), d.tokens(), d.blocks(), s, out.data(), d.ld, 2);
    double err = 0.0;
    for (index_t i = 0; i < d.samples * d.n; i += 5)
      for (int h = 0; h < d.H; ++h) {
        const index_t smp = i / d.n, blk = smp * d.nb + (i % d.n) / 8;
        std::vector<std::vector<double>> keys, values;
        for (index_t g = smp * d.nb; g < (smp + 1) * d.nb; ++g) {
          keys.push_back(row_of(d.E, [&](int e) { return d.kc[g * d.H * d.E + h * d.E + e]; }));
          values.push_back(row_of(d.E, [&](int e) { return d.vc[g * d.H * d.E + h * d.E + e]; }));
        }
        const auto q = coarse_q ? row_of(d.E, [&](int e) { return d.qc[blk * d.H * d.E + h * d.E + e]; })
                                : row_of(d.E, [&](int e) { return d.q(i, h, e); });
        const auto want = naive_attention(q, keys, values, {});
        for (int e = 0; e < d.E; ++e) err = std::max(err, std::abs(out[i * d.ld + h * d.E + e] - want[e]));
      }
    EXPECT_LE(err, kTol) << "coarse_q_attn " << coarse_q;
  }
}

TEST(Branches, SelectionMatchesNaiveTopS) {
  const Data d = make_data(8, 3);
  const int P = 64, C = 8, S = 3;
  struct Variant {
    bool block_level, group, mask;
    int G;
  };
  // Every instruction set this CPU runs (the top_keys kernel has one variant per set).
  using surrogate::kernels::Isa;
  for (const Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    const surrogate::kernels::CpuKernels* table = surrogate::kernels::cpu(isa);
    if (!table) continue;
    SCOPED_TRACE(surrogate::kernels::to_string(isa));
    for (const Variant var : {Variant{true, true, true, 8}, Variant{false, true, true, 16},
                              Variant{false, true, false, 4}, Variant{false, false, true, 1},
                              Variant{false, false, false, 1}}) {
      const auto s = shape(P, C, S, var.G, var.group, var.mask, false, var.block_level);
      const index_t rows = s.selection_rows(d.n);
      std::vector<std::int32_t> sel(static_cast<std::size_t>(d.samples * d.H * rows * S));
      double gap = 0.0;
      bd::select_blocks(*table, d.tokens(), d.blocks(), s, sel.data(), 3, &gap);
      int mismatches = 0, near_ties = 0;
      double naive_gap = std::numeric_limits<double>::infinity();
      for (int smp = 0; smp < d.samples; ++smp)
        for (int h = 0; h < d.H; ++h)
          for (index_t r = 0; r < rows; ++r) {
            const int per = var.block_level ? 1 : s.tokens_per_row();
            std::vector<double> scores(static_cast<std::size_t>(d.nb), 0.0);
            for (index_t g = 0; g < d.nb; ++g) {
              for (int t = 0; t < per; ++t) {
                double dot = 0.0;
                for (int e = 0; e < d.E; ++e) {
                  const double q = var.block_level ? d.qc[(smp * d.nb + r) * d.H * d.E + h * d.E + e]
                                                   : d.q(smp * d.n + r * per + t, h, e);
                  dot += q * d.kc[(smp * d.nb + g) * d.H * d.E + h * d.E + e];
                }
                scores[g] += dot / std::sqrt(8.0) / per;
              }
              const index_t ball = var.block_level ? r * C / P : r * per / P;
              if (var.mask && g * C / P == ball) scores[g] = kNegInf;
            }
            double row_gap = 0.0;
            const auto want = naive_select(scores, S, &row_gap);
            naive_gap = std::min(naive_gap, row_gap);
            const std::int32_t* got = sel.data() + ((smp * d.H + h) * rows + r) * S;
            if (!std::equal(want.begin(), want.end(), got)) {
              ++mismatches;
              if (row_gap < 1e-5) ++near_ties;  // float32 scores may order a near-tie differently
            }
          }
      EXPECT_EQ(mismatches, near_ties) << "block " << var.block_level << " group " << var.group << " mask " << var.mask;
      EXPECT_NEAR(gap, naive_gap, 1e-5);
    }
  }
}

// The one-pass coarse attention + block selection (coarse-q attention, block-level importance): the
// selection is bit for bit select_blocks' (the same scores, dot product then scale), the coarse output is
// within the naive reference's tolerance, and a window of a sample (a rank's part when distributed) gets
// the same bits as the whole sample in its rows. 128 blocks per sample: two tasks of 64 query blocks.
TEST(Branches, CoarseAndSelectInOnePassEqualsTheTwoBranches) {
  using surrogate::kernels::Isa;
  for (const Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    const surrogate::kernels::CpuKernels* table = surrogate::kernels::cpu(isa);
    if (!table) continue;
    SCOPED_TRACE(surrogate::kernels::to_string(isa));
    for (const int E : {8, 6}) {
      const Data d = make_data(8, 6, E, 1024);
      for (const bool mask : {true, false}) {
        SCOPED_TRACE("E " + std::to_string(E) + " mask " + std::to_string(mask));
        const auto s = shape(64, 8, 5, 8, true, mask, true, true);
        std::vector<float> out;
        const std::vector<std::int32_t> sel = one_pass_selection(*table, d, s, out, 3);
        double err = 0.0;
        for (index_t i = 0; i < d.samples * d.n; i += 3)
          for (int h = 0; h < d.H; ++h) {
            const index_t smp = i / d.n, blk = smp * d.nb + (i % d.n) / 8;
            std::vector<std::vector<double>> keys, values;
            for (index_t g = smp * d.nb; g < (smp + 1) * d.nb; ++g) {
              keys.push_back(row_of(d.E, [&](int e) { return d.kc[g * d.H * d.E + h * d.E + e]; }));
              values.push_back(row_of(d.E, [&](int e) { return d.vc[g * d.H * d.E + h * d.E + e]; }));
            }
            const auto want = naive_attention(row_of(d.E, [&](int e) { return d.qc[blk * d.H * d.E + h * d.E + e]; }),
                                              keys, values, {});
            for (int e = 0; e < d.E; ++e) err = std::max(err, std::abs(out[i * d.ld + h * d.E + e] - want[e]));
          }
        EXPECT_LE(err, kTol);
        // Window: tokens 320 .. 1023 of sample 1 (row0 320, 88 query blocks: one full task and a tail).
        const index_t row0 = 320, length = d.n - row0;
        bd::Tokens t = d.tokens();
        t.q += (d.n + row0) * d.ld;
        t.k += (d.n + row0) * d.ld;
        t.v += (d.n + row0) * d.ld;
        t.samples = 1;
        t.n = length;
        t.row0 = row0;
        bd::Blocks b = d.blocks();
        b.q += (d.nb + row0 / 8) * b.ld;
        b.k += d.nb * b.ld;
        b.v += d.nb * b.ld;
        std::vector<std::int32_t> sel_w(static_cast<std::size_t>(d.H * (length / 8) * s.S));
        std::vector<float> out_w(static_cast<std::size_t>(length * d.ld), 0.0f);
        bd::coarse_and_select(*table, t, b, s, out_w.data(), d.ld, sel_w.data(), 2);
        for (int h = 0; h < d.H; ++h)
          for (index_t r = 0; r < length / 8; ++r)
            for (int j = 0; j < s.S; ++j)
              ASSERT_EQ(sel_w[static_cast<std::size_t>((h * (length / 8) + r) * s.S + j)],
                        sel[static_cast<std::size_t>(((d.H + h) * d.nb + row0 / 8 + r) * s.S + j)]);
        for (index_t i = 0; i < length; ++i)
          for (int c = 0; c < d.H * d.E; ++c)
            ASSERT_EQ(out_w[static_cast<std::size_t>(i * d.ld + c)],
                      out[static_cast<std::size_t>((d.n + row0 + i) * d.ld + c)]);
      }
    }
  }
}

// The one-pass selection over many chunks of keys (1024 blocks per sample, a chunk holds 256 for E = 8),
// with exactly tied scores (every 7th block a copy of block 3) and keys that grow with their index, so
// that the top-S set keeps changing in late chunks: bit for bit select_blocks', on every instruction set.
TEST(Branches, CoarseAndSelectOverManyChunksWithTiesEqualsSelectBlocks) {
  using surrogate::kernels::Isa;
  Data d = make_data(8, 11, 8, 8192);
  const int width = d.H * d.E;
  for (index_t g = 0; g < d.samples * d.nb; ++g) {
    float* row = d.kc.data() + g * width;
    if (g % 7 == 0) {
      std::copy_n(d.kc.data() + (g / d.nb * d.nb + 3) * width, width, row);
    } else {
      const float grow = 1.0f + 2.0f * static_cast<float>(g % d.nb) / static_cast<float>(d.nb);
      for (int c = 0; c < width; ++c) row[c] *= grow;
    }
  }
  for (const Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    const surrogate::kernels::CpuKernels* table = surrogate::kernels::cpu(isa);
    if (!table) continue;
    for (const bool mask : {true, false}) {
      SCOPED_TRACE(std::string(surrogate::kernels::to_string(isa)) + " mask " + std::to_string(mask));
      const auto s = shape(64, 8, 6, 8, true, mask, true, true);
      std::vector<float> out;
      const std::vector<std::int32_t> sel = one_pass_selection(*table, d, s, out, 2);
      // Some rows choose blocks of the last chunk, and some choose tied copies.
      std::size_t late = 0, tied = 0;
      for (const std::int32_t g : sel) {
        late += g >= 768 ? 1 : 0;
        tied += g % 7 == 0 ? 1 : 0;
      }
      EXPECT_GT(late, sel.size() / 10);
      EXPECT_GT(tied, 0u);
    }
  }
}

TEST(Branches, SelectionOfADegenerateSampleTakesTheLowestMaskedBlocks) {
  // Two balls of 16 blocks per sample: S = 10 are chosen outside the own ball; with S = 18 the 16 blocks
  // of the other ball, then the two lowest-index blocks of the own ball (all scored -inf). A single ball
  // per sample: blocks 0..S-1.
  Data d = make_data(8, 4);
  const auto s = shape(128, 8, 10, 8, true, true, true, true);
  std::vector<std::int32_t> sel(static_cast<std::size_t>(d.samples * d.H * d.nb * s.S));
  bd::select_blocks(surrogate::kernels::cpu(), d.tokens(), d.blocks(), s, sel.data(), 2);
  for (int smp = 0; smp < d.samples; ++smp)
    for (int h = 0; h < d.H; ++h)
      for (index_t r = 0; r < d.nb; ++r) {
        const index_t own = r / 16;
        // 16 blocks outside: S = 10 of them are chosen by score; none of the own ball.
        const std::int32_t* got = sel.data() + ((smp * d.H + h) * d.nb + r) * s.S;
        for (int j = 0; j < s.S; ++j) EXPECT_NE(got[j] / 16, own);
      }
  const auto one_ball = shape(256, 8, 4, 8, true, true, true, true);  // n = 256 = one ball
  std::vector<std::int32_t> sel1(static_cast<std::size_t>(d.samples * d.H * d.nb * one_ball.S));
  bd::select_blocks(surrogate::kernels::cpu(), d.tokens(), d.blocks(), one_ball, sel1.data(), 2);
  for (std::size_t i = 0; i < sel1.size(); ++i) EXPECT_EQ(sel1[i], static_cast<std::int32_t>(i % 4));
  const auto two_balls = shape(128, 8, 18, 8, true, true, true, true);  // 16 outside, then 2 own
  std::vector<std::int32_t> sel2(static_cast<std::size_t>(d.samples * d.H * d.nb * two_balls.S));
  bd::select_blocks(surrogate::kernels::cpu(), d.tokens(), d.blocks(), two_balls, sel2.data(), 2);
  for (int smp = 0; smp < d.samples; ++smp)
    for (int h = 0; h < d.H; ++h)
      for (index_t r = 0; r < d.nb; ++r) {
        const std::int32_t own0 = static_cast<std::int32_t>(r / 16 * 16);
        std::vector<std::int32_t> want;
        for (std::int32_t g = 0; g < 32; ++g)
          if (g / 16 != r / 16 || g < own0 + 2) want.push_back(g);
        const std::int32_t* got = sel2.data() + ((smp * d.H + h) * d.nb + r) * two_balls.S;
        EXPECT_TRUE(std::equal(want.begin(), want.end(), got)) << "row " << r;
      }
}

// The one-pass selection when S exceeds the blocks outside the own ball: once the unmasked blocks are
// in, the set fills with masked blocks scored -inf (the lowest indices) and its threshold stays -inf, the
// case where no later score may pass it. Bit for bit select_blocks', on every instruction set.
TEST(Branches, CoarseAndSelectOfADegenerateSampleEqualsSelectBlocks) {
  using surrogate::kernels::Isa;
  const Data d = make_data(8, 4);
  const auto s = shape(128, 8, 18, 8, true, true, true, true);  // 16 blocks outside the own ball, S = 18
  for (const Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    const surrogate::kernels::CpuKernels* table = surrogate::kernels::cpu(isa);
    if (!table) continue;
    SCOPED_TRACE(surrogate::kernels::to_string(isa));
    std::vector<float> out;
    const std::vector<std::int32_t> sel = one_pass_selection(*table, d, s, out, 2);
    for (index_t r = 0; r < d.nb; ++r) {  // the two lowest own-ball blocks close every row's set
      const std::int32_t* got = sel.data() + r * s.S;
      const std::int32_t own0 = static_cast<std::int32_t>(r / 16 * 16);
      EXPECT_EQ(std::count_if(got, got + s.S, [&](std::int32_t g) { return g / 16 == own0 / 16; }), 2);
      EXPECT_NE(std::find(got, got + s.S, own0), got + s.S);
      EXPECT_NE(std::find(got, got + s.S, own0 + 1), got + s.S);
    }
  }
}

// While a row's set fills, the selecting encode offers only the scores at or above a floor taken from the
// chunk's lane maxima (top_set_impl.hpp, selection_floor). With every score of a sample tied (one key for
// all blocks) the floor is that score and the set must still take the lowest unmasked blocks; a NaN score
// (which the set places by arrival) switches the floor off. Bit for bit select_blocks', on every
// instruction set, over two chunks of keys (1024 blocks per sample).
TEST(Branches, CoarseAndSelectWithEveryScoreTiedOrANaNEqualsSelectBlocks) {
  using surrogate::kernels::Isa;
  Data d = make_data(8, 13, 8, 8192);
  const int width = d.H * d.E;
  for (index_t g = 1; g < d.nb; ++g) std::copy_n(d.kc.data(), width, d.kc.data() + g * width);  // sample 0
  const float nan = std::numeric_limits<float>::quiet_NaN();
  d.kc[static_cast<std::size_t>((d.nb + 40) * width + 3)] = nan;           // sample 1, head 0, first chunk
  d.kc[static_cast<std::size_t>((d.nb + 700) * width + d.E + 3)] = nan;    // sample 1, head 1, second chunk
  for (const Isa isa : {Isa::generic, Isa::avx2, Isa::avx512}) {
    const surrogate::kernels::CpuKernels* table = surrogate::kernels::cpu(isa);
    if (!table) continue;
    for (const bool mask : {true, false}) {
      SCOPED_TRACE(std::string(surrogate::kernels::to_string(isa)) + " mask " + std::to_string(mask));
      const auto s = shape(64, 8, 5, 8, true, mask, true, true);  // balls of 8 blocks, S = 5
      std::vector<float> out;
      const std::vector<std::int32_t> sel = one_pass_selection(*table, d, s, out, 2);
      for (int h = 0; h < d.H; ++h)
        for (index_t r = 0; r < d.nb; ++r) {
          std::vector<std::int32_t> want;
          for (std::int32_t g = 0; static_cast<int>(want.size()) < s.S; ++g)
            if (!mask || g / 8 != r / 8) want.push_back(g);
          const std::int32_t* got = sel.data() + (h * d.nb + r) * s.S;
          ASSERT_TRUE(std::equal(want.begin(), want.end(), got)) << "head " << h << " row " << r;
        }
    }
  }
}

TEST(Branches, FineMatchesNaiveOverTheSelectedBlocks) {
  const Data d = make_data(8, 5, 16);
  const int C = 8, S = 3;
  for (const bool group : {true, false}) {
    const auto s = shape(64, C, S, 8, group, true, false, false);
    const index_t rows = s.selection_rows(d.n);
    std::vector<std::int32_t> sel(static_cast<std::size_t>(d.samples * d.H * rows * S));
    std::mt19937 rng(9);
    for (std::size_t r = 0; r * S < sel.size(); ++r) {  // any ascending distinct blocks
      std::vector<std::int32_t> all(static_cast<std::size_t>(d.nb));
      std::iota(all.begin(), all.end(), 0);
      std::shuffle(all.begin(), all.end(), rng);
      std::sort(all.begin(), all.begin() + S);
      std::copy_n(all.begin(), S, sel.begin() + static_cast<std::ptrdiff_t>(r * S));
    }
    std::vector<float> out(static_cast<std::size_t>(d.samples * d.n * d.ld), 0.0f);
    bd::fine_branch(surrogate::kernels::cpu(), d.tokens(), s, sel.data(), out.data(), d.ld, 3);
    double err = 0.0;
    for (index_t i = 0; i < d.samples * d.n; i += 3)
      for (int h = 0; h < d.H; ++h) {
        const index_t smp = i / d.n, r = (i % d.n) / s.tokens_per_row();
        std::vector<std::vector<double>> keys, values;
        for (int j = 0; j < S; ++j)
          for (int t = 0; t < C; ++t) {
            const index_t key = smp * d.n + sel[static_cast<std::size_t>(((smp * d.H + h) * rows + r) * S + j)] * C + t;
            keys.push_back(row_of(d.E, [&](int e) { return d.k(key, h, e); }));
            values.push_back(row_of(d.E, [&](int e) { return d.v(key, h, e); }));
          }
        const auto want = naive_attention(row_of(d.E, [&](int e) { return d.q(i, h, e); }), keys, values, {});
        for (int e = 0; e < d.E; ++e) err = std::max(err, std::abs(out[i * d.ld + h * d.E + e] - want[e]));
      }
    EXPECT_LE(err, kTol) << "group " << group;
  }
}

TEST(Branches, GlobalMatchesNaiveFullAttention) {
  const Data d = make_data(8, 6);
  std::vector<float> out(static_cast<std::size_t>(d.samples * d.n * d.ld), 0.0f);
  bd::global_attention(surrogate::kernels::cpu(), d.tokens(), out.data(), d.ld, 2);
  double err = 0.0;
  for (index_t i = 0; i < d.samples * d.n; i += 11)
    for (int h = 0; h < d.H; ++h) {
      const index_t smp = i / d.n;
      std::vector<std::vector<double>> keys, values;
      for (index_t j = smp * d.n; j < (smp + 1) * d.n; ++j) {
        keys.push_back(row_of(d.E, [&](int e) { return d.k(j, h, e); }));
        values.push_back(row_of(d.E, [&](int e) { return d.v(j, h, e); }));
      }
      const auto want = naive_attention(row_of(d.E, [&](int e) { return d.q(i, h, e); }), keys, values, {});
      for (int e = 0; e < d.E; ++e) err = std::max(err, std::abs(out[i * d.ld + h * d.E + e] - want[e]));
    }
  EXPECT_LE(err, kTol);
}
