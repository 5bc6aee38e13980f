// Builds the kernel table of one instruction set. Included once by each isa_*.cpp, which defines
// SURROGATE_ISA_NS, SURROGATE_ISA_ENUM and the register blocking before including it.
#pragma once

#include "ball_distance_impl.hpp"
#include "bucket_impl.hpp"
#include "latent_impl.hpp"
#include "linear_impl.hpp"
#include "linear64_impl.hpp"
#include "norm_impl.hpp"
#include "top_keys_impl.hpp"
#include "ring_attention_impl.hpp"
#include "transpose_impl.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

inline void exp_map(const float* x, float* y, index_t n) {
  using namespace simd;
  index_t i = 0;
  for (; i + W <= n; i += W) store(y + i, simd::exp(load(x + i)));
  for (; i < n; ++i) {
    float lanes[W] = {};
    lanes[0] = x[i];
    y[i] = simd::exp(load(lanes))[0];
  }
}

inline void exp_f64_map(const double* x, double* y, index_t n) {
  using namespace simd;
  index_t i = 0;
  for (; i + WD <= n; i += WD) stored(y + i, simd::exp(loadd(x + i)));
  for (; i < n; ++i) {
    double lanes[WD] = {};
    lanes[0] = x[i];
    y[i] = simd::exp(loadd(lanes))[0];
  }
}

inline void tanh_map(const float* x, float* y, index_t n) {
  using namespace simd;
  index_t i = 0;
  for (; i + W <= n; i += W) store(y + i, simd::tanh(load(x + i)));
  for (; i < n; ++i) {
    float lanes[W] = {};
    lanes[0] = x[i];
    y[i] = simd::tanh(load(lanes))[0];
  }
}

inline void erf_map(const float* x, float* y, index_t n) {
  using namespace simd;
  index_t i = 0;
  for (; i + W <= n; i += W) store(y + i, simd::erf(load(x + i)));
  for (; i < n; ++i) {
    float lanes[W] = {};
    lanes[0] = x[i];
    y[i] = simd::erf(load(lanes))[0];
  }
}

inline void activation_map(Activation act, const float* x, float* y, index_t n) {
  using namespace simd;
  index_t i = 0;
  for (; i + W <= n; i += W) store(y + i, apply_activation(act, load(x + i)));
  for (; i < n; ++i) {
    float lanes[W] = {};
    lanes[0] = x[i];
    y[i] = apply_activation(act, load(lanes))[0];
  }
}

inline CpuKernels make_table() {
  CpuKernels t;
  t.isa = SURROGATE_ISA_ENUM;
  t.simd_width = simd::W;
  t.linear = &linear;
  t.norm = &norm;
  t.latent_encode = &latent_encode;
  t.latent_decode = &latent_decode;
  t.latent_max = &latent_max;
  t.latent_encode_exact = &latent_encode_exact;
  t.ball_attention = &ball_attention;
  t.ball_distances = &ball_distances;
  t.top_keys = &top_keys;
  t.ring_attention = &ring_attention;
  t.transpose = &transpose;
  t.gaussian_bucket = &gaussian_bucket;
  t.gaussian_bucket_f64 = &gaussian_bucket_f64;
  t.linear_f64 = &linear_f64;
  t.exp = &exp_map;
  t.exp_f64 = &exp_f64_map;
  t.tanh = &tanh_map;
  t.erf = &erf_map;
  t.activation = &activation_map;
  return t;
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
