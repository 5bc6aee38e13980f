// CUDA kernels of the attention operators on the sphere (CUDA builds only): torch-harmonics' AttentionS2
// (every query against every key) and NeighborhoodAttentionS2 (every output point against the keys of its
// CSR neighbour list, shifted in longitude), both a quadrature-weighted softmax
//   o_{h,i} = sum_j exp(q_{h,i}.k_{h,j} + log w_lat(j)) v_{h,j} / sum_j exp(q_{h,i}.k_{h,j} + log w_lat(j))
// on the online softmax with a power-of-two reference of latent_softmax.cuh (the CPU kernels' softmax_exp_parts,
// double sums). Inputs are the already projected operands (q scaled and qk-normed: s2_head_norm_scale).
// Each (sample, head, query) is computed in key order with the same operations whatever the launch geometry
// (one thread, or for wide heads one thread per 64 value columns sharing the logits): bitwise reproducible
// run to run.
//
// Layout (device buffers, row-major, channels last, one point per row): q row b*queries + i, k and v rows
// b*keys + j; head h of q and k at columns [h*ek, (h+1)*ek), of v and o at [h*ev, (h+1)*ev). Key row
// j of a sample lies on latitude j / nlon_in (the log weight of log_w_lat).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"   // index_t
#include "surrogate/kernels/cuda.hpp"  // MlpPrecision

namespace surrogate::kernels::cuda {

/// Head widths up to this (max(ek, ev)) run on the register-resident kernels (one thread per query, q and
/// the accumulators in registers); wider heads on the column-split kernels (the value columns of a query
/// shared by up to 8 threads of 64 columns each, q in shared memory; more columns in further launches), so
/// no head width is refused. Both compute the same operations in the same order.
inline constexpr int kSphereRegisterHeadDim = 64;

struct SphereAttentionArgs {
  const float* q = nullptr;  // batch*queries rows
  index_t ldq = 0;
  const float* k = nullptr;  // batch*keys rows
  index_t ldk = 0;
  const float* v = nullptr;  // batch*keys rows
  index_t ldv = 0;
  float* o = nullptr;        // batch*queries rows
  index_t ldo = 0;
  const float* log_w_lat = nullptr;  // device, one per key latitude
  int batch = 0, heads = 0, ek = 0, ev = 0;
  index_t queries = 0;  // query (output) points per sample
  index_t keys = 0;     // key (input) points per sample: nlat_in * nlon_in
  int nlon_in = 0;
  MlpPrecision precision = MlpPrecision::fp32;  // global attention only (below)
};

/// AttentionS2: every query against all keys of its sample. Throws std::invalid_argument for head widths
/// below 1. precision tf32 / bf16 with max(ek, ev) <= kSphereRegisterHeadDim: the two products on the tensor
/// cores (compute capability >= 8.0), q and k, then the softmax weights and v, rounded to the format and
/// accumulated in FP32, the log weight added to each logit in FP32, running maximum and sum FP32 (not bitwise
/// reproducible across launch geometries then, but run to run); wider heads, and the neighbourhood attention
/// in every precision, keep the FP32 kernels.
void sphere_global_attention(const SphereAttentionArgs& a, cudaStream_t stream);

/// The CSR neighbour lists of NeighborhoodAttentionS2 on the device (NeighborhoodCsr): output point
/// (t, wo), t < nlat_out, wo < nlon_out, query row t*nlon_out + wo, has the keys columns[row_offsets[t]
/// .. row_offsets[t+1]) = hi*nlon_in + wi, each shifted to input longitude (wi + (nlon_in/nlon_out)*wo)
/// mod nlon_in. Output points without neighbours give NaN (0/0, as torch-harmonics).
struct SphereNeighbors {
  const std::int64_t* row_offsets = nullptr;  // device, nlat_out + 1
  const std::int64_t* columns = nullptr;      // device
  int nlat_out = 0, nlon_out = 0;
};
/// NeighborhoodAttentionS2 (gather mode): a.queries must be nlat_out * nlon_out.
void sphere_neighborhood_attention(const SphereAttentionArgs& a, const SphereNeighbors& n, cudaStream_t stream);

/// In place, for each row and head: the optional RMS qk-norm x * float(1 / sqrt(mean(x^2) + FLT_EPSILON))
/// * weight[e] (mean of the squares in double, as the CPU operators), then x * scale. weight: device,
/// `width` values (1 + w, formed on the host), or nullptr for no norm.
void sphere_head_norm_scale(float* x, index_t ldx, index_t rows, int heads, int width, const float* weight, float scale,
                            cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
