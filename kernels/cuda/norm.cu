// LayerNorm / RMSNorm over the channels of each row, one warp per row; and buffer fills.
#include "launch.cuh"
#include "row_norm.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kNormThreads = 256;  // 8 rows per block

__global__ void __launch_bounds__(kNormThreads) norm_kernel(NormArgs a) {
  const index_t row = (static_cast<index_t>(blockIdx.x) * kNormThreads + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (row >= a.rows) return;  // uniform over the warp
  row_norm::apply(a.x + row * a.ldx, a.y + row * a.ldy, a.dim, a.weight, a.bias, a.eps, a.rms, lane);
}

template <class T>
__global__ void fill_kernel(T* dst, std::size_t n, T value) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    dst[i] = value;
}

template <class T>
void fill_impl(T* dst, std::size_t n, T value, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, fill(dst, n, value, stream));
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::size_t>((n + 255) / 256, 4096));
  launch(fill_kernel<T>, blocks, 256, 0, stream, dst, n, value);
  check_launch("fill_kernel");
}

}  // namespace

void norm(const NormArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, norm(a, stream));
  if (a.rows <= 0) return;
  if (a.dim < 1) throw std::invalid_argument("cuda::norm: dim must be >= 1");
  constexpr index_t rows_per_block = kNormThreads / 32;
  const index_t blocks = (a.rows + rows_per_block - 1) / rows_per_block;
  launch(norm_kernel, static_cast<unsigned>(blocks), kNormThreads, 0, stream, a);
  check_launch("norm_kernel");
}

void fill(std::int32_t* dst, std::size_t n, std::int32_t value, cudaStream_t stream) { fill_impl(dst, n, value, stream); }
void fill(float* dst, std::size_t n, float value, cudaStream_t stream) { fill_impl(dst, n, value, stream); }

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
