// The device code of the DISCO contraction, the grouped linear layer and ResampleS2
// (sphere_grid_ops.cu has the launchers; surrogate/kernels/cuda_sphere_grid_ops.hpp says what they
// compute). In a header of its own so that a host emulation (tests/gpu/test_sphere_grid_ops_emulated.cpp)
// runs exactly this code on the CPU.
//
// Rounding: products that the CPU code rounds before adding are written __fmul_rn(a, b) + c, which nvcc
// never fuses; the fused operations of the CPU code (torch.lerp's) are explicit fmaf.
#pragma once

#include <math.h>

#include "launch.cuh"
#include "tile_gemm.cuh"
#include "surrogate/kernels/cuda_sphere_grid_ops.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace sphere_grid_kernels {

constexpr int kThreads = 256;  // threads per block of every kernel here

/// One thread per (sample, output latitude, output longitude, channel): y of that channel for every basis
/// function k, each the sum over the (t, k) segment in table order (0 + psi x + psi x + ...).
__global__ void __launch_bounds__(kThreads) disco_contraction_kernel(DiscoContractionArgs a, DiscoTable tab) {
  const index_t idx = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= static_cast<index_t>(a.nlon_out) * a.channels) return;
  const int wo = static_cast<int>(idx / a.channels), c = static_cast<int>(idx % a.channels);
  const index_t r = a.rows_begin + blockIdx.y;
  const index_t b = r / a.nlat_out;
  const int t = static_cast<int>(r % a.nlat_out);
  const int K = tab.kernel_size, cg = a.channels / a.groups, g = c / cg;
  const int shift = (a.nlon_in / a.nlon_out) * wo;
  const float* const xb = a.x + b * a.nlat_in * a.nlon_in * a.ldx + c;
  float* const dst = a.y + (static_cast<index_t>(blockIdx.y) * a.nlon_out + wo) * a.ldy +
                     static_cast<index_t>(g) * K * cg + (c - g * cg);
  for (int k = 0; k < K; ++k) {
    const index_t s = static_cast<index_t>(t) * K + k;
    const std::int64_t end = tab.segment[s + 1];
    float acc = 0.0f;
    for (std::int64_t z = tab.segment[s]; z < end; ++z) {
      int w = tab.lon_in[z] + shift;
      if (w >= a.nlon_in) w -= a.nlon_in;
      acc = acc + __fmul_rn(tab.value[z], xb[(static_cast<index_t>(tab.lat_in[z]) * a.nlon_in + w) * a.ldx]);
    }
    dst[static_cast<index_t>(k) * cg] = acc;
  }
}

constexpr int kTileRows = tile_gemm::kRows, kTileOut = tile_gemm::kCols;
static_assert(kThreads == tile_gemm::kThreads);

/// A block computes 64 rows x 64 outputs of one group (tile_gemm.cuh). Each output: fmaf over j ascending
/// from 0, then + bias.
__global__ void __launch_bounds__(kThreads) grouped_linear_kernel(GroupedLinearArgs a) {
  const index_t row0 = static_cast<index_t>(blockIdx.x) * kTileRows;
  const int out0 = static_cast<int>(blockIdx.y) * kTileOut, g = static_cast<int>(blockIdx.z);
  const float* const x = a.x + static_cast<index_t>(g) * a.in;
  const float* const w = a.weight + static_cast<index_t>(g) * a.in * a.out;
  float acc[4][4];
  tile_gemm::start(a.out, out0, acc, [](int) { return 0.0f; });
  tile_gemm::accumulate(
      a.rows, a.out, a.in, row0, out0, [&](index_t r, int k) { return x[r * a.ldx + k]; },
      [&](int k, int o) { return w[static_cast<index_t>(k) * a.out + o]; }, acc);
  tile_gemm::for_each_output(a.rows, a.out, row0, out0, acc, [&](index_t row, int o, float v) {
    const index_t col = static_cast<index_t>(g) * a.out + o;
    a.y[row * a.ldy + col] = a.bias ? v + a.bias[col] : v;
  });
}

/// torch.lerp on float32 (its vectorised CPU form, as resample.cpp): one fused multiply-add.
__device__ __forceinline__ float resample_lerp(float start, float end, float w) {
  const float diff = end - start;
  return fabsf(w) < 0.5f ? fmaf(w, diff, start) : fmaf(w - 1.0f, diff, end);
}

