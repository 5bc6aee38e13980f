// Sequoia's weight loading and whole-matrix tree attention (layers.hpp; share/docs/sequoia.md, "Forward").
#include "layers.hpp"

#include <algorithm>
#include <cmath>

#include "../layers.hpp"

namespace surrogate::sequoia {

kernels::PackedLinear pack_dense(const ModelFile& f, const std::string& prefix, bool bias) {
  const Tensor32& t = f.weight(prefix + ".weight");
  const auto out = static_cast<int>(t.shape[0]), in = static_cast<int>(t.shape[1]);
  return {t.values.data(), bias ? f.weight(prefix + ".bias").values.data() : nullptr, out, in};
}

ops::BatchNorm<std::vector<float>> fold_batch_norm(const ModelFile& f, const std::string& p) {
  const auto& w = f.weight(p + ".weight").values;
  const auto& b = f.weight(p + ".bias").values;
  const auto& mean = f.weight(p + ".running_mean").values;
  const auto& var = batch_norm_variance(f, p);
  std::vector<float> alpha, beta;
  for (std::size_t c = 0; c < w.size(); ++c) {
    const double s = static_cast<double>(w[c]) / std::sqrt(static_cast<double>(var[c]) + 1e-5);
    alpha.push_back(static_cast<float>(s));
    beta.push_back(static_cast<float>(static_cast<double>(b[c]) - static_cast<double>(mean[c]) * s));
  }
  return {std::move(alpha), std::move(beta)};
}

PositionalMlp::PositionalMlp(const ModelFile& f, const std::string& p) {
  const std::string m = p + ".pe_mlp.";
  w1 = f.weight(m + "0.weight").values;
  b1 = f.weight(m + "0.bias").values;
  bn = fold_batch_norm(f, m + "1");
  const Tensor32& last = f.weight(m + "3.weight");
  const auto& bias = f.weight(m + "3.bias").values;
  const auto e = static_cast<std::size_t>(last.shape[0]);
  w3.resize(3 * e);
  b3.resize(e);
  for (std::size_t c = 0; c < e; ++c) {
    b3[c] = static_cast<double>(bias[c]);
    for (std::size_t t = 0; t < 3; ++t) w3[t * e + c] = static_cast<double>(last.values[c * 3 + t]);
  }
}

Rows tree_attention(const Rows& q, const Rows& k, const Rows& v, const std::vector<float>& query_positions,
                    const std::vector<float>& key_positions, const KeyLists& lists, const PositionalMlp& pe,
                    int heads, float tau, float fixed_denom) {
  const std::int64_t n = q.rows;
  Rows out(n, q.cols, Rows::Uninitialised{});
  const auto host = [](const float* data, int width, std::int64_t rows) {
    return ops::view(data, width, rows, width, ops::Place::host);
  };
  ops::HostOps ops(kernels::cpu());
  ops.tree_attention({&pe, heads, host(q.v.data(), q.cols, n), host(k.v.data(), k.cols, k.rows),
                      host(v.v.data(), v.cols, v.rows), host(query_positions.data(), 3, n),
                      host(key_positions.data(), 3, k.rows), lists.first.data(), lists.keys.data(), tau, fixed_denom,
                      {out.v.data(), out.cols, n, out.cols, ops::Place::host}});
  return out;
}

}  // namespace surrogate::sequoia
