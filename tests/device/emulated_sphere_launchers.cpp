// Host versions of the launchers only the sphere operators use (the common ones: emulated_cuda_backend.cpp).
// They run the unchanged device code of sphere_grid_norm_kernels.cuh (block by block, threads one after
// another), sphere_attention_kernels.cuh and sphere_grid_ops_kernels.cuh (their blocks' threads as
// std::threads, for __syncthreads) and sphere_sht_kernels.cuh; the fused MLP kernel of mlp.cu is written
// out (one layer, FP32: bias, then fmaf over the inputs in order, activation, extra). Compiled into the
// sphere emulation tests (test_sphere_transformer_device_emulated.cpp, test_sphere_device_mpi_emulated.cpp),
// where they replace libsurrogate_kernels.so's, like emulated_cuda_backend.cpp.
#include "emulated_sphere_launchers.hpp"  // first: replaces the CUDA keywords for the kernel sources below

#include "activation.cuh"  // activate(), for the MLP written out below
#include "sphere_attention_kernels.cuh"
#include "sphere_grid_norm_kernels.cuh"
#include "sphere_grid_ops_kernels.cuh"
#include "sphere_sht_kernels.cuh"

#include <cmath>
#include <stdexcept>
#include <vector>

#include "surrogate/kernels/cuda.hpp"

#include "surrogate/kernels/cuda_point_layers.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"
#include "surrogate/kernels/cuda_sphere_grid_norm.hpp"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"

int emulated_sphere::fail_after = 0;

namespace surrogate::kernels::cuda {

using emulated_backend::grid_for;
using emulated_backend::launches;
using emulated_backend::run_sequentially;

namespace nk = grid_norm_kernels;
void grid_row_sums(const GridRowSumsArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(static_cast<index_t>(a.batch) * a.lat_rows * a.dim, nk::kThreads), nk::kThreads,
                   [&] { nk::grid_row_sums_kernel(a); });
}
void grid_norm_stats(const GridNormStatsArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(static_cast<index_t>(a.batch) * a.dim, nk::kThreads), nk::kThreads,
                   [&] { nk::grid_norm_stats_kernel(a); });
}
void channel_affine(const ChannelAffineArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.rows * a.dim, nk::kThreads), nk::kThreads, [&] { nk::channel_affine_kernel(a); });
}
void relu_rows(float* x, index_t ld, index_t rows, int width, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(rows * width, nk::kThreads), nk::kThreads, [&] { nk::relu_kernel(x, ld, rows, width); });
}

/// mlp.cu's FP32 arithmetic per output: the bias, fmaf over the inputs in order, the activation, the
/// layer's input (add_input), the extra.
void mlp(const MlpArgs& a, cudaStream_t) {
  ++launches;
  if (a.precision != MlpPrecision::fp32) throw std::invalid_argument("emulated mlp: FP32 only");
  std::vector<float> cur, next;
  for (index_t r = 0; r < a.rows; ++r) {
    cur.assign(a.x + r * a.ldx, a.x + r * a.ldx + a.layers[0].in);
    for (int l = 0; l < a.num_layers; ++l) {
      const MlpLayer& L = a.layers[l];
      next.assign(static_cast<std::size_t>(L.out), 0.0f);
      for (int o = 0; o < L.out; ++o) {
        float acc = L.bias[o];
        for (int k = 0; k < L.in; ++k) acc = std::fma(cur[static_cast<std::size_t>(k)], L.weight_t[static_cast<index_t>(k) * L.ld + o], acc);
        float v = activate(L.act, acc);
        if (L.add_input) v += cur[static_cast<std::size_t>(o)];
        next[static_cast<std::size_t>(o)] = v;
      }
      cur.swap(next);
    }
    for (std::size_t o = 0; o < cur.size(); ++o) {
      float v = cur[o];
      if (a.extra) v += a.extra[r * a.ld_extra + static_cast<index_t>(o)];
      a.y[r * a.ldy + static_cast<index_t>(o)] = v;
    }
  }
}

