// DISCO (discrete-continuous) convolution on the sphere: torch-harmonics' DiscreteContinuousConvS2
// (0.9.3 semantics, eval) on the CPU, with the filter tensor psi computed here as the official module
// computes it (float64 geometry, the (1 + 1e-3) cutoff slack, the filter basis, the basis normalisation,
// the merged quadrature weights), and its transpose DiscreteContinuousConvTransposeS2 (upsampling).
//
// DiscoConvS2 (nlon_in a multiple of nlon_out, p = nlon_in / nlon_out):
//   y[b, c, k, t, wo] = sum_{(hi, wi)} psi[k, t, hi*nlon_in + wi] x[b, c, hi, (wi + p*wo) mod nlon_in],
//   out[b, o, t, wo]  = sum_{c in group(o), k} W[o, c, k] y[b, c, k, t, wo] (+ bias[o]).
// DiscoConvTransposeS2 (nlon_out a multiple of nlon_in, p = nlon_out / nlon_in), psi the transpose table
// (rows = input latitudes ti, columns = output points ho*nlon_out + wo, for input longitude 0):
//   out[b, o, ho, (wo + p*wi) mod nlon_out] += sum_{c in group(o), k} W[o, c, k] psi[k, ti, ho*nlon_out + wo]
//                                              x[b, c, ti, wi]   (+ bias[o]), the adjoint of the gather.
//
// Semantics, options, version notes and measured errors: share/docs/sphere.md ("DISCO convolution");
// specification: docs/reference-models.md §5.6.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

/// The filter bases of torch-harmonics 0.9.3 (`basis_type`):
///  * piecewise_linear ("piecewise linear"): hat functions on rings x sectors, kernel_shape (nr[, nphi]);
///  * harmonic ("harmonic"): Hann window x sin/cos tensor product, each function divided by its numerical
///    L2 norm on the unit disk, kernel_shape (n0, n1) or n (= (n, n));
///  * morlet ("morlet", deprecated alias in 0.9.3): the harmonic basis without the L2 normalisation;
///  * zernike ("zernike"): L2-normalised Zernike polynomials up to radial order n_max = kernel_shape[0];
///  * fourier_bessel ("fourier-bessel"): J_m(alpha_{m,n} r / rc) {cos, sin}(m phi) divided by its analytic L2
///    norm on the unit disk, kernel_shape (n_radial, m_max) or n (= (n, n)): for m = 0 .. m_max the zeros
///    alpha_{m,n} (n <= n_radial) of J_m up to the n_radial-th zero of J_0, a cosine and (m > 0) a sine
///    function each, ordered by alpha (Bessel functions: std::cyl_bessel_j; zeros: bessel_j_zeros).
enum class FilterBasis { piecewise_linear, morlet, zernike, harmonic, fourier_bessel };

/// torch-harmonics 0.9.3's `basis_norm_mode` values: "none", "nodal", "modal", "mean", "support",
/// "geometric", plus the deprecated aliases "individual" (= nodal) and "area ratio" (= geometric).
enum class BasisNormMode { none, nodal, modal, mean, support, geometric, individual = nodal };

const char* to_string(FilterBasis basis) noexcept;
const char* to_string(BasisNormMode mode) noexcept;
/// torch-harmonics' names ("piecewise linear", "morlet", "harmonic", "zernike", "fourier-bessel");
/// Error(invalid_argument) naming `basis_type` otherwise.
FilterBasis parse_filter_basis(const std::string& name);
/// "none", "nodal", "modal", "mean", "support", "geometric", "individual", "area ratio";
/// Error(invalid_argument) naming `basis_norm_mode` otherwise.
BasisNormMode parse_basis_norm_mode(const std::string& name);

/// Number of basis functions K of a kernel shape (1 or 2 entries) for a basis:
/// piecewise linear (nr//2)*nphi + nr%2 (one entry: nphi = 1); harmonic/morlet n0*n1 (one entry n: n*n);
/// zernike n(n+1)/2 with n = kernel_shape[0]; fourier-bessel the number of selected (m, n, cos/sin) modes
/// (e.g. (3, 3): 13). Error(invalid_argument) naming `kernel_shape` for an empty/over-long shape or
/// non-positive entries (fourier-bessel allows m_max = 0).
int filter_basis_size(FilterBasis basis, const std::vector<int>& kernel_shape);

/// The first n positive zeros of the Bessel function J_m (float64): scan for sign changes of
/// std::cyl_bessel_j, then safeguarded Newton / bisection in the bracket down to adjacent doubles.
/// Error(invalid_argument) for m < 0 or n < 1.
std::vector<double> bessel_j_zeros(int m, int n);

