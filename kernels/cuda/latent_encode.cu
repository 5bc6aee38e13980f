// Latent (FLARE) encode: the softmax over the points of a sample, split across thread blocks.
//
// Grid (chunk, head, latent group); a block holds `latents` latents times `slices` point slices
// (encode_shape). The block streams its chunk through shared memory in tiles of kTile / E points (keys as
// float, values converted once to double); thread (slice g, latent m) visits the tile's points
// g, g + slices, ... and keeps its latent's query in registers. All threads of a warp read the same point
// (shared-memory broadcast) when a block holds 32 latents or more.
//
// Default mode: each thread's (ref, sum, acc) is one partial (Pow2Softmax<double>); the merge kernel adds
// the partials of a segment in a fixed order after moving them to the segment's largest exponent
// (exact power-of-two factors), exactly as the CPU merges its threads and ranks.
// Reproducible mode: pass 1 takes maxima (exact, order-free), pass 2 adds fixed-point images of every
// term with 64-bit integer atomics (exact, order-free).
//
// tf32 / bf16 in the default mode (LatentProblem::precision): the partials on the tensor cores
// (mma_softmax.cuh, the decode's softmax with the roles turned): each warp takes 16 latents of a head,
// the block streams the chunk's keys and values through shared memory 64 points a pass by cp.async, up to
// three passes in flight (mma_softmax.cuh, stream_passes). One partial
// per chunk and latent, written in the Pow2Softmax form (reference 2^round(max log2 e), sums in double)
// that the merge and the ranks' reduction take.
#include <algorithm>

#include "async_copy.cuh"
#include "launch.cuh"
#include "latent_softmax.cuh"
#include "mma_softmax.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using detail::Pow2Softmax;

constexpr int kTile = 2048;  // staged floats per operand: kTile / E points per tile
constexpr int kMaxThreads = 256;

template <class F>
void dispatch_head_dim(int E, F&& f) {
  if (E < 1 || E > kMaxHeadDim)
    throw std::invalid_argument("cuda latent kernels: head width " + std::to_string(E) + " outside 1.." +
                                std::to_string(kMaxHeadDim));
  detail::dispatch_head_width(E, [&](auto width) { f.template operator()<decltype(width)::value>(); });
}

struct ThreadPlace {
  int g, m;
  bool active;
};
__device__ __forceinline__ ThreadPlace place(const EncodeShape& s, int M) {
  const int tid = static_cast<int>(threadIdx.x);
  ThreadPlace p;
  p.g = tid / s.latents;
  p.m = static_cast<int>(blockIdx.z) * s.latents + tid % s.latents;
  p.active = p.m < M;
  return p;
}

template <int kMaxE>
__device__ __forceinline__ void load_query(const LatentProblem& p, int h, const ThreadPlace& t, float (&q)[kMaxE]) {
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    q[e] = (t.active && e < p.E) ? p.q[(static_cast<std::size_t>(h) * p.M + t.m) * p.E + e] : 0.0f;
}

/// Stages rows [r0, r0 + n) of the chunk's head-h keys (and values, as V) into shared memory, a thread's
/// loads issued in batches of kBatch before their stores (mma_softmax.cuh, stage_columns).
template <int kBatch, class V>
__device__ __forceinline__ void stage(const LatentProblem& p, const LatentChunk& chunk, int h, int r0, int n, float* ks,
                                      V* vs) {
  const int E = p.E, size = n * E, stride = static_cast<int>(blockDim.x);
  for (int i0 = static_cast<int>(threadIdx.x); i0 < size; i0 += kBatch * stride) {
    float k[kBatch] = {}, v[kBatch] = {};
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride, r = i / E, e = i - r * E;
      const index_t at = (chunk.begin + r0 + r) * p.ld + static_cast<index_t>(h) * E + e;
      if (i < size) {
        k[b] = p.k[at];
        if (vs) v[b] = p.v[at];
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int i = i0 + b * stride;
      if (i < size) {
        ks[i] = k[b];
        if (vs) vs[i] = static_cast<V>(v[b]);
      }
    }
  }
}

