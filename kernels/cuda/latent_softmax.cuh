// Device helpers shared by the latent encode and decode kernels: the logit (one FMA chain in e order),
// exp split into mantissa and power of two (the CPU kernels' softmax_exp_parts: same reduction, polynomial),
// and the online softmax with a power-of-two reference that both directions use.
//
// The online softmax keeps its sums relative to 2^ref, ref the largest k = round(l log2 e) seen so far.
// A term is mantissa(l) * 2^(k(l) - ref): its bits depend only on the logit and on ref, and raising ref
// rescales what is already summed by an exact power of two. The encode accumulates in double, so partial
// sums over any split of the points merge exactly (up to double rounding of the additions); the decode
// accumulates in float (a softmax over the M latents of one point).
#pragma once

#include <cstdint>
#include <type_traits>

#include "launch.cuh"
#include "surrogate/kernels/cpu.hpp"  // kNoExponent

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace detail {

/// Smallest supported maximal head width for E: the kernels are instantiated for 4, 8, 16, 32 and 64.
constexpr int head_dim_bucket(int E) { return E <= 4 ? 4 : E <= 8 ? 8 : E <= 16 ? 16 : E <= 32 ? 32 : 64; }

/// The one head-width dispatch of every attention kernel: calls f(std::integral_constant<int, kMaxE>{})
/// with kMaxE = head_dim_bucket(E) (host code; the caller checks E against its own limit first).
template <class F>
void dispatch_head_width(int E, F&& f) {
  switch (head_dim_bucket(E)) {
    case 4: f(std::integral_constant<int, 4>{}); break;
    case 8: f(std::integral_constant<int, 8>{}); break;
    case 16: f(std::integral_constant<int, 16>{}); break;
    case 32: f(std::integral_constant<int, 32>{}); break;
    default: f(std::integral_constant<int, 64>{}); break;
  }
}

/// l = sum_e q[e] k[e], one fused multiply-add chain in e order (bitwise the same wherever it runs).
template <int kMaxE>
__device__ __forceinline__ float logit(const float* q, const float* k, int E) {
  float l = 0.0f;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) l = fmaf(q[e], k[e], l);
  return l;
}

/// exp(x) = mantissa * 2^k with k = round(x log2 e) and mantissa in [0.7, 1.42]: the CPU kernels'
/// softmax_exp_parts (simd.hpp), f = x log2 e - k in one fma and 2^f by the same degree-5 polynomial, within
/// (3.3 + 0.225 |x|) 2^-24 relative. |x| is clamped to 2^20 first, which keeps the rounding trick exact
/// (|x log2 e| < 2^22); 2^k is not formed, so nothing overflows.
struct ExpParts {
  float mantissa;
  int k;
};
__device__ __forceinline__ ExpParts exp_parts(float x) {
  x = fminf(fmaxf(x, -1048576.0f), 1048576.0f);
  // x log2 e + 1.5 * 2^23 lies in [2^23, 2^24), where the float spacing is 1: it is rounded to an integer
  // and that integer sits in the low mantissa bits (no float-to-int conversion needed).
  const float shifted = fmaf(x, 1.44269504088896341f, 12582912.0f);
  const float kf = shifted - 12582912.0f;
  const int k = __float_as_int(shifted) - 0x4B400000;
  const float f = fmaf(x, 1.44269504088896341f, -kf);
  float p = 1.365022617e-3f;
  p = fmaf(p, f, 9.684677236e-3f);
  p = fmaf(p, f, 5.549710989e-2f);
  p = fmaf(p, f, 2.402191758e-1f);
  p = fmaf(p, f, 6.931474209e-1f);
  p = fmaf(p, f, 1.00000011920928955f);
  return {p, k};
}

