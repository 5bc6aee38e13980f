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
#include <cfloat>
#include <stdexcept>
#include <string>

#include "latent_softmax.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere.hpp"

namespace surrogate::kernels::cuda {
namespace {

using detail::head_dim_bucket;
using detail::logit;
using detail::Pow2Softmax;

constexpr int kQueries = 128;  // threads (queries) per block
constexpr int kKeyTile = 64;   // keys staged per step (global attention)

template <int kMaxE>
__device__ __forceinline__ void load_query(const float* src, int ek, float (&q)[kMaxE]) {
#pragma unroll
  for (int e = 0; e < kMaxE; ++e) q[e] = e < ek ? src[e] : 0.0f;
}

/// o[e] = acc[e] * (1 / sum), as the CPU operators finish (NaN for a query without keys: 0 * inf).
template <int kMaxE>
__device__ __forceinline__ void store_output(const Pow2Softmax<double, kMaxE>& sm, float* dst, int ev) {
  const double inv = 1.0 / sm.sum;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < ev) dst[e] = static_cast<float>(sm.acc[e] * inv);
}

template <int kMaxE>
__global__ void __launch_bounds__(kQueries) global_attention_kernel(SphereAttentionArgs a) {
  __shared__ float k_tile[kKeyTile][kMaxE];
  __shared__ float v_tile[kKeyTile][kMaxE];
  __shared__ float log_w_tile[kKeyTile];
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const index_t i = static_cast<index_t>(blockIdx.x) * kQueries + threadIdx.x;
  const bool active = i < a.queries;  // inactive threads still stage keys
  float q[kMaxE];
  load_query<kMaxE>(a.q + (static_cast<index_t>(b) * a.queries + (active ? i : 0)) * a.ldq + h * a.ek, a.ek, q);
  Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const float* const k = a.k + static_cast<index_t>(b) * a.keys * a.ldk + h * a.ek;
  const float* const v = a.v + static_cast<index_t>(b) * a.keys * a.ldv + h * a.ev;
  for (index_t j0 = 0; j0 < a.keys; j0 += kKeyTile) {
    const int n = static_cast<int>(a.keys - j0 < kKeyTile ? a.keys - j0 : kKeyTile);
    __syncthreads();  // nobody reads the previous tile any more
    for (int idx = static_cast<int>(threadIdx.x); idx < n * kMaxE; idx += kQueries) {
      const int t = idx / kMaxE, e = idx % kMaxE;
      k_tile[t][e] = e < a.ek ? k[(j0 + t) * a.ldk + e] : 0.0f;
      v_tile[t][e] = e < a.ev ? v[(j0 + t) * a.ldv + e] : 0.0f;
    }
    for (int t = static_cast<int>(threadIdx.x); t < n; t += kQueries)
      log_w_tile[t] = a.log_w_lat[(j0 + t) / a.nlon_in];
    __syncthreads();
    if (active)
      for (int t = 0; t < n; ++t) sm.add(logit<kMaxE>(q, k_tile[t], a.ek) + log_w_tile[t], v_tile[t], a.ev);
  }
  if (active) store_output(sm, a.o + (static_cast<index_t>(b) * a.queries + i) * a.ldo + h * a.ev, a.ev);
}

template <int kMaxE>
__global__ void __launch_bounds__(kQueries) neighborhood_attention_kernel(SphereAttentionArgs a, SphereNeighbors nb) {
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const index_t i = static_cast<index_t>(blockIdx.x) * kQueries + threadIdx.x;
  if (i >= a.queries) return;
  const index_t t = i / nb.nlon_out, wo = i % nb.nlon_out;
  const index_t shift = static_cast<index_t>(a.nlon_in / nb.nlon_out) * wo;
  float q[kMaxE];
  load_query<kMaxE>(a.q + (static_cast<index_t>(b) * a.queries + i) * a.ldq + h * a.ek, a.ek, q);
  Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const float* const k = a.k + static_cast<index_t>(b) * a.keys * a.ldk + h * a.ek;
  const float* const v = a.v + static_cast<index_t>(b) * a.keys * a.ldv + h * a.ev;
  const std::int64_t end = nb.row_offsets[t + 1];
  for (std::int64_t j = nb.row_offsets[t]; j < end; ++j) {
    const std::int64_t column = nb.columns[j];
    const std::int64_t hi = column / a.nlon_in, wi = column - hi * a.nlon_in;
    const std::int64_t r = hi * a.nlon_in + (wi + shift) % a.nlon_in;
    sm.add(logit<kMaxE>(q, k + r * a.ldk, a.ek) + a.log_w_lat[hi], v + r * a.ldv, a.ev);
  }
  store_output(sm, a.o + (static_cast<index_t>(b) * a.queries + i) * a.ldo + h * a.ev, a.ev);
}

/// One thread per (row, head); the products and sums of the norm rounded as the CPU's (no contraction).
__global__ void head_norm_scale_kernel(float* x, index_t ldx, index_t rows, int heads, int width, const float* weight,
                                       float scale) {
  const index_t id = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (id >= rows * heads) return;
  float* const p = x + (id / heads) * ldx + (id % heads) * width;
  if (weight) {
    double sq = 0.0;
    for (int e = 0; e < width; ++e) {
      const double xe = p[e];
      sq = __dadd_rn(sq, __dmul_rn(xe, xe));
    }
    const float inv = static_cast<float>(1.0 / sqrt(sq / width + static_cast<double>(FLT_EPSILON)));
    for (int e = 0; e < width; ++e) p[e] = __fmul_rn(__fmul_rn(p[e], inv), weight[e]);
  }
  for (int e = 0; e < width; ++e) p[e] = __fmul_rn(p[e], scale);
}

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