/// stage()'s batch in a kernel of head width kMaxE: one load at a time at width 64, whose registers the
/// softmax's accumulators take (a batch there spills).
template <int kMaxE>
inline constexpr int kBatchOf = kMaxE >= 64 ? 1 : detail::kStageBatch;

template <int kMaxE>
__global__ void __launch_bounds__(kMaxThreads) encode_partials_kernel(LatentProblem p, EncodeShape s,
                                                                      std::int32_t* part_ref, double* part_acc) {
  __shared__ float ks[kTile];
  __shared__ double vs[kTile];
  const LatentChunk chunk = p.chunks[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int E = p.E;
  const ThreadPlace t = place(s, p.M);
  float q[kMaxE];
  load_query<kMaxE>(p, h, t, q);
  Pow2Softmax<double, kMaxE> sm;
  sm.reset();
  const int tile_rows = kTile / E;
  for (int r0 = 0; r0 < chunk.rows; r0 += tile_rows) {
    const int n = min(tile_rows, chunk.rows - r0);
    __syncthreads();
    stage<kBatchOf<kMaxE>>(p, chunk, h, r0, n, ks, vs);
    __syncthreads();
    if (t.active)
      for (int r = t.g; r < n; r += s.slices) sm.add(detail::logit<kMaxE>(q, ks + r * E, E), vs + r * E, E);
  }
  if (!t.active) return;
  const std::size_t idx = ((static_cast<std::size_t>(blockIdx.x) * s.slices + t.g) * p.H + h) * p.M + t.m;
  part_ref[idx] = sm.ref;
  double* dst = part_acc + idx * (E + 1);
  dst[0] = sm.sum;
#pragma unroll
  for (int e = 0; e < kMaxE; ++e)
    if (e < E) dst[1 + e] = sm.acc[e];
}

constexpr int kTcPoints = 64;  // points staged per pass of the tensor-core partials
constexpr int kTcMaxWarps = 16;

/// Warps per block of the tensor-core partials: one per 16 latents, at most kTcMaxWarps (grid.z groups).
int tc_warps(int M) { return std::min(kTcMaxWarps, (M + 15) / 16); }

/// Partials per chunk: the SIMT kernel's point slices, or one (tensor cores).
int partial_slices(const LatentProblem& p) { return p.precision == MlpPrecision::fp32 ? encode_shape(p.M).slices : 1; }

/// The chunk streams through shared memory by cp.async (detail::stream_passes): while the warps compute on
/// one pass of kTcPoints points, the next ones' keys and values travel (a chunk is hundreds of passes).
template <MlpPrecision P, int kE>
__global__ void __launch_bounds__(kTcMaxWarps * 32) encode_tc_kernel(LatentProblem p, std::int32_t* part_ref,
                                                                     double* part_acc) {
  using Softmax = detail::MmaSoftmax<P, kE>;
  constexpr int kStages = detail::pipeline_stages(kTcPoints * (Softmax::kPad + kE) * 4);
  __shared__ float ks[kStages][kTcPoints * Softmax::kPad];
  __shared__ float vs[kStages][kTcPoints * kE];
  const LatentChunk chunk = p.chunks[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y), E = p.E, M = p.M;
  const int warps = static_cast<int>(blockDim.x) / 32, warp = static_cast<int>(threadIdx.x) / 32;
  const int first = (static_cast<int>(blockIdx.z) * warps + warp) * 16;  // this warp's first latent
  Softmax sm;
  sm.start([&](int r, int e) {
    return first + r < M && e < E ? p.q[(static_cast<std::size_t>(h) * M + first + r) * E + e] : 0.0f;
  });
  const auto count_of = [&](int pass) { return min(kTcPoints, chunk.rows - pass * kTcPoints); };
  detail::stream_passes<kStages>(
      (chunk.rows + kTcPoints - 1) / kTcPoints,
      [&](int pass, int slot) {
        const index_t row0 = (chunk.begin + static_cast<index_t>(pass) * kTcPoints) * p.ld + static_cast<index_t>(h) * E;
        detail::stage_columns_async<kTcPoints, Softmax::kPad>(ks[slot], count_of(pass), E, p.k,
                                                              [&](int r, int e) { return p.k + row0 + r * p.ld + e; });
        detail::stage_columns_async<kTcPoints, kE>(vs[slot], count_of(pass), E, p.v,
                                                   [&](int r, int e) { return p.v + row0 + r * p.ld + e; });
      },
      [&](int pass, int slot) {
        if (first >= M) return;  // no latents for this warp (it still joins the barriers)
        for (int l0 = 0; l0 < count_of(pass); l0 += 16) sm.add(ks[slot], vs[slot], l0, count_of(pass));
      });
  if (first >= M) return;
  sm.finish();
  // The partial of each latent row in Pow2Softmax's form: sum_n 2^(l_n log2 e - ref) with ref the
  // rounded max l log2 e is row_sum times 2^(max log2 e - ref), the mantissa of exp(max).
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int m = first + sm.g + 8 * r;
    if (m >= M) continue;
    const std::size_t idx = (static_cast<std::size_t>(blockIdx.x) * p.H + h) * M + m;
    const detail::ExpParts top = detail::exp_parts(sm.row_max[r]);
    const double f = top.mantissa;
    double* dst = part_acc + idx * (E + 1);
    if (sm.t == 0) {
      part_ref[idx] = top.k;
      dst[0] = static_cast<double>(sm.row_sum[r]) * f;
    }
#pragma unroll
    for (int n = 0; n < Softmax::kTiles; ++n)
#pragma unroll
      for (int e = 0; e < 2; ++e)
        if (8 * n + 2 * sm.t + e < E) dst[1 + 8 * n + 2 * sm.t + e] = static_cast<double>(sm.o[n][2 * r + e]) * f;
  }
}

