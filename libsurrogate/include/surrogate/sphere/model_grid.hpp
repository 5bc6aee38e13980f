// The input grid of a spherical model file: which latitude-longitude grid the rows of a sample are, so that
// callers that hold coordinates (`surrogate predict`'s /coords) can check them against it.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

#include "surrogate/model_file.hpp"
#include "surrogate/sphere/quadrature.hpp"

namespace surrogate::sphere {

/// The grid a spherical model reads: nlat x nlon points of `grid`, row-major (latitude 0 = north, then
/// longitude), one sample = nlat * nlon rows.
struct ModelGrid {
  int nlat = 0, nlon = 0;
  Grid grid = Grid::equiangular;
  std::vector<double> colatitude;  // nlat values, ascending (latitudes(nlat, grid).colatitude)

  std::int64_t points() const { return static_cast<std::int64_t>(nlat) * nlon; }
  /// The unit vector (sin t cos p, sin t sin p, cos t) of point `index` of a sample (0 <= index < points()),
  /// t its colatitude and p = 2 pi lon / nlon its longitude, in float64. Throws Error(invalid_argument)
  /// for an index outside the grid.
  std::array<double, 3> unit_vector(std::int64_t index) const;
};

/// The input grid of a model file of architecture "sphere_transformer" (img_size, grid), "s2_attention" or
/// "s2_neighborhood_attention" (in_shape, grid_in); std::nullopt for every other architecture. Throws
/// Error(format) when the attributes that define the grid are missing or invalid. With_colatitudes false:
/// the shape only (`colatitude` left empty), for size checks: a large grid's quadrature rule takes seconds.
std::optional<ModelGrid> model_grid(const ModelFile& file, bool with_colatitudes = true);

}  // namespace surrogate::sphere
