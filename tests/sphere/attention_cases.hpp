// Helpers shared by the AttentionS2 and NeighborhoodAttentionS2 tests: the golden cases' configuration
// and weights as the generator (share/tools/golden/sphere_golden.py) writes them, layout conversion and
// random weights for the comparisons with the naive references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "h5_reader.hpp"
#include "surrogate/sphere/attention.hpp"

namespace sphere_test {

inline std::string data_file(const char* name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/sphere/" + name; }

/// (B, C, P) -> (B, P, C)
inline std::vector<float> to_channels_last(const std::vector<float>& x, int batch, int channels) {
  const std::size_t points = x.size() / static_cast<std::size_t>(batch) / static_cast<std::size_t>(channels);
  std::vector<float> y(x.size());
  for (std::size_t b = 0; b < static_cast<std::size_t>(batch); ++b)
    for (std::size_t c = 0; c < static_cast<std::size_t>(channels); ++c)
      for (std::size_t p = 0; p < points; ++p)
        y[(b * points + p) * static_cast<std::size_t>(channels) + c] = x[(b * static_cast<std::size_t>(channels) + c) * points + p];
  return y;
}

/// The options both operators share, from a golden case's attributes; returns the scale kind
/// ("none", "float" or "tensor"; the caller asserts it is one of them).
template <class Config>
std::string read_common_config(const H5Reader& f, const std::string& g, Config& c) {
  c.in_channels = static_cast<int>(f.number(g, "in_channels"));
  c.num_heads = static_cast<int>(f.number(g, "num_heads"));
  c.nlat_in = static_cast<int>(f.number(g, "nlat_in"));
  c.nlon_in = static_cast<int>(f.number(g, "nlon_in"));
  c.nlat_out = static_cast<int>(f.number(g, "nlat_out"));
  c.nlon_out = static_cast<int>(f.number(g, "nlon_out"));
  c.grid_in = surrogate::sphere::parse_grid(f.text(g, "grid_in"));
  c.grid_out = surrogate::sphere::parse_grid(f.text(g, "grid_out"));
  c.bias = f.number(g, "bias") != 0;
  c.use_qknorm = f.number(g, "use_qknorm") != 0;
  c.k_channels = static_cast<int>(f.number(g, "k_channels"));
  c.out_channels = static_cast<int>(f.number(g, "out_channels"));
  const std::string scale_kind = f.text(g, "scale_kind");
  if (scale_kind == "float" || scale_kind == "tensor") {
    c.scale_mode = scale_kind == "float" ? surrogate::sphere::ScaleMode::value : surrogate::sphere::ScaleMode::tensor;
    c.scale = static_cast<float>(f.number(g, "scale"));
  }
  return scale_kind;
}

/// The official module's state_dict of a golden case.
inline surrogate::sphere::AttentionS2Weights read_weights(const H5Reader& f, const std::string& g, bool bias, bool qknorm) {
  surrogate::sphere::AttentionS2Weights w;
  w.q_weights = f.floats(g + "/weights/q_weights");
  w.k_weights = f.floats(g + "/weights/k_weights");
  w.v_weights = f.floats(g + "/weights/v_weights");
  w.proj_weights = f.floats(g + "/weights/proj_weights");
  if (bias) {
    w.q_bias = f.floats(g + "/weights/q_bias");
    w.k_bias = f.floats(g + "/weights/k_bias");
    w.v_bias = f.floats(g + "/weights/v_bias");
    w.proj_bias = f.floats(g + "/weights/proj_bias");
  }
  if (qknorm) {
    w.q_norm_weights = f.floats(g + "/weights/q_norm_weights");
    w.k_norm_weights = f.floats(g + "/weights/k_norm_weights");
  }
  return w;
}

inline std::vector<float> random_vector(std::size_t n, std::mt19937& rng, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

/// Random weights of PyTorch-like scale for the configuration (k_channels / out_channels 0: in_channels).
template <class Config>
surrogate::sphere::AttentionS2Weights random_weights(const Config& c, std::mt19937& rng) {
  const int ck = c.k_channels ? c.k_channels : c.in_channels, co = c.out_channels ? c.out_channels : c.in_channels;
  const auto ucin = static_cast<std::size_t>(c.in_channels), uck = static_cast<std::size_t>(ck),
             uco = static_cast<std::size_t>(co);
  const float sw = 1.0f / std::sqrt(static_cast<float>(c.in_channels));
  surrogate::sphere::AttentionS2Weights w;
  w.q_weights = random_vector(uck * ucin, rng, sw);
  w.k_weights = random_vector(uck * ucin, rng, sw);
  w.v_weights = random_vector(uco * ucin, rng, sw);
  w.proj_weights = random_vector(uco * uco, rng, 1.0f / std::sqrt(static_cast<float>(co)));
  if (c.bias) {
    w.q_bias = random_vector(uck, rng, 0.5f);
    w.k_bias = random_vector(uck, rng, 0.5f);
    w.v_bias = random_vector(uco, rng, 0.5f);
    w.proj_bias = random_vector(uco, rng, 0.5f);
  }
  if (c.use_qknorm) {
    w.q_norm_weights = random_vector(uck / static_cast<std::size_t>(c.num_heads), rng, 0.5f);
    w.k_norm_weights = random_vector(uck / static_cast<std::size_t>(c.num_heads), rng, 0.5f);
  }
  return w;
}

/// Op(c, w).weights() gives back every tensor of random weights w, value for value, with and without bias
/// and qk-norm (the read-back from the operator's packed layers that a device operator built on it uploads).
template <class Op, class Config>
void expect_weights_read_back(Config c, std::mt19937& rng) {
  using W = surrogate::sphere::AttentionS2Weights;
  const std::pair<std::vector<float> W::*, const char*> tensors[] = {
      {&W::q_weights, "q_weights"}, {&W::k_weights, "k_weights"}, {&W::v_weights, "v_weights"},
      {&W::proj_weights, "proj_weights"}, {&W::q_bias, "q_bias"}, {&W::k_bias, "k_bias"}, {&W::v_bias, "v_bias"},
      {&W::proj_bias, "proj_bias"}, {&W::q_norm_weights, "q_norm_weights"}, {&W::k_norm_weights, "k_norm_weights"}};
  for (const bool bias : {true, false})
    for (const bool qknorm : {false, true}) {
      c.bias = bias;
      c.use_qknorm = qknorm;
      const W w = random_weights(c, rng);
      const W got = Op(c, w).weights();
      for (const auto& [tensor, name] : tensors)
        EXPECT_EQ(w.*tensor, got.*tensor) << "bias " << bias << ", qknorm " << qknorm << ": " << name;
    }
}

}  // namespace sphere_test
