// Sequoia's CPU layers (layers.hpp; share/docs/sequoia.md, "Forward").
#include "layers.hpp"

#include <algorithm>
#include <cmath>

#include "../layers.hpp"
#include "surrogate/kernels/nan_keeping.hpp"
#include "surrogate/kernels/tree_attention.hpp"

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

void Dense::apply_rows(const float* x, std::int64_t ldx, float* y, std::int64_t ldy, std::int64_t n) const {
  kernels::cpu().linear({.layer = &packed, .x = x, .ldx = ldx, .y = y, .ldy = ldy, .rows = n});
}

void Dense::apply(const Rows& x, Rows& y) const {
  y.reshape(x.rows, out);
  constexpr std::int64_t kChunk = 64;
  const std::int64_t ld = packed.out_pad();
  const bool direct = ld == out;  // no padding: the kernel writes the rows in place
#pragma omp parallel if (x.rows > kChunk)  // one chunk: no region
  {
    kernels::AlignedBuffer<float> buffer(direct ? 0 : static_cast<std::size_t>(kChunk * ld));
#pragma omp for schedule(static)
    for (std::int64_t r0 = 0; r0 < x.rows; r0 += kChunk) {
      const std::int64_t n = std::min(kChunk, x.rows - r0);
      apply_rows(x.row(r0), x.cols, direct ? y.row(r0) : buffer.data(), ld, n);
      if (!direct)
        for (std::int64_t r = 0; r < n; ++r) std::copy_n(buffer.data() + r * ld, out, y.row(r0 + r));
    }
  }
}

BatchNorm::BatchNorm(const ModelFile& f, const std::string& p) {
  const auto& w = f.weight(p + ".weight").values;
  const auto& b = f.weight(p + ".bias").values;
  const auto& mean = f.weight(p + ".running_mean").values;
  const auto& var = batch_norm_variance(f, p);
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
      for (int c = 0; c < x.cols; ++c) row[c] = kernels::relu_keep_nan(row[c]);
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

Rows tree_attention(const Rows& q, const Rows& k, const Rows& v, const std::vector<float>& query_positions,
                    const std::vector<float>& key_positions, const KeyLists& lists, const PositionalMlp& pe,
                    int heads, float tau, float fixed_denom) {
  const std::int64_t n = q.rows;
  const int d = q.cols, e = d / heads;
  Rows out(n, d, Rows::Uninitialised{});
  kernels::TreeAttentionArgs args;
  args.heads = heads;
  args.e = e;
  args.ldq = q.cols;
  args.k = k.row(0);
  args.v = v.row(0);
  args.ldkv = k.cols;
  args.key_positions = key_positions.data();
  args.keys = lists.keys.data();
  args.pe_w1 = pe.first.w.data();
  args.pe_b1 = pe.first.b.data();
  args.bn_scale = pe.norm.scale.data();
  args.bn_shift = pe.norm.shift.data();
  args.pe_w3 = pe.w3.data();
  args.pe_b3 = pe.b3.data();
  args.tau = tau;
  args.fixed_denom = fixed_denom;
  args.ldo = d;
  const kernels::CpuKernels& kern = kernels::cpu();
  constexpr std::int64_t kChunk = 64;  // queries per kernel call
#pragma omp parallel if (static_cast<std::int64_t>(lists.keys.size()) * d > kSerialWork)
  {
    std::vector<double> scratch;
#pragma omp for schedule(dynamic)
    for (std::int64_t a0 = 0; a0 < n; a0 += kChunk) {
      kernels::TreeAttentionArgs chunk = args;
      chunk.queries = std::min(kChunk, n - a0);
      std::int64_t most = 0;
      for (std::int64_t a = a0; a < a0 + chunk.queries; ++a)
        most = std::max(most, lists.first[static_cast<std::size_t>(a) + 1] - lists.first[static_cast<std::size_t>(a)]);
      scratch.resize(static_cast<std::size_t>(kernels::tree_attention_scratch(heads, e, most)));
      chunk.q = q.row(a0);
      chunk.query_positions = query_positions.data() + a0 * 3;
      chunk.first = lists.first.data() + a0;
      chunk.out = out.row(a0);
      chunk.scratch = scratch.data();
      kern.tree_attention(chunk);
    }
  }
  return out;
}

}  // namespace surrogate::sequoia