/// mantissa * 2^shift for shift <= 0 (an exponent-field addition, exact); 0 below 2^-125 (the result
/// would leave the normal range). mantissa must be in [0.5, 2).
__device__ __forceinline__ float scale_down(float mantissa, int shift) {
  return shift < -125 ? 0.0f : __int_as_float(__float_as_int(mantissa) + shift * (1 << 23));
}

/// exp(x) for x <= 0: 0 below about -86.6 (2^-125).
__device__ __forceinline__ float exp_nonpositive(float x) {
  const ExpParts p = exp_parts(x);
  return scale_down(p.mantissa, p.k);
}

/// 2^x on the special-function unit (ex2.approx.ftz.f32: within 2 ulp, results below 2^-126 flushed to 0,
/// 2^-inf = 0): one instruction where exp_parts takes a dozen; the host backend rounds exp2f the same way.
__device__ __forceinline__ float exp2_sfu(float x) {
#if defined(SURROGATE_CUDA_HOST_BACKEND)
  return surrogate_ex2_approx_ftz(x);
#else
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
#endif
}

/// 2^d for d <= 0, exactly; 0 when it would be subnormal.
template <class T> __device__ __forceinline__ T pow2_nonpositive(int d);
template <> __device__ __forceinline__ float pow2_nonpositive<float>(int d) {
  return d < -126 ? 0.0f : __int_as_float((127 + d) * (1 << 23));
}
template <> __device__ __forceinline__ double pow2_nonpositive<double>(int d) {
  return d < -1022 ? 0.0 : __longlong_as_double(static_cast<long long>(1023 + d) << 52);
}

/// The exact factor that moves sums kept relative to 2^from onto the reference 2^to (from <= to):
/// 2^(from - to); 0 for an empty partial (from == kNoExponent, whose sums are 0) and below the normal
/// range. The one rebasing rule of the online softmax: raising the reference inside Pow2Softmax, merging
/// the partials of a segment, and moving a rank's sums to the global reference all use it.
template <class Acc>
__device__ __forceinline__ Acc rebase_factor(int from, int to) {
  return from == kNoExponent ? Acc(0) : pow2_nonpositive<Acc>(from - to);
}

__device__ __forceinline__ float madd(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double madd(double a, double b, double c) { return fma(a, b, c); }

/// Online softmax-weighted sum with a power-of-two reference: after add() over a set of (logit, value)
/// pairs, sum = sum_n 2^(l_n log2 e - ref) and acc[e] = sum_n 2^(l_n log2 e - ref) v_ne, with
/// ref = max_n round(l_n log2 e) (kNoExponent before the first term). Acc is double (encode) or float
/// (decode). A float term times a float value is exact in double.
template <class Acc, int kMaxE>
struct Pow2Softmax {
  int ref;
  Acc sum;
  Acc acc[kMaxE];

  __device__ __forceinline__ void reset() {
    ref = kNoExponent;
    sum = Acc(0);
#pragma unroll
    for (int e = 0; e < kMaxE; ++e) acc[e] = Acc(0);
  }

  /// Moves the sums to the reference 2^new_ref (new_ref >= ref), exactly.
  __device__ __forceinline__ void rebase(int new_ref) {
    const Acc s = rebase_factor<Acc>(ref, new_ref);
    sum *= s;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e) acc[e] *= s;
    ref = new_ref;
  }

  /// The term of `logit` relative to 2^ref, after raising ref (and rescaling the sums) if needed.
  __device__ __forceinline__ float term(float l) {
    const ExpParts p = exp_parts(l);
    if (p.k > ref) rebase(p.k);
    return scale_down(p.mantissa, p.k - ref);
  }

  template <class V>
  __device__ __forceinline__ void add(float l, const V* v, int E) {
    const Acc t = static_cast<Acc>(term(l));
    sum += t;
#pragma unroll
    for (int e = 0; e < kMaxE; ++e)
      if (e < E) acc[e] = madd(t, static_cast<Acc>(v[e]), acc[e]);
  }
};

}  // namespace detail
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
