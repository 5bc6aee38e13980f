// Inputs of the Sequoia command-line tests, from the golden files tests/data/sequoia:
//   make_sequoia_cli_inputs DATA_DIR OUT_DIR
// writes seg_model.h5, seg_points.h5 (/coords, /features = the positions, /batch_idx, /sample_features:
// the class vectors), seg_points_noclass.h5 (without /sample_features), seg_reference.h5 (/prediction:
// sequoia::Network in this process), cls_model.h5, cls_points.h5 (/coords, /features = normals,
// /batch_idx) and cls_reference.h5 (/sample_prediction).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate/sequoia.hpp"

namespace st = surrogate::testing;
namespace sq = surrogate::sequoia;

namespace {

std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

/// The points files and the one-process reference of one golden case.
void make(const std::string& data, const std::string& out, const std::string& model, const std::string& name) {
  const std::string golden = data + "sequoia_" + model + ".h5", g = "golden/" + name + "/";
  const surrogate::ModelFile file = surrogate::ModelFile::read(golden);
  file.write(out + model + "_model.h5");
  const sq::Config cfg = sq::Config::from_file(file);
  const st::Array positions = st::read_array(golden, g + "positions"), sizes = st::read_array(golden, g + "sample_sizes");
  const bool seg = cfg.kind == sq::Config::Kind::segmentation;
  const st::Array features = st::read_array(golden, g + (seg ? "positions" : "features"));
  std::vector<std::int64_t> offsets{0};
  std::vector<double> batch_idx;
  for (std::size_t b = 0; b < sizes.values.size(); ++b) {
    offsets.push_back(offsets.back() + static_cast<std::int64_t>(sizes.values[b]));
    batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(sizes.values[b]), static_cast<double>(b));
  }
  const auto n = static_cast<std::int64_t>(batch_idx.size()), B = static_cast<std::int64_t>(sizes.values.size());
  std::vector<st::Dataset> points = {{"coords", positions.shape, positions.values},
                                     {"features", features.shape, features.values},
                                     {"batch_idx", {n}, batch_idx, true}};
  std::vector<float> classes;
  if (seg) {
    st::write_file(out + "seg_points_noclass.h5", points);
    const st::Array c = st::read_array(golden, g + "sample_features");
    classes = st::to_float(c.values);
    points.push_back({"sample_features", c.shape, c.values});
  }
  st::write_file(out + model + "_points.h5", points);
  const sq::Network net(file, cfg);
  const std::vector<float> pos = st::to_float(positions.values), feat = st::to_float(features.values);
  const sq::Hierarchy h = sq::build_hierarchy(pos.data(), offsets, cfg.divide, cfg.depth);
  const std::vector<float> y = net.forward(h, feat.data(), seg ? classes.data() : nullptr);
  if (seg)
    st::write_file(out + "seg_reference.h5", {{"prediction", {n, cfg.n_part}, as_double(y)}});
  else
    st::write_file(out + "cls_reference.h5", {{"sample_prediction", {B, cfg.classes}, as_double(y)}});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_sequoia_cli_inputs DATA_DIR OUT_DIR\n";
    return 2;
  }
  try {
    std::filesystem::create_directories(argv[2]);
    const std::string data = std::string(argv[1]) + "/sequoia/", out = std::string(argv[2]) + "/";
    make(data, out, "seg", "ties");
    make(data, out, "cls", "medium");
  } catch (const std::exception& e) {
    std::cerr << "make_sequoia_cli_inputs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
