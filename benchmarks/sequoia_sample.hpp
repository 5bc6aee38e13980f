// The one synthetic sample of the Sequoia benchmarks (sequoia_plan_bench, sequoia_mpi_steps,
// gpu/sequoia_gpu_bench): a bumpy ellipsoid's surface, and point features that repeat its coordinates.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace bench_sequoia {

/// `points` points (x, y, z float32, row-major) on the surface r = 1 + 0.1 sin(5 phi) sin(theta) stretched
/// to 2 x 1 x 0.7, uniform in z and phi (seed 7).
inline std::vector<float> bumpy_ellipsoid(std::int64_t points) {
  std::mt19937 gen(7u);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<float> positions;
  positions.reserve(static_cast<std::size_t>(points) * 3);
  for (std::int64_t i = 0; i < points; ++i) {
    const double z = 2.0 * unit(gen) - 1.0, phi = 2.0 * 3.14159265358979 * unit(gen), s = std::sqrt(1.0 - z * z);
    const double r = 1.0 + 0.1 * std::sin(5.0 * phi) * s;
    positions.insert(positions.end(), {static_cast<float>(2.0 * r * s * std::cos(phi)),
                                       static_cast<float>(r * s * std::sin(phi)), static_cast<float>(0.7 * r * z)});
  }
  return positions;
}

/// `channels` features per point: its coordinates x, y, z, x, ... (the models' inputs as trained).
inline std::vector<float> coordinate_features(const std::vector<float>& positions, int channels) {
  std::vector<float> features;
  features.reserve(positions.size() / 3 * static_cast<std::size_t>(channels));
  for (std::size_t i = 0; i < positions.size(); i += 3)
    for (int c = 0; c < channels; ++c) features.push_back(positions[i + static_cast<std::size_t>(c % 3)]);
  return features;
}

}  // namespace bench_sequoia