struct DiscoConfig {
  int in_channels = 0, out_channels = 0;
  int nlat_in = 0, nlon_in = 0, nlat_out = 0, nlon_out = 0;
  Grid grid_in = Grid::equiangular, grid_out = Grid::equiangular;
  std::vector<int> kernel_shape;  // 1 or 2 entries, as the Python argument
  FilterBasis basis = FilterBasis::piecewise_linear;
  BasisNormMode norm_mode = BasisNormMode::nodal;  // the 0.9.3 default
  int groups = 1;
  bool bias = false;
  double theta_cutoff = 0.0;  // radians; <= 0: the official default for these grids
};

/// The cutoff the table is built with (before the 1e-3 slack): config.theta_cutoff if > 0, else the
/// 0.9.3 default = the largest colatitude gap of the OUTPUT grid (default_theta_cutoff(nlat_out,
/// grid_out); pi/(nlat_out-1) on equiangular grids).
double disco_theta_cutoff(const DiscoConfig& config);
/// The cutoff of the transpose convolution: config.theta_cutoff if > 0, else the 0.9.3 default of
/// DiscreteContinuousConvTransposeS2 = the largest colatitude gap of the INPUT grid.
double disco_transpose_theta_cutoff(const DiscoConfig& config);

/// psi of DiscreteContinuousConvS2 in COO form, sorted as torch-harmonics orders it (by kernel index,
/// then output latitude, then column): entry n is (ker[n], row[n] = output latitude t, col[n] =
/// hi * nlon_in + wi) for output longitude 0, value val[n] (the official float64 values with the
/// quadrature weights merged in; the forward rounds them to float32 as the official float32 forward does).
struct FilterTable {
  int kernel_size = 0;
  int nlat_out = 0;
  int nlat_in = 0;
  int nlon_in = 0;
  std::vector<std::int64_t> ker, row, col;
  std::vector<double> val;
};

/// Computes psi as torch-harmonics 0.9.3 does for this configuration. Errors (naming the argument):
/// invalid_argument for bad sizes/kernel shapes/cutoffs, unsupported for nlon_in % nlon_out != 0
/// (upsampling: compute_transpose_filter_table / DiscoConvTransposeS2).
FilterTable compute_filter_table(const DiscoConfig& config);

/// psi of DiscreteContinuousConvTransposeS2 as torch-harmonics 0.9.3 computes it: the table of the forward
/// convolution from the OUTPUT grid to the INPUT grid (grids swapped; cutoff disco_transpose_theta_cutoff),
/// normalised per (k, output latitude) group with the quadrature weights of the INPUT latitude,
/// w_ti / nlon_out / 2, merged, then divided by nlon_in / nlon_out. In FilterTable terms (the table's own
/// roles): nlat_out = config.nlat_in rows (ker, row = input latitude ti, col = ho * nlon_out + wo),
/// nlat_in = config.nlat_out, nlon_in = config.nlon_out; order (k, ti, ho, wo).
/// Errors: invalid_argument as compute_filter_table, unsupported for nlon_out % nlon_in != 0.
FilterTable compute_transpose_filter_table(const DiscoConfig& config);

/// The order of the two contractions of DiscoConvS2 and DiscoConvTransposeS2 (results within the same
/// float32 bound, not bitwise equal): gather_first: per output row, the table entries gather Cin channels,
/// then the packed linear layer (K*Cin -> Cout) on the output row (the official order of the forward);
/// weights_first: the linear layer on the input rows read (Cin -> K*Cout, the official order of the
/// transpose), then the entries gather Cout channels; automatic: the one with fewer multiply-adds (padded
/// widths; e.g. the transformer's decoder, 128 -> 3 channels, runs weights first).
enum class DiscoOrder { automatic, gather_first, weights_first };
/// The former name (the transpose had the two orders first).
using DiscoTransposeOrder = DiscoOrder;

class DiscoConvS2 {
 public:
  /// weight: (out_channels, in_channels/groups, K) flat as PyTorch stores it; bias: out_channels values
  /// if config.bias (else empty). table: nullptr = compute_filter_table(config); otherwise a table from
  /// the model file (checked against the config: sizes, kernel size, index ranges, finite values).
  /// order: the DiscoOrder of the two contractions (automatic: by multiply-add count; see order()).
  DiscoConvS2(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
              const FilterTable* table = nullptr, DiscoOrder order = DiscoOrder::automatic);
  ~DiscoConvS2();
  DiscoConvS2(DiscoConvS2&&) noexcept;
  DiscoConvS2& operator=(DiscoConvS2&&) noexcept;

