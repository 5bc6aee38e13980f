// Inputs of the Erwin command-line and C API tests, from the golden files tests/data/erwin:
//   make_erwin_cli_inputs DATA_DIR OUT_DIR
// writes erwin_model.h5 (mpnn_rot, no graph rule: edges must be given), erwin_model_knn.h5 (the same
// with graph = knn, graph_k = 6), erwin_points.h5 (/coords = positions, /features, /batch_idx,
// /edge_index), erwin_points_noedges.h5, erwin_reference.h5 (/prediction: erwin::Network::forward in
// this process with the golden edges), shapenet_model.h5, shapenet_points.h5 (/coords, /batch_idx
// only) and shapenet_reference.h5 (/prediction: the registered model in one process).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/model.hpp"

namespace st = surrogate::testing;

namespace {
std::vector<double> as_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }
std::vector<float> floats(const st::Array& a) { return st::to_float(a.values); }
std::vector<std::int64_t> ints(const st::Array& a) { return {a.values.begin(), a.values.end()}; }
st::Dataset int_dataset(const std::string& name, std::vector<std::int64_t> shape, const std::vector<std::int64_t>& v) {
  return {name, std::move(shape), std::vector<double>(v.begin(), v.end()), true};
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_erwin_cli_inputs DATA_DIR OUT_DIR\n";
    return 2;
  }
  const std::string data = std::string(argv[1]) + "/erwin/", out = std::string(argv[2]) + "/";
  try {
    std::filesystem::create_directories(argv[2]);
    // Plain Erwin with message passing and rotations, two samples.
    const std::string golden = data + "erwin_mpnn_rot.h5";
    surrogate::ModelFile file = surrogate::ModelFile::read(golden);
    file.write(out + "erwin_model.h5");
    surrogate::ModelFile knn = file;
    knn.config.set("graph", std::string("knn"));
    knn.config.set("graph_k", std::int64_t{6});
    knn.write(out + "erwin_model_knn.h5");
    const st::Array features = st::read_array(golden, "golden/features"), positions = st::read_array(golden, "golden/positions");
    const st::Array edges = st::read_array(golden, "golden/edge_index"), sizes = st::read_array(golden, "golden/sample_sizes");
    std::vector<std::int64_t> batch_idx;
    for (std::size_t b = 0; b < sizes.values.size(); ++b)
      batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(sizes.values[b]), static_cast<std::int64_t>(b));
    const auto n = static_cast<std::int64_t>(batch_idx.size());
    const std::vector<st::Dataset> common = {{"coords", positions.shape, positions.values},
                                             {"features", features.shape, features.values},
                                             int_dataset("batch_idx", {n}, batch_idx)};
    std::vector<st::Dataset> with_edges = common;
    with_edges.push_back(int_dataset("edge_index", edges.shape, ints(edges)));
    st::write_file(out + "erwin_points.h5", with_edges);
    st::write_file(out + "erwin_points_noedges.h5", common);
    const surrogate::erwin::Network net(file);
    const std::vector<float> y = net.forward(floats(features), floats(positions),
                                             surrogate::balltree::Batch::from_batch_idx(batch_idx), ints(edges), 1);
    st::write_file(out + "erwin_reference.h5", {{"prediction", {n, net.out_channels()}, as_double(y)}});

    // The ShapeNet-Car wrapper: positions only, graph built by the model (kNN 8).
    const std::string shapenet = data + "erwin_shapenet_car.h5";
    const surrogate::ModelFile wrapper = surrogate::ModelFile::read(shapenet);
    wrapper.write(out + "shapenet_model.h5");
    const st::Array spos = st::read_array(shapenet, "golden/positions"), ssizes = st::read_array(shapenet, "golden/sample_sizes");
    std::vector<std::int64_t> sbatch;
    for (std::size_t b = 0; b < ssizes.values.size(); ++b)
      sbatch.insert(sbatch.end(), static_cast<std::size_t>(ssizes.values[b]), static_cast<std::int64_t>(b));
    const auto sn = static_cast<std::int64_t>(sbatch.size());
    st::write_file(out + "shapenet_points.h5", {{"coords", spos.shape, spos.values}, int_dataset("batch_idx", {sn}, sbatch)});
    const auto model = surrogate::make_model(wrapper);
    const surrogate::SelfComm comm;
    const auto layout = surrogate::SampleLayout::build(comm, sn, sbatch.data());
    const std::vector<float> p = floats(spos);
    surrogate::PointGeometry g;
    g.positions = p.data();
    g.ld_positions = 3;
    std::vector<float> sy(static_cast<std::size_t>(sn));
    model->predict(comm, layout, g, nullptr, 0, sy.data(), 1);
    st::write_file(out + "shapenet_reference.h5", {{"prediction", {sn, 1}, as_double(sy)}});
  } catch (const std::exception& e) {
    std::cerr << "make_erwin_cli_inputs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
