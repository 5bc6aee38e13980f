#include "precision_emulation.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace surrogate::testing {
namespace {

std::uint32_t bits_of(float x) {
  std::uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  return u;
}

float float_of(std::uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

using Round = float (*)(float);

/// The device's activation (kernels/cuda/activation.cuh) in float: the GPU's arithmetic, independent of
/// the CPU kernels' vectorised forms.
float device_activation(kernels::Activation act, float v) {
  switch (act) {
    case kernels::Activation::gelu_tanh: {
      const float u2 = v * (1.5957691216057308f + 0.071354816272600250f * (v * v));
      return v / (1.0f + std::exp(std::fmin(-u2, 80.0f)));
    }
    case kernels::Activation::silu: return v / (1.0f + std::exp(std::fmin(-v, 80.0f)));
    case kernels::Activation::gelu_erf: return 0.5f * v * (1.0f + std::erf(v * 0.70710678118654752440f));
    case kernels::Activation::relu: return v < 0.0f ? 0.0f : v;
    case kernels::Activation::none: break;
  }
  return v;
}

template <Round R>
void emulated_linear(const kernels::LinearArgs& a) {
  const kernels::PackedLinear& L = *a.layer;
  const int in = L.in(), out_pad = L.out_pad();
  const float* wt = L.wt();
  const float* bias = L.bias();
  std::vector<float> w(static_cast<std::size_t>(in) * out_pad), x(static_cast<std::size_t>(in)),
      y(static_cast<std::size_t>(out_pad));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = R(wt[i]);
  for (kernels::index_t r = 0; r < a.rows; ++r) {
    for (int i = 0; i < in; ++i) x[static_cast<std::size_t>(i)] = R(a.x[r * a.ldx + i]);
    for (int o = 0; o < out_pad; ++o) {
      float acc = 0.0f;
      for (int i = 0; i < in; ++i) acc = std::fma(x[static_cast<std::size_t>(i)], w[static_cast<std::size_t>(i) * out_pad + o], acc);
      y[static_cast<std::size_t>(o)] = acc + bias[o];
    }
    for (int o = 0; o < out_pad; ++o) {
      float v = device_activation(a.act, y[static_cast<std::size_t>(o)]);
      if (a.add1) v += a.add1[r * a.ld_add1 + o];
      if (a.add2) v += a.add2[r * a.ld_add2 + o];
      a.y[r * a.ldy + o] = v;
    }
  }
}

/// The latent decode of the tensor-core kernels (kernels/cuda/latent_decode.cu; with latent_bias, the
/// global S2 attention of sphere_attention.cu): keys and latent queries rounded, logits accumulated in FP32
/// in e order (then the latent's bias added), FP32 softmax statistics, the weights and the values rounded
/// for their product, accumulated in FP32. The per-row bias form and S2 heads wider than 64 (no tensor-core
/// path: kernels::cuda::kSphereRegisterHeadDim) run the CPU kernel.
template <Round R>
void emulated_latent_decode(const kernels::LatentDecodeArgs& a) {
  if (a.bias || (a.latent_bias && a.E > 64)) return kernels::cpu(kernels::best_cpu_isa())->latent_decode(a);
  const int M = a.M, E = a.E;
  const kernels::index_t ldq = a.ldq ? a.ldq : E, ldz = a.ldz ? a.ldz : E;
  std::vector<float> logit(static_cast<std::size_t>(M)), acc(static_cast<std::size_t>(E));
  for (kernels::index_t r = 0; r < a.rows; ++r) {
    float top = -INFINITY;
    for (int m = 0; m < M; ++m) {
      float l = 0.0f;
      for (int e = 0; e < E; ++e) l = std::fma(R(a.q[m * ldq + e]), R(a.k[r * a.ldk + e] * a.k_scale), l);
      if (a.latent_bias) l += a.latent_bias[m];
      logit[static_cast<std::size_t>(m)] = l;
      top = std::fmax(top, l);
    }
    float sum = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int m = 0; m < M; ++m) {
      const float w = std::exp(logit[static_cast<std::size_t>(m)] - top);
      sum += w;
      for (int e = 0; e < E; ++e) acc[static_cast<std::size_t>(e)] = std::fma(R(w), R(a.z[m * ldz + e]), acc[static_cast<std::size_t>(e)]);
    }
    for (int e = 0; e < E; ++e) a.y[r * a.ldy + e] = acc[static_cast<std::size_t>(e)] / sum;
  }
}

/// The default-mode latent encode of the tensor-core kernel (kernels/cuda/latent_encode.cu) over this
/// call's rows as one chunk: queries and keys rounded, logits in FP32, the FP32 running sum of
/// exp(l - max) and the rounded weights times the rounded values summed in FP32; the chunk's partial then
/// joins the running sums in their power-of-two form (reference round(max log2 e)), exactly as the
/// device merges its chunks. BSA's selecting form runs the CPU kernel.
template <Round R>
void emulated_latent_encode(const kernels::LatentEncodeArgs& a) {
  if (a.select_S > 0 || a.rows == 0) return kernels::cpu(kernels::best_cpu_isa())->latent_encode(a);
  const int M = a.M, E = a.E;
  std::vector<float> logit(static_cast<std::size_t>(a.rows)), acc(static_cast<std::size_t>(E));
  for (int m = 0; m < M; ++m) {
    float top = -INFINITY;
    for (kernels::index_t r = 0; r < a.rows; ++r) {
      float l = 0.0f;
      for (int e = 0; e < E; ++e) l = std::fma(R(a.q[m * E + e]), R(a.k[r * a.ldk + e]), l);
      logit[static_cast<std::size_t>(r)] = l;
      top = std::fmax(top, l);
    }
    float sum = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (kernels::index_t r = 0; r < a.rows; ++r) {
      const float w = std::exp(logit[static_cast<std::size_t>(r)] - top);
      sum += w;
      for (int e = 0; e < E; ++e) acc[static_cast<std::size_t>(e)] = std::fma(R(w), R(a.v[r * a.ldv + e]), acc[static_cast<std::size_t>(e)]);
    }
    // The partial relative to 2^ref: exp(top) = 2^(top log2 e) = f 2^ref with ref the rounded exponent.
    const double t2 = static_cast<double>(top) * 1.4426950408889634;
    const auto ref = static_cast<std::int32_t>(std::nearbyint(t2));
    const double f = std::exp2(t2 - ref);
    std::int32_t& into = a.ref_exp[m];
    const std::int32_t joint = into == kernels::kNoExponent ? ref : std::max(into, ref);
    const double old_scale = into == kernels::kNoExponent ? 0.0 : std::ldexp(1.0, into - joint);
    const double new_scale = f * std::ldexp(1.0, ref - joint);
    a.sum[m] = a.sum[m] * old_scale + sum * new_scale;
    for (int e = 0; e < E; ++e)
      a.weighted[m * E + e] = a.weighted[m * E + e] * old_scale + acc[static_cast<std::size_t>(e)] * new_scale;
    into = joint;
  }
}

/// The ball attention of the tensor-core kernel (kernels/cuda/ball_attention.cu), one ball: the scaled query
/// (one float multiply) and the keys rounded, logits accumulated in FP32 in e order, the distance bias added
/// with one fused multiply-add, FP32 softmax statistics, the weights and the values rounded for their
/// product, accumulated in FP32.
template <Round R>
void emulated_ball_attention(const kernels::BallAttentionArgs& a) {
  const int m = a.m, E = a.E;
  std::vector<float> logit(static_cast<std::size_t>(m)), acc(static_cast<std::size_t>(E));
  for (int h = 0; h < a.heads; ++h)
    for (int i = 0; i < m; ++i) {
      const float* q = a.q + i * a.ld + h * E;
      float top = -INFINITY;
      for (int j = 0; j < m; ++j) {
        const float* k = a.k + j * a.ld + h * E;
        float l = 0.0f;
        for (int e = 0; e < E; ++e) l = std::fma(R(q[e] * a.scale), R(k[e]), l);
        if (a.sigma) l = std::fma(a.sigma[h], a.bias[i * a.ld_bias + j], l);
        logit[static_cast<std::size_t>(j)] = l;
        top = std::fmax(top, l);
      }
      float sum = 0.0f;
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int j = 0; j < m; ++j) {
        const float w = std::exp(logit[static_cast<std::size_t>(j)] - top);
        sum += w;
        const float* v = a.v + j * a.ld + h * E;
        for (int e = 0; e < E; ++e) acc[static_cast<std::size_t>(e)] = std::fma(R(w), R(v[e]), acc[static_cast<std::size_t>(e)]);
      }
      for (int e = 0; e < E; ++e) a.out[i * a.ldo + h * E + e] = acc[static_cast<std::size_t>(e)] / sum;
    }
}

