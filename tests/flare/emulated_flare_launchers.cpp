// Host versions of the CUDA launchers FLARE's device forward uses beyond the shared emulated backend
// (tests/device/emulated_cuda_backend.hpp): the fused MLP, the latent encode / decode, the caller-array
// gather and scatter, fills, pinned memory and the multiprocessor count. Written from the contracts of
// surrogate/kernels/cuda.hpp (not the device code: those kernels use shared memory, warp shuffles and
// atomics), the latent products on the CPU kernels, so that the forward's orchestration (plan tables,
// buffer layouts, merges across ranks, error agreement) runs unchanged on the CPU.
#include "emulated_cuda_backend.hpp"  // first: replaces the CUDA keywords

#include "activation.cuh"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <vector>

extern "C" cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int) {
  *value = attr == cudaDevAttrMultiProcessorCount ? 3 : 0;  // 3: several encode chunks per sample
  return cudaSuccess;
}

namespace surrogate::kernels::cuda {
namespace {

const CpuKernels& cpu_kernels() { return kernels::cpu(); }

/// Partial slot of (chunk, slice 0) in the [num_chunks * slices][H][M] layout of the encode partials.
std::size_t part_slot(int chunk, int slices, int H, int M, int h, int m) {
  return ((static_cast<std::size_t>(chunk) * slices) * H + h) * M + m;
}

}  // namespace

void* pinned_alloc(std::size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw CudaError(cudaErrorMemoryAllocation, "emulated pinned_alloc");
  return p;
}
void pinned_free(void* p) noexcept { std::free(p); }
void zero(void* dst, std::size_t bytes, cudaStream_t) { std::memset(dst, 0, bytes); }
void fill(std::int32_t* dst, std::size_t n, std::int32_t value, cudaStream_t) { std::fill(dst, dst + n, value); }
void fill(float* dst, std::size_t n, float value, cudaStream_t) { std::fill(dst, dst + n, value); }

void gather_caller_input(const CallerInput& a, cudaStream_t) {
  ++emulated_backend::launches;
  auto* work = a.work;
  for (index_t r = 0; r < a.rows; ++r) {
    const index_t i = a.order ? a.order[r] : r;
    for (int c = 0; c < a.channels; ++c) {
      const index_t at = i * a.point_stride + c * a.component_stride;
      const float x = a.is_double ? static_cast<float>(static_cast<const double*>(a.data)[at])
                                  : static_cast<const float*>(a.data)[at];
      if (!std::isfinite(x)) ++a.bad[c];
      double v = x;
      if (a.mean) v = (v - a.mean[c]) / a.std[c];
      work[r * a.ld_work + c] = static_cast<float>(v);
    }
  }
}

void scatter_caller_output(const CallerOutput& a, cudaStream_t) {
  ++emulated_backend::launches;
  for (index_t r = 0; r < a.rows; ++r) {
    const index_t i = a.order ? a.order[r] : r;
    for (int c = 0; c < a.channels; ++c) {
      double v = a.work[r * a.ld_work + c];
      if (a.mean) v = v * a.std[c] + a.mean[c];
      const index_t at = i * a.point_stride + c * a.component_stride;
      if (a.is_double) static_cast<double*>(a.data)[at] = static_cast<float>(v);
      else static_cast<float*>(a.data)[at] = static_cast<float>(v);
    }
  }
}

/// Row by row through every layer: h' = act(h W^T + b) (+ h), per output a multiply-add chain over k
/// from the bias (unfused: the sums run over the outputs' columns at once).
void mlp(const MlpArgs& a, cudaStream_t) {
  ++emulated_backend::launches;
  for (int l = 0; l < a.num_layers; ++l)
    if (a.layers[l].in > kMaxMlpWidth || a.layers[l].out > kMaxMlpWidth)
      throw std::invalid_argument("mlp: width above kMaxMlpWidth");
  std::vector<float> h, next;
  for (index_t r = 0; r < a.rows; ++r) {
    h.assign(a.x + r * a.ldx, a.x + r * a.ldx + a.layers[0].in);
    for (int l = 0; l < a.num_layers; ++l) {
      const MlpLayer& L = a.layers[l];
      next.assign(L.bias, L.bias + L.out);
      for (int k = 0; k < L.in; ++k) {
        const float x = h[static_cast<std::size_t>(k)];
        const float* w = L.weight_t + static_cast<index_t>(k) * L.ld;
        for (int o = 0; o < L.out; ++o) next[static_cast<std::size_t>(o)] += x * w[o];
      }
      for (int o = 0; o < L.out; ++o) {
        float& y = next[static_cast<std::size_t>(o)];
        y = activate(L.act, y);
        if (L.add_input) y += h[static_cast<std::size_t>(o)];
      }
      h.swap(next);
    }
    for (std::size_t o = 0; o < h.size(); ++o)
      a.y[r * a.ldy + static_cast<index_t>(o)] = h[o] + (a.extra ? a.extra[r * a.ld_extra + static_cast<index_t>(o)] : 0.0f);
  }
}

void latent_encode_partials(const LatentProblem& p, std::int32_t* part_ref, double* part_acc, cudaStream_t) {
  ++emulated_backend::launches;
  const int slices = encode_shape(p.M).slices;
  const std::size_t width = static_cast<std::size_t>(p.E) + 1;
  std::fill(part_ref, part_ref + static_cast<std::size_t>(p.num_chunks) * slices * p.H * p.M, kNoExponent);
  std::vector<double> sum(static_cast<std::size_t>(p.M)), weighted(static_cast<std::size_t>(p.M) * p.E);
  for (int c = 0; c < p.num_chunks; ++c)
    for (int h = 0; h < p.H; ++h) {
      const LatentChunk& chunk = p.chunks[c];
      std::int32_t* ref = part_ref + part_slot(c, slices, p.H, p.M, h, 0);
      std::fill(sum.begin(), sum.end(), 0.0);
      std::fill(weighted.begin(), weighted.end(), 0.0);
      LatentEncodeArgs e;
      e.q = p.q + static_cast<std::size_t>(h) * p.M * p.E;
      e.M = p.M;
      e.E = p.E;
      e.k = p.k + chunk.begin * p.ld + h * p.E;
      e.ldk = p.ld;
      e.v = p.v + chunk.begin * p.ld + h * p.E;
      e.ldv = p.ld;
      e.rows = chunk.rows;
      e.ref_exp = ref;
      e.sum = sum.data();
      e.weighted = weighted.data();
      cpu_kernels().latent_encode(e);
      for (int m = 0; m < p.M; ++m) {
        double* acc = part_acc + part_slot(c, slices, p.H, p.M, h, m) * width;
        acc[0] = sum[static_cast<std::size_t>(m)];
        for (int i = 0; i < p.E; ++i) acc[1 + i] = weighted[static_cast<std::size_t>(m) * p.E + i];
      }
    }
}

void latent_encode_merge(const LatentProblem& p, const std::int32_t* part_ref, const double* part_acc,
                         const SegmentInfo& seg, std::int32_t* ref, double* acc, cudaStream_t) {
  ++emulated_backend::launches;
  const int slices = encode_shape(p.M).slices;
  const std::size_t width = static_cast<std::size_t>(p.E) + 1;
  for (int s = 0; s < seg.segments; ++s)
    for (int h = 0; h < p.H; ++h)
      for (int m = 0; m < p.M; ++m) {
        const std::size_t out = (static_cast<std::size_t>(seg.sample[s]) * p.H + h) * p.M + m;
        std::int32_t top = kNoExponent;
        for (int c = seg.chunk_begin[s]; c < seg.chunk_begin[s + 1]; ++c)
          top = std::max(top, part_ref[part_slot(c, slices, p.H, p.M, h, m)]);
        ref[out] = top;
        for (std::size_t i = 0; i < width; ++i) acc[out * width + i] = 0.0;
        for (int c = seg.chunk_begin[s]; c < seg.chunk_begin[s + 1]; ++c) {
          const std::size_t slot = part_slot(c, slices, p.H, p.M, h, m);
          if (part_ref[slot] == kNoExponent) continue;
          const double scale = std::ldexp(1.0, part_ref[slot] - top);
          for (std::size_t i = 0; i < width; ++i) acc[out * width + i] += scale * part_acc[slot * width + i];
        }
      }
}

void latent_encode_rescale(const std::int32_t* local_ref, const std::int32_t* global_ref, double* acc, index_t entries,
                           int E, cudaStream_t) {
  ++emulated_backend::launches;
  for (index_t i = 0; i < entries; ++i) {
    if (local_ref[i] == kNoExponent) continue;
    const double scale = std::ldexp(1.0, local_ref[i] - global_ref[i]);
    for (int c = 0; c <= E; ++c) acc[i * (E + 1) + c] *= scale;
  }
}

void latent_encode_finalize(const double* acc, const SegmentInfo& seg, int H, int M, int E, float* z, cudaStream_t) {
  ++emulated_backend::launches;
  for (int s = 0; s < seg.segments; ++s)
    for (int hm = 0; hm < H * M; ++hm) {
      const double* a = acc + (static_cast<std::size_t>(seg.sample[s]) * H * M + hm) * (E + 1);
      for (int e = 0; e < E; ++e) z[(static_cast<std::size_t>(s) * H * M + hm) * E + e] = static_cast<float>(a[1 + e] / a[0]);
    }
}

void latent_max_partials(const LatentProblem& p, float* part_max, float* part_vmax, cudaStream_t) {
  ++emulated_backend::launches;
  const int slices = encode_shape(p.M).slices;
  const float lowest = -std::numeric_limits<float>::infinity();
  std::fill(part_max, part_max + static_cast<std::size_t>(p.num_chunks) * slices * p.H * p.M, lowest);
  for (int c = 0; c < p.num_chunks; ++c)
    for (int h = 0; h < p.H; ++h) {
      const LatentChunk& chunk = p.chunks[c];
      LatentMaxArgs a;
      a.q = p.q + static_cast<std::size_t>(h) * p.M * p.E;
      a.M = p.M;
      a.E = p.E;
      a.k = p.k + chunk.begin * p.ld + h * p.E;
      a.ldk = p.ld;
      a.rows = chunk.rows;
      a.max = part_max + part_slot(c, slices, p.H, p.M, h, 0);
      cpu_kernels().latent_max(a);
      float vmax = 0.0f;
      for (int r = 0; r < chunk.rows; ++r)
        for (int e = 0; e < p.E; ++e) vmax = std::max(vmax, std::abs(p.v[(chunk.begin + r) * p.ld + h * p.E + e]));
      part_vmax[static_cast<std::size_t>(c) * p.H + h] = vmax;
    }
}

void latent_max_merge(const LatentProblem& p, const float* part_max, const float* part_vmax, const SegmentInfo& seg,
                      float* max_out, float* vmax_out, cudaStream_t) {
  ++emulated_backend::launches;
  const int slices = encode_shape(p.M).slices;
  for (int s = 0; s < seg.segments; ++s) {
    const auto sample = static_cast<std::size_t>(seg.sample[s]);
    for (int h = 0; h < p.H; ++h) {
      float vmax = 0.0f;
      for (int c = seg.chunk_begin[s]; c < seg.chunk_begin[s + 1]; ++c)
        vmax = std::max(vmax, part_vmax[static_cast<std::size_t>(c) * p.H + h]);
      vmax_out[sample * p.H + h] = vmax;
      for (int m = 0; m < p.M; ++m) {
        float top = -std::numeric_limits<float>::infinity();
        for (int c = seg.chunk_begin[s]; c < seg.chunk_begin[s + 1]; ++c)
          top = std::max(top, part_max[part_slot(c, slices, p.H, p.M, h, m)]);
        max_out[(sample * p.H + h) * p.M + m] = top;
      }
    }
  }
}

void latent_encode_exact(const LatentProblem& p, const float* max, const SegmentInfo& seg, const ExactScale* sum_scale,
                         const ExactScale* value_scale, std::int64_t* acc, cudaStream_t) {
  ++emulated_backend::launches;
  for (int s = 0; s < seg.segments; ++s) {
    const auto sample = static_cast<std::size_t>(seg.sample[s]);
    for (int c = seg.chunk_begin[s]; c < seg.chunk_begin[s + 1]; ++c)
      for (int h = 0; h < p.H; ++h) {
        const LatentChunk& chunk = p.chunks[c];
        LatentExactArgs a;
        a.q = p.q + static_cast<std::size_t>(h) * p.M * p.E;
        a.M = p.M;
        a.E = p.E;
        a.k = p.k + chunk.begin * p.ld + h * p.E;
        a.ldk = p.ld;
        a.v = p.v + chunk.begin * p.ld + h * p.E;
        a.ldv = p.ld;
        a.rows = chunk.rows;
        a.ref_max = max + (sample * p.H + h) * p.M;
        a.sum_scale = sum_scale[s];
        a.value_scale = value_scale[static_cast<std::size_t>(s) * p.H + h];
        a.acc = acc + (sample * p.H + h) * p.M * (p.E + 1) * 2;
        cpu_kernels().latent_encode_exact(a);
      }
  }
}

void latent_exact_finalize(const std::int64_t* acc, const SegmentInfo& seg, const ExactScale* sum_scale,
                           const ExactScale* value_scale, int H, int M, int E, float* z, cudaStream_t) {
  ++emulated_backend::launches;
  for (int s = 0; s < seg.segments; ++s)
    for (int h = 0; h < H; ++h)
      for (int m = 0; m < M; ++m) {
        const std::int64_t* a = acc + ((static_cast<std::size_t>(seg.sample[s]) * H + h) * M + m) * (E + 1) * 2;
        const double total = exact_value(a[0], a[1], sum_scale[s]);
        for (int e = 0; e < E; ++e) {
          const ExactScale scale = value_scale[static_cast<std::size_t>(s) * H + h];
          const double weighted = exact_value(a[2 * (1 + e)], a[2 * (1 + e) + 1], scale);
          z[((static_cast<std::size_t>(s) * H + h) * M + m) * E + e] = static_cast<float>(weighted / total);
        }
      }
}

void latent_decode(const LatentDecodeArgs& a, cudaStream_t) {
  ++emulated_backend::launches;
  for (int t = 0; t < a.num_tiles; ++t) {
    const LatentChunk& tile = a.tiles[t];
    for (int h = 0; h < a.H; ++h) {
      kernels::LatentDecodeArgs d;  // the CPU's
      d.q = a.q + static_cast<std::size_t>(h) * a.M * a.E;
      d.z = a.z + (static_cast<std::size_t>(tile.segment) * a.H + h) * a.M * a.E;
      d.M = a.M;
      d.E = a.E;
      d.k = a.k + tile.begin * a.ldk + h * a.E;
      d.ldk = a.ldk;
      d.y = a.y + tile.begin * a.ldy + h * a.E;
      d.ldy = a.ldy;
      d.rows = tile.rows;
      cpu_kernels().latent_decode(d);
    }
  }
}

}  // namespace surrogate::kernels::cuda
