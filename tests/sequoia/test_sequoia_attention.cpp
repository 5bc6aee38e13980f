// Sequoia's tree attention (libsurrogate/src/sequoia/layers.hpp, a CPU kernel of its own: per-edge
// positional terms in logits and values do not fit the shared streaming-softmax primitive) against a
// naive long-double evaluation of its definition (share/docs/sequoia.md, "Tree attention"): variable key
// counts (none, one, repeated keys), the count-dependent and the fixed denominator, several heads.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "sequoia/layers.hpp"

namespace sq = surrogate::sequoia;

namespace {

surrogate::Tensor32 tensor(std::vector<std::int64_t> shape, std::mt19937& gen, double scale, double shift = 0.0) {
  surrogate::Tensor32 t;
  t.shape = std::move(shape);
  std::int64_t n = 1;
  for (const auto s : t.shape) n *= s;
  std::normal_distribution<double> normal;
  for (std::int64_t i = 0; i < n; ++i) t.values.push_back(static_cast<float>(shift + scale * normal(gen)));
  return t;
}

struct Setup {
  surrogate::ModelFile file;
  sq::PositionalMlp pe;
  int heads = 3, e = 4;
};

Setup make_pe(std::mt19937& gen) {
  Setup s;
  const std::string p = "pe.pe_mlp.";
  s.file.weights[p + "0.weight"] = tensor({3, 3}, gen, 0.8);
  s.file.weights[p + "0.bias"] = tensor({3}, gen, 0.1);
  s.file.weights[p + "1.weight"] = tensor({3}, gen, 0.2, 1.0);
  s.file.weights[p + "1.bias"] = tensor({3}, gen, 0.1);
  s.file.weights[p + "1.running_mean"] = tensor({3}, gen, 0.1);
  auto var = tensor({3}, gen, 0.1, 1.0);
  for (float& v : var.values) v = std::abs(v);
  s.file.weights[p + "1.running_var"] = var;
  s.file.weights[p + "3.weight"] = tensor({s.e, 3}, gen, 0.6);
  s.file.weights[p + "3.bias"] = tensor({s.e}, gen, 0.1);
  s.pe = sq::PositionalMlp(s.file, "pe");
  return s;
}

/// pe(delta) in long double, from the tensors.
std::vector<long double> naive_pe(const surrogate::ModelFile& f, const float d[3], int e) {
  auto w = [&](const char* k) { return f.weights.at(std::string("pe.pe_mlp.") + k).values; };
  const auto w0 = w("0.weight"), b0 = w("0.bias"), g = w("1.weight"), b = w("1.bias"), m = w("1.running_mean"),
             v = w("1.running_var"), w3 = w("3.weight"), b3 = w("3.bias");
  long double h[3];
  for (int o = 0; o < 3; ++o) {
    long double s = b0[static_cast<std::size_t>(o)];
    for (int i = 0; i < 3; ++i) s += static_cast<long double>(w0[static_cast<std::size_t>(o * 3 + i)]) * d[i];
    const auto oo = static_cast<std::size_t>(o);
    s = (s - m[oo]) / std::sqrt(static_cast<long double>(v[oo]) + 1e-5L) * g[oo] + b[oo];
    h[o] = s > 0 ? s : 0;
  }
  std::vector<long double> out(static_cast<std::size_t>(e));
  for (int o = 0; o < e; ++o) {
    long double s = b3[static_cast<std::size_t>(o)];
    for (int i = 0; i < 3; ++i) s += static_cast<long double>(w3[static_cast<std::size_t>(o * 3 + i)]) * h[i];
    out[static_cast<std::size_t>(o)] = s;
  }
  return out;
}

void check(float fixed_denom) {
  std::mt19937 gen(7);
  const Setup s = make_pe(gen);
  const int d = s.heads * s.e;
  const std::int64_t nq = 9, nk = 6;
  sq::Rows q(nq, d), k(nk, d), v(nk, d);
  std::normal_distribution<float> normal;
  for (auto* r : {&q, &k, &v})
    for (float& x : r->v) x = 2.0f * normal(gen);
  std::vector<float> pq(static_cast<std::size_t>(nq * 3)), pk(static_cast<std::size_t>(nk * 3));
  for (float& x : pq) x = normal(gen);
  for (float& x : pk) x = normal(gen);
  // Query a gets a % 5 keys (query 0 and 5: none), with repeats.
  sq::KeyLists lists;
  lists.first.push_back(0);
  for (std::int64_t a = 0; a < nq; ++a) {
    for (std::int64_t j = 0; j < a % 5; ++j) lists.keys.push_back((a * 3 + j * j) % nk);
    lists.first.push_back(static_cast<std::int64_t>(lists.keys.size()));
  }
  const float tau = std::sqrt(8.0f);
  const sq::Rows out = sq::tree_attention(q, k, v, pq, pk, lists, s.pe, s.heads, tau, fixed_denom);
  for (std::int64_t a = 0; a < nq; ++a) {
    const auto b0 = lists.first[static_cast<std::size_t>(a)], c = lists.first[static_cast<std::size_t>(a) + 1] - b0;
    const long double denom = fixed_denom > 0 ? fixed_denom : static_cast<long double>(tau) * c + 1e-8L;
    for (int h = 0; h < s.heads; ++h) {
      std::vector<long double> logit, weight;
      std::vector<std::vector<long double>> pes;
      for (std::int64_t j = 0; j < c; ++j) {
        const std::int64_t key = lists.keys[static_cast<std::size_t>(b0 + j)];
        const float delta[3] = {pq[static_cast<std::size_t>(a * 3)] - pk[static_cast<std::size_t>(key * 3)],
                                pq[static_cast<std::size_t>(a * 3 + 1)] - pk[static_cast<std::size_t>(key * 3 + 1)],
                                pq[static_cast<std::size_t>(a * 3 + 2)] - pk[static_cast<std::size_t>(key * 3 + 2)]};
        pes.push_back(naive_pe(s.file, delta, s.e));
        long double l = 0;
        for (int t = 0; t < s.e; ++t)
          l += (static_cast<long double>(q.row(a)[h * s.e + t]) * k.row(key)[h * s.e + t] + pes.back()[static_cast<std::size_t>(t)]) / denom;
        logit.push_back(l);
      }
      long double mx = -INFINITY, sum = 0;
      for (const auto l : logit) mx = std::max(mx, l);
      for (const auto l : logit) sum += std::exp(l - mx);
      for (int t = 0; t < s.e; ++t) {
        long double y = 0;
        for (std::int64_t j = 0; j < c; ++j) {
          const std::int64_t key = lists.keys[static_cast<std::size_t>(b0 + j)];
          y += std::exp(logit[static_cast<std::size_t>(j)] - mx) / sum *
               (v.row(key)[h * s.e + t] + pes[static_cast<std::size_t>(j)][static_cast<std::size_t>(t)]);
        }
        // float32 operands, double sums: a few float32 ulps of the values' magnitude (~5).
        EXPECT_NEAR(out.row(a)[h * s.e + t], static_cast<double>(y), 4e-6) << "query " << a << " head " << h;
        if (c == 0) {
          EXPECT_EQ(out.row(a)[h * s.e + t], 0.0f);
        }
      }
    }
  }
}

TEST(SequoiaTreeAttention, CountDenominatorAgainstNaive) { check(0.0f); }
TEST(SequoiaTreeAttention, FixedDenominatorAgainstNaive) { check(std::sqrt(8.0f) * 16 + 1e-8f); }

}  // namespace
