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
//
// Global attention in tf32 / bf16 (SphereAttentionArgs::precision, heads up to 64 wide): on the tensor
// cores with mma_softmax.cuh, FLARE's decode scheme: a block of 4 warps takes 64 queries of one (sample,
// head), each warp 16 as mma A fragments; keys, values and their latitudes' log weights are staged through
// shared memory 64 at a time, the widths padded to 8, 16, 32 or 64 with zeros.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "mma_softmax.cuh"
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

constexpr int kTcWarps = 4;              // warps per block, 16 queries each
constexpr int kTcQueries = 16 * kTcWarps;  // queries per block
constexpr int kTcKeys = 64;               // keys staged per pass

/// Grid (query tile, head, sample); kE: max(ek, ev) padded to a multiple of 8.
template <MlpPrecision P, int kE>
__global__ void __launch_bounds__(kTcWarps * 32) global_tc_kernel(SphereAttentionArgs a) {
  using Softmax = detail::MmaSoftmax<P, kE>;
  constexpr int kStages = detail::pipeline_stages(kTcKeys * (Softmax::kPad + kE + 1) * 4);
  __shared__ float ks[kStages][kTcKeys * Softmax::kPad];
  __shared__ float vs[kStages][kTcKeys * kE];
  __shared__ float lw[kStages][kTcKeys];
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const index_t first = static_cast<index_t>(blockIdx.x) * kTcQueries + 16 * (static_cast<int>(threadIdx.x) / 32);
  const float* const q = a.q + static_cast<index_t>(b) * a.queries * a.ldq + h * a.ek;
  const float* const k = a.k + static_cast<index_t>(b) * a.keys * a.ldk + h * a.ek;
  const float* const v = a.v + static_cast<index_t>(b) * a.keys * a.ldv + h * a.ev;
  Softmax sm;
  sm.start([&](int r, int e) { return first + r < a.queries && e < a.ek ? q[(first + r) * a.ldq + e] : 0.0f; });
  // The keys stream through shared memory by cp.async, kTcKeys a pass (detail::stream_passes): all of a
  // sample's grid points pass by every block.
  const auto count_of = [&](index_t pass) {
    return static_cast<int>(a.keys - pass * kTcKeys < kTcKeys ? a.keys - pass * kTcKeys : kTcKeys);
  };
  detail::stream_passes<kStages>(
      static_cast<int>((a.keys + kTcKeys - 1) / kTcKeys),
      [&](int pass, int slot) {
        const index_t j0 = static_cast<index_t>(pass) * kTcKeys;
        const int count = count_of(pass);
        detail::stage_columns_async<kTcKeys, Softmax::kPad>(ks[slot], count, a.ek, k,
                                                            [&](int t, int e) { return k + (j0 + t) * a.ldk + e; });
        detail::stage_columns_async<kTcKeys, kE>(vs[slot], count, a.ev, v,
                                                 [&](int t, int e) { return v + (j0 + t) * a.ldv + e; });
        for (int t = static_cast<int>(threadIdx.x); t < count; t += kTcWarps * 32)
          async_copy::copy<4>(lw[slot] + t, a.log_w_lat + (j0 + t) / a.nlon_in, true);
      },
      [&](int pass, int slot) {
        if (first >= a.queries) return;  // no queries for this warp (it still joins the barriers)
        const int count = count_of(pass);
        for (int l0 = 0; l0 < count; l0 += 16)
          sm.add(ks[slot], vs[slot], l0, count,
                 [&](int /*row*/, int column, float logit) { return logit + lw[slot][column]; });
      });
  if (first >= a.queries) return;
  sm.finish();
  const float inv[2] = {1.0f / sm.row_sum[0], 1.0f / sm.row_sum[1]};  // >= 1: the largest weight is exp(0)
  sm.for_each_value(a.ev, [&](int r, int c, float value) {
    const index_t row = first + sm.g + 8 * r;
    if (row < a.queries) a.o[(static_cast<index_t>(b) * a.queries + row) * a.ldo + h * a.ev + c] = value * inv[r];
  });
}

template <MlpPrecision P>
void launch_global_tensor_cores(const SphereAttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((a.queries + kTcQueries - 1) / kTcQueries), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  detail::dispatch_mma_width(a.ek > a.ev ? a.ek : a.ev, [&](auto width) {
    launch(global_tc_kernel<P, decltype(width)::value>, grid, kTcWarps * 32, 0, stream, a);
  });
}

}  // namespace

void sphere_global_attention(const SphereAttentionArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sphere_global_attention(a, stream));
  check_args(a, "cuda::sphere_global_attention");
  if (a.batch < 1 || a.queries < 1) return;
  if (a.keys < 1) throw std::invalid_argument("cuda::sphere_global_attention: no keys");
  if (a.precision != MlpPrecision::fp32 && (a.ek > a.ev ? a.ek : a.ev) <= kSphereRegisterHeadDim) {
    require_tensor_cores("sphere_global_attention");
    if (a.precision == MlpPrecision::bf16) launch_global_tensor_cores<MlpPrecision::bf16>(a, stream);
    else launch_global_tensor_cores<MlpPrecision::tf32>(a, stream);
    check_launch("sphere global_tc_kernel");
    return;
  }
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
