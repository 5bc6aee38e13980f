// Sequoia's layers around the tree attention (surrogate/kernels/cuda_tree_layers.hpp): one thread per
// output value (per row for the LayerNorm), every product and sum rounded on its own in the CPU's order.
#include <string>

#include "launch.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_tree_layers.hpp"
#include "surrogate/kernels/nan_keeping.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) tree_norm_kernel(const TreeNormArgs a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.rows * a.dim) return;
  const index_t r = i / a.dim;
  const int c = static_cast<int>(i - r * a.dim);
  float* x = a.x + r * a.ld + c;
  const float y = static_cast<float>(__dadd_rn(__dmul_rn(static_cast<double>(*x), static_cast<double>(a.scale[c])),
                                               static_cast<double>(a.shift[c])));
  *x = a.relu ? relu_keep_nan(y) : y;
}

__global__ void __launch_bounds__(kThreads) tree_pool_kernel(const TreePoolArgs a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.parents * a.width) return;
  const index_t p = i / a.width;
  const int c = static_cast<int>(i - p * a.width);
  const std::int64_t b0 = a.first[p], b1 = a.first[p + 1];
  float m = 0.0f;
  for (std::int64_t j = b0; j < b1; ++j) {
    const float v = a.x[a.rows[j] * a.ldx + c];
    m = j == b0 ? v : max_keep_nan(m, v);
  }
  a.out[p * a.ldo + c] = m;
}

__global__ void __launch_bounds__(kThreads) tree_mix_kernel(const TreeMixArgs a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.rows * a.width) return;
  const index_t r = i / a.width;
  const int c = static_cast<int>(i - r * a.width);
  float s = a.a ? __fmul_rn(a.w[0], a.a[r * a.ld + c]) : 0.0f;
  if (a.b) s = __fadd_rn(s, __fmul_rn(a.w[1], a.b[r * a.ld + c]));
  if (a.s) s = __fadd_rn(s, __fmul_rn(a.w[2], a.s[r * a.ld + c]));
  a.out[r * a.ldo + c] = s;
}

__global__ void __launch_bounds__(kThreads) tree_layer_norm_relu_kernel(const TreeLayerNormArgs a) {
  const index_t r = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (r >= a.rows) return;
  float* x = a.x + r * a.ld;
  double mean = 0.0, var = 0.0;
  for (int c = 0; c < a.dim; ++c) mean = __dadd_rn(mean, static_cast<double>(x[c]));
  mean = __ddiv_rn(mean, static_cast<double>(a.dim));
  for (int c = 0; c < a.dim; ++c) {
    const double d = __dsub_rn(static_cast<double>(x[c]), mean);
    var = __dadd_rn(var, __dmul_rn(d, d));
  }
  const double inv = __ddiv_rn(1.0, sqrt(__dadd_rn(__ddiv_rn(var, static_cast<double>(a.dim)), a.eps)));
  for (int c = 0; c < a.dim; ++c) {
    const double t = __dmul_rn(__dmul_rn(__dsub_rn(static_cast<double>(x[c]), mean), inv), static_cast<double>(a.weight[c]));
    x[c] = relu_keep_nan(static_cast<float>(__dadd_rn(t, static_cast<double>(a.bias[c]))));
  }
}

__global__ void __launch_bounds__(kThreads) point_conv_max_kernel(const PointConvArgs a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.points * a.out) return;
  const index_t p = i / a.out;
  const int o = static_cast<int>(i - p * a.out);
  const float* w = a.w + static_cast<index_t>(o) * (a.c + 3);
  const float* pi = a.positions + p * 3;
  float m = 0.0f;
  for (int t = 0; t < a.k; ++t) {
    const std::int64_t j = a.keys[p * a.k + t];
    const float* xj = a.x + j * a.ldx;
    double s = static_cast<double>(a.b[o]);
    for (int q = 0; q < a.c; ++q) s = __dadd_rn(s, __dmul_rn(static_cast<double>(w[q]), static_cast<double>(xj[q])));
    for (int d = 0; d < 3; ++d)
      s = __dadd_rn(s, __dmul_rn(static_cast<double>(w[a.c + d]), static_cast<double>(__fadd_rn(a.positions[j * 3 + d], -pi[d]))));
    const float v = static_cast<float>(s);
    m = t == 0 ? v : max_keep_nan(m, v);
  }
  a.y[p * a.ldy + o] = m;
}

