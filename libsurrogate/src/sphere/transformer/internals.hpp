// Read access to the parts of a SphericalTransformer (network.cpp) for the band plan (bands.cpp) and the
// device forward (../cuda/transformer.cpp): the CPU operators (their configurations and tables), the
// position embedding, the norms' weights and the packed MLP layers. Internal to libsurrogate.
#pragma once

#include <string>
#include <vector>

#include "../../layers.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/attention.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/resample.hpp"
#include "surrogate/sphere/sht.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace surrogate::sphere {

struct TransformerView {
  const TransformerConfig* config = nullptr;
  int h = 0, w = 0;      // the internal grid
  index_t ld = 0;        // the row stride of `pos` (embed_dim rounded up to kernels::kPad)
  const DiscoConvS2* encoder = nullptr;
  const DiscoConvS2* decoder = nullptr;
  const ResampleS2* resample = nullptr;  // nullptr with upsample_sht
  const RealSHT* sht = nullptr;          // upsample_sht only: analysis on the internal grid,
  const InverseRealSHT* isht = nullptr;  // synthesis on the image grid
  const float* pos = nullptr;            // h*w rows of ld floats (zeros past embed_dim), or nullptr
  struct Block {
    const float* norm_w[2] = {nullptr, nullptr};  // embed_dim values each (instance or layer norm)
    const float* norm_b[2] = {nullptr, nullptr};
    const AttentionS2* global = nullptr;                // exactly one of the two
    const NeighborhoodAttentionS2* neighborhood = nullptr;
    const kernels::PackedLinear* fc1 = nullptr;         // use_mlp only
    const kernels::PackedLinear* fc2 = nullptr;
  };
  std::vector<Block> blocks;
};

struct TransformerInternals {
  static TransformerView view(const SphericalTransformer& net);
};

/// The weights of block `block`'s attention (blocks.<block>.self_attn.*) as the CPU forward reads them.
AttentionS2Weights transformer_attention_weights(const ModelFile& file, int block);

}  // namespace surrogate::sphere
