// Resampling between latitude-longitude grids of the sphere: torch-harmonics' ResampleS2 (0.9.3) on the
// CPU, modes "bilinear" and "bilinear-spherical". Specification: docs/reference-models.md §5.7;
// semantics and tests: share/docs/sphere.md.
//
// The interpolation tables are computed as the official module computes them (float64 geometry, weights
// rounded to float32):
//  * if an output colatitude lies outside the input range (e.g. Legendre-Gauss -> equiangular, whose
//    poles are outside), the input is extended by a row at colatitude 0 and one at pi holding the
//    longitude mean of the first / last input row ("pole expansion");
//  * latitude: i = (number of input colatitudes <= the output colatitude) - 1, decremented when the output
//    colatitude equals the last input colatitude; weight t = (theta_out - theta_i) / (theta_{i+1} - theta_i);
//  * longitude: left = (number of input longitudes <= the output longitude) - 1, right = left + 1, or 0
//    (periodic wrap) when the output longitude is at or beyond the last input longitude; the span gains
//    2 pi when it is not positive;
//  * forward: latitude interpolation first (rounded to float32), then longitude, each with torch.lerp's
//    float32 arithmetic (bilinear) or the shortest-arc interpolation of angle-valued samples
//    f0 + t * wrap(f1 - f0), wrap into [-pi, pi) (bilinear-spherical, whose pole rows are circular means).
// A resampling between identical grids (same sizes and grid type) is the identity.
#pragma once

#include <string_view>
#include <utility>
#include <vector>

#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

/// "bilinear": linear in latitude then in longitude. "bilinear-spherical": the same along the shorter arc
/// of the circle, for fields whose values are angles (radians); the result is not re-wrapped.
enum class ResampleMode { bilinear, bilinear_spherical };

/// The torch-harmonics name of a mode ("bilinear", "bilinear-spherical").
const char* to_string(ResampleMode mode) noexcept;
/// The mode of a torch-harmonics name; anything else is an Error (invalid_argument) naming `argument`.
ResampleMode parse_resample_mode(std::string_view name, std::string_view argument = "mode");

/// The constructor arguments of torch-harmonics' ResampleS2.
struct ResampleConfig {
  int nlat_in = 0, nlon_in = 0;
  int nlat_out = 0, nlon_out = 0;
  Grid grid_in = Grid::equiangular;
  Grid grid_out = Grid::equiangular;
  ResampleMode mode = ResampleMode::bilinear;
};

class ResampleS2 {
 public:
  /// Validates the sizes (Error, invalid_argument, naming the argument) and computes the tables.
  explicit ResampleS2(const ResampleConfig& config);

  /// Resamples `batch` samples of `channels` channels, channels last:
  /// in[(b*Pi + p)*channels + c] with p = lat*nlon_in + lon, out[(b*Po + p)*channels + c] likewise on the
  /// output grid. `in` and `out` must not overlap (identity: a copy). OpenMP threads over output rows; the
  /// result does not depend on the number of threads.
  void forward(int batch, int channels, const float* in, float* out) const;

  /// The input latitude rows [first, second) that output rows [lat_begin, lat_end) read (a pole row reads
  /// the whole first / last input row; {lat_begin, lat_begin} for an empty range).
  std::pair<int, int> input_rows(int lat_begin, int lat_end) const;
  /// forward() restricted to output rows [out_begin, out_end) of every sample (latitude bands): `in` holds
  /// input rows [in_begin, in_end) of every sample (sample-major, row-major), which must contain
  /// input_rows(out_begin, out_end); `out` rows [out_begin, out_end). Bitwise the values of forward().
  void forward_rows(int batch, int channels, const float* in, int in_begin, int in_end, float* out, int out_begin,
                    int out_end) const;

  /// True when the official module skips the resampling (same sizes and grid type): forward copies.
  bool identity() const noexcept { return identity_; }
  /// True when the input is extended by the two pole rows.
  bool expand_poles() const noexcept { return expand_poles_; }
  const ResampleConfig& config() const noexcept { return config_; }

  /// The tables (the official buffers lat_idx, lat_weights, lon_idx_left, lon_idx_right, lon_weights):
  /// lat_index()[t] indexes the input rows, extended by the north pole row at 0 when expand_poles();
  /// the interpolation uses rows lat_index()[t] and lat_index()[t] + 1.
  const std::vector<int>& lat_index() const noexcept { return lat_index_; }
  const std::vector<float>& lat_weight() const noexcept { return lat_weight_; }
  const std::vector<int>& lon_left() const noexcept { return lon_left_; }
  const std::vector<int>& lon_right() const noexcept { return lon_right_; }
  const std::vector<float>& lon_weight() const noexcept { return lon_weight_; }

 private:
  ResampleConfig config_;
  bool identity_ = false;
  bool expand_poles_ = false;
  std::vector<int> lat_index_;
  std::vector<float> lat_weight_;
  std::vector<int> lon_left_, lon_right_;
  std::vector<float> lon_weight_;
};

}  // namespace surrogate::sphere