namespace sk = sphere_kernels;
template <int kMaxE>
void attention_launch(const SphereAttentionArgs& a, const SphereNeighbors* n) {
  const dim3 grid(static_cast<unsigned>((a.queries + sk::kQueries - 1) / sk::kQueries), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  if (n) cuda_host_emulation::launch(grid, sk::kQueries, [&] { sk::neighborhood_attention_kernel<kMaxE>(a, *n); });
  else cuda_host_emulation::launch(grid, sk::kQueries, [&] { sk::global_attention_kernel<kMaxE>(a); });
}
int wide_attention_launches = 0;  // launches of the wide-head kernels (the e128 tests check they ran)
/// As sphere_attention.cu: the register kernels up to width 64, the column-split kernels above.
void attention_bucket(const SphereAttentionArgs& a, const SphereNeighbors* n) {
  ++launches;
  if (emulated_sphere::fail_after > 0 && --emulated_sphere::fail_after == 0)
    throw CudaError(cudaErrorLaunchFailure, "sphere attention: emulated launch failure");
  sk::dispatch_attention(
      a, [&](auto width) { attention_launch<decltype(width)::value>(a, n); },
      [&](int parts, int col0) {
        ++wide_attention_launches;
        const unsigned threads = static_cast<unsigned>(sk::kWideQueries * parts);
        if (n)
          cuda_host_emulation::launch(sk::wide_grid(a), threads, [&] { sk::wide_neighborhood_attention_kernel(a, *n, col0); });
        else
          cuda_host_emulation::launch(sk::wide_grid(a), threads, [&] { sk::wide_global_attention_kernel(a, col0); });
      });
}
void sphere_global_attention(const SphereAttentionArgs& a, cudaStream_t) { attention_bucket(a, nullptr); }
void sphere_neighborhood_attention(const SphereAttentionArgs& a, const SphereNeighbors& n, cudaStream_t) {
  attention_bucket(a, &n);
}
void sphere_head_norm_scale(float* x, index_t ldx, index_t rows, int heads, int width, const float* weight, float scale,
                            cudaStream_t) {
  ++launches;
  const index_t n = rows * heads;
  if (n <= 0) return;
  cuda_host_emulation::launch(dim3(static_cast<unsigned>((n + 255) / 256)), 256,
                              [&] { sk::head_norm_scale_kernel(x, ldx, rows, heads, width, weight, scale); });
}

namespace shk = sht_kernels;
int sht_launches = 0;  // launches of the SHT kernels (the upsample_sht tests check they ran)
void sht_fourier_analysis(const ShtFourierArgs& a, cudaStream_t) {
  ++launches, ++sht_launches;
  run_sequentially(grid_for(a.rows * 2 * a.mmax * a.channels, shk::kThreads), shk::kThreads,
                   [&] { shk::fourier_analysis_kernel(a); });
}
void sht_fourier_synthesis(const ShtFourierArgs& a, cudaStream_t) {
  ++launches, ++sht_launches;
  run_sequentially(grid_for(a.rows * a.nlon * a.channels, shk::kThreads), shk::kThreads,
                   [&] { shk::fourier_synthesis_kernel(a); });
}
void sht_legendre_analysis(const ShtLegendreArgs& a, cudaStream_t) {
  ++launches, ++sht_launches;
  run_sequentially(grid_for(static_cast<index_t>(a.batch) * a.lmax * a.mmax * 2 * a.channels, shk::kThreads),
                   shk::kThreads, [&] { shk::legendre_analysis_kernel(a); });
}
void sht_legendre_synthesis(const ShtLegendreArgs& a, cudaStream_t) {
  ++launches, ++sht_launches;
  run_sequentially(grid_for(static_cast<index_t>(a.batch) * (a.lat_rows < 0 ? a.nlat : a.lat_rows) * a.modes * 2 * a.channels,
                            shk::kThreads),
                   shk::kThreads, [&] { shk::legendre_synthesis_kernel(a); });
}

namespace gk = sphere_grid_kernels;
void disco_contraction(const DiscoContractionArgs& a, const DiscoTable& table, cudaStream_t) {
  ++launches;
  if (a.rows_end == a.rows_begin) return;
  const dim3 grid(static_cast<unsigned>((static_cast<index_t>(a.nlon_out) * a.channels + gk::kThreads - 1) / gk::kThreads),
                  static_cast<unsigned>(a.rows_end - a.rows_begin));
  cuda_host_emulation::launch(grid, gk::kThreads, [&] { gk::disco_contraction_kernel(a, table); });
}
void grouped_linear(const GroupedLinearArgs& a, cudaStream_t) {
  ++launches;
  if (a.rows == 0) return;
  const dim3 grid(static_cast<unsigned>((a.rows + gk::kTileRows - 1) / gk::kTileRows),
                  static_cast<unsigned>((a.out + gk::kTileOut - 1) / gk::kTileOut), static_cast<unsigned>(a.groups));
  cuda_host_emulation::launch(grid, gk::kThreads, [&] { gk::grouped_linear_kernel(a); });
}
void resample(const ResampleArgs& a, const ResampleTables& t, cudaStream_t) {
  ++launches;
  if (a.batch == 0) return;
  const auto blocks = [](index_t n) { return dim3(static_cast<unsigned>((n + gk::kThreads - 1) / gk::kThreads)); };
  if (t.expand_poles)
    cuda_host_emulation::launch(blocks(static_cast<index_t>(a.batch) * 2 * a.channels), gk::kThreads,
                                [&] { gk::resample_poles_kernel(a, t.spherical); });
  const index_t n = static_cast<index_t>(a.batch) * ((a.out_end < 0 ? a.nlat_out : a.out_end) - a.out_begin) * a.nlon_out * a.channels;
  cuda_host_emulation::launch(blocks(n), gk::kThreads, [&] { gk::resample_interpolate_kernel(a, t); });
}

}  // namespace surrogate::kernels::cuda
