// The sphere benchmarks' model and input (sphere_transformer_bench, gpu/sphere_gpu_bench). move_to_grid:
// img_size replaced, the DISCO tables of the file's grid dropped (the library computes them for the new
// one), a grid-sized position embedding replaced by normal random values of the new internal grid's shape
// (0.02 scale, seed 2); every other weight is the file's (none depends on the grid).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "surrogate/model_file.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace bench_sphere {

inline void move_to_grid(surrogate::ModelFile& file, std::int64_t nlat, std::int64_t nlon) {
  file.config.set("img_size", std::vector<std::int64_t>{nlat, nlon});
  file.tables.clear();
  const auto embedding = file.weights.find("pos_embed.position_embeddings");
  if (embedding == file.weights.end()) return;
  const auto cfg = surrogate::sphere::TransformerConfig::from_attributes(file.config);
  std::vector<std::int64_t>& shape = embedding->second.shape;  // (1, C, h, w) or (1, C, h, 1)
  shape[2] = cfg.internal_nlat();
  if (shape[3] != 1) shape[3] = cfg.internal_nlon();
  std::mt19937 gen(2);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  embedding->second.values.resize(static_cast<std::size_t>(shape[1] * shape[2] * shape[3]));
  for (float& v : embedding->second.values) v = normal(gen);
}

/// One sample's input: normal random values (seed 1), nlat * nlon points x in_chans, channels last.
inline std::vector<float> random_input(const surrogate::sphere::TransformerConfig& cfg) {
  std::mt19937 gen(1);
  std::normal_distribution<float> normal;
  std::vector<float> in(static_cast<std::size_t>(cfg.nlat) * static_cast<std::size_t>(cfg.nlon) *
                        static_cast<std::size_t>(cfg.in_chans));
  for (float& v : in) v = normal(gen);
  return in;
}

}  // namespace bench_sphere