template <MlpPrecision P>
void launch_encode_tc(const LatentProblem& p, cudaStream_t stream, std::int32_t* part_ref, double* part_acc) {
  const int warps = tc_warps(p.M), groups = (p.M + 16 * warps - 1) / (16 * warps);
  const dim3 grid(static_cast<unsigned>(p.num_chunks), static_cast<unsigned>(p.H), static_cast<unsigned>(groups));
  detail::dispatch_mma_width(p.E, [&](auto width) {
    launch(encode_tc_kernel<P, decltype(width)::value>, grid, 32 * warps, 0, stream, p, part_ref, part_acc);
  });
}

/// One thread per (segment, head, latent, channel c < E + 1).
__global__ void encode_merge_kernel(int H, int M, int E, int slices, const std::int32_t* part_ref,
                                    const double* part_acc, SegmentInfo seg, std::int32_t* ref_out, double* acc_out) {
  const std::size_t width = static_cast<std::size_t>(E) + 1;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(seg.segments) * H * M * width) return;
  const int c = static_cast<int>(i % width);
  const std::size_t j = i / width;
  const int m = static_cast<int>(j % M);
  const int h = static_cast<int>((j / M) % H);
  const int s = static_cast<int>(j / (static_cast<std::size_t>(M) * H));
  const std::size_t p0 = static_cast<std::size_t>(seg.chunk_begin[s]) * slices;
  const std::size_t p1 = static_cast<std::size_t>(seg.chunk_begin[s + 1]) * slices;
  std::int32_t ref = kNoExponent;
  for (std::size_t part = p0; part < p1; ++part) ref = max(ref, part_ref[(part * H + h) * M + m]);
  double total = 0.0;
  if (ref != kNoExponent) {
    for (std::size_t part = p0; part < p1; ++part) {
      const std::size_t at = (part * H + h) * M + m;
      const std::int32_t r = part_ref[at];
      if (r != kNoExponent) total += detail::rebase_factor<double>(r, ref) * part_acc[at * width + c];
    }
  }
  const std::size_t o = (static_cast<std::size_t>(seg.sample[s]) * H + h) * M + m;
  acc_out[o * width + c] = total;
  if (c == 0) ref_out[o] = ref;
}

