// A tree attention problem (surrogate/kernels/tree_attention.hpp) and its definition written out as plain
// loops, for the CPU kernel's test (test_tree_attention.cpp) and the CUDA kernel's (test_gpu_tree_attention.cpp).
// Key lists of 0 (a query without keys), 1, 2, 16, 30 and 5 keys with repeats.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::testing {

using kernels::index_t;

struct TreeAttentionProblem {
  int heads, e;
  index_t queries = 6, key_rows = 40;
  std::vector<float> q, k, v, pq, pk, w1, b1, scale, shift;
  std::vector<double> w3, b3;
  std::vector<std::int64_t> first, keys;
  float tau = 5.5f, fixed = 0.0f;

  /// `cancelling` adds a seventh query (q = 0) over 30 more key rows at one position, whose values
  /// alternate between +-2^60 (1 + m 2^-10), m odd: equal weights 1/30, each weighted value rounded, the
  /// pairs cancelling to exactly 0, where a fused multiply-add leaves its rounding errors (about 2^7).
  TreeAttentionProblem(int heads_, int e_, float fixed_denom, std::uint32_t seed, bool cancelling = false)
      : heads(heads_), e(e_), fixed(fixed_denom) {
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
    if (!cancelling) return;
    const float big = 0x1p60f;
    q.resize(q.size() + static_cast<std::size_t>(d), 0.0f);
    pq.insert(pq.end(), {0.5f, -0.25f, 0.75f});
    for (int j = 0; j < 30; ++j) {
      for (index_t c = 0; c < d; ++c) {
        k.push_back(unit(gen));
        v.push_back((j % 2 ? -big : big) * (1.0f + 0x1p-10f * static_cast<float>(2 * (c % 7) + 1)));
      }
      pk.insert(pk.end(), {0.125f, 0.5f, -0.375f});
      keys.push_back(key_rows + j);
    }
    first.push_back(static_cast<std::int64_t>(keys.size()));
    key_rows += 30;
    ++queries;
  }

  /// The definition (tree_attention.hpp) as plain loops, in its order and roundings.
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

}  // namespace surrogate::testing
