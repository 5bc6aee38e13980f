// The BSA test models inside the ShapeNet-Car wrapper: a model file with c_in 6 Fourier features of the
// positions and seeded random pos_enc, embedding and pred_head weights, the same in every test, in the
// command-line inputs (make_bsa_cli_inputs) and so in the prediction digests.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "surrogate/bsa.hpp"
#include "surrogate/model_file.hpp"

namespace bsa_testing {

/// `file` (a BSA model of `dim` coordinates) inside the wrapper: inputs are the positions only, the
/// output one value a point.
inline surrogate::ModelFile shapenet_wrapped(surrogate::ModelFile file, int dim) {
  const std::int64_t D = surrogate::bsa::Network(file).config().c_hidden, cin = 6;
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto tensor = [&](std::vector<std::int64_t> shape, float scale) {
    surrogate::Tensor32 t;
    t.shape = shape;
    std::int64_t count = 1;
    for (const auto s : shape) count *= s;
    for (std::int64_t i = 0; i < count; ++i) t.values.push_back(scale * normal(rng));
    return t;
  };
  file.config.set("c_in", cin);
  file.config.set("wrapper", std::string("shapenet_car"));
  file.weights["embed.weight"] = tensor({D, cin}, 0.4f);
  file.weights["pos_enc.linear.weight"] = tensor({cin / 2, dim}, 1.0f);
  file.weights["pred_head.0.weight"] = tensor({D, D}, 0.2f);
  file.weights["pred_head.0.bias"] = tensor({D}, 0.1f);
  file.weights["pred_head.2.weight"] = tensor({1, D}, 0.2f);
  file.weights["pred_head.2.bias"] = tensor({1}, 0.1f);
  return file;
}

}  // namespace bsa_testing
