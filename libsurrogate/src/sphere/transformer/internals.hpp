// Read access to a SphericalTransformer's layers (network.cpp: program.hpp's Layers over SphereHostOps) for
// the band plan (bands.cpp) and the device forward (../cuda/transformer.cpp, which converts them to its own
// Ops). Internal to libsurrogate.
#pragma once

#include "host_ops.hpp"
#include "program.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

struct TransformerInternals {
  static const program::Layers<SphereHostOps>& layers(const SphericalTransformer& net);
};

/// The weights of block `block`'s attention (blocks.<block>.self_attn.*) as the CPU forward reads them.
AttentionS2Weights transformer_attention_weights(const ModelFile& file, int block);

}  // namespace surrogate::sphere
