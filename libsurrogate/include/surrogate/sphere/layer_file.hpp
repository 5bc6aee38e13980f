// The single-layer model files (families "s2_attention" and "s2_neighborhood_attention", written by
// share/tools/surrogate-export; schema: model-format.md §4.3) as operators between any two grids.
//
// Through make_model / `surrogate predict` such a file runs as self-attention on one grid: a generic Model
// maps every input point to one output row, while a layer between two grids (cross-attention,
// downsampling, the upsampling mode of NeighborhoodAttentionS2) takes its query on the output grid and its
// keys/values on the input grid - two fields on two grids. make_model refuses those files
// (Error(unsupported) naming these functions); a C++ caller builds the operator here and calls its
// forward(batch, query, key, value, out) (channels last, row-major latitude-longitude; see
// attention.hpp / neighborhood_attention.hpp). Semantics: share/docs/sphere.md.
#pragma once

#include "surrogate/model_file.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"

namespace surrogate::sphere {

/// The AttentionS2 of an "s2_attention" file (in_shape = key/value grid, out_shape = query grid). Errors:
/// another architecture (format), a release before 0.9.1 (unsupported), missing or mis-sized tensors
/// (weights), the operator's own argument checks.
AttentionS2 attention_from_file(const ModelFile& file);

/// The NeighborhoodAttentionS2 of an "s2_neighborhood_attention" file, any mode (self-attention,
/// downsampling, upsampling). Errors as attention_from_file.
NeighborhoodAttentionS2 neighborhood_attention_from_file(const ModelFile& file);

}  // namespace surrogate::sphere
