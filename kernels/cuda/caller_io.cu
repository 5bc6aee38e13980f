// The caller's arrays on the device (device-resident predict): gather + normalise the inputs into the
// working order (optionally finding the first row whose value of one channel is outside a range),
// de-normalise + scatter the outputs into the caller's strided array. The arithmetic is
// that of the host path (Surrogate::predict, Model::predict): the value is rounded to float, normalised
// in double, rounded to float; outputs are de-normalised in double from the float result, rounded to
// float and then converted to the caller's type. The double operations are spelled with the _rn
// intrinsics so that nvcc cannot contract them into an FMA the host code does not use: the result is
// bitwise that of host arrays.
#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kIoThreads = 256;

template <class Real>
__global__ void __launch_bounds__(kIoThreads) gather_kernel(CallerInput a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kIoThreads + threadIdx.x;
  if (i >= a.rows * a.channels) return;
  const index_t row = i / a.channels;
  const int c = static_cast<int>(i - row * a.channels);
  const index_t src_row = a.order ? a.order[row] : row;
  const Real* in = static_cast<const Real*>(a.data);
  const float f = static_cast<float>(in[src_row * a.point_stride + static_cast<index_t>(c) * a.component_stride]);
  if (!isfinite(f)) atomicAdd(a.bad + c, 1ull);
  double v = f;
  if (a.mean) v = __ddiv_rn(__dsub_rn(v, a.mean[c]), a.std[c]);
  const float w = static_cast<float>(v);
  a.work[row * a.ld_work + c] = w;
  if (c == a.range_channel && !(w > a.range_lo && w < a.range_hi))
    atomicMax(a.outside, static_cast<unsigned long long>(a.rows - row));
}

template <class Real>
__global__ void __launch_bounds__(kIoThreads) scatter_kernel(CallerOutput a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kIoThreads + threadIdx.x;
  if (i >= a.rows * a.channels) return;
  const index_t row = i / a.channels;
  const int c = static_cast<int>(i - row * a.channels);
  const index_t dst_row = a.order ? a.order[row] : row;
  double v = a.work[row * a.ld_work + c];
  if (a.mean) v = __dadd_rn(__dmul_rn(v, a.std[c]), a.mean[c]);  // no FMA contraction: as the host
  const float f = static_cast<float>(v);
  if (a.bad && !isfinite(f)) atomicAdd(a.bad + c, 1ull);
  Real* out = static_cast<Real*>(a.data);
  out[dst_row * a.point_stride + static_cast<index_t>(c) * a.component_stride] = static_cast<Real>(f);
}

unsigned grid_for(index_t n) { return static_cast<unsigned>((n + kIoThreads - 1) / kIoThreads); }

}  // namespace

void gather_caller_input(const CallerInput& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, gather_caller_input(a, stream));
  if (a.rows <= 0 || a.channels <= 0) return;
  const index_t n = a.rows * a.channels;
  if (a.is_double)
    launch(gather_kernel<double>, grid_for(n), kIoThreads, 0, stream, a);
  else
    launch(gather_kernel<float>, grid_for(n), kIoThreads, 0, stream, a);
  check_launch("gather_kernel");
}

void scatter_caller_output(const CallerOutput& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, scatter_caller_output(a, stream));
  if (a.rows <= 0 || a.channels <= 0) return;
  const index_t n = a.rows * a.channels;
  if (a.is_double)
    launch(scatter_kernel<double>, grid_for(n), kIoThreads, 0, stream, a);
  else
    launch(scatter_kernel<float>, grid_for(n), kIoThreads, 0, stream, a);
  check_launch("scatter_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
