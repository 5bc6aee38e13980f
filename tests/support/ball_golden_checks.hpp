// What the Erwin and BSA device-forward tests share (test_gpu_erwin.cpp, test_gpu_bsa.cpp, on a GPU and
// on the host backend): the error measures
// against the golden outputs, and the trees BSA's Network::forward builds.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"

namespace ball_golden {

/// max |v_i| (the scale of a golden output, for relative bounds).
inline double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (const double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// max |got_i - want_i| in double; a size mismatch is a test failure (and the common prefix is compared).
template <class T>
double max_error(const std::vector<float>& got, const std::vector<T>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    m = std::max(m, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  return m;
}

/// The trees bsa::Network::forward builds (rotated with strides [1] when the model rotates).
inline surrogate::balltree::RotatedTrees bsa_trees_for(const surrogate::bsa::Config& c, const std::vector<float>& positions,
                                                       const surrogate::balltree::Batch& batch) {
  namespace bt = surrogate::balltree;
  bt::RotatedTrees trees;
  if (c.should_rotate) {
    const std::vector<int> strides{1}, balls{c.ball_size, c.ball_size};
    trees = bt::build_with_rotations(positions, c.dimensionality, batch, strides, balls, c.rotation_angle);
  } else {
    trees.tree = bt::build(positions, c.dimensionality, batch);
  }
  return trees;
}

}  // namespace ball_golden
