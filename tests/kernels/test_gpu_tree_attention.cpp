// Sequoia's tree attention kernel through its launcher (surrogate/kernels/cuda_tree_attention.hpp), on the
// host backend (cuda.*) and a GPU (gpu.*, skipped without one), against the CPU's arithmetic written out
// here as plain loops (sequoia/layers.cpp's order and roundings): bitwise on the host backend, whose exp is
// the CPU's; within 2 float ulps of max|out| on a GPU (its double exp may differ by an ulp). Key lists of
// 0 (a query without keys), 1, 2, 16 and 30 keys with repeats; head widths 3, 8, 37 (registers), 80 and
// 256 (the wide kernel, its sums in a scratch array).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "gpu_test.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_tree_attention.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
using surrogate::kernels::index_t;
using surrogate::testing::to_device;
using surrogate::testing::to_host;

struct Problem {
  int heads, e;
  index_t queries = 6, key_rows = 40;
  std::vector<float> q, k, v, pq, pk, w1, b1, scale, shift;
  std::vector<double> w3, b3;
  std::vector<std::int64_t> first, keys;
  float tau = 5.5f, fixed = 0.0f;

  Problem(int heads_, int e_, float fixed_denom, std::uint32_t seed) : heads(heads_), e(e_), fixed(fixed_denom) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
    const index_t d = static_cast<index_t>(heads) * e;
    auto fill = [&](std::vector<float>& x, std::size_t n, float s = 1.0f) {
      x.resize(n);
      for (float& y : x) y = s * unit(gen);
    };
    fill(q, static_cast<std::size_t>(queries * d), 2.0f);
    fill(k, static_cast<std::size_t>(key_rows * d), 2.0f);
    fill(v, static_cast<std::size_t>(key_rows * d));
    fill(pq, static_cast<std::size_t>(queries * 3));
    fill(pk, static_cast<std::size_t>(key_rows * 3));
    fill(w1, 9);
    fill(b1, 3);
    fill(scale, 3, 2.0f);
    fill(shift, 3);
    for (std::size_t c = 0; c < 3 * static_cast<std::size_t>(e); ++c) w3.push_back(unit(gen));
    for (int c = 0; c < e; ++c) b3.push_back(unit(gen));
    // Lists of 0, 1, 2, 16, 30 and 5 keys (repeats allowed: a voxel with two parents, padded siblings).
    std::uniform_int_distribution<std::int64_t> pick(0, key_rows - 1);
    first = {0};
    for (const int count : {0, 1, 2, 16, 30, 5}) {
      for (int j = 0; j < count; ++j) keys.push_back(pick(gen));
      first.push_back(static_cast<std::int64_t>(keys.size()));
    }
  }

  /// sequoia/layers.cpp's tree_attention, written out.
  std::vector<float> cpu() const {
    const int d = heads * e;
    std::vector<float> out(static_cast<std::size_t>(queries * d));
    for (index_t a = 0; a < queries; ++a) {
      const std::int64_t b0 = first[static_cast<std::size_t>(a)], b1e = first[static_cast<std::size_t>(a) + 1];
      const std::int64_t count = b1e - b0;
      if (count == 0) continue;
      const double denom = fixed > 0 ? static_cast<double>(fixed) : static_cast<double>(tau * static_cast<float>(count) + 1e-8f);
      std::vector<float> pi(static_cast<std::size_t>(count * e));
      std::vector<double> logit(static_cast<std::size_t>(count * heads));
      for (std::int64_t j = 0; j < count; ++j) {
        const std::int64_t key = keys[static_cast<std::size_t>(b0 + j)];
        const float dl[3] = {pq[a * 3] - pk[key * 3], pq[a * 3 + 1] - pk[key * 3 + 1], pq[a * 3 + 2] - pk[key * 3 + 2]};
        float h[3];
        for (int o = 0; o < 3; ++o) {
          double s = b1[static_cast<std::size_t>(o)];
          for (int i = 0; i < 3; ++i) s += static_cast<double>(w1[static_cast<std::size_t>(o * 3 + i)]) * static_cast<double>(dl[i]);
          h[o] = static_cast<float>(s);
          h[o] = static_cast<float>(static_cast<double>(h[o]) * scale[static_cast<std::size_t>(o)] + static_cast<double>(shift[static_cast<std::size_t>(o)]));
        }
        const double h0 = std::max(h[0], 0.0f), h1 = std::max(h[1], 0.0f), h2 = std::max(h[2], 0.0f);
        for (int c = 0; c < e; ++c)
          pi[static_cast<std::size_t>(j * e + c)] = static_cast<float>(b3[static_cast<std::size_t>(c)] + w3[static_cast<std::size_t>(c)] * h0 +
                                                                       w3[static_cast<std::size_t>(e + c)] * h1 + w3[static_cast<std::size_t>(2 * e + c)] * h2);
        for (int hd = 0; hd < heads; ++hd) {
          double s[4] = {0, 0, 0, 0};
          int c = 0;
          const float* qa = q.data() + a * d + hd * e;
          const float* kk = k.data() + key * d + hd * e;
          const float* pj = pi.data() + j * e;
          for (; c + 4 <= e; c += 4)
            for (int t = 0; t < 4; ++t) s[t] += static_cast<double>(qa[c + t]) * static_cast<double>(kk[c + t]) + static_cast<double>(pj[c + t]);
          for (; c < e; ++c) s[0] += static_cast<double>(qa[c]) * static_cast<double>(kk[c]) + static_cast<double>(pj[c]);
          logit[static_cast<std::size_t>(j * heads + hd)] = ((s[0] + s[1]) + (s[2] + s[3])) / denom;
        }
      }
      for (int hd = 0; hd < heads; ++hd) {
        double mx = -INFINITY, sum = 0;
        for (std::int64_t j = 0; j < count; ++j) mx = std::max(mx, logit[static_cast<std::size_t>(j * heads + hd)]);
        std::vector<double> w(static_cast<std::size_t>(count));
        for (std::int64_t j = 0; j < count; ++j) sum += (w[static_cast<std::size_t>(j)] = std::exp(logit[static_cast<std::size_t>(j * heads + hd)] - mx));
        std::vector<double> acc(static_cast<std::size_t>(e), 0.0);
        for (std::int64_t j = 0; j < count; ++j) {
          const double alpha = w[static_cast<std::size_t>(j)] / sum;
          const float* vv = v.data() + keys[static_cast<std::size_t>(b0 + j)] * d + hd * e;
          for (int c = 0; c < e; ++c)
            acc[static_cast<std::size_t>(c)] += alpha * (static_cast<double>(vv[c]) + static_cast<double>(pi[static_cast<std::size_t>(j * e + c)]));
        }
        for (int c = 0; c < e; ++c) out[static_cast<std::size_t>(a * d + hd * e + c)] = static_cast<float>(acc[static_cast<std::size_t>(c)]);
      }
    }
    return out;
  }
};

