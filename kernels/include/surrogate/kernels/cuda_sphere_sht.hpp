// CUDA kernels of the real spherical harmonic transforms (CUDA builds only): the four steps of
// surrogate::sphere::RealSHT / InverseRealSHT (sphere/sht.hpp, torch-harmonics' RealSHT and
// InverseRealSHT), as the SphericalTransformer's upsample_sht decoder uses them. One thread per output
// element, every sum in double in a fixed order, rounded to float32 where the CPU (and the official
// module) holds float32:
//  * fourier analysis: X_r(m) = (1/nlon) sum_j x_r(j) e^{-2 pi i m j / nlon} for the rows r (a direct DFT
//    in j order; the CPU uses an FFT, so the double sums round differently: the float32 results agree to
//    about one unit in the last place);
//  * legendre analysis: a(l, m) = sum_k W[m][l][k] X_k(m), k in order, product and sum rounded separately
//    (no contraction): bitwise RealSHT::legendre;
//  * legendre synthesis: G_k(m) = sum_{l >= m} P[m][l][k] a(l, m), l in order, the imaginary part of the
//    orders 0 and nlon / 2 dropped: bitwise InverseRealSHT's first step;
//  * fourier synthesis: f(j) = sum_m c_m (Re G(m) cos(2 pi m j / nlon) - Im G(m) sin(...)), c_0 = c_{nlon/2} =
//    1, else 2, m in order (the CPU uses an FFT: agreement to about one unit in the last place).
// The tables come from the CPU classes (RealSHT::weights(), InverseRealSHT::table()); the twiddles
// cos/sin(2 pi t / nlon), t < nlon, are computed on the host in double.
//
// Layouts (sht.hpp): fields channels last, x[(r * nlon + j) * ld + c] for rows r = b * nlat + lat;
// Fourier rows fourier[(r * mmax + m) * 2C + part * C + c] (part 0 real, 1 imaginary); coefficients
// coeff[((b * lmax + l) * mmax + m) * 2C + part * C + c]; synthesis rows g[(r * modes + m) * 2C + ...].
#pragma once

#include <cuda_runtime_api.h>

#include "surrogate/kernels/cpu.hpp"  // index_t

namespace surrogate::kernels::cuda {

struct ShtFourierArgs {
  const float* x = nullptr;       // analysis: the fields; synthesis: the G rows
  index_t ldx = 0;                // analysis: floats per point (>= channels)
  float* y = nullptr;             // analysis: the Fourier rows; synthesis: the fields
  index_t ldy = 0;                // synthesis: floats per point (>= channels)
  const double* twiddle = nullptr;  // device, 2 * nlon: cos(2 pi t / nlon), sin(2 pi t / nlon) for t < nlon
  index_t rows = 0;               // batch * nlat
  int nlon = 0, channels = 0;
  int mmax = 0;                   // orders per row (analysis output; synthesis input: the G rows' modes)
  int modes = 0;                  // orders computed: min(mmax, nlon / 2 + 1); analysis orders >= modes are zero
};
/// Fourier rows of `rows` latitude rows (RealSHT::fourier_rows).
void sht_fourier_analysis(const ShtFourierArgs& a, cudaStream_t stream);
/// Fields from the synthesis rows (InverseRealSHT's second step); a.mmax = a.modes.
void sht_fourier_synthesis(const ShtFourierArgs& a, cudaStream_t stream);

struct ShtLegendreArgs {
  const float* table = nullptr;  // device, [(m * lmax + l) * nlat + k]: RealSHT::weights() / InverseRealSHT::table()
  const float* x = nullptr;
  float* y = nullptr;
  int batch = 0, nlat = 0, lmax = 0, mmax = 0, channels = 0;
  int modes = 0;                 // synthesis: orders of the output rows, min(mmax, nlon / 2 + 1)
  int nyquist = -1;              // synthesis: the order nlon / 2 when nlon is even and it is < modes, else -1
  // Order split (analysis, several ranks): x and y hold the mmax orders [m_first, m_first + mmax) only
  // (x[((b * nlat + k) * mmax + m - m_first) * 2C + i], y[((b * lmax + l) * mmax + m - m_first) * 2C + i]);
  // the table is the whole one. Each coefficient's sum is the whole-grid one (same k order).
  int m_first = 0;
  // Latitude band (synthesis): y holds the output rows [lat_first, lat_first + lat_rows) of each sample
  // (y[((b * lat_rows + k - lat_first) * modes + m) * 2C + i]); lat_rows -1: every row (nlat). nlat stays
  // the table's latitude count.
  int lat_first = 0, lat_rows = -1;
};
/// Coefficients from the Fourier rows of every latitude (RealSHT::legendre).
void sht_legendre_analysis(const ShtLegendreArgs& a, cudaStream_t stream);
/// Synthesis rows G from the coefficients (InverseRealSHT, first step).
void sht_legendre_synthesis(const ShtLegendreArgs& a, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
