// Host arithmetic of the geometry the ball-tree device forwards upload once per plan (erwin/cuda,
// bsa/cuda): the CPU forward's own functions, so the device sees the CPU's bits. CUDA builds only.
#pragma once

#include <cstddef>
#include <vector>

#include "surrogate/balltree.hpp"

namespace surrogate::balltree::device {

/// Offsets of rows from their ball's centre (mean_pool, the CPU's summation), balls of `ball` rows.
inline std::vector<float> ball_relative(const std::vector<float>& pos, int d, int ball) {
  const std::vector<float> centres = mean_pool(pos, d, ball);
  std::vector<float> rel(pos.size());
  for (std::size_t r = 0; r < pos.size() / static_cast<std::size_t>(d); ++r)
    for (int c = 0; c < d; ++c) rel[r * d + c] = pos[r * d + c] - centres[(r / static_cast<std::size_t>(ball)) * d + c];
  return rel;
}

}  // namespace surrogate::balltree::device
