// The configuration of the spherical model files (internal): the torch-harmonics release they record, and
// the constructor arguments and weights of the single-layer files (s2_attention, s2_neighborhood_attention;
// model-format.md §4.3). The SphericalTransformer's are TransformerConfig (transformer/config.cpp).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "surrogate/error.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace surrogate::sphere::detail {

/// Reads /config's torch_harmonics_version and refuses releases before 0.9.1, whose neighbourhood-attention
/// scale placement and DISCO normalisation default differ (reference-models §5.1); returns the string.
inline std::string check_release(const AttributeMap& config, const std::string& family) {
  if (!config.has("torch_harmonics_version"))
    throw Error(ErrorCode::format, family + " /config: attribute 'torch_harmonics_version' (the release the model was "
                                            "trained with, e.g. \"0.9.3\") is missing");
  const std::string v = config.get_string("torch_harmonics_version");
  int major = 0, minor = 0, patch = 0;
  if (std::sscanf(v.c_str(), "%d.%d.%d", &major, &minor, &patch) < 2)
    throw Error(ErrorCode::format, family + " /config: unreadable torch_harmonics_version '" + v + "'");
  if (major == 0 && (minor < 9 || (minor == 9 && patch < 1)))
    throw Error(ErrorCode::unsupported, family + ": trained with torch-harmonics " + v +
                                            "; this library implements the semantics of 0.9.1 and later (the "
                                            "neighbourhood attention scale and the DISCO normalisation changed in "
                                            "0.9.1, share/docs/sphere.md)");
  return v;
}

/// Largest grid a spherical model file may declare: the grid drives the quadrature, SHT and DISCO work
/// and memory before any weight is checked (0.044 degrees; ERA5's 721 x 1440 fits easily).
inline constexpr std::int64_t kMaxGridLatitudes = 4096;
inline constexpr std::int64_t kMaxGridLongitudes = 8192;

/// A grid shape attribute (nlat, nlon): two integers within the limits above; errors name the attribute.
inline std::vector<std::int64_t> grid_shape(const AttributeMap& config, const std::string& name,
                                            const std::string& family) {
  const auto shape = config.get_int_list(name);
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1 || shape[0] > kMaxGridLatitudes ||
      shape[1] > kMaxGridLongitudes)
    throw Error(ErrorCode::format, family + " /config: attribute '" + name + "' must hold two integers (nlat, nlon) " +
                                       "from 1 to " + std::to_string(kMaxGridLatitudes) + " and " +
                                       std::to_string(kMaxGridLongitudes) + ", found " +
                                       AttributeMap::to_text(config.values().at(name)));
  return shape;
}

}  // namespace surrogate::sphere::detail

namespace surrogate::sphere {

/// A single-layer file's operator configuration (`nbh` filled for s2_neighborhood_attention) and weights.
struct LayerSetup {
  AttentionS2Config att;
  NeighborhoodAttentionS2Config nbh;
  AttentionS2Weights weights;
};

/// Reads a single-layer file: release check, configuration, weights (every stored tensor must be one the
/// operator takes: Error(weights) otherwise). A file between two grids is Error(unsupported) unless
/// `between_grids` (the operators of layer_file.hpp take those; a Model cannot).
LayerSetup layer_setup(const ModelFile& file, bool neighborhood, bool between_grids);
/// Error(unsupported) for a single-layer file between two grids (in_shape != out_shape) where a Model is
/// asked for: the reason and the C++ API that runs it. Cheap (attributes only), so that callers can
/// refuse such a file before reading anything else (model_grid does).
void refuse_between_grids(const ModelFile& file, bool neighborhood);

/// The number of values of every weight tensor of the file.
std::int64_t count_parameters(const ModelFile& file);

}  // namespace surrogate::sphere
