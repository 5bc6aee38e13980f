// Attention on the sphere (AttentionS2, NeighborhoodAttentionS2): the quadrature-weighted softmax over the
// keys of each query on the online softmax with a power-of-two reference (latent_softmax.cuh: the CPU
// kernels' softmax_exp_parts, double sums), and the per-head RMS qk-norm / scale of the projected q and k.
//
// One thread owns one (sample, head, query): it keeps its q in registers and streams the keys in key
// order, so every output is computed by the same arithmetic in the same order whatever the launch
// geometry (bitwise reproducible run to run). Global attention: a block of kQueries queries of one
// (sample, head) stages kKeyTile keys (k, v and the log weight) at a time in shared memory and every
// thread reads them as broadcasts. Neighbourhood attention: each thread reads its neighbours' k and v rows
// straight from global memory (consecutive threads are consecutive output longitudes, whose neighbour
// rows are the same rows shifted by nlon_in / nlon_out longitudes: neighbouring addresses, cached).
//
// Heads wider than kSphereRegisterHeadDim (64) run on the column-split kernels of
// sphere_attention_kernels.cuh (wide_*_attention_kernel): several threads per query, 64 value columns
// each, the logits computed once per key into shared memory with the same fmaf chain. Same results.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "sphere_attention_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using namespace sphere_kernels;

void check_args(const SphereAttentionArgs& a, const char* what) {
  const auto bad = [what](const std::string& m) { throw std::invalid_argument(std::string(what) + ": " + m); };
  if (a.ek < 1 || a.ev < 1)
    bad("head widths ek = " + std::to_string(a.ek) + ", ev = " + std::to_string(a.ev) + " must be >= 1");
  if (a.heads < 1 || a.heads > 65535 || a.batch > 65535) bad("heads and batch must be in [1, 65535]");
  if (a.nlon_in < 1 || a.keys % a.nlon_in) bad("keys must be a multiple of nlon_in >= 1");
}

dim3 grid_of(const SphereAttentionArgs& a) {
  return dim3(static_cast<unsigned>((a.queries + kQueries - 1) / kQueries), static_cast<unsigned>(a.heads),
              static_cast<unsigned>(a.batch));
}

}  // namespace

void sphere_global_attention(const SphereAttentionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sphere_global_attention(a, stream));
  check_args(a, "cuda::sphere_global_attention");
  if (a.batch < 1 || a.queries < 1) return;
  if (a.keys < 1) throw std::invalid_argument("cuda::sphere_global_attention: no keys");
  dispatch_attention(
      a,
      [&](auto width) {
        launch(global_attention_kernel<decltype(width)::value>, grid_of(a), kQueries, 0, stream, a);
        check_launch("sphere global_attention_kernel");
      },
      [&](int parts, int col0) {
        launch(wide_global_attention_kernel, wide_grid(a), kWideQueries * parts, 0, stream, a, col0);
        check_launch("sphere wide_global_attention_kernel");
      });
}

void sphere_neighborhood_attention(const SphereAttentionArgs& a, const SphereNeighbors& n, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sphere_neighborhood_attention(a, n, stream));
  check_args(a, "cuda::sphere_neighborhood_attention");
  if (n.nlat_out < 1 || n.nlon_out < 1 || a.nlon_in % n.nlon_out ||
      a.queries != static_cast<index_t>(n.nlat_out) * n.nlon_out)
    throw std::invalid_argument("cuda::sphere_neighborhood_attention: queries must be nlat_out * nlon_out and nlon_out "
                                "must divide nlon_in");
  if (a.batch < 1) return;
  dispatch_attention(
      a,
      [&](auto width) {
        launch(neighborhood_attention_kernel<decltype(width)::value>, grid_of(a), kQueries, 0, stream, a, n);
        check_launch("sphere neighborhood_attention_kernel");
      },
      [&](int parts, int col0) {
        launch(wide_neighborhood_attention_kernel, wide_grid(a), kWideQueries * parts, 0, stream, a, n, col0);
        check_launch("sphere wide_neighborhood_attention_kernel");
      });
}

void sphere_head_norm_scale(float* x, index_t ldx, index_t rows, int heads, int width, const float* weight, float scale,
                            cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sphere_head_norm_scale(x, ldx, rows, heads, width, weight, scale, stream));
  const index_t n = rows * heads;
  if (n <= 0) return;
  launch(head_norm_scale_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, stream, x, ldx, rows, heads, width, weight,
                                                                                    scale);
  check_launch("sphere head_norm_scale_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