/// HEPT's bucket attention of the tensor-core kernel (kernels/cuda/bucket_attention.cu), one bucket: q̂ and k̂
/// rounded, logits accumulated in FP32 in t order, then (l + (-|q̂|^2/2)) + (-|k̂|^2/2) and min(0, .) in FP32
/// with the half squares FP32 sums in t order, exp, the weights and the values rounded for their product,
/// accumulated in FP32; the denominator the FP32 sum of the weights + 1e-20.
template <Round R>
void emulated_gaussian_bucket(const kernels::GaussianBucketArgs& a) {
  const int m = a.m;
  std::vector<float> ksq(static_cast<std::size_t>(m)), acc(static_cast<std::size_t>(a.dv));
  for (int j = 0; j < m; ++j) {
    const float* k = a.k + a.krow[j] * a.ldk;
    float s = 0.0f;
    for (int t = 0; t < a.dh; ++t) s = std::fma(k[t], k[t], s);
    ksq[static_cast<std::size_t>(j)] = -0.5f * s;
  }
  for (int i = 0; i < m; ++i) {
    const float* q = a.q + a.qrow[i] * a.ldq;
    float s = 0.0f;
    for (int t = 0; t < a.dh; ++t) s = std::fma(q[t], q[t], s);
    const float qsq = -0.5f * s;
    float total = 0.0f;
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int j = 0; j < m; ++j) {
      const float* k = a.k + a.krow[j] * a.ldk;
      float l = 0.0f;
      for (int t = 0; t < a.dh; ++t) l = std::fma(R(q[t]), R(k[t]), l);
      const float w = std::exp(std::min((l + qsq) + ksq[static_cast<std::size_t>(j)], 0.0f));
      total += w;
      const float* v = a.v + a.krow[j] * a.ldv;
      for (int d = 0; d < a.dv; ++d) acc[static_cast<std::size_t>(d)] = std::fma(R(w), R(v[d]), acc[static_cast<std::size_t>(d)]);
    }
    for (int d = 0; d < a.dv; ++d) a.num[static_cast<std::size_t>(i) * a.dv + d] = acc[static_cast<std::size_t>(d)];
    a.den[i] = total + 1e-20f;
  }
}

