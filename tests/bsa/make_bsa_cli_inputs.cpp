// Inputs of the BSA command-line tests, from the golden file tests/data/bsa/bsa_sparse_rot.h5:
//   make_bsa_cli_inputs DATA_DIR OUT_DIR
// writes bsa_model.h5 (the golden model), bsa_points.h5 (/coords = positions, /features, /batch_idx: two
// samples of 1000 and 1024 points), bsa_reference.h5 (/prediction: bsa::Network::forward in this process),
// and the ShapeNet-Car wrapper around the same model with seeded random head weights: shapenet_model.h5,
// shapenet_points.h5 (/coords, /batch_idx only), shapenet_reference.h5 (Network::forward_shapenet).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "shapenet_wrapped.hpp"
#include "surrogate/bsa.hpp"

namespace st = surrogate::testing;

namespace {
std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
st::Dataset int_dataset(const std::string& name, std::vector<std::int64_t> shape, const std::vector<std::int64_t>& v) {
  return {name, std::move(shape), std::vector<double>(v.begin(), v.end()), true};
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_bsa_cli_inputs DATA_DIR OUT_DIR\n";
    return 2;
  }
  const std::string golden = std::string(argv[1]) + "/bsa/bsa_sparse_rot.h5", out = std::string(argv[2]) + "/";
  try {
    std::filesystem::create_directories(argv[2]);
    const surrogate::ModelFile file = surrogate::ModelFile::read(golden);
    file.write(out + "bsa_model.h5");
    const st::Array features = st::read_array(golden, "golden/features"), positions = st::read_array(golden, "golden/positions");
    const st::Array sizes = st::read_array(golden, "golden/sample_sizes");
    std::vector<std::int64_t> batch_idx;
    for (std::size_t b = 0; b < sizes.values.size(); ++b)
      batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(sizes.values[b]), static_cast<std::int64_t>(b));
    const auto n = static_cast<std::int64_t>(batch_idx.size());
    st::write_file(out + "bsa_points.h5", {{"coords", positions.shape, positions.values},
                                           {"features", features.shape, features.values},
                                           int_dataset("batch_idx", {n}, batch_idx)});
    const auto batch = surrogate::balltree::Batch::from_batch_idx(batch_idx);
    const std::vector<float> pos = st::to_float(positions.values);
    const surrogate::bsa::Network net(file);
    const std::vector<float> y = net.forward(st::to_float(features.values), pos, batch, 1);
    st::write_file(out + "bsa_reference.h5", {{"prediction", {n, net.out_channels()}, as_double(y)}});

    // The ShapeNet-Car wrapper: c_in 6 Fourier features of the positions, head D -> D -> 1.
    const surrogate::ModelFile wrapped = bsa_testing::shapenet_wrapped(file, 3);
    wrapped.write(out + "shapenet_model.h5");
    st::write_file(out + "shapenet_points.h5", {{"coords", positions.shape, positions.values},
                                                int_dataset("batch_idx", {n}, batch_idx)});
    const std::vector<float> p = surrogate::bsa::Network(wrapped).forward_shapenet(pos, batch, 1);
    st::write_file(out + "shapenet_reference.h5", {{"prediction", {n, 1}, as_double(p)}});
  } catch (const std::exception& e) {
    std::cerr << "make_bsa_cli_inputs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
