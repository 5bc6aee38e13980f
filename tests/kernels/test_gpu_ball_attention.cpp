// The ball-tree attention kernels on the GPU (the library's launchers, device arrays): the checks of
// ball_attention_checks.hpp (naive double reference with a float32 error bound, the CPU kernel and BSA's
// CPU branches, determinism, launch independence) and block_selection_checks.hpp (the selection bitwise),
// and the ball attention on the tensor cores within the bound of its operand format (below).
// Every test SKIPS when no CUDA device is visible.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "ball_attention_checks.hpp"
#include "block_selection_checks.hpp"
#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_ball_attention.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace checks = surrogate::testing::ball_attention_checks;
using surrogate::kernels::index_t;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

template <class T>
cu::DeviceBuffer<T> upload(const T* host, index_t count) {
  return to_device(std::vector<T>(host, host + count));
}

/// Copies the args' host arrays to the device, launches, returns the output array.
struct GpuBackend {
  std::vector<float> ball(cu::BallAttentionLaunch a) {
    auto q = upload(a.q, a.rows * a.ld), k = upload(a.k, a.rows * a.ld), v = upload(a.v, a.rows * a.ld);
    auto positions = upload(a.positions, a.rows * a.ld_pos);
    auto sigma = upload(a.sigma ? a.sigma : a.q, a.sigma ? a.heads : 1);
    auto out = upload(a.out, a.rows * a.ldo);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.positions = positions.data();
    a.sigma = a.sigma ? sigma.data() : nullptr;
    a.out = out.data();
    cu::ball_attention(a, nullptr);
    return to_host(out.data(), static_cast<std::size_t>(a.rows * a.ldo));
  }
  std::vector<float> coarse(cu::CoarseAttentionArgs a) {
    const index_t queries = a.samples * a.queries, keys = a.samples * a.keys;
    auto q = upload(a.q, queries * a.ldq), k = upload(a.k, keys * a.ldkv), v = upload(a.v, keys * a.ldkv);
    auto out = upload(a.out, queries * a.copies * a.ldo);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.out = out.data();
    cu::coarse_attention(a, nullptr);
    return to_host(out.data(), static_cast<std::size_t>(queries * a.copies * a.ldo));
  }
  std::vector<float> selected(cu::SelectedBlockAttentionArgs a) {
    const index_t tokens = a.samples * a.n;
    // k and v: the tokens' own rows, or (first_row) the gathered rows up to the last block named.
    index_t kv_rows = tokens, ldkv = a.ld;
    if (a.first_row) {
      kv_rows = 0;
      for (index_t i = 0; i < a.samples * a.blocks; ++i) kv_rows = std::max<index_t>(kv_rows, a.first_row[i] + a.C);
      ldkv = a.ldkv;
    }
    auto q = upload(a.q, tokens * a.ld), k = upload(a.k, kv_rows * ldkv), v = upload(a.v, kv_rows * ldkv);
    auto sel = upload(a.sel, a.samples * a.heads * a.rows * a.S);
    auto first_row = upload(a.first_row ? a.first_row : &kv_rows, a.first_row ? a.samples * a.blocks : 1);
    auto out = upload(a.out, tokens * a.ldo);
    a.q = q.data();
    a.k = k.data();
    a.v = v.data();
    a.sel = sel.data();
    a.first_row = a.first_row ? first_row.data() : nullptr;
    a.out = out.data();
    cu::selected_block_attention(a, nullptr);
    return to_host(out.data(), static_cast<std::size_t>(tokens * a.ldo));
  }
  std::vector<std::int32_t> selection(cu::BlockSelectionArgs a) {
    const index_t q_rows = a.samples * a.rows * a.group, count = a.samples * a.heads * a.rows * a.S;
    auto q = upload(a.q, (q_rows - 1) * a.ldq + a.heads * a.E), k = upload(a.k, a.samples * a.blocks * a.ldk);
    auto sel = upload(a.sel, count);
    a.q = q.data();
    a.k = k.data();
    a.sel = sel.data();
    cu::select_blocks(a, nullptr);
    return to_host(sel.data(), static_cast<std::size_t>(count));
  }
  std::pair<std::vector<float>, std::vector<std::int32_t>> coarse_select(cu::CoarseAttentionArgs c,
                                                                         cu::BlockSelectionArgs a) {
    const index_t count = a.samples * a.heads * a.rows * a.S, out_rows = a.samples * a.rows * c.copies;
    auto q = upload(a.q, (a.samples * a.rows - 1) * a.ldq + a.heads * a.E);
    auto k = upload(a.k, a.samples * a.blocks * a.ldk), v = upload(c.v, a.samples * a.blocks * c.ldkv);
    auto out = upload(c.out, out_rows * c.ldo);
    auto sel = upload(a.sel, count);
    c.q = a.q = q.data();
    c.k = a.k = k.data();
    c.v = v.data();
    c.out = out.data();
    a.sel = sel.data();
    cu::coarse_attention_and_select(c, a, nullptr);
    return {to_host(out.data(), static_cast<std::size_t>(out_rows * c.ldo)), to_host(sel.data(), static_cast<std::size_t>(count))};
  }
};