class GpuTreeAttention : public ::testing::TestWithParam<std::tuple<int, int, float>> {};

TEST_P(GpuTreeAttention, IsTheCpuArithmetic) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const auto [heads, e, fixed] = GetParam();
  const Problem p(heads, e, fixed, static_cast<std::uint32_t>(heads * 100 + e));
  const index_t d = static_cast<index_t>(heads) * e;
  auto q = to_device(p.q), k = to_device(p.k), v = to_device(p.v), pq = to_device(p.pq), pk = to_device(p.pk);
  auto w1 = to_device(p.w1), b1 = to_device(p.b1), scale = to_device(p.scale), shift = to_device(p.shift);
  auto w3 = to_device(p.w3), b3 = to_device(p.b3);
  auto first = to_device(p.first), keys = to_device(p.keys);
  auto out = to_device(std::vector<float>(static_cast<std::size_t>(p.queries * d), 7.0f));
  cu::TreeAttentionArgs a;
  a.queries = p.queries;
  a.heads = heads;
  a.e = e;
  a.q = q.data();
  a.ldq = d;
  a.k = k.data();
  a.v = v.data();
  a.ldkv = d;
  a.query_positions = pq.data();
  a.key_positions = pk.data();
  a.first = first.data();
  a.keys = keys.data();
  a.pe_w1 = w1.data();
  a.pe_b1 = b1.data();
  a.bn_scale = scale.data();
  a.bn_shift = shift.data();
  a.pe_w3 = w3.data();
  a.pe_b3 = b3.data();
  a.tau = p.tau;
  a.fixed_denom = p.fixed;
  a.out = out.data();
  a.ldo = d;
  auto scratch = to_device(std::vector<double>(static_cast<std::size_t>(p.queries * d), 0.0));
  if (e > cu::kMaxTreeHeadDim) a.scratch = scratch.data();
  cu::tree_attention(a, nullptr);
  const std::vector<float> got = to_host(out.data(), static_cast<std::size_t>(p.queries * d)), want = p.cpu();
  float top = 0;
  for (const float x : want) top = std::max(top, std::fabs(x));
  const float tolerance = surrogate::testing::on_host_backend() ? 0.0f : 2 * top * 0x1p-24f;
  for (std::size_t i = 0; i < want.size(); ++i) ASSERT_LE(std::fabs(got[i] - want[i]), tolerance) << "element " << i;
}

INSTANTIATE_TEST_SUITE_P(Widths, GpuTreeAttention,
                         ::testing::Values(std::make_tuple(4, 8, 0.0f), std::make_tuple(2, 3, 0.0f),
                                           std::make_tuple(1, 37, 0.0f), std::make_tuple(3, 8, 4.0f),
                                           std::make_tuple(2, 80, 0.0f), std::make_tuple(1, 256, 4.0f)));

TEST(GpuTreeAttentionArgs, AWideHeadWithoutScratchIsRefused) {
  SURROGATE_SKIP_WITHOUT_GPU();
  cu::TreeAttentionArgs a;
  a.queries = 1;
  a.heads = 1;
  a.e = cu::kMaxTreeHeadDim + 1;
  EXPECT_THROW(cu::tree_attention(a, nullptr), std::invalid_argument);
}

}  // namespace