__global__ void encode_rescale_kernel(const std::int32_t* local_ref, const std::int32_t* global_ref, double* acc,
                                      std::size_t entries, int E) {
  const std::size_t width = static_cast<std::size_t>(E) + 1;
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= entries * width) return;
  const std::int32_t local = local_ref[i / width];
  if (local == kNoExponent) return;  // no local terms: the sums are 0 and stay untouched
  acc[i] *= detail::rebase_factor<double>(local, global_ref[i / width]);
}

/// One thread per (segment, head, latent, e).
__global__ void encode_finalize_kernel(const double* acc, SegmentInfo seg, int H, int M, int E, float* z) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(seg.segments) * H * M * E) return;
  const int e = static_cast<int>(i % E);
  const std::size_t j = i / E;  // (s, h, m)
  const int s = static_cast<int>(j / (static_cast<std::size_t>(H) * M));
  const std::size_t o = static_cast<std::size_t>(seg.sample[s]) * H * M + j % (static_cast<std::size_t>(H) * M);
  const double* a = acc + o * (static_cast<std::size_t>(E) + 1);
  z[i] = static_cast<float>(a[1 + e] / a[0]);
}

// ---------------------------------------------------------------------------------------------------
// Reproducible mode.

template <int kMaxE>
__global__ void __launch_bounds__(kMaxThreads) max_partials_kernel(LatentProblem p, EncodeShape s, float* part_max,
                                                                   float* part_vmax) {
  __shared__ float ks[kTile];
  __shared__ unsigned int vmax_bits;  // max |v| of the chunk (non-negative floats order as their bits)
  if (threadIdx.x == 0) vmax_bits = 0u;
  __syncthreads();
  const LatentChunk chunk = p.chunks[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int E = p.E;
  const ThreadPlace t = place(s, p.M);
  float q[kMaxE];
  load_query<kMaxE>(p, h, t, q);
  float mx = -__int_as_float(0x7f800000);  // -inf
  float vmax = 0.0f;
  const int tile_rows = kTile / E;
  for (int r0 = 0; r0 < chunk.rows; r0 += tile_rows) {
    const int n = min(tile_rows, chunk.rows - r0);
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < n * E; i += static_cast<int>(blockDim.x)) {
      const int r = i / E, e = i - r * E;
      const index_t at = (chunk.begin + r0 + r) * p.ld + static_cast<index_t>(h) * E + e;
      ks[i] = p.k[at];
      vmax = fmaxf(vmax, fabsf(p.v[at]));
    }
    __syncthreads();
    if (t.active)
      for (int r = t.g; r < n; r += s.slices) mx = fmaxf(mx, detail::logit<kMaxE>(q, ks + r * E, E));
  }
  if (t.active) part_max[((static_cast<std::size_t>(blockIdx.x) * s.slices + t.g) * p.H + h) * p.M + t.m] = mx;
  if (blockIdx.z == 0) {  // (uniform over the block)
    atomicMax(&vmax_bits, __float_as_uint(vmax));
    __syncthreads();
    if (threadIdx.x == 0) part_vmax[static_cast<std::size_t>(blockIdx.x) * p.H + h] = __uint_as_float(vmax_bits);
  }
}

/// Threads [0, S H M): logit maxima; threads [0, S H) also the value maxima.
__global__ void max_merge_kernel(int H, int M, int slices, const float* part_max, const float* part_vmax,
                                 SegmentInfo seg, float* max_out, float* vmax_out) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const std::size_t hm = static_cast<std::size_t>(H) * M;
  if (i < static_cast<std::size_t>(seg.segments) * hm) {
    const int s = static_cast<int>(i / hm);
    const std::size_t within = i % hm;  // h M + m
    const std::size_t p0 = static_cast<std::size_t>(seg.chunk_begin[s]) * slices;
    const std::size_t p1 = static_cast<std::size_t>(seg.chunk_begin[s + 1]) * slices;
    float mx = -__int_as_float(0x7f800000);
    for (std::size_t part = p0; part < p1; ++part) mx = fmaxf(mx, part_max[part * hm + within]);
    max_out[static_cast<std::size_t>(seg.sample[s]) * hm + within] = mx;
  }
  if (i < static_cast<std::size_t>(seg.segments) * H) {
    const int s = static_cast<int>(i / H), h = static_cast<int>(i % H);
    float vm = 0.0f;
    for (int c = seg.chunk_begin[s]; c < seg.chunk_begin[s + 1]; ++c)
      vm = fmaxf(vm, part_vmax[static_cast<std::size_t>(c) * H + h]);
    vmax_out[static_cast<std::size_t>(seg.sample[s]) * H + h] = vm;
  }
}

