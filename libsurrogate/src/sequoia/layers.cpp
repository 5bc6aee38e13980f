// Sequoia's CPU layers (layers.hpp; share/docs/sequoia.md, "Forward").
#include "layers.hpp"

#include <algorithm>
#include <cmath>

namespace surrogate::sequoia {

Dense::Dense(const ModelFile& f, const std::string& prefix, bool bias) {
  const Tensor32& t = f.weight(prefix + ".weight");
  out = static_cast<int>(t.shape[0]);
  in = static_cast<int>(t.shape[1]);
  w = t.values;
  if (bias) b = f.weight(prefix + ".bias").values;
  packed = kernels::PackedLinear(w.data(), bias ? b.data() : nullptr, out, in);
}

void Dense::apply(const float* x, float* y) const {
  for (int o = 0; o < out; ++o) {
    const float* wo = w.data() + static_cast<std::size_t>(o) * static_cast<std::size_t>(in);
    double s = b.empty() ? 0.0 : static_cast<double>(b[static_cast<std::size_t>(o)]);
    for (int i = 0; i < in; ++i) s += static_cast<double>(wo[i]) * static_cast<double>(x[i]);
    y[o] = static_cast<float>(s);
  }
}

Rows Dense::apply(const Rows& x) const {
  Rows y(x.rows, out, Rows::Uninitialised{});
  apply(x, y);
  return y;
}

void Dense::apply(const Rows& x, Rows& y) const {
  y.reshape(x.rows, out);
  const kernels::CpuKernels& k = kernels::cpu();
  constexpr std::int64_t kChunk = 64;
  const std::int64_t ld = packed.out_pad();
  const bool direct = ld == out;  // no padding: the kernel writes the rows in place
#pragma omp parallel if (x.rows > kChunk)  // one chunk: no region
  {
    kernels::AlignedBuffer<float> buffer(direct ? 0 : static_cast<std::size_t>(kChunk * ld));
#pragma omp for schedule(static)
    for (std::int64_t r0 = 0; r0 < x.rows; r0 += kChunk) {
      kernels::LinearArgs a;
      a.layer = &packed;
      a.x = x.row(r0);
      a.ldx = x.cols;
      a.y = direct ? y.row(r0) : buffer.data();
      a.ldy = ld;
      a.rows = std::min(kChunk, x.rows - r0);
      k.linear(a);
      if (!direct)
        for (std::int64_t r = 0; r < a.rows; ++r) std::copy_n(buffer.data() + r * ld, out, y.row(r0 + r));
    }
  }
}

BatchNorm::BatchNorm(const ModelFile& f, const std::string& p) {
  const auto& w = f.weight(p + ".weight").values;
  const auto& b = f.weight(p + ".bias").values;
  const auto& mean = f.weight(p + ".running_mean").values;
  const auto& var = f.weight(p + ".running_var").values;
  scale.resize(w.size());
  shift.resize(w.size());
  for (std::size_t c = 0; c < w.size(); ++c) {
    const double s = static_cast<double>(w[c]) / std::sqrt(static_cast<double>(var[c]) + 1e-5);
    scale[c] = static_cast<float>(s);
    shift[c] = static_cast<float>(static_cast<double>(b[c]) - static_cast<double>(mean[c]) * s);
  }
}

void BatchNorm::apply(float* x) const {
  for (std::size_t c = 0; c < scale.size(); ++c)
    x[c] = static_cast<float>(static_cast<double>(x[c]) * scale[c] + static_cast<double>(shift[c]));
}

void BatchNorm::apply(Rows& x, bool relu) const {
#pragma omp parallel for schedule(static) if (x.rows * x.cols > kSerialWork)
  for (std::int64_t r = 0; r < x.rows; ++r) {
    float* row = x.row(r);
    apply(row);
    if (relu)
      for (int c = 0; c < x.cols; ++c) row[c] = std::max(row[c], 0.0f);
  }
}

PositionalMlp::PositionalMlp(const ModelFile& f, const std::string& p)
    : first(f, p + ".pe_mlp.0", true), last(f, p + ".pe_mlp.3", true), norm(f, p + ".pe_mlp.1") {
  const auto e = static_cast<std::size_t>(last.out);
  w3.resize(3 * e);
  b3.resize(e);
  for (std::size_t c = 0; c < e; ++c) {
    b3[c] = static_cast<double>(last.b[c]);
    for (std::size_t t = 0; t < 3; ++t) w3[t * e + c] = static_cast<double>(last.w[c * 3 + t]);
  }
}

void PositionalMlp::apply(const float delta[3], float* out) const {
  float h[3];
  first.apply(delta, h);
  norm.apply(h);
  const double h0 = std::max(h[0], 0.0f), h1 = std::max(h[1], 0.0f), h2 = std::max(h[2], 0.0f);
  const auto e = static_cast<std::size_t>(last.out);
  const double *w0 = w3.data(), *w1 = w0 + e, *w2 = w1 + e;
  for (std::size_t c = 0; c < e; ++c) out[c] = static_cast<float>(b3[c] + w0[c] * h0 + w1[c] * h1 + w2[c] * h2);
}

namespace {

/// sum_c (q_c k_c + pi_c) over one head's e channels in double, four interleaved partial sums (a fixed
/// order: the same result on every machine and thread count).
double head_logit(const double* q, const float* k, const float* pi, int e) {
  double s[4] = {0.0, 0.0, 0.0, 0.0};
  int c = 0;
  for (; c + 4 <= e; c += 4)
    for (int t = 0; t < 4; ++t) s[t] += q[c + t] * static_cast<double>(k[c + t]) + static_cast<double>(pi[c + t]);
  for (; c < e; ++c) s[0] += q[c] * static_cast<double>(k[c]) + static_cast<double>(pi[c]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

void prefetch_row(const float* row, int count) {
  for (int c = 0; c < count; c += 16) __builtin_prefetch(row + c);  // one 64-byte line per 16 floats
}

}  // namespace

Rows tree_attention(const Rows& q, const Rows& k, const Rows& v, const std::vector<float>& query_positions,
                    const std::vector<float>& key_positions, const KeyLists& lists, const PositionalMlp& pe,
                    int heads, float tau, float fixed_denom) {
  const std::int64_t n = q.rows;
  const int d = q.cols, e = d / heads;
  Rows out(n, d, Rows::Uninitialised{});
#pragma omp parallel if (static_cast<std::int64_t>(lists.keys.size()) * d > kSerialWork)
  {
    std::vector<float> pi;
    std::vector<double> logit, acc(static_cast<std::size_t>(d)), qd(static_cast<std::size_t>(d));
#pragma omp for schedule(dynamic, 64)
    for (std::int64_t a = 0; a < n; ++a) {
      const std::int64_t b0 = lists.first[static_cast<std::size_t>(a)], b1 = lists.first[static_cast<std::size_t>(a) + 1];
      const std::int64_t count = b1 - b0;
      if (count == 0) {  // no keys: 0
        std::fill_n(out.row(a), d, 0.0f);
        continue;
      }
      const double denom = fixed_denom > 0 ? static_cast<double>(fixed_denom)
                                           : static_cast<double>(tau * static_cast<float>(count) + 1e-8f);
      pi.resize(static_cast<std::size_t>(count * e));
      logit.resize(static_cast<std::size_t>(count * heads));
      const float* pa = &query_positions[static_cast<std::size_t>(a) * 3];
      const float* qa = q.row(a);
      for (int c = 0; c < d; ++c) qd[static_cast<std::size_t>(c)] = static_cast<double>(qa[c]);
      for (std::int64_t j = 0; j < count; ++j) {
        const std::int64_t key = lists.keys[static_cast<std::size_t>(b0 + j)];
        // The key rows are gathered from anywhere in the level: fetch the next key's k row and this
        // key's v row (read by the value sums below) while this edge computes.
        if (j + 1 < count) prefetch_row(k.row(lists.keys[static_cast<std::size_t>(b0 + j + 1)]), d);
        prefetch_row(v.row(key), d);
        const float* pk = &key_positions[static_cast<std::size_t>(key) * 3];
        const float delta[3] = {pa[0] - pk[0], pa[1] - pk[1], pa[2] - pk[2]};
        float* pij = &pi[static_cast<std::size_t>(j * e)];
        pe.apply(delta, pij);
        const float* kk = k.row(key);
        for (int h = 0; h < heads; ++h)
          logit[static_cast<std::size_t>(j * heads + h)] = head_logit(qd.data() + h * e, kk + h * e, pij, e) / denom;
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int h = 0; h < heads; ++h) {
        double mx = -INFINITY;
        for (std::int64_t j = 0; j < count; ++j) mx = std::max(mx, logit[static_cast<std::size_t>(j * heads + h)]);
        double sum = 0.0;
        for (std::int64_t j = 0; j < count; ++j) {
          double& l = logit[static_cast<std::size_t>(j * heads + h)];
          l = std::exp(l - mx);
          sum += l;
        }
        double* acch = acc.data() + h * e;
        for (std::int64_t j = 0; j < count; ++j) {
          const double alpha = logit[static_cast<std::size_t>(j * heads + h)] / sum;
          const float* vv = v.row(lists.keys[static_cast<std::size_t>(b0 + j)]) + h * e;
          const float* pij = &pi[static_cast<std::size_t>(j * e)];
          for (int c = 0; c < e; ++c) acch[c] += alpha * (static_cast<double>(vv[c]) + static_cast<double>(pij[c]));
        }
      }
      float* o = out.row(a);
      for (int c = 0; c < d; ++c) o[c] = static_cast<float>(acc[static_cast<std::size_t>(c)]);
    }
  }
  return out;
}

}  // namespace surrogate::sequoia
