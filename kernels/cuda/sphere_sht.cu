// Launchers of the spherical harmonic transform kernels (surrogate/kernels/cuda_sphere_sht.hpp); the device
// code is in sphere_sht_kernels.cuh. One thread per output element, kThreads per block, a 1-D grid.
#include <stdexcept>
#include <string>

#include "launch.cuh"
#include "sphere_sht_kernels.cuh"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"

namespace surrogate::kernels::cuda {
SURROGATE_CUDA_BACKEND_BEGIN
namespace {

using sht_kernels::kThreads;

void check_fourier(const ShtFourierArgs& a, const char* kernel, bool analysis) {
  require(a.rows >= 0 && a.nlon >= 1 && a.channels >= 1 && a.mmax >= 1 && a.modes >= 1 && a.modes <= a.mmax &&
              a.modes <= a.nlon / 2 + 1 && a.x && a.y && a.twiddle,
          kernel,
          "need rows >= 0, nlon, channels, mmax >= 1, 1 <= modes <= min(mmax, nlon / 2 + 1), inputs and outputs "
          "(nlon " + std::to_string(a.nlon) + ", mmax " + std::to_string(a.mmax) + ", modes " +
              std::to_string(a.modes) + ")");
  require(analysis ? a.ldx >= a.channels : a.ldy >= a.channels && a.mmax == a.modes, kernel,
          "the field's row stride must be >= channels (synthesis: mmax == modes)");
}

void check_legendre(const ShtLegendreArgs& a, const char* kernel) {
  require(a.batch >= 0 && a.nlat >= 1 && a.lmax >= 1 && a.mmax >= 1 && a.channels >= 1 && a.table && a.x && a.y,
          kernel, "need batch >= 0, nlat, lmax, mmax, channels >= 1, a table, inputs and outputs");
}

}  // namespace

void sht_fourier_analysis(const ShtFourierArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sht_fourier_analysis(a, stream));
  check_fourier(a, "sht_fourier_analysis", true);
  const index_t elements = a.rows * 2 * static_cast<index_t>(a.mmax) * a.channels;
  if (elements == 0) return;
  launch(sht_kernels::fourier_analysis_kernel, blocks_for("sht_fourier_analysis", elements, kThreads), kThreads, 0, stream, a);
  check_launch("sht fourier_analysis_kernel");
}

void sht_fourier_synthesis(const ShtFourierArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sht_fourier_synthesis(a, stream));
  check_fourier(a, "sht_fourier_synthesis", false);
  const index_t elements = a.rows * a.nlon * static_cast<index_t>(a.channels);
  if (elements == 0) return;
  launch(sht_kernels::fourier_synthesis_kernel, blocks_for("sht_fourier_synthesis", elements, kThreads), kThreads, 0, stream, a);
  check_launch("sht fourier_synthesis_kernel");
}

void sht_legendre_analysis(const ShtLegendreArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sht_legendre_analysis(a, stream));
  check_legendre(a, "sht_legendre_analysis");
  const index_t elements = static_cast<index_t>(a.batch) * a.lmax * a.mmax * 2 * a.channels;
  if (elements == 0) return;
  launch(sht_kernels::legendre_analysis_kernel, blocks_for("sht_legendre_analysis", elements, kThreads), kThreads, 0, stream, a);
  check_launch("sht legendre_analysis_kernel");
}

void sht_legendre_synthesis(const ShtLegendreArgs& a, cudaStream_t stream) {
  SURROGATE_CUDA_ON_HOST_BACKEND(stream, sht_legendre_synthesis(a, stream));
  check_legendre(a, "sht_legendre_synthesis");
  require(a.modes >= 1 && a.modes <= a.mmax && (a.nyquist == -1 || (a.nyquist >= 1 && a.nyquist < a.modes)),
          "sht_legendre_synthesis", "need 1 <= modes <= mmax and nyquist -1 or an order below modes");
  const index_t elements = static_cast<index_t>(a.batch) * (a.lat_rows < 0 ? a.nlat : a.lat_rows) * a.modes * 2 * a.channels;
  if (elements == 0) return;
  launch(sht_kernels::legendre_synthesis_kernel, blocks_for("sht_legendre_synthesis", elements, kThreads), kThreads, 0, stream, a);
  check_launch("sht legendre_synthesis_kernel");
}

SURROGATE_CUDA_BACKEND_END
}  // namespace surrogate::kernels::cuda
