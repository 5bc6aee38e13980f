// CUDA kernels of BSA's element-wise steps (CUDA builds only): the ReLU of the compression MLPs, the
// sigmoid of the token gate, and the gated sum of the three attention branches. Used by the BSA device
// forward (libsurrogate/src/bsa/bsa_cuda.cpp); the device code is in kernels/cuda/bsa_gate_kernels.cuh.
//
// Layout: device buffers, row-major, any row stride >= the row's width. One thread per element. Every
// launcher enqueues on the given stream and returns at once; invalid sizes throw std::invalid_argument
// before anything is enqueued.
//
// The device code also runs on the CPU in tests/bsa/test_bsa_device_emulated.cpp (status: share/docs/cuda.md).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t

namespace surrogate::kernels::cuda {

/// x[r, c] = f(x[r, c]) for c < width: relu (x < 0 ? 0 : x, as std::max(x, 0.0f)), sigmoid
/// (1 / (1 + exp(-x)), the device's expf) or tanh (in double, rounded once; HEPT's head).
enum class RowMap : std::uint8_t { relu, sigmoid, tanh };
struct RowMapArgs {
  RowMap op = RowMap::relu;
  float* x = nullptr;
  index_t ld = 0;
  index_t rows = 0;
  int width = 0;
};
void row_map(const RowMapArgs& a, cudaStream_t stream);

/// BSA's gate: out[r, h E + e] = g_local local + g_coarse coarse + g_fine fine (three products, each
/// rounded, summed left to right) for h < heads, e < E. Token gate: gates[r * ld_gates + 3 h + {0, 1, 2}]
/// (after the sigmoid); static gate (gates == nullptr): g_local = 1 and static_gates[2 h + {0, 1}].
/// out may equal local.
struct GatedSumArgs {
  const float* local = nullptr;
  const float* coarse = nullptr;
  const float* fine = nullptr;
  index_t ld = 0;  // row stride of local, coarse and fine
  float* out = nullptr;
  index_t ldo = 0;
  index_t rows = 0;
  int heads = 0, E = 0;
  const float* gates = nullptr;
  index_t ld_gates = 0;
  const float* static_gates = nullptr;
};
void gated_sum(const GatedSumArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
