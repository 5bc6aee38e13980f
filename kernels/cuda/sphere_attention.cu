// Attention on the sphere (AttentionS2, NeighborhoodAttentionS2): the quadrature-weighted softmax over the
// keys of each query on the online softmax with a power-of-two reference (latent_softmax.cuh: the CPU
// kernels' exp_parts, double sums), and the per-head RMS qk-norm / scale of the projected q and k.
//
// One thread owns one (sample, head, query): it keeps its q in registers and streams the keys in key
// order, so every output is computed by the same arithmetic in the same order whatever the launch
// geometry (bitwise reproducible run to run). Global attention: a block of kQueries queries of one
// (sample, head) stages kKeyTile keys (k, v and the log weight) at a time in shared memory and every
// thread reads them as broadcasts. Neighbourhood attention: each thread reads its neighbours' k and v rows
// straight from global memory (consecutive threads are consecutive output longitudes, whose neighbour
// rows are the same rows shifted by nlon_in / nlon_out longitudes: neighbouring addresses, cached).
#include <stdexcept>
#include <string>

#include "sphere_attention_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"

namespace surrogate::kernels::cuda {
namespace {

using namespace sphere_kernels;

void check_args(const SphereAttentionArgs& a, const char* what) {
  const auto bad = [what](const std::string& m) { throw std::invalid_argument(std::string(what) + ": " + m); };
  if (a.ek < 1 || a.ek > kMaxSphereHeadDim || a.ev < 1 || a.ev > kMaxSphereHeadDim)
    bad("head widths ek = " + std::to_string(a.ek) + ", ev = " + std::to_string(a.ev) + " outside [1, " +
        std::to_string(kMaxSphereHeadDim) + "]");
  if (a.heads < 1 || a.heads > 65535 || a.batch > 65535) bad("heads and batch must be in [1, 65535]");
  if (a.nlon_in < 1 || a.keys % a.nlon_in) bad("keys must be a multiple of nlon_in >= 1");
}

dim3 grid_of(const SphereAttentionArgs& a) {
  return dim3(static_cast<unsigned>((a.queries + kQueries - 1) / kQueries), static_cast<unsigned>(a.heads),
              static_cast<unsigned>(a.batch));
}

template <int kMaxE>
void launch_global(const SphereAttentionArgs& a, cudaStream_t stream) {
  global_attention_kernel<kMaxE><<<grid_of(a), kQueries, 0, stream>>>(a);
}

template <int kMaxE>
void launch_neighborhood(const SphereAttentionArgs& a, const SphereNeighbors& n, cudaStream_t stream) {
  neighborhood_attention_kernel<kMaxE><<<grid_of(a), kQueries, 0, stream>>>(a, n);
}

}  // namespace

void sphere_global_attention(const SphereAttentionArgs& a, cudaStream_t stream) {
  check_args(a, "cuda::sphere_global_attention");
  if (a.batch < 1 || a.queries < 1) return;
  if (a.keys < 1) throw std::invalid_argument("cuda::sphere_global_attention: no keys");
  switch (head_dim_bucket(a.ek > a.ev ? a.ek : a.ev)) {
    case 4: launch_global<4>(a, stream); break;
    case 8: launch_global<8>(a, stream); break;
    case 16: launch_global<16>(a, stream); break;
    case 32: launch_global<32>(a, stream); break;
    default: launch_global<64>(a, stream); break;
  }
  check_launch("sphere global_attention_kernel");
}

void sphere_neighborhood_attention(const SphereAttentionArgs& a, const SphereNeighbors& n, cudaStream_t stream) {
  check_args(a, "cuda::sphere_neighborhood_attention");
  if (n.nlat_out < 1 || n.nlon_out < 1 || a.nlon_in % n.nlon_out ||
      a.queries != static_cast<index_t>(n.nlat_out) * n.nlon_out)
    throw std::invalid_argument("cuda::sphere_neighborhood_attention: queries must be nlat_out * nlon_out and nlon_out "
                                "must divide nlon_in");
  if (a.batch < 1) return;
  switch (head_dim_bucket(a.ek > a.ev ? a.ek : a.ev)) {
    case 4: launch_neighborhood<4>(a, n, stream); break;
    case 8: launch_neighborhood<8>(a, n, stream); break;
    case 16: launch_neighborhood<16>(a, n, stream); break;
    case 32: launch_neighborhood<32>(a, n, stream); break;
    default: launch_neighborhood<64>(a, n, stream); break;
  }
  check_launch("sphere neighborhood_attention_kernel");
}

void sphere_head_norm_scale(float* x, index_t ldx, index_t rows, int heads, int width, const float* weight, float scale,
                            cudaStream_t stream) {
  const index_t n = rows * heads;
  if (n <= 0) return;
  head_norm_scale_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, stream>>>(x, ldx, rows, heads, width, weight,
                                                                                    scale);
  check_launch("sphere head_norm_scale_kernel");
}

}  // namespace surrogate::kernels::cuda
