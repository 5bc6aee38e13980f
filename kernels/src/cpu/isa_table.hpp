// Builds the kernel table of one instruction set. Included once by each isa_*.cpp, which defines
// SURROGATE_ISA_NS, SURROGATE_ISA_ENUM and the register blocking before including it.
#pragma once

#include <cstring>

#include "ball_distance_impl.hpp"
#include "bucket_impl.hpp"
#include "latent_exact_impl.hpp"
#include "latent_impl.hpp"
#include "linear_impl.hpp"
#include "linear64_impl.hpp"
#include "norm_impl.hpp"
#include "top_keys_impl.hpp"
#include "ring_attention_impl.hpp"
#include "transpose_impl.hpp"
#include "tree_attention_impl.hpp"

namespace surrogate::kernels::SURROGATE_ISA_NS {

/// y[i] = f(x[i]) for n values, a vector V at a time; the tail through one zero-padded vector (lane 0).
template <class V, class T, class F>
inline void map_lanes(const T* x, T* y, index_t n, F f) {
  constexpr index_t kLanes = static_cast<index_t>(sizeof(V) / sizeof(T));
  index_t i = 0;
  V v;
  for (; i + kLanes <= n; i += kLanes) {
    std::memcpy(&v, x + i, sizeof v);
    v = f(v);
    std::memcpy(y + i, &v, sizeof v);
  }
  for (; i < n; ++i) {
    T lanes[kLanes] = {};
    lanes[0] = x[i];
    std::memcpy(&v, lanes, sizeof v);
    y[i] = f(v)[0];
  }
}

inline void exp_map(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::exp(v); });
}
inline void softmax_exp_map(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::exp_nonpositive(v); });
}
inline void exp_f64_map(const double* x, double* y, index_t n) {
  map_lanes<simd::vd>(x, y, n, [](simd::vd v) { return simd::exp(v); });
}
inline void tanh_map(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::tanh(v); });
}
inline void tanh_f64_map(const double* x, double* y, index_t n) {
  map_lanes<simd::vd>(x, y, n, [](simd::vd v) { return simd::tanh_f64(v); });
}
inline void erf_map(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::erf(v); });
}
inline void activation_map(Activation act, const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [act](simd::vf v) { return apply_activation(act, v); });
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
  t.tree_attention = &tree_attention;
  t.exp = &exp_map;
  t.softmax_exp = &softmax_exp_map;
  t.exp_f64 = &exp_f64_map;
  t.tanh = &tanh_map;
  t.tanh_f64 = &tanh_f64_map;
  t.erf = &erf_map;
  t.activation = &activation_map;
  return t;
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
