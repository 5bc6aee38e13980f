// Batches for the registered Sequoia model's tests: the golden files' inputs, random clouds for any model
// file, and the one-process forward they are compared with (test_sequoia_mpi, test_gpu_sequoia).
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "h5_golden.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sequoia.hpp"

namespace sequoia_test {

namespace sq = surrogate::sequoia;
using surrogate::ModelFile;

struct Batch {
  std::string model;
  ModelFile file;
  std::vector<float> positions, features, sample_features;
  std::vector<std::int64_t> sizes, batch_idx;
  std::int64_t n() const { return static_cast<std::int64_t>(batch_idx.size()); }
};

inline Batch golden(const std::string& model, const std::string& name) {
  const H5 f(data_path(model));
  Batch c;
  c.model = model;
  c.file = ModelFile::read(data_path(model));
  const std::string g = "/golden/" + name + "/";
  c.positions = f.f32(g + "positions");
  c.features = f.exists(g + "features") ? f.f32(g + "features") : c.positions;
  if (f.exists(g + "sample_features")) c.sample_features = f.f32(g + "sample_features");
  c.sizes = f.i64(g + "sample_sizes");
  for (std::size_t s = 0; s < c.sizes.size(); ++s)
    c.batch_idx.insert(c.batch_idx.end(), static_cast<std::size_t>(c.sizes[s]), static_cast<std::int64_t>(s));
  return c;
}

/// Random clouds of `sizes` points (clusters and a flat patch with duplicated points, so that lowest
/// voxels differ in size and some neighbours tie), inputs and class vectors random, for the model file at
/// `path`.
inline Batch synthetic(const std::string& path, const std::vector<std::int64_t>& sizes, unsigned seed) {
  Batch c;
  c.model = path;
  c.file = ModelFile::read(path);
  const sq::Config cfg = sq::Config::from_file(c.file);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  c.sizes = sizes;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    for (std::int64_t i = 0; i < sizes[s]; ++i) {
      const int kind = static_cast<int>(i % 5);
      float p[3];
      if (kind < 3) {  // three clusters of different spread
        for (int a = 0; a < 3; ++a) p[a] = 2.0f * static_cast<float>(kind - 1) * (a == 0) + 0.1f * (kind + 1) * normal(gen);
      } else if (kind == 3) {  // a flat patch on a coarse lattice: equal distances
        p[0] = 0.25f * static_cast<float>(gen() % 8u);
        p[1] = 0.25f * static_cast<float>(gen() % 8u);
        p[2] = 1.5f;
      } else {
        for (float& v : p) v = 3.0f * unit(gen);
      }
      c.positions.insert(c.positions.end(), p, p + 3);
      for (int f = 0; f < cfg.c; ++f) c.features.push_back(unit(gen));
      c.batch_idx.push_back(static_cast<std::int64_t>(s));
    }
    for (int f = 0; f < cfg.n_class; ++f) c.sample_features.push_back(f == static_cast<int>(s) % cfg.n_class ? 1.0f : 0.0f);
  }
  return c;
}

/// A segmentation batch's model without class vectors (n_class 0: the head's first layer keeps the columns
/// of the point features), the batch without them: a model predict_device takes.
inline Batch without_class_vectors(Batch c) {
  const sq::Config cfg = sq::Config::from_file(c.file);
  surrogate::Tensor32& w = c.file.weights.at("cls.0.weight");
  const std::int64_t rows = w.shape[0], cols = w.shape[1], kept = cols - cfg.n_class;
  std::vector<float> values;
  for (std::int64_t r = 0; r < rows; ++r)
    values.insert(values.end(), w.values.begin() + r * cols, w.values.begin() + r * cols + kept);
  w.values = std::move(values);
  w.shape[1] = kept;
  c.file.config.set("n_class", std::int64_t{0});
  c.model += " (no class vectors)";
  c.sample_features.clear();
  return c;
}

inline std::string example_model(const std::string& name) {
  return std::string(SURROGATE_TEST_DATA_DIR) + "/../../share/models/sequoia/" + name + ".h5";
}

/// seg: points x n_part; cls: B x classes.
inline std::vector<float> single_process(const Batch& c) {
  const sq::Config cfg = sq::Config::from_file(c.file);
  const sq::Network net(c.file, cfg);
  std::vector<std::int64_t> offsets{0};
  for (const auto s : c.sizes) offsets.push_back(offsets.back() + s);
  const sq::Hierarchy h = sq::build_hierarchy(c.positions.data(), offsets, cfg.divide, cfg.depth);
  return net.forward(h, c.features.data(), c.sample_features.empty() ? nullptr : c.sample_features.data());
}

}  // namespace sequoia_test