  /// Channels last: in[(b*Pi + p)*in_channels + c], p = lat*nlon_in + lon (lat 0 = north);
  /// out[(b*Po + p)*out_channels + o]. OpenMP over (sample, output latitude) rows inside.
  void forward(int batch, const float* in, float* out) const;

  /// The input latitude rows [first, second) that output rows [lat_begin, lat_end) read (from the
  /// table; {lat_begin, lat_begin} when they read none).
  std::pair<int, int> input_rows(int lat_begin, int lat_end) const;
  /// The forward restricted to output rows [out_begin, out_end) of every sample (latitude bands):
  /// in[((b*(in_end - in_begin) + lat - in_begin)*nlon_in + lon)*in_channels + c] holds input rows
  /// [in_begin, in_end) of every sample, which must contain input_rows(out_begin, out_end);
  /// out likewise with rows [out_begin, out_end). Each output value is computed exactly as forward()
  /// computes it (bitwise the same).
  void forward_rows(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                    int out_end) const;

  const DiscoConfig& config() const;
  int kernel_size() const;
  const FilterTable& table() const;
  /// The order in use (gather_first or weights_first).
  DiscoOrder order() const;
  /// The weight (out_channels, in_channels/groups, K) and bias (empty without) as the constructor took
  /// them, read back from the operator's packed copy (exactly).
  std::vector<float> weight() const;
  std::vector<float> bias() const;
  /// The scratch is kept between forwards (one set per concurrent forward; share/docs/sphere.md, "Forward
  /// workspaces"): release_workspace() frees the sets no forward is using, workspace_bytes() is what they hold.
  void release_workspace() const noexcept;
  std::size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// torch-harmonics' DiscreteContinuousConvTransposeS2 (0.9.3 semantics, eval): the same options as
/// DiscoConvS2 (weight (out_channels, in_channels/groups, K) as PyTorch stores it), nlon_out a multiple of
/// nlon_in, default cutoff from the input grid. Computed per output row as a gather (the input rows of the
/// table entries of that row) in float32 with psi rounded to float32, in the DiscoOrder chosen
/// (the row contraction shared with DiscoConvS2; scratch: one output row per thread, plus for weights_first
/// the weighted input rows that the output rows read, one sample at a time).
class DiscoConvTransposeS2 {
 public:
  /// table: nullptr = compute_transpose_filter_table(config); otherwise a table from the model file
  /// (checked: kernel size, its grid (nlat_out = config.nlat_in, nlat_in = config.nlat_out, nlon_in =
  /// config.nlon_out), lengths, index ranges, finite values).
  DiscoConvTransposeS2(const DiscoConfig& config, std::vector<float> weight, std::vector<float> bias,
                       const FilterTable* table = nullptr, DiscoOrder order = DiscoOrder::automatic);
  ~DiscoConvTransposeS2();
  DiscoConvTransposeS2(DiscoConvTransposeS2&&) noexcept;
  DiscoConvTransposeS2& operator=(DiscoConvTransposeS2&&) noexcept;

  /// Channels last, as DiscoConvS2::forward. OpenMP over (sample, output latitude) rows.
  void forward(int batch, const float* in, float* out) const;
  /// The input latitude rows [first, second) that output rows [lat_begin, lat_end) read.
  std::pair<int, int> input_rows(int lat_begin, int lat_end) const;
  /// The forward restricted to output rows [out_begin, out_end), with input rows [in_begin, in_end)
  /// (containing input_rows(out_begin, out_end)); bitwise the values forward() computes.
  void forward_rows(int batch, const float* in, int in_begin, int in_end, float* out, int out_begin,
                    int out_end) const;

  const DiscoConfig& config() const;
  int kernel_size() const;
  const FilterTable& table() const;
  /// The order in use (gather_first or weights_first).
  DiscoOrder order() const;
  /// The weight (out_channels, in_channels/groups, K) and bias (empty without) as the constructor took
  /// them, read back from the operator's packed copy (exactly).
  std::vector<float> weight() const;
  std::vector<float> bias() const;
  /// The scratch is kept between forwards (one set per concurrent forward; share/docs/sphere.md, "Forward
  /// workspaces"): release_workspace() frees the sets no forward is using, workspace_bytes() is what they hold.
  void release_workspace() const noexcept;
  std::size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace surrogate::sphere
