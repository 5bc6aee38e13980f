// Launchers of BSA's element-wise steps (surrogate/kernels/cuda_bsa_gate.hpp); the device code is in
// bsa_gate_kernels.cuh. One thread per element, kThreads per block, a 1-D grid.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "bsa_gate_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_bsa_gate.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN

void row_map(const RowMapArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, row_map(a, stream));
  if (a.rows == 0 || a.width == 0) return;
  if (a.rows < 0 || a.width < 0 || a.ld < a.width)
    throw std::invalid_argument("cuda::row_map: need rows, width >= 0 and ld >= width (width " +
                                std::to_string(a.width) + ", ld " + std::to_string(a.ld) + ")");
  launch(bsa_kernels::row_map_kernel, blocks_for("row_map", a.rows * a.width, bsa_kernels::kThreads), bsa_kernels::kThreads, 0, stream, a);
  check_launch("row_map_kernel");
}

void gated_sum(const GatedSumArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, gated_sum(a, stream));
  const index_t width = static_cast<index_t>(a.heads) * a.E;
  if (a.rows == 0 || width == 0) return;
  if (a.rows < 0 || a.heads < 0 || a.E < 0 || a.ld < width || a.ldo < width ||
      (a.gates ? a.ld_gates < 3 * static_cast<index_t>(a.heads) : a.static_gates == nullptr))
    throw std::invalid_argument("cuda::gated_sum: need rows, heads, E >= 0, strides >= heads * E (" +
                                std::to_string(width) + "), and token gates (ld_gates >= 3 heads) or static gates");
  launch(bsa_kernels::gated_sum_kernel, blocks_for("gated_sum", a.rows * width, bsa_kernels::kThreads), bsa_kernels::kThreads, 0, stream, a);
  check_launch("gated_sum_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
