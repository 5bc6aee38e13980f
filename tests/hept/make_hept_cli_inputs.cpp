// Inputs of the HEPT command-line tests, from the golden files tests/data/hept:
//   make_hept_cli_inputs DATA_DIR OUT_DIR
// writes small_model.h5 (the example_small model), three_graphs.h5 (/coords, /features, /batch_idx: graph
// 1 of the golden batch three times, features scaled per copy: 3 x 224 hits, so that 3 ranks' slabs are
// whole graphs), three_graphs_reference.h5 (/prediction: the registered model in one process, fp32),
// checkpoint_model.h5 and checkpoint_points.h5 (the shipped checkpoint and the golden events), pileup_*.h5
// (the src pileup model, its particles, the official output, a class outside the embedding),
// checkpoint_official.h5 (/prediction: the official f64_stable output), checkpoint_reference_fp64.h5
// (the registered model in one process, fp64), degenerate_model.h5 and
// coords5_points.h5 (coordinates 5 wide for a model of coords_dim 4).
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "surrogate/model.hpp"

namespace st = surrogate::testing;

namespace {
st::Dataset ints(const std::string& name, const std::vector<std::int64_t>& v) {
  return {name, {static_cast<std::int64_t>(v.size())}, std::vector<double>(v.begin(), v.end()), true};
}
std::vector<std::int64_t> batch_of(const std::string& path, const std::string& root) {
  const auto b = st::read_array(path, root + "/batch").values;
  return {b.begin(), b.end()};
}
void write_points(const std::string& out, const std::string& path, const std::string& root) {
  const st::Array c = st::read_array(path, root + "/coords"), x = st::read_array(path, root + "/x");
  st::write_file(
      out, {{"coords", c.shape, c.values}, {"features", x.shape, x.values}, ints("batch_idx", batch_of(path, root))});
}
}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: make_hept_cli_inputs DATA_DIR OUT_DIR\n";
    return 2;
  }
  const std::string data = std::string(argv[1]) + "/hept/hept_", out = std::string(argv[2]) + "/";
  try {
    std::filesystem::create_directories(argv[2]);
    const std::string small = data + "example_small.h5";
    const surrogate::ModelFile file = surrogate::ModelFile::read(small);
    file.write(out + "small_model.h5");
    const st::Array c = st::read_array(small, "/golden/coords"), x = st::read_array(small, "/golden/x");
    const auto batch = batch_of(small, "/golden");
    std::vector<double> coords, features;
    std::vector<std::int64_t> graph;
    for (int copy = 0; copy < 3; ++copy)
      for (std::size_t i = 0; i < batch.size(); ++i) {
        if (batch[i] != 1) continue;
        for (std::int64_t k = 0; k < c.cols(); ++k)
          coords.push_back(c.values[i * static_cast<std::size_t>(c.cols()) + static_cast<std::size_t>(k)]);
        for (std::int64_t k = 0; k < x.cols(); ++k)
          features.push_back(x.values[i * static_cast<std::size_t>(x.cols()) + static_cast<std::size_t>(k)] *
                             (1.0 - 0.25 * copy));
        graph.push_back(copy);
      }
    const auto n = static_cast<std::int64_t>(graph.size());
    st::write_file(
        out + "three_graphs.h5",
        {{"coords", {n, c.cols()}, coords}, {"features", {n, x.cols()}, features}, ints("batch_idx", graph)});
    const auto model = surrogate::make_model(file);
    const surrogate::SelfComm comm;
    const auto cf = st::to_float(coords), xf = st::to_float(features);
    surrogate::PointGeometry g;
    g.positions = cf.data();
    g.ld_positions = c.cols();
    std::vector<float> y(static_cast<std::size_t>(n * model->out_channels()));
    model->predict(comm, surrogate::SampleLayout::build(comm, n, graph.data()), g, xf.data(), x.cols(), y.data(),
                   model->out_channels());
    st::write_file(out + "three_graphs_reference.h5",
                   {{"prediction", {n, model->out_channels()}, {y.begin(), y.end()}}});

    const std::string checkpoint = data + "checkpoint_tracking.h5";
    surrogate::ModelFile::read(checkpoint).write(out + "checkpoint_model.h5");
    write_points(out + "checkpoint_points.h5", checkpoint, "/golden");
    {  // the registered model in one process, fp64
      const surrogate::ModelFile checkpoint_file = surrogate::ModelFile::read(checkpoint);
      const auto m = surrogate::make_model(checkpoint_file);
      const st::Array pc = st::read_array(checkpoint, "/golden/coords"), px = st::read_array(checkpoint, "/golden/x");
      const auto pb = batch_of(checkpoint, "/golden");
      const auto pcf = st::to_float(pc.values), pxf = st::to_float(px.values);
      surrogate::PointGeometry pg;
      pg.positions = pcf.data();
      pg.ld_positions = pc.cols();
      const auto pn = static_cast<std::int64_t>(pb.size());
      std::vector<double> py(static_cast<std::size_t>(pn * m->out_channels()));
      surrogate::RunOptions o;
      o.precision = surrogate::Precision::fp64;
      const auto plan = m->plan(comm, surrogate::SampleLayout::build(comm, pn, pb.data()), pg, o);
      m->predict(comm, *plan, pxf.data(), px.cols(), py.data(), m->out_channels(), {}, o);  // double outputs
      st::write_file(out + "checkpoint_reference_fp64.h5",
                     {{"prediction", {pn, m->out_channels()}, py, false, /*as_float64=*/true}});
    }
    const st::Array official = st::read_array(checkpoint, "/golden/f64_stable/output");
    st::write_file(out + "checkpoint_official.h5", {{"prediction", official.shape, official.values}});

    // The src layout's pileup task: the model, its golden particles, the official float32 (stable sorts)
    // output, and the particles with a class outside the embedding (9) in the last row.
    const std::string pileup = data + "src_pileup.h5";
    surrogate::ModelFile::read(pileup).write(out + "pileup_model.h5");
    write_points(out + "pileup_points.h5", pileup, "/golden");
    const st::Array pileup_official = st::read_array(pileup, "/golden/f32_stable/output");
    st::write_file(out + "pileup_official.h5", {{"prediction", pileup_official.shape, pileup_official.values}});
    {
      const st::Array pc = st::read_array(pileup, "/golden/coords");
      st::Array px = st::read_array(pileup, "/golden/x");
      px.values.back() = 9.0;
      st::write_file(out + "pileup_bad_class.h5", {{"coords", pc.shape, pc.values}, {"features", px.shape, px.values},
                                                   ints("batch_idx", batch_of(pileup, "/golden"))});
    }

    {  // regions of 1e17 (finite, far beyond any graph): every rank count must give the one-rank result
      surrogate::ModelFile huge = surrogate::ModelFile::read(pileup);
      for (float& v : huge.weights.at("regions").values) v = 1e17f;
      huge.write(out + "pileup_regions_1e17_model.h5");
    }

    const std::string degenerate = data + "degenerate.h5";
    surrogate::ModelFile::read(degenerate).write(out + "degenerate_model.h5");
    write_points(out + "coords5_points.h5", degenerate, "/golden/coords_dim_mismatch");
  } catch (const std::exception& e) {
    std::cerr << "make_hept_cli_inputs: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