/// Adds the fixed-point image of t (hi = trunc(t 2^a), lo = trunc((t 2^a - hi) 2^b)), as the CPU's
/// quantize_add. t 2^a is exact (a power of two); |t 2^a| < 2^61, so hi and the remainder are exact. A term
/// whose image does not fit (NaN, Inf, beyond the scale's maximum) is counted in `bad` instead.
__device__ __forceinline__ void quantize_add(double t, double hi_mult, double lo_mult, long long& hi, long long& lo,
                                             long long& bad) {
  const double scaled = t * hi_mult;
  if (!(fabs(scaled) < 0x1p62)) {
    ++bad;
    return;
  }
  const long long h = __double2ll_rz(scaled);
  const double rem = scaled - static_cast<double>(h);
  hi += h;
  lo += __double2ll_rz(rem * lo_mult);
}

template <int kMaxE>
__global__ void __launch_bounds__(kMaxThreads) exact_kernel(LatentProblem p, EncodeShape s, const float* max,
                                                            SegmentInfo seg, const ExactScale* sum_scale,
                                                            const ExactScale* value_scale, std::int64_t* acc,
                                                            std::int64_t* bad_out) {
  __shared__ float ks[kTile];
  __shared__ double vs[kTile];
  const LatentChunk chunk = p.chunks[blockIdx.x];
  const int h = static_cast<int>(blockIdx.y);
  const int E = p.E;
  const ThreadPlace t = place(s, p.M);
  float q[kMaxE];
  load_query<kMaxE>(p, h, t, q);
  const std::size_t entry = (static_cast<std::size_t>(seg.sample[chunk.segment]) * p.H + h) * p.M + (t.active ? t.m : 0);
  const float ref = max[entry];
  const ExactScale ss = sum_scale[chunk.segment];
  const ExactScale vsc = value_scale[static_cast<std::size_t>(chunk.segment) * p.H + h];
  const double s_hi = ldexp(1.0, ss.hi_bits), s_lo = ldexp(1.0, ss.lo_bits);
  const double v_hi = ldexp(1.0, vsc.hi_bits), v_lo = ldexp(1.0, vsc.lo_bits);
  long long hi[kMaxE + 1], lo[kMaxE + 1], bad = 0;
#pragma unroll
  for (int c = 0; c <= kMaxE; ++c) hi[c] = lo[c] = 0;
  const int tile_rows = kTile / E;
  for (int r0 = 0; r0 < chunk.rows; r0 += tile_rows) {
    const int n = min(tile_rows, chunk.rows - r0);
    __syncthreads();
    stage<kBatchOf<kMaxE>>(p, chunk, h, r0, n, ks, vs);
    __syncthreads();
    if (!t.active) continue;
    for (int r = t.g; r < n; r += s.slices) {
      // the same logit as pass 1, so l <= ref exactly
      const double pd = detail::exp_nonpositive(detail::logit<kMaxE>(q, ks + r * E, E) - ref);
      quantize_add(pd, s_hi, s_lo, hi[0], lo[0], bad);
#pragma unroll
      for (int e = 0; e < kMaxE; ++e)
        if (e < E) quantize_add(pd * vs[r * E + e], v_hi, v_lo, hi[1 + e], lo[1 + e], bad);  // exact product
    }
  }
  if (!t.active) return;
  auto* out = reinterpret_cast<unsigned long long*>(acc) + entry * (static_cast<std::size_t>(E) + 1) * 2;
#pragma unroll
  for (int c = 0; c <= kMaxE; ++c) {
    if (c > E) break;
    // two's complement: unsigned wrap-around addition is the signed sum (which cannot overflow)
    atomicAdd(out + 2 * c, static_cast<unsigned long long>(hi[c]));
    atomicAdd(out + 2 * c + 1, static_cast<unsigned long long>(lo[c]));
  }
  if (bad) atomicAdd(reinterpret_cast<unsigned long long*>(bad_out) + entry, static_cast<unsigned long long>(bad));
}

