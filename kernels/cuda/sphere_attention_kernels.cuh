// The device code of the sphere attention kernels (sphere_attention.cu has the launchers; see there and
// surrogate/kernels/cuda_sphere.hpp for what they compute). In a header of its own so that a host
// emulation (tests/gpu/test_sphere_kernels_emulated.cpp) can run exactly this code on the CPU.
#pragma once

#include <cfloat>
#include <cstdint>
#include <type_traits>

#include "launch.cuh"
#include "latent_softmax.cuh"
#include "surrogate/kernels/cuda_sphere.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace sphere_kernels {

using detail::head_dim_bucket;
using detail::logit;
using detail::Pow2Softmax;

constexpr int kQueries = 128;  // threads (queries) per block
constexpr int kKeyTile = 64;   // keys staged per step (global attention)
/// Key elements a thread of the global attention loads before storing them: four, one at width 64
/// (whose double sums take the registers).
template <int kMaxE>
inline constexpr int kKeyBatch = kMaxE >= 64 ? 1 : 4;

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
    // A thread's loads in batches, issued before their stores (their trips from memory overlap).
    constexpr int kBatch = kKeyBatch<kMaxE>;
    for (int idx0 = static_cast<int>(threadIdx.x); idx0 < n * kMaxE; idx0 += kBatch * kQueries) {
      float kv[kBatch], vv[kBatch];
#pragma unroll
      for (int s = 0; s < kBatch; ++s) {
        const int idx = idx0 + s * kQueries, t = idx / kMaxE, e = idx % kMaxE;
        kv[s] = idx < n * kMaxE && e < a.ek ? k[(j0 + t) * a.ldk + e] : 0.0f;
        vv[s] = idx < n * kMaxE && e < a.ev ? v[(j0 + t) * a.ldv + e] : 0.0f;
      }
#pragma unroll
      for (int s = 0; s < kBatch; ++s) {
        const int idx = idx0 + s * kQueries;
        if (idx < n * kMaxE) {
          k_tile[idx / kMaxE][idx % kMaxE] = kv[s];
          v_tile[idx / kMaxE][idx % kMaxE] = vv[s];
        }
      }
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

// ---------------------------------------------------------------------------------------------------
// Wide heads (max(ek, ev) > kSphereRegisterHeadDim, e.g. the model zoo's one-head embed_dim 128 / 256):
// a query's value columns are split among `parts` threads, each owning at most kWideColumns of them (its
// own Pow2Softmax<double, kWideColumns>), and q lives in shared memory instead of registers. A block
// holds kWideQueries queries of one (sample, head) and blockDim = kWideQueries * parts threads: thread
// (part, lane) = threadIdx.x / kWideQueries, threadIdx.x % kWideQueries, so a warp is one column part of
// 32 queries. The keys of each query are taken kWideSlots at a time:
//  1. logits: the key slots of a query are dealt among its parts threads (slot t to part t % parts); each
//     computes its slots' logits as the register kernels do, one fmaf chain over e in order from 0 (the
//     chain is continued across the kWideQChunk-column chunks of q staged in shared memory, so the bits
//     are those of detail::logit), then adds the log weight, and leaves them in shared memory;
//  2. softmax: every thread of the query adds all slots of the window, in key order, to its accumulator
//     (its columns only; ref and sum are the same in every part).
// Every output is therefore the same sequence of operations as in the register kernels (bitwise equal at
// the widths both handle), whatever the launch geometry. Value columns beyond kWideMaxParts *
// kWideColumns (512) are covered by further launches of column groups [col0, col0 + parts * kWideColumns)
// (the logits are recomputed per group), so no width is refused.

constexpr int kWideQueries = 32;   // queries per block (lanes)
constexpr int kWideColumns = 64;   // value columns per thread
constexpr int kWideMaxParts = 8;   // threads per query: blockDim <= 256
constexpr int kWideSlots = 64;     // key slots per window
constexpr int kWideQChunk = 64;    // q columns staged in shared memory per step

/// Threads per query of the wide kernels for head widths ek, ev (host side: the launchers and tests).
inline int wide_parts(int ek, int ev) {
  const int widest = ek > ev ? ek : ev;
  const int parts = (widest + kWideColumns - 1) / kWideColumns;
  return parts < kWideMaxParts ? parts : kWideMaxParts;
}

/// A key as the wide kernels need it: its row in k and v (within the sample) and its latitude.
struct KeyRef {
  index_t row, lat;
};

/// Global attention: slot s of any query is key s.
struct AllKeys {
  index_t count;  // keys of this lane's query (0 for a lane past the last query)
  int nlon_in;
  __device__ __forceinline__ KeyRef operator()(index_t s) const { return {s, s / nlon_in}; }
};

/// Neighbourhood attention: slot s of query (t, wo) is entry s of latitude t's list, shifted by wo.
struct NeighborKeys {
  const std::int64_t* columns;  // the list of the query's output latitude
  index_t count;
  index_t shift;                // (nlon_in / nlon_out) * wo
  int nlon_in;
  __device__ __forceinline__ KeyRef operator()(index_t s) const {
    const std::int64_t column = columns[s];
    const std::int64_t hi = column / nlon_in, wi = column - hi * nlon_in;
    return {hi * nlon_in + (wi + shift) % nlon_in, hi};
  }
};

/// The body of both wide kernels; `slots` (the most keys of any query of the block) is uniform over the
/// block, as the __syncthreads() need.
template <class Keys>
__device__ __forceinline__ void wide_attention(const SphereAttentionArgs& a, const Keys& keys, index_t slots,
                                               int col0, float (&q_tile)[kWideQueries][kWideQChunk + 1],
                                               float (&logit_tile)[kWideSlots][kWideQueries]) {
  const int lane = static_cast<int>(threadIdx.x) % kWideQueries, part = static_cast<int>(threadIdx.x) / kWideQueries;
  const int parts = static_cast<int>(blockDim.x) / kWideQueries;
  const int h = static_cast<int>(blockIdx.y), b = static_cast<int>(blockIdx.z);
  const index_t first = static_cast<index_t>(blockIdx.x) * kWideQueries, i = first + lane;
  // This thread's value columns: [c0, c0 + columns) of the launch's group [col0, col0 + parts * kWideColumns).
  const int c0 = col0 + part * kWideColumns;
  const int group_end = a.ev < col0 + parts * kWideColumns ? a.ev : col0 + parts * kWideColumns;
  const int columns = group_end - c0 < 0 ? 0 : group_end - c0 > kWideColumns ? kWideColumns : group_end - c0;
  const float* const q = a.q + (static_cast<index_t>(b) * a.queries + first) * a.ldq + h * a.ek;
  const float* const k = a.k + static_cast<index_t>(b) * a.keys * a.ldk + h * a.ek;
  const float* const v = a.v + static_cast<index_t>(b) * a.keys * a.ldv + h * a.ev + c0;
  Pow2Softmax<double, kWideColumns> sm;
  sm.reset();
  for (index_t s0 = 0; s0 < slots; s0 += kWideSlots) {
    const int n = static_cast<int>(keys.count - s0 < 0 ? 0 : keys.count - s0 < kWideSlots ? keys.count - s0 : kWideSlots);
    for (int e0 = 0; e0 < a.ek; e0 += kWideQChunk) {
      const int ne = a.ek - e0 < kWideQChunk ? a.ek - e0 : kWideQChunk;
      __syncthreads();  // nobody reads q_tile (previous chunk) or logit_tile (previous window) any more
      for (int idx = static_cast<int>(threadIdx.x); idx < kWideQueries * kWideQChunk; idx += static_cast<int>(blockDim.x)) {
        const int r = idx / kWideQChunk, e = idx % kWideQChunk;
        q_tile[r][e] = first + r < a.queries && e < ne ? q[r * a.ldq + e0 + e] : 0.0f;
      }
      __syncthreads();
      const bool last_chunk = e0 + kWideQChunk >= a.ek;
      for (int t = part; t < n; t += parts) {
        const KeyRef key = keys(s0 + t);
        const float* const kr = k + key.row * a.ldk + e0;
        float l = e0 == 0 ? 0.0f : logit_tile[t][lane];
        for (int e = 0; e < ne; ++e) l = fmaf(q_tile[lane][e], kr[e], l);
        logit_tile[t][lane] = last_chunk ? l + a.log_w_lat[key.lat] : l;
      }
    }
    __syncthreads();  // the window's logits are complete
    for (int t = 0; t < n; ++t) sm.add(logit_tile[t][lane], v + keys(s0 + t).row * a.ldv, columns);
  }
  if (i < a.queries && columns > 0)
    store_output(sm, a.o + (static_cast<index_t>(b) * a.queries + i) * a.ldo + h * a.ev + c0, columns);
}

/// AttentionS2 for wide heads; blockDim = kWideQueries * wide_parts(ek, ev), value columns from col0.
__global__ void __launch_bounds__(kWideQueries * kWideMaxParts) wide_global_attention_kernel(SphereAttentionArgs a,
                                                                                              int col0) {
  __shared__ float q_tile[kWideQueries][kWideQChunk + 1];
  __shared__ float logit_tile[kWideSlots][kWideQueries];
  const index_t i = static_cast<index_t>(blockIdx.x) * kWideQueries + static_cast<int>(threadIdx.x) % kWideQueries;
  const AllKeys keys{i < a.queries ? a.keys : 0, a.nlon_in};
  wide_attention(a, keys, a.keys, col0, q_tile, logit_tile);
}

/// NeighborhoodAttentionS2 (gather mode) for wide heads; launched as wide_global_attention_kernel.
__global__ void __launch_bounds__(kWideQueries * kWideMaxParts)
    wide_neighborhood_attention_kernel(SphereAttentionArgs a, SphereNeighbors nb, int col0) {
  __shared__ float q_tile[kWideQueries][kWideQChunk + 1];
  __shared__ float logit_tile[kWideSlots][kWideQueries];
  const index_t first = static_cast<index_t>(blockIdx.x) * kWideQueries;
  const index_t i = first + static_cast<int>(threadIdx.x) % kWideQueries;
  const index_t last = (first + kWideQueries < a.queries ? first + kWideQueries : a.queries) - 1;
  index_t slots = 0;  // the longest list of the block's output latitudes
  for (index_t t = first / nb.nlon_out; t <= last / nb.nlon_out; ++t) {
    const index_t len = nb.row_offsets[t + 1] - nb.row_offsets[t];
    slots = len > slots ? len : slots;
  }
  NeighborKeys keys{nb.columns, 0, 0, a.nlon_in};
  if (i < a.queries) {
    const index_t t = i / nb.nlon_out, wo = i % nb.nlon_out;
    keys.columns = nb.columns + nb.row_offsets[t];
    keys.count = nb.row_offsets[t + 1] - nb.row_offsets[t];
    keys.shift = static_cast<index_t>(a.nlon_in / nb.nlon_out) * wo;
  }
  wide_attention(a, keys, slots, col0, q_tile, logit_tile);
}

/// Launches a softmax kernel for the head widths of `a` (host side; sphere_attention.cu and the emulation
/// tests): register(std::integral_constant<int, kMaxE>) for max(ek, ev) <= kSphereRegisterHeadDim (kMaxE
/// its bucket), else wide(parts, col0) for each column group.
template <class Register, class Wide>
void dispatch_attention(const SphereAttentionArgs& a, Register&& register_kernel, Wide&& wide) {
  const int widest = a.ek > a.ev ? a.ek : a.ev;
  if (widest > kSphereRegisterHeadDim) {
    const int parts = wide_parts(a.ek, a.ev);
    for (int col0 = 0; col0 < a.ev; col0 += parts * kWideColumns) wide(parts, col0);
    return;
  }
  detail::dispatch_head_width(widest, register_kernel);
}

/// The grid of the wide kernels: query blocks of kWideQueries, heads, samples.
inline dim3 wide_grid(const SphereAttentionArgs& a) {
  return dim3(static_cast<unsigned>((a.queries + kWideQueries - 1) / kWideQueries), static_cast<unsigned>(a.heads),
              static_cast<unsigned>(a.batch));
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

}  // namespace sphere_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
