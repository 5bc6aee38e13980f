// Random model files for tests and benchmarks (weights scaled so activations stay O(1) and attention is
// far from uniform).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "surrogate/flare.hpp"
#include "surrogate/model_file.hpp"

namespace surrogate::testing {

/// The canonical /config attributes of a FLARE configuration.
AttributeMap flare_attributes(const flare::Config& cfg);

/// A complete, valid FLARE model file with random weights.
ModelFile random_flare_file(const flare::Config& cfg, std::uint64_t seed);

/// The official default elasticity model: in 2, out 1, C 64, H 8, M 64, 8 blocks.
flare::Config elasticity_config();

}  // namespace surrogate::testing
