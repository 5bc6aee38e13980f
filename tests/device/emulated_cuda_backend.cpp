// Host versions of the CUDA backend's functions that the whole-forward emulation tests share; see
// emulated_cuda_backend.hpp. Compiled into each test executable, where they replace the library's.
#include "emulated_cuda_backend.hpp"  // first: replaces the CUDA keywords for the kernel sources below

#include "ball_attention_kernels.cuh"
#include "point_layers_kernels.cuh"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

int emulated_backend::launches = 0;
int emulated_backend::fail_after = 0;
long long emulated_backend::bytes_to_device = 0;
long long emulated_backend::bytes_to_host = 0;

// The CUDA runtime calls the device operators make directly.
extern "C" cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, cudaMemcpyKind) {
  if (count) std::memcpy(dst, src, count);
  return cudaSuccess;
}
extern "C" cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

namespace surrogate::kernels::cuda {

using emulated_backend::grid_for;
using emulated_backend::launches;
using emulated_backend::run_sequentially;

void check(cudaError_t code, const char* call) {
  if (code != cudaSuccess) throw CudaError(code, std::string(call) + ": emulated runtime error");
}
void check_launch(const char*) {}
int device_count(std::string*) noexcept { return 1; }
DeviceGuard::DeviceGuard(int device) : device_(device) {}
DeviceGuard::~DeviceGuard() = default;
void* device_alloc(std::size_t bytes, int) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw CudaError(cudaErrorMemoryAllocation, "emulated device_alloc");
  return p;
}
void device_free(void* p, int) noexcept { std::free(p); }
Stream::Stream(int device) : device_(device) {}
Stream::~Stream() = default;
void Stream::synchronize() const {}
void synchronize(cudaStream_t) {}
Event::Event(int device) : device_(device) {}
Event::~Event() = default;
void Event::record(cudaStream_t) {}
float Event::elapsed_ms_since(const Event&) const { return 0.0f; }
void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t) {
  emulated_backend::bytes_to_device += static_cast<long long>(bytes);
  std::memcpy(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, std::size_t bytes, cudaStream_t) {
  emulated_backend::bytes_to_host += static_cast<long long>(bytes);
  std::memcpy(dst, src, bytes);
}
void copy_on_device(void* dst, const void* src, std::size_t bytes, cudaStream_t) { std::memmove(dst, src, bytes); }

namespace {
/// Counts a launch; the one that brings fail_after to zero fails as a CUDA launch error would.
void count_launch() {
  ++launches;
  if (emulated_backend::fail_after > 0 && --emulated_backend::fail_after == 0)
    throw CudaError(cudaErrorLaunchFailure, "emulated launch failure");
}
}  // namespace

namespace pk = point_kernels;
void dense(const DenseArgs& a, cudaStream_t) {
  count_launch();
  run_sequentially(grid_for(a.rows * a.out, pk::kThreads), pk::kThreads, [&] { pk::dense_kernel(a); });
}
void copy_rows(const RowCopyArgs& a, cudaStream_t) {
  count_launch();
  run_sequentially(grid_for(a.rows * a.width, pk::kThreads), pk::kThreads, [&] { pk::copy_rows_kernel(a); });
}
void row_binary(const RowBinaryArgs& a, cudaStream_t) {
  count_launch();
  run_sequentially(grid_for(a.rows * a.width, pk::kThreads), pk::kThreads, [&] { pk::row_binary_kernel(a); });
}
void batch_norm(const BatchNormArgs& a, cudaStream_t) {
  count_launch();
  run_sequentially(grid_for(a.rows * a.dim, pk::kThreads), pk::kThreads, [&] { pk::batch_norm_kernel(a); });
}
void segment_mean(const SegmentMeanArgs& a, cudaStream_t) {
  count_launch();
  run_sequentially(grid_for(a.receivers * a.width, pk::kThreads), pk::kThreads, [&] { pk::segment_mean_kernel(a); });
}

namespace bk = ball_kernels;
void ball_attention(const BallAttentionLaunch& a, cudaStream_t) {
  count_launch();
  emulated_backend::with_head_dim(a.E, [&](auto width) {
    constexpr int kE = decltype(width)::value;
    run_sequentially(grid_for(a.rows, bk::kThreads, a.heads), bk::kThreads, [&] {  // grid.y = heads
      if (a.sigma) bk::ball_kernel<kE, true>(a);
      else bk::ball_kernel<kE, false>(a);
    });
  });
}

/// norm.cu's arithmetic per row: lane l sums channels l, l + 32, ...; the warp butterfly (xor 16 .. 1);
/// (x - mean) rstd weight [+ bias] per channel (the multiply-add fused, as nvcc contracts it).
void norm(const NormArgs& a, cudaStream_t) {
  count_launch();
  auto warp_sum = [](float (&v)[32]) {
    for (int offset = 16; offset >= 1; offset /= 2) {
      float next[32];
      for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ offset];
      std::copy(next, next + 32, v);
    }
    return v[0];
  };
  const float inv_dim = 1.0f / static_cast<float>(a.dim);
  for (index_t r = 0; r < a.rows; ++r) {
    const float* x = a.x + r * a.ldx;
    float* y = a.y + r * a.ldy;
    float lanes[32] = {};
    float mean = 0.0f;
    if (!a.rms) {
      for (int c = 0; c < a.dim; ++c) lanes[c % 32] += x[c];
      mean = warp_sum(lanes) * inv_dim;
    }
    float squares[32] = {};
    for (int c = 0; c < a.dim; ++c) {
      const float d = x[c] - mean;
      squares[c % 32] = std::fma(d, d, squares[c % 32]);
    }
    const float rstd = 1.0f / std::sqrt(warp_sum(squares) * inv_dim + a.eps);
    for (int c = 0; c < a.dim; ++c) {
      const float scaled = (x[c] - mean) * rstd;
      y[c] = a.bias ? std::fma(scaled, a.weight[c], a.bias[c]) : scaled * a.weight[c];
    }
  }
}

}  // namespace surrogate::kernels::cuda
