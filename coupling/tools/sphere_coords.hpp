// `surrogate predict`: checks the optional /coords of a point file against the grid of a spherical model.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/point_file.hpp"
#include "surrogate/sphere/model_grid.hpp"

namespace surrogate::cli {

/// Largest accepted difference of a /coords component from the grid's unit vector: far above float32
/// rounding of the components (6e-8) and of coordinates computed in float32 (~1e-6), far below the
/// spacing of any grid the models run on (2 pi / nlon, 2.2e-3 at 2880 longitudes).
inline constexpr double kGridCoordinateTolerance = 1e-4;

/// Collective. For spherical model files (surrogate::sphere::model_grid): every sample must hold the grid's
/// nlat*nlon points, and when the point file has /coords every row must be the unit vector of its grid point (row b*nlat*nlon + lat*nlon + lon of the file
/// holds point (lat, lon) of sample b) within kGridCoordinateTolerance per component; otherwise
/// Error(input) on every rank naming the first bad row. Other architectures and files without /coords:
/// nothing to check. `sample_sizes` are the layout's (samples are contiguous and sample-major in the file).
/// `grid`: sphere::model_grid(file, false), read once before the points (it refuses a layer file between
/// two grids before any input is read); the colatitudes are computed here when /coords needs them.
void check_sphere_coordinates(const MpiComm& comm, const ModelFile& file, std::optional<sphere::ModelGrid> grid,
                              const PointSlab& slab, const std::vector<index_t>& sample_sizes,
                              const std::string& input_path);

}  // namespace surrogate::cli