class GpuBallAttention : public ::testing::Test {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
  GpuBackend backend;
};

TEST_F(GpuBallAttention, MatchesTheNaiveReferenceAndTheCpuKernel) { checks::check_ball_attention(backend); }
TEST_F(GpuBallAttention, CoarseAttentionMatchesTheNaiveReferenceAndTheCpuBranch) {
  checks::check_coarse_attention(backend);
}
TEST_F(GpuBallAttention, SelectedBlockAttentionMatchesTheNaiveReferenceAndTheCpuBranch) {
  checks::check_selected_block_attention(backend);
}
TEST_F(GpuBallAttention, BlockSelectionIsTheNaiveAndTheCpuSelection) { checks::check_block_selection(backend); }
TEST_F(GpuBallAttention, CoarseAttentionAndSelectionInOnePass) { checks::check_coarse_and_select(backend); }

// The ball attention on the tensor cores (tf32, bf16) against the attention in double, within a bound
// derived from the operand format (unit roundoff u: bf16 2^-8, tf32 2^-11), as for FLARE's decode: a
// logit's products of rounded operands (the query scaled by one float multiply first) are off by at most
// (2u + u^2 + 2^-24) |q_e k_e| each, their FP32 sum by E 2^-24 sum |q_e k_e|, the float distance and the
// bias's fused multiply-add by (dim + 4) 2^-24 |sigma| d + 2^-24 |l|: delta = max_j of that; a softmax
// weight then moves by at most e^(2 delta) - 1 relative, the weights and values rounded to the format add
// u each, the exp (8 ulps) and the FP32 sums over the ball's keys and the channels (ball + E + 8) 2^-23:
// all of it relative to max_j |v_j|. The rounding must act (the error above four times the fp32 kernel's),
// the result is repeatable and a ball's rows do not depend on the other balls of the launch.
TEST_F(GpuBallAttention, TensorCoresAreWithinTheirFormatsBound) {
  std::mt19937 gen(23);
  struct Case {
    int balls, ball, heads, E, dim;
    bool bias;
  };
  // Balls of 1 to 256 keys (several query tiles and key passes, partial ones), head widths of every
  // padded width 8 / 16 / 32 / 64 and between them, 1 to 4 coordinates, with and without the bias.
  const Case cases[] = {{3, 16, 2, 8, 3, true},  {2, 256, 2, 8, 3, true},  {4, 100, 3, 12, 4, true},
                        {2, 48, 2, 64, 3, true}, {5, 1, 2, 16, 2, true},   {3, 64, 1, 32, 1, true},
                        {2, 130, 2, 24, 3, false}, {6, 8, 5, 3, 2, true},  {1, 200, 1, 40, 3, true}};
  for (const auto precision : {cu::MlpPrecision::tf32, cu::MlpPrecision::bf16}) {
    const double u = precision == cu::MlpPrecision::bf16 ? 0x1p-8 : 0x1p-11;
    const char* name = precision == cu::MlpPrecision::bf16 ? "bf16" : "tf32";
    double worst = 0.0, largest = 0.0, largest_fp32 = 0.0;  // error / bound; errors / max|v|
    for (const Case& t : cases) {
      const index_t rows = static_cast<index_t>(t.balls) * t.ball;
      const int H = t.heads, E = t.E, C = H * E;
      const index_t ld = C + 3, ldo = C + 2, ld_pos = t.dim + 1;
      const auto q = checks::random_rows(rows, ld, C, 1.0f, gen), kk = checks::random_rows(rows, ld, C, 1.0f, gen);
      const auto v = checks::random_rows(rows, ld, C, 1.0f, gen);
      std::vector<float> pos(static_cast<std::size_t>(rows * ld_pos), checks::kNaN);
      std::uniform_real_distribution<float> unit(0.0f, 1.0f);
      for (index_t r = 0; r < rows; ++r)
        for (int c = 0; c < t.dim; ++c) pos[r * ld_pos + c] = unit(gen);
      std::vector<float> sigma(static_cast<std::size_t>(H));
      for (auto& x : sigma) x = -1.0f - unit(gen);
      std::vector<float> init(static_cast<std::size_t>(rows * ldo), checks::kSentinel);
      cu::BallAttentionLaunch g;
      g.rows = rows;
      g.ball = t.ball;
      g.heads = H;
      g.E = E;
      g.q = q.data();
      g.k = kk.data();
      g.v = v.data();
      g.ld = ld;
      g.scale = 1.0f / std::sqrt(static_cast<float>(E));
      g.sigma = t.bias ? sigma.data() : nullptr;
      g.positions = pos.data();
      g.ld_pos = ld_pos;
      g.dim = t.dim;
      g.out = init.data();
      g.ldo = ldo;
      const std::vector<float> fp32 = backend.ball(g);
      g.precision = precision;
      const std::vector<float> out = backend.ball(g);
      const std::string what = std::string(name) + ", ball " + std::to_string(t.ball) + " E " + std::to_string(E);

      for (index_t i = 0; i < rows; ++i) {
        const index_t b0 = i - i % t.ball;
        for (int h = 0; h < H; ++h) {
          std::vector<double> logit(static_cast<std::size_t>(t.ball));
          double delta = 0.0, top = -1e300, max_v = 0.0;
          for (int j = 0; j < t.ball; ++j) {
            const float* qi = &q[i * ld + h * E];
            const float* kj = &kk[(b0 + j) * ld + h * E];
            double l = 0.0, mag = 0.0;
            for (int e = 0; e < E; ++e) {
              l += static_cast<double>(qi[e]) * g.scale * kj[e];
              mag += std::abs(static_cast<double>(qi[e]) * g.scale * kj[e]);
              max_v = std::max(max_v, std::abs(static_cast<double>(v[(b0 + j) * ld + h * E + e])));
            }
            double bias_error = 0.0;
            if (t.bias) {
              double d2 = 0.0;
              for (int c = 0; c < t.dim; ++c) {
                const double diff = static_cast<double>(pos[i * ld_pos + c]) - pos[(b0 + j) * ld_pos + c];
                d2 += diff * diff;
              }
              l += static_cast<double>(sigma[h]) * std::sqrt(d2);
              bias_error = (t.dim + 4) * 0x1p-24 * std::abs(sigma[h]) * std::sqrt(d2) + 0x1p-24 * std::abs(l);
            }
            logit[static_cast<std::size_t>(j)] = l;
            top = std::max(top, l);
            delta = std::max(delta, (2.0 * u + u * u + (E + 1) * 0x1p-24) * mag + bias_error);
          }
          double sum = 0.0;
          std::vector<double> want(static_cast<std::size_t>(E), 0.0);
          for (int j = 0; j < t.ball; ++j) {
            const double w = std::exp(logit[static_cast<std::size_t>(j)] - top);
            sum += w;
            for (int e = 0; e < E; ++e) want[static_cast<std::size_t>(e)] += w * v[(b0 + j) * ld + h * E + e];
          }
          const double bound = (std::expm1(2.0 * delta) + 2.0 * u + (t.ball + E + 8) * 0x1p-23) * max_v;
          for (int e = 0; e < E; ++e) {
            const double exact = want[static_cast<std::size_t>(e)] / sum;
            const double err = std::abs(out[i * ldo + h * E + e] - exact);
            worst = std::max(worst, err / bound);
            largest = std::max(largest, err / max_v);
            largest_fp32 = std::max(largest_fp32, std::abs(fp32[i * ldo + h * E + e] - exact) / max_v);
            ASSERT_LE(err, bound) << what << " row " << i << " head " << h << " channel " << e;
          }
        }
        for (index_t c = C; c < ldo; ++c) ASSERT_EQ(out[i * ldo + c], checks::kSentinel) << what << " row " << i;
      }
      EXPECT_EQ(backend.ball(g), out) << what << ": run to run";
      if (t.balls > 1) {  // the balls after the first alone: the same rows
        cu::BallAttentionLaunch tail = g;
        tail.rows = rows - t.ball;
        tail.q += t.ball * ld;
        tail.k += t.ball * ld;
        tail.v += t.ball * ld;
        tail.positions += t.ball * ld_pos;
        const std::vector<float> got = backend.ball(tail);
        EXPECT_TRUE(std::equal(got.begin(), got.end(), out.begin() + t.ball * ldo)) << what << ": launch independence";
      }
    }
    EXPECT_GT(largest, 4.0 * largest_fp32) << name << ": the operands' rounding does not show";
    std::printf("%s ball attention: largest error / bound %.3f, error / max|v| %.3g (fp32 kernel %.3g)\n", name,
                worst, largest, largest_fp32);
  }
}

}  // namespace
