// The input grid of the spherical model files (surrogate/sphere/model_grid.hpp).
#include "surrogate/sphere/model_grid.hpp"

#include <cmath>
#include <numbers>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/sphere/transformer.hpp"
#include "../../file_errors.hpp"
#include "../config.hpp"

namespace surrogate::sphere {

std::array<double, 3> ModelGrid::unit_vector(std::int64_t index) const {
  if (index < 0 || index >= points() || colatitude.size() != static_cast<std::size_t>(nlat))
    throw Error(ErrorCode::invalid_argument, "ModelGrid::unit_vector: point " + std::to_string(index) +
                                                 " is outside the " + std::to_string(nlat) + " x " +
                                                 std::to_string(nlon) + " grid");
  const double t = colatitude[static_cast<std::size_t>(index / nlon)];
  const double p = 2.0 * std::numbers::pi * static_cast<double>(index % nlon) / static_cast<double>(nlon);
  return {std::sin(t) * std::cos(p), std::sin(t) * std::sin(p), std::cos(t)};
}

namespace {

std::optional<ModelGrid> grid_of(const ModelFile& file, bool with_colatitudes) {
  ModelGrid g;
  const AttributeMap& a = file.config;
  if (file.architecture == "sphere_transformer") {
    const TransformerConfig c = TransformerConfig::from_attributes(a);
    g.nlat = c.nlat;
    g.nlon = c.nlon;
    g.grid = c.grid;
  } else if (file.architecture == "s2_attention" || file.architecture == "s2_neighborhood_attention") {
    refuse_between_grids(file, file.architecture == "s2_neighborhood_attention");  // not a Model: no one grid
    const auto shape = detail::grid_shape(a, "in_shape", "'" + file.path + "' " + file.architecture);
    g.nlat = static_cast<int>(shape[0]);
    g.nlon = static_cast<int>(shape[1]);
    g.grid = parse_grid(a.has("grid_in") ? a.get_string("grid_in") : "equiangular", "grid_in");
  } else {
    return std::nullopt;
  }
  if (with_colatitudes) g.colatitude = latitudes(g.nlat, g.grid).colatitude;
  return g;
}

}  // namespace

std::optional<ModelGrid> model_grid(const ModelFile& file, bool with_colatitudes) {
  return surrogate::detail::naming_the_file(file, [&] { return grid_of(file, with_colatitudes); });  // as make_model
}

}  // namespace surrogate::sphere