__global__ void __launch_bounds__(kThreads) tree_sums_kernel(const TreeSumsArgs a) {
  const index_t i = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= a.lists * a.width) return;
  const index_t l = i / a.width;
  const int c = static_cast<int>(i - l * a.width);
  const std::int64_t j0 = a.first[l], j1 = a.first[l + 1];
  double s = 0.0;
  for (std::int64_t j = j0; j < j1; ++j)
    s = __dadd_rn(s, a.x ? static_cast<double>(a.x[a.rows[j] * a.ldx + c]) : a.x64[a.rows[j] * a.ldx + c]);
  if (!a.means) {
    a.sums[l * a.width + c] = s;
    return;
  }
  const double count = a.counts ? a.counts[l] : static_cast<double>(j1 - j0);
  a.means[l * a.ldm + c] = static_cast<float>(__ddiv_rn(s, count));
}

}  // namespace

void tree_norm(const TreeNormArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, tree_norm(a, stream));
  if (a.rows == 0) return;
  require(a.rows > 0 && a.dim > 0 && a.ld >= a.dim && a.x && a.scale && a.shift, "tree_norm", "bad sizes or a null array");
  launch(tree_norm_kernel, blocks_for("tree_norm", a.rows * a.dim, kThreads), kThreads, 0, stream, a);
  check_launch("tree_norm_kernel");
}

void tree_pool(const TreePoolArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, tree_pool(a, stream));
  if (a.parents == 0) return;
  require(a.parents > 0 && a.width > 0 && a.ldx >= a.width && a.ldo >= a.width && a.x && a.first && a.rows && a.out,
          "tree_pool", "bad sizes or a null array");
  launch(tree_pool_kernel, blocks_for("tree_pool", a.parents * a.width, kThreads), kThreads, 0, stream, a);
  check_launch("tree_pool_kernel");
}

void tree_mix(const TreeMixArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, tree_mix(a, stream));
  if (a.rows == 0) return;
  require(a.rows > 0 && a.width > 0 && a.ld >= a.width && a.ldo >= a.width && a.out, "tree_mix", "bad sizes or a null array");
  launch(tree_mix_kernel, blocks_for("tree_mix", a.rows * a.width, kThreads), kThreads, 0, stream, a);
  check_launch("tree_mix_kernel");
}

void tree_layer_norm_relu(const TreeLayerNormArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, tree_layer_norm_relu(a, stream));
  if (a.rows == 0) return;
  require(a.rows > 0 && a.dim > 0 && a.ld >= a.dim && a.x && a.weight && a.bias, "tree_layer_norm_relu",
          "bad sizes or a null array");
  launch(tree_layer_norm_relu_kernel, blocks_for("tree_layer_norm_relu", a.rows, kThreads), kThreads, 0, stream, a);
  check_launch("tree_layer_norm_relu_kernel");
}

void point_conv_max(const PointConvArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, point_conv_max(a, stream));
  if (a.points == 0) return;
  require(a.points > 0 && a.c > 0 && a.k > 0 && a.out > 0 && a.ldx >= a.c && a.ldy >= a.out && a.x && a.positions &&
              a.keys && a.w && a.b && a.y,
          "point_conv_max", "bad sizes or a null array");
  launch(point_conv_max_kernel, blocks_for("point_conv_max", a.points * a.out, kThreads), kThreads, 0, stream, a);
  check_launch("point_conv_max_kernel");
}

void tree_sums(const TreeSumsArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, tree_sums(a, stream));
  if (a.lists == 0) return;
  require(a.lists > 0 && a.width > 0 && a.ldx >= a.width && (a.x || a.x64) && a.first && a.rows &&
              (a.means ? a.ldm >= a.width : a.sums != nullptr),
          "tree_sums", "bad sizes or a null array");
  launch(tree_sums_kernel, blocks_for("tree_sums", a.lists * a.width, kThreads), kThreads, 0, stream, a);
  check_launch("tree_sums_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
