// Read access to a SphericalTransformer's layers (network.cpp: program.hpp's Layers over SphereHostOps) for
// the band plan (bands.cpp) and the device forward (../cuda/transformer.cpp, which converts them to its own
// Ops). Internal to libsurrogate.
#pragma once

#include "host_ops.hpp"
#include "program.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

struct TransformerInternals {
  static const program::Layers<SphereHostOps>& layers(const SphericalTransformer& net);
};

}  // namespace surrogate::sphere
