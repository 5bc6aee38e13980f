// CUDA kernels of the spherical grid operators (CUDA builds only): torch-harmonics' DISCO convolution
// (DiscreteContinuousConvS2, gather mode) split as the CPU operator splits it (libsurrogate/src/sphere/
// disco_conv.cpp), and ResampleS2 (bilinear / bilinear-spherical, with the pole expansion).
//
//  * disco_contraction: y[row][g*K*Cg + k*Cg + c] = sum_z psi_z x[hi_z, (wi_z + p*wo) mod nlon_in, g*Cg + c]
//    over the entries z of the (output latitude t, basis function k) segment, in table order, float32,
//    product then sum (never fused): the CPU operator's arithmetic, bitwise.
//  * grouped_linear: out[row][g*out + o] = sum_j x[row][g*in + j] w[g][j][o] (+ bias[g*out + o]), FP32, j
//    ascending with fused multiply-adds, the bias added last (the CPU's packed linear kernel sums in
//    another order: a float32 bound apart).
//  * resample_poles / resample_interpolate: the pole rows (longitude means, double sums; circular means
//    for bilinear-spherical) and the latitude-then-longitude interpolation with torch.lerp's float32
//    arithmetic (or the shortest-arc form), exactly the CPU operator's operations (bitwise, except the
//    float sin/cos/atan2 of the bilinear-spherical pole rows, which are the device's, not glibc's).
//
// Every output element is computed by one thread, in an order that does not depend on the launch
// geometry: results are bitwise reproducible run to run. Device buffers, row-major, channels last.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "surrogate/kernels/cpu.hpp"  // index_t

namespace surrogate::kernels::cuda {

/// The filter table of a DISCO convolution regrouped by (output latitude t, basis function k), table
/// order kept inside each group: entries [segment[t*K + k], segment[t*K + k + 1]).
struct DiscoTable {
  const std::int64_t* segment = nullptr;  // device, nlat_out * K + 1
  const std::int32_t* lat_in = nullptr;   // device, input latitude hi of each entry
  const std::int32_t* lon_in = nullptr;   // device, input longitude wi of each entry (for output longitude 0)
  const float* value = nullptr;           // device, psi rounded to float32
  int kernel_size = 0;                    // K
};

struct DiscoContractionArgs {
  const float* x = nullptr;  // batch * nlat_in * nlon_in rows of `channels` values (row stride ldx)
  index_t ldx = 0;
  float* y = nullptr;        // (rows_end - rows_begin) * nlon_out rows of K * channels values (stride ldy)
  index_t ldy = 0;
  int batch = 0, nlat_in = 0, nlon_in = 0, nlat_out = 0, nlon_out = 0;
  int channels = 0, groups = 1;
  /// (sample, output latitude) rows r = b * nlat_out + t in [rows_begin, rows_end); y row
  /// (r - rows_begin) * nlon_out + wo. At most 65535 rows per call.
  index_t rows_begin = 0, rows_end = 0;
};
/// Throws std::invalid_argument for inconsistent sizes (nlon_out not dividing nlon_in, channels not a
/// multiple of groups, too many rows).
void disco_contraction(const DiscoContractionArgs& a, const DiscoTable& table, cudaStream_t stream);

struct GroupedLinearArgs {
  const float* x = nullptr;         // rows x groups*in (stride ldx); group g reads columns [g*in, (g+1)*in)
  index_t ldx = 0;
  const float* weight = nullptr;    // device [groups][in][out]: w[g][j][o]
  const float* bias = nullptr;      // device groups*out values, or nullptr
  float* y = nullptr;               // rows x groups*out (stride ldy); must not alias x
  index_t ldy = 0;
  index_t rows = 0;
  int in = 0, out = 0, groups = 1;
};
void grouped_linear(const GroupedLinearArgs& a, cudaStream_t stream);

/// The interpolation tables of ResampleS2 (the CPU operator's lat_index, lat_weight, lon_left, lon_right,
/// lon_weight), on the device. Rows of the extended input: with expand_poles, row 0 is the north pole row,
/// row r the input row r - 1 and row nlat_in + 1 the south pole row.
struct ResampleTables {
  const int* lat_index = nullptr;    // nlat_out
  const float* lat_weight = nullptr;  // nlat_out
  const int* lon_left = nullptr;     // nlon_out
  const int* lon_right = nullptr;    // nlon_out
  const float* lon_weight = nullptr;  // nlon_out
  bool expand_poles = false;
  bool spherical = false;  // bilinear-spherical
};

struct ResampleArgs {
  const float* x = nullptr;  // batch * nlat_in * nlon_in rows of `channels` values (contiguous)
  float* y = nullptr;        // batch * nlat_out * nlon_out rows of `channels` values; must not alias x
  float* poles = nullptr;    // device scratch of batch * 2 * channels values (with expand_poles)
  int batch = 0, channels = 0, nlat_in = 0, nlon_in = 0, nlat_out = 0, nlon_out = 0;
  // Latitude bands (ResampleS2Device::forward_rows): x holds the input rows [in_begin, in_end) of each
  // sample, y the output rows [out_begin, out_end); an end of -1 means nlat_in / nlat_out (the whole
  // grid). With expand_poles, the north (south) pole row is computed only where `north` (`south`) is set,
  // from input row 0 (nlat_in - 1), which x must then hold.
  int in_begin = 0, in_end = -1, out_begin = 0, out_end = -1;
  bool north = true, south = true;
};
/// With t.expand_poles: the pole rows (poles[(b*2 + side)*channels + c]), then the interpolation;
/// without: the interpolation only. Not for the identity (the caller copies).
void resample(const ResampleArgs& a, const ResampleTables& t, cudaStream_t stream);

}  // namespace surrogate::kernels::cuda