__device__ __forceinline__ double exact_value(long long hi, long long lo, ExactScale s) {
  return ldexp(static_cast<double>(hi), -s.hi_bits) + ldexp(static_cast<double>(lo), -(s.hi_bits + s.lo_bits));
}

__global__ void exact_finalize_kernel(const std::int64_t* acc, const std::int64_t* bad, SegmentInfo seg,
                                      const ExactScale* sum_scale, const ExactScale* value_scale, int H, int M, int E,
                                      float* z) {
  const std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= static_cast<std::size_t>(seg.segments) * H * M * E) return;
  const int e = static_cast<int>(i % E);
  const std::size_t j = i / E;  // (s, h, m)
  const std::size_t hm = static_cast<std::size_t>(H) * M;
  const int s = static_cast<int>(j / hm);
  const int h = static_cast<int>((j % hm) / M);
  const std::size_t o = static_cast<std::size_t>(seg.sample[s]) * hm + j % hm;
  const long long* a = reinterpret_cast<const long long*>(acc) + o * (static_cast<std::size_t>(E) + 1) * 2;
  const double total = exact_value(a[0], a[1], sum_scale[s]);
  const double weighted = exact_value(a[2 * (1 + e)], a[2 * (1 + e) + 1], value_scale[static_cast<std::size_t>(s) * H + h]);
  z[i] = bad[o] > 0 ? __int_as_float(0x7fc00000) : static_cast<float>(weighted / total);  // a term did not fit: NaN
}

unsigned blocks_for(std::size_t threads, int per_block) {
  return static_cast<unsigned>((threads + static_cast<std::size_t>(per_block) - 1) / static_cast<std::size_t>(per_block));
}

void check_problem(const LatentProblem& p) {
  if (p.H < 1 || p.M < 1 || p.H > 65535)
    throw std::invalid_argument("cuda latent kernels: need 1 <= H <= 65535 and M >= 1");
  (void)encode_shape(p.M);
}

}  // namespace

void latent_encode_partials(const LatentProblem& p, std::int32_t* part_ref, double* part_acc, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_encode_partials(p, part_ref, part_acc, stream));
  check_problem(p);
  if (p.num_chunks == 0) return;
  if (p.precision != MlpPrecision::fp32) {
    require_tensor_cores("latent_encode_partials");
    if (p.E < 1 || p.E > kMaxHeadDim)
      throw std::invalid_argument("cuda latent kernels: head width " + std::to_string(p.E) + " outside 1.." +
                                  std::to_string(kMaxHeadDim));
    if (p.precision == MlpPrecision::bf16) launch_encode_tc<MlpPrecision::bf16>(p, stream, part_ref, part_acc);
    else launch_encode_tc<MlpPrecision::tf32>(p, stream, part_ref, part_acc);
    check_launch("encode_tc_kernel");
    return;
  }
  const EncodeShape s = encode_shape(p.M);
  const dim3 grid(static_cast<unsigned>(p.num_chunks), static_cast<unsigned>(p.H), static_cast<unsigned>(s.groups));
  dispatch_head_dim(p.E, [&]<int kMaxE>() {
    launch(encode_partials_kernel<kMaxE>, grid, s.threads, 0, stream, p, s, part_ref, part_acc);
  });
  check_launch("encode_partials_kernel");
}

void latent_encode_merge(const LatentProblem& p, const std::int32_t* part_ref, const double* part_acc,
                         const SegmentInfo& seg, std::int32_t* ref, double* acc, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_encode_merge(p, part_ref, part_acc, seg, ref, acc, stream));
  check_problem(p);
  const std::size_t n = static_cast<std::size_t>(seg.segments) * p.H * p.M * (p.E + 1);
  if (n == 0) return;
  launch(encode_merge_kernel, blocks_for(n, 256), 256, 0, stream, p.H, p.M, p.E, partial_slices(p), part_ref, part_acc,
         seg, ref, acc);
  check_launch("encode_merge_kernel");
}

