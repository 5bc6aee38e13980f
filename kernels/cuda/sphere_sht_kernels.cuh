// The device code of the spherical harmonic transform kernels (sphere_sht.cu has the launchers; what they
// compute: surrogate/kernels/cuda_sphere_sht.hpp). In a header of its own so that the host emulation
// (tests/gpu/cuda_host_emulation.hpp) runs exactly this code on the CPU in tests. One thread per output
// element; no shared memory, no synchronisation.
#pragma once

#include "launch.cuh"
#include "surrogate/kernels/cuda_sphere_sht.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace sht_kernels {

constexpr int kThreads = 256;

/// y[(r * mmax + m) * 2C + part * C + c]: sum over j in order of x * twiddle in double (fma), times 1/nlon,
/// rounded to float; zero for m >= modes and for the imaginary part of the real orders 0 and nlon / 2.
__global__ void __launch_bounds__(kThreads) fourier_analysis_kernel(ShtFourierArgs a) {
  const index_t id = flat_index();
  const index_t C = a.channels, width = 2 * static_cast<index_t>(a.mmax) * C;
  if (id >= a.rows * width) return;
  const index_t r = id / width, rest = id - r * width;
  const int m = static_cast<int>(rest / (2 * C));
  const int part = static_cast<int>(rest / C % 2);
  const index_t c = rest % C;
  float value = 0.0f;
  if (m < a.modes && !(part == 1 && (m == 0 || 2 * m == a.nlon))) {
    const float* x = a.x + r * a.nlon * a.ldx + c;
    double sum = 0.0;
    index_t t = 0;  // m * j mod nlon
    for (int j = 0; j < a.nlon; ++j) {
      sum = fma(static_cast<double>(x[j * a.ldx]), a.twiddle[2 * t + part], sum);
      t += m;
      if (t >= a.nlon) t -= a.nlon;
    }
    value = static_cast<float>((part == 0 ? sum : -sum) / a.nlon);
  }
  a.y[id] = value;
}

/// y[((b * lmax + l) * mmax + m) * 2C + i] = float(sum_k table[(m * lmax + l) * nlat + k] * x[((b * nlat + k) * mmax
/// + m) * 2C + i]), k in order, products and sums rounded separately (RealSHT::legendre's double sums).
__global__ void __launch_bounds__(kThreads) legendre_analysis_kernel(ShtLegendreArgs a) {
  const index_t id = flat_index();
  const index_t C2 = 2 * static_cast<index_t>(a.channels);
  const index_t per_sample = static_cast<index_t>(a.lmax) * a.mmax * C2;
  if (id >= a.batch * per_sample) return;
  const index_t b = id / per_sample, rest = id - b * per_sample;
  const int l = static_cast<int>(rest / (static_cast<index_t>(a.mmax) * C2));
  const int m_local = static_cast<int>(rest / C2 % a.mmax), m = a.m_first + m_local;
  const index_t i = rest % C2;
  double sum = 0.0;
  if (l >= m) {
    const float* w = a.table + (static_cast<index_t>(m) * a.lmax + l) * a.nlat;
    const float* x = a.x + (b * a.nlat * a.mmax + m_local) * C2 + i;
    for (int k = 0; k < a.nlat; ++k)
      sum = __dadd_rn(sum, __dmul_rn(static_cast<double>(w[k]), static_cast<double>(x[k * a.mmax * C2])));
  }
  a.y[id] = static_cast<float>(sum);
}

/// y[((b * nlat + k) * modes + m) * 2C + i] = float(sum_{l = m}^{lmax - 1} table[(m * lmax + l) * nlat + k] *
/// x[((b * lmax + l) * mmax + m) * 2C + i]), l in order, rounded separately (InverseRealSHT's first step);
/// the imaginary parts of the orders 0 and nyquist are zero.
__global__ void __launch_bounds__(kThreads) legendre_synthesis_kernel(ShtLegendreArgs a) {
  const index_t id = flat_index();
  const index_t C2 = 2 * static_cast<index_t>(a.channels);
  const index_t lat_rows = a.lat_rows < 0 ? a.nlat : a.lat_rows;
  const index_t per_sample = lat_rows * a.modes * C2;
  if (id >= a.batch * per_sample) return;
  const index_t b = id / per_sample, rest = id - b * per_sample;
  const int k = a.lat_first + static_cast<int>(rest / (static_cast<index_t>(a.modes) * C2));
  const int m = static_cast<int>(rest / C2 % a.modes);
  const index_t i = rest % C2;
  double sum = 0.0;
  if (!(i >= a.channels && (m == 0 || m == a.nyquist))) {
    const float* p = a.table + static_cast<index_t>(m) * a.lmax * a.nlat + k;
    const float* x = a.x + (b * a.lmax * a.mmax + m) * C2 + i;
    for (int l = m; l < a.lmax; ++l)
      sum = __dadd_rn(sum, __dmul_rn(static_cast<double>(p[static_cast<index_t>(l) * a.nlat]),
                                     static_cast<double>(x[static_cast<index_t>(l) * a.mmax * C2])));
  }
  a.y[id] = static_cast<float>(sum);
}

/// y[(r * nlon + j) * ldy + c] = float(sum_m c_m (Re G_r(m) cos(2 pi m j / nlon) - Im G_r(m) sin(...))), m in order,
/// in double (fma); c_m = 1 for m = 0 and m = nlon / 2, else 2.
__global__ void __launch_bounds__(kThreads) fourier_synthesis_kernel(ShtFourierArgs a) {
  const index_t id = flat_index();
  const index_t C = a.channels;
  if (id >= a.rows * a.nlon * C) return;
  const index_t point = id / C, c = id - point * C;
  const index_t r = point / a.nlon;
  const int j = static_cast<int>(point - r * a.nlon);
  const float* g = a.x + r * a.modes * 2 * C + c;
  double sum = 0.0;
  index_t t = 0;  // m * j mod nlon
  for (int m = 0; m < a.modes; ++m) {
    const double weight = m == 0 || 2 * m == a.nlon ? 1.0 : 2.0;
    const double re = g[2 * static_cast<index_t>(m) * C], im = g[(2 * static_cast<index_t>(m) + 1) * C];
    sum = fma(weight * re, a.twiddle[2 * t], sum);
    sum = fma(-weight * im, a.twiddle[2 * t + 1], sum);
    t += j;
    if (t >= a.nlon) t -= a.nlon;
  }
  a.y[point * a.ldy + c] = static_cast<float>(sum);
}

}  // namespace sht_kernels
SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
