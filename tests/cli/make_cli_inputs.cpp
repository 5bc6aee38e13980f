// Writes the input files of the command-line tests into a directory: broken model files and point files
// (each one with a single defect), plus a valid 3-point file (fewer points than ranks).
//   make_cli_inputs GOOD_MODEL.h5 OUTPUT_DIR
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include "h5_io.hpp"
#include "surrogate/model_file.hpp"

namespace fs = std::filesystem;
using surrogate::testing::write_file;

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_cli_inputs GOOD_MODEL.h5 OUTPUT_DIR\n";
    return 2;
  }
  const fs::path out = argv[2];
  fs::create_directories(out);
  try {
    const surrogate::ModelFile good = surrogate::ModelFile::read(argv[1]);
    good.write((out / "model_good.h5").string());
    // model files
    std::ofstream(out / "model_not_hdf5.h5") << "surrogate model? no: plain text\n";
    fs::copy_file(out / "model_good.h5", out / "model_truncated.h5", fs::copy_options::overwrite_existing);
    fs::resize_file(out / "model_truncated.h5", fs::file_size(out / "model_good.h5") / 3);
    surrogate::ModelFile m = good;
    m.format_version = 7;
    m.write((out / "model_version7.h5").string());
    m = good;
    m.architecture = "perceiver";
    m.write((out / "model_unknown_architecture.h5").string());
    m = good;
    m.weights.erase("blocks.1.att.latent_q");
    surrogate::Tensor32& fc1 = m.weights.at("blocks.0.mlp.fc1.weight");
    fc1.shape[0] += 1;  // one output row too many
    fc1.values.resize(static_cast<std::size_t>(fc1.numel()), 0.5f);
    m.write((out / "model_bad_weights.h5").string());
    m = good;  // an output std of 1e300 overflows float32: every prediction is Inf
    m.normalization.output_mean.assign(static_cast<std::size_t>(m.config.get_int("out_dim")), 0.0);
    m.normalization.output_std.assign(static_cast<std::size_t>(m.config.get_int("out_dim")), 1e300);
    m.write((out / "model_overflow.h5").string());
    // point files (the model has 2 input channels)
    const double nan = std::numeric_limits<double>::quiet_NaN();
    write_file((out / "points_ok3.h5").string(), {{"coords", {3, 2}, {0, 0, 1, 0, 0, 1}}});
    write_file((out / "points_three_features.h5").string(),
               {{"coords", {3, 2}, {0, 0, 1, 0, 0, 1}}, {"features", {3, 3}, {0, 0, 0, 1, 0, 0, 0, 1, 0}}});
    write_file((out / "points_nan.h5").string(), {{"coords", {4, 2}, {0, 0, 1, nan, 0, 1, 1, 1}}});
    write_file((out / "points_length_mismatch.h5").string(),
               {{"coords", {4, 2}, {0, 0, 1, 0, 0, 1, 1, 1}}, {"features", {3, 2}, {0, 0, 1, 0, 0, 1}}});
    write_file((out / "points_empty.h5").string(), {{"coords", {0, 2}, {}}});
    write_file((out / "points_unsorted_batch.h5").string(),
               {{"coords", {4, 2}, {0, 0, 1, 0, 0, 1, 1, 1}}, {"batch_idx", {4}, {0, 1, 0, 1}, true}});
    write_file((out / "points_no_coords.h5").string(), {{"features", {3, 2}, {0, 0, 1, 0, 0, 1}}});
    write_file((out / "points_no_coords_no_features.h5").string(), {{"batch_idx", {3}, {0, 0, 0}, true}});
    // 2.7e9 rows of no column and no /coords: a point count no byte of the file backs (found by the fuzzer)
    write_file((out / "points_features_no_column.h5").string(), {{"features", {2701131777, 0}, {}}});
  } catch (const std::exception& e) {
    std::cerr << "make_cli_inputs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
