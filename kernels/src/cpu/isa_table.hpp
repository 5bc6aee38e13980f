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

/// The element-wise maps of the table, named as its entries.
namespace maps {
inline void exp(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::exp(v); });
}
inline void softmax_exp(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::exp_nonpositive(v); });
}
inline void exp_f64(const double* x, double* y, index_t n) {
  map_lanes<simd::vd>(x, y, n, [](simd::vd v) { return simd::exp(v); });
}
inline void tanh(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::tanh(v); });
}
inline void tanh_f64(const double* x, double* y, index_t n) {
  map_lanes<simd::vd>(x, y, n, [](simd::vd v) { return simd::tanh_f64(v); });
}
inline void erf(const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [](simd::vf v) { return simd::erf(v); });
}
inline void activation(Activation act, const float* x, float* y, index_t n) {
  map_lanes<simd::vf>(x, y, n, [act](simd::vf v) { return apply_activation(act, v); });
}
}  // namespace maps

/// Where make_table finds entry `name` of SURROGATE_CPU_KERNELS: the kernel of the *_impl.hpp headers
/// (this namespace) or the map above (the same name and signature in both would not compile).
namespace entries {
using namespace SURROGATE_ISA_NS;
using namespace maps;
}  // namespace entries

inline CpuKernels make_table() {
  CpuKernels t;
  t.isa = SURROGATE_ISA_ENUM;
  t.simd_width = simd::W;
#define SURROGATE_CPU_KERNEL_ENTRY(name, parameters) t.name = &entries::name;
  SURROGATE_CPU_KERNELS(SURROGATE_CPU_KERNEL_ENTRY)
#undef SURROGATE_CPU_KERNEL_ENTRY
  return t;
}

}  // namespace surrogate::kernels::SURROGATE_ISA_NS