template <Round R>
kernels::CpuKernels emulated(EmulatedKernels which) {
  kernels::CpuKernels k = *kernels::cpu(kernels::best_cpu_isa());
  k.linear = &emulated_linear<R>;
  if (which == EmulatedKernels::linear_and_attention) {
    k.latent_encode = &emulated_latent_encode<R>;
    k.latent_decode = &emulated_latent_decode<R>;
    k.ball_attention = &emulated_ball_attention<R>;
    k.gaussian_bucket = &emulated_gaussian_bucket<R>;
  }
  return k;
}

}  // namespace

float round_to_bf16(float x) {
  const std::uint32_t u = bits_of(x);
  if (std::isnan(x)) return float_of((u | 0x00400000u) & 0xffff0000u);
  const std::uint32_t lsb = (u >> 16) & 1u;
  return float_of((u + 0x7fffu + lsb) & 0xffff0000u);
}

float round_to_tf32(float x) {
  if (!std::isfinite(x)) return x;
  const std::uint32_t u = bits_of(x);
  return float_of((u + 0x1000u) & 0xffffe000u);  // add half of the dropped 13 bits' unit: ties away
}

const kernels::CpuKernels& emulated_cpu_kernels(Precision precision, EmulatedKernels which) {
  static const kernels::CpuKernels fp32 = *kernels::cpu(kernels::best_cpu_isa());
  static const kernels::CpuKernels tf32[2] = {emulated<&round_to_tf32>(EmulatedKernels::linear_and_attention),
                                              emulated<&round_to_tf32>(EmulatedKernels::linear)};
  static const kernels::CpuKernels bf16[2] = {emulated<&round_to_bf16>(EmulatedKernels::linear_and_attention),
                                              emulated<&round_to_bf16>(EmulatedKernels::linear)};
  const int i = which == EmulatedKernels::linear ? 1 : 0;
  switch (precision) {
    case Precision::tf32: return tf32[i];
    case Precision::bf16: return bf16[i];
    case Precision::fp32:
    case Precision::fp64: break;
  }
  return fp32;
}

ScopedPrecisionEmulation::ScopedPrecisionEmulation(Precision precision, EmulatedKernels which) {
  kernels::replace_cpu_kernels(&emulated_cpu_kernels(precision, which));
}

ScopedPrecisionEmulation::~ScopedPrecisionEmulation() { kernels::replace_cpu_kernels(nullptr); }

}  // namespace surrogate::testing