/// start + w * wrap(end - start), wrap(d) = remainder(d + pi, 2 pi) - pi (fmod moved into [0, 2 pi)).
__device__ __forceinline__ float resample_slerp(float start, float end, float w) {
  const float pi = static_cast<float>(3.14159265358979323846), two_pi = static_cast<float>(2.0 * 3.14159265358979323846);
  float r = fmodf((end - start) + pi, two_pi);
  if (r < 0.0f) r += two_pi;
  const float delta = r - pi;
  return start + __fmul_rn(w, delta);
}

/// The input rows x holds per sample, the output rows y receives (ResampleArgs' band; -1: the whole grid).
__device__ __forceinline__ index_t resample_in_rows(const ResampleArgs& a) {
  return static_cast<index_t>(a.in_end < 0 ? a.nlat_in : a.in_end) - a.in_begin;
}
__device__ __forceinline__ index_t resample_out_rows(const ResampleArgs& a) {
  return static_cast<index_t>(a.out_end < 0 ? a.nlat_out : a.out_end) - a.out_begin;
}

/// One thread per (sample, pole, channel): the longitude mean of the first (north) or last (south) input
/// row, summed in double in longitude order; bilinear-spherical: atan2 of the means of sin and cos. A pole
/// the band does not use (a.north / a.south unset) is left alone.
__global__ void __launch_bounds__(kThreads) resample_poles_kernel(ResampleArgs a, bool spherical) {
  const index_t idx = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (idx >= static_cast<index_t>(a.batch) * 2 * a.channels) return;
  const index_t c = idx % a.channels, side = (idx / a.channels) % 2, b = idx / (2 * static_cast<index_t>(a.channels));
  if (!(side == 0 ? a.north : a.south)) return;
  const index_t row = (side == 0 ? 0 : a.nlat_in - 1) - a.in_begin;  // in the rows x holds
  const float* const x = a.x + ((b * resample_in_rows(a) + row) * a.nlon_in) * a.channels + c;
  double s = 0.0, s2 = 0.0;
  for (int lon = 0; lon < a.nlon_in; ++lon) {
    const float v = x[static_cast<index_t>(lon) * a.channels];
    if (spherical) {
      s = s + static_cast<double>(sinf(v));
      s2 = s2 + static_cast<double>(cosf(v));
    } else {
      s = s + static_cast<double>(v);
    }
  }
  const float mean = static_cast<float>(s / a.nlon_in);
  a.poles[idx] = spherical ? atan2f(mean, static_cast<float>(s2 / a.nlon_in)) : mean;
}

/// One thread per (sample, output latitude, output longitude, channel): latitude interpolation on the
/// left and right input longitudes, then longitude interpolation (resample.cpp's order and operations).
__global__ void __launch_bounds__(kThreads) resample_interpolate_kernel(ResampleArgs a, ResampleTables tab) {
  const index_t idx = static_cast<index_t>(blockIdx.x) * kThreads + threadIdx.x;
  const index_t C = a.channels, po = resample_out_rows(a) * a.nlon_out, in_rows = resample_in_rows(a);
  if (idx >= static_cast<index_t>(a.batch) * po * C) return;
  const index_t c = idx % C, p = (idx / C) % po, b = idx / (C * po);
  const int t = a.out_begin + static_cast<int>(p / a.nlon_out), w = static_cast<int>(p % a.nlon_out);
  const int r0 = tab.lat_index[t], left = tab.lon_left[w], right = tab.lon_right[w];
  const float wl = tab.lat_weight[t], wo = tab.lon_weight[w];
  // The value of extended row r at input longitude lon (a pole row has one value per channel).
  const auto at = [&](int r, int lon) -> float {
    if (tab.expand_poles) {
      if (r == 0) return a.poles[(b * 2) * C + c];
      if (r == a.nlat_in + 1) return a.poles[(b * 2 + 1) * C + c];
      --r;
    }
    return a.x[((b * in_rows + (r - a.in_begin)) * a.nlon_in + lon) * C + c];
  };
  const float a0 = at(r0, left), a1 = at(r0 + 1, left), b0 = at(r0, right), b1 = at(r0 + 1, right);
  a.y[idx] = tab.spherical ? resample_slerp(resample_slerp(a0, a1, wl), resample_slerp(b0, b1, wl), wo)
                           : resample_lerp(resample_lerp(a0, a1, wl), resample_lerp(b0, b1, wl), wo);
}

}  // namespace sphere_grid_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
