// `surrogate predict`: /coords of a point file against the grid of a spherical model (sphere_coords.hpp).
#include "sphere_coords.hpp"

#include <cmath>
#include <cstdio>
#include <optional>

#include "surrogate/error.hpp"
#include "surrogate/sphere/model_grid.hpp"

namespace surrogate::cli {

void check_sphere_coordinates(const MpiComm& comm, const ModelFile& file, std::optional<sphere::ModelGrid> grid,
                              const PointSlab& slab, const std::vector<index_t>& sample_sizes,
                              const std::string& input_path) {
  if (!grid) return;
  Status status;
  // Every sample is one whole grid: checked here, before the model builds its tables (minutes on a large grid).
  for (std::size_t s = 0; s < sample_sizes.size() && status.ok(); ++s)
    if (sample_sizes[s] != grid->points())
      status = {ErrorCode::input, "'" + input_path + "': sample " + std::to_string(s) + " has " +
                                      std::to_string(sample_sizes[s]) + " points, the " + file.architecture +
                                      " model's " + std::to_string(grid->nlat) + " x " + std::to_string(grid->nlon) +
                                      " grid has " + std::to_string(grid->points()) +
                                      " (rows in row-major latitude-longitude order, one whole grid per sample)"};
  if (!status.ok() || !slab.has_coords) {
    comm.agree_or_throw(status);
    return;
  }
  if (slab.dim == 3) collectively(comm, [&] { grid->colatitude = sphere::latitudes(grid->nlat, grid->grid).colatitude; });
  if (slab.dim != 3) {
    status = {ErrorCode::input, "'" + input_path + "': /coords has " + std::to_string(slab.dim) + " columns; for the " +
                                    file.architecture + " model it is optional and, if present, holds the unit vectors "
                                    "(x, y, z) of the grid points"};
  } else {
    std::int64_t sample = 0, sample_start = 0;  // the sample of the current row and its first file row
    for (std::int64_t i = 0; i < slab.count && status.ok(); ++i) {
      const std::int64_t row = slab.offset + i;
      while (sample + 1 < static_cast<std::int64_t>(sample_sizes.size()) &&
             row >= sample_start + sample_sizes[static_cast<std::size_t>(sample)])
        sample_start += sample_sizes[static_cast<std::size_t>(sample++)];
      const std::int64_t point = row - sample_start;
      const auto expected = grid->unit_vector(point);
      const float* c = slab.coords.data() + i * 3;
      double worst = 0.0;
      for (int d = 0; d < 3; ++d) worst = std::max(worst, std::abs(static_cast<double>(c[d]) - expected[static_cast<std::size_t>(d)]));
      if (!(worst <= kGridCoordinateTolerance)) {
        char text[256];
        std::snprintf(text, sizeof text, "(%.7g, %.7g, %.7g) but point (lat %lld, lon %lld) is (%.7g, %.7g, %.7g)", c[0],
                      c[1], c[2], static_cast<long long>(point / grid->nlon), static_cast<long long>(point % grid->nlon),
                      expected[0], expected[1], expected[2]);
        status = {ErrorCode::input,
                  "'" + input_path + "': /coords row " + std::to_string(row) +
                      " (sample " + std::to_string(sample) + ") is " + text + " on the model's " +
                      std::to_string(grid->nlat) + " x " + std::to_string(grid->nlon) + " " + sphere::to_string(grid->grid) +
                      " grid: rows must be the grid points in row-major order (latitude 0 = north, then longitude 2 pi "
                      "lon / nlon), as unit vectors (sin t cos p, sin t sin p, cos t); /coords may also be left out"};
      }
    }
  }
  comm.agree_or_throw(status);
}

}  // namespace surrogate::cli