void latent_encode_rescale(const std::int32_t* local_ref, const std::int32_t* global_ref, double* acc, index_t entries,
                           int E, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_encode_rescale(local_ref, global_ref, acc, entries, E, stream));
  const std::size_t n = static_cast<std::size_t>(entries) * (static_cast<std::size_t>(E) + 1);
  if (n == 0) return;
  launch(encode_rescale_kernel, blocks_for(n, 256), 256, 0, stream, local_ref, global_ref, acc,
                                                                static_cast<std::size_t>(entries), E);
  check_launch("encode_rescale_kernel");
}

void latent_encode_finalize(const double* acc, const SegmentInfo& seg, int H, int M, int E, float* z,
                            cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_encode_finalize(acc, seg, H, M, E, z, stream));
  const std::size_t n = static_cast<std::size_t>(seg.segments) * H * M * E;
  if (n == 0) return;
  launch(encode_finalize_kernel, blocks_for(n, 256), 256, 0, stream, acc, seg, H, M, E, z);
  check_launch("encode_finalize_kernel");
}

void latent_max_partials(const LatentProblem& p, float* part_max, float* part_vmax, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_max_partials(p, part_max, part_vmax, stream));
  check_problem(p);
  if (p.num_chunks == 0) return;
  const EncodeShape s = encode_shape(p.M);
  const dim3 grid(static_cast<unsigned>(p.num_chunks), static_cast<unsigned>(p.H), static_cast<unsigned>(s.groups));
  dispatch_head_dim(p.E, [&]<int kMaxE>() {
    launch(max_partials_kernel<kMaxE>, grid, s.threads, 0, stream, p, s, part_max, part_vmax);
  });
  check_launch("max_partials_kernel");
}

void latent_max_merge(const LatentProblem& p, const float* part_max, const float* part_vmax, const SegmentInfo& seg,
                      float* max_out, float* vmax_out, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_max_merge(p, part_max, part_vmax, seg, max_out, vmax_out, stream));
  check_problem(p);
  const std::size_t n = static_cast<std::size_t>(seg.segments) * p.H * p.M;  // >= segments * H
  if (n == 0) return;
  launch(max_merge_kernel, blocks_for(n, 256), 256, 0, stream, p.H, p.M, encode_shape(p.M).slices, part_max, part_vmax,
                                                           seg, max_out, vmax_out);
  check_launch("max_merge_kernel");
}

void latent_encode_exact(const LatentProblem& p, const float* max, const SegmentInfo& seg, const ExactScale* sum_scale,
                         const ExactScale* value_scale, std::int64_t* acc, std::int64_t* bad, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, latent_encode_exact(p, max, seg, sum_scale, value_scale, acc, bad, stream));
  check_problem(p);
  if (p.num_chunks == 0) return;
  const EncodeShape s = encode_shape(p.M);
  const dim3 grid(static_cast<unsigned>(p.num_chunks), static_cast<unsigned>(p.H), static_cast<unsigned>(s.groups));
  dispatch_head_dim(p.E, [&]<int kMaxE>() {
    launch(exact_kernel<kMaxE>, grid, s.threads, 0, stream, p, s, max, seg, sum_scale, value_scale, acc, bad);
  });
  check_launch("exact_kernel");
}

void latent_exact_finalize(const std::int64_t* acc, const std::int64_t* bad, const SegmentInfo& seg,
                           const ExactScale* sum_scale, const ExactScale* value_scale, int H, int M, int E, float* z,
                           cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream,
                                 latent_exact_finalize(acc, bad, seg, sum_scale, value_scale, H, M, E, z, stream));
  const std::size_t n = static_cast<std::size_t>(seg.segments) * H * M * E;
  if (n == 0) return;
  launch(exact_finalize_kernel, blocks_for(n, 256), 256, 0, stream, acc, bad, seg, sum_scale, value_scale, H, M, E, z);
  check_launch("exact_finalize_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
