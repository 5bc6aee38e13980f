// ReLU and max that keep NaN, as PyTorch's relu, max and amax do. std::max(0.0f, x), fmaxf and
// `x > 0 ? x : 0` all turn a NaN x into a number, which hides a broken input or weight behind a plausible
// prediction (share/docs/reliability.md, promise 7): every ReLU and every max over model values, on the
// CPU, on the device and in the host backend, goes through these two.
#pragma once

#if defined(__CUDACC__)
#define SURROGATE_NAN_KEEPING __host__ __device__ __forceinline__
#else
#define SURROGATE_NAN_KEEPING inline
#endif

namespace surrogate::kernels {

/// max(x, 0) with NaN kept and -0 kept (what std::max(x, 0.0f) gives, and torch.relu).
template <class T>
SURROGATE_NAN_KEEPING constexpr T relu_keep_nan(T x) {
  return x < T(0) ? T(0) : x;
}

/// The larger of a and b; NaN when either is NaN (torch.maximum), a when they are equal.
template <class T>
SURROGATE_NAN_KEEPING constexpr T max_keep_nan(T a, T b) {
  return (a < b || b != b) ? b : a;
}

}  // namespace surrogate::kernels
