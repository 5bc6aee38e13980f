// The device code of BSA's element-wise steps (bsa_gate.cu has the launchers; see
// surrogate/kernels/cuda_bsa_gate.hpp). In a header of its own so that the host emulation
// (tests/gpu/test_bsa_device_emulated.cpp) runs exactly this code on the CPU: one thread per element, no
// shared memory, no synchronisation; intrinsics __fmul_rn and expf only.
#pragma once

#include <cstdint>

#include "launch.cuh"
#include "surrogate/kernels/cuda_bsa_gate.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace bsa_kernels {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) row_map_kernel(RowMapArgs a) {
  const index_t t = flat_index();
  if (t >= a.rows * a.width) return;
  const index_t r = t / a.width;
  float* x = a.x + r * a.ld + (t - r * a.width);
  const float v = *x;
  switch (a.op) {
    case RowMap::relu: *x = relu_keep_nan(v); break;
    case RowMap::sigmoid: *x = 1.0f / (1.0f + expf(-v)); break;
    case RowMap::tanh: *x = static_cast<float>(tanh(static_cast<double>(v))); break;
  }
}

__global__ void __launch_bounds__(kThreads) gated_sum_kernel(GatedSumArgs a) {
  const index_t width = static_cast<index_t>(a.heads) * a.E;
  const index_t t = flat_index();
  if (t >= a.rows * width) return;
  const index_t r = t / width;
  const index_t c = t - r * width;
  const index_t h = c / a.E;
  float g0 = 1.0f, g1, g2;
  if (a.gates) {
    const float* g = a.gates + r * a.ld_gates + 3 * h;
    g0 = g[0];
    g1 = g[1];
    g2 = g[2];
  } else {
    g1 = a.static_gates[2 * h];
    g2 = a.static_gates[2 * h + 1];
  }
  const index_t i = r * a.ld + c;
  a.out[r * a.ldo + c] = __fmul_rn(g0, a.local[i]) + __fmul_rn(g1, a.coarse[i]) + __fmul_rn(g2, a.fine[i]);
}

}  // namespace bsa_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
