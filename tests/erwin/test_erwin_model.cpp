// Erwin as a registered Model (make_model, Model::predict with PointGeometry) in one process: equal bit
// for bit to erwin::Network on the golden cases, with explicit edges and with the graph built from the
// /config rule, in any row order (global ids); the ShapeNet-Car wrapper against the official wrapper's
// output (tests/data/erwin/erwin_shapenet_car.h5); errors for missing positions / edges and bad geometry.
#include <gtest/gtest.h>
#include <hdf5.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"

namespace bt = surrogate::balltree;
namespace ew = surrogate::erwin;
using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::ModelFile;
using surrogate::PointGeometry;
using surrogate::SampleLayout;
using surrogate::SelfComm;

namespace {

std::string path_of(const std::string& name) { return std::string(SURROGATE_TEST_DATA_DIR) + "/erwin/erwin_" + name + ".h5"; }

template <class T>
std::vector<T> read(const std::string& path, const std::string& name, hid_t type) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + path);
  std::vector<T> v;
  if (H5Lexists(f, name.c_str(), H5P_DEFAULT) > 0) {
    const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
    const hid_t s = H5Dget_space(d);
    v.resize(static_cast<std::size_t>(H5Sget_simple_extent_npoints(s)));
    H5Dread(d, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
    H5Sclose(s);
    H5Dclose(d);
  }
  H5Fclose(f);
  return v;
}

struct Case {
  ModelFile file;
  std::vector<float> features, positions, official;
  std::vector<double> exact;
  std::vector<std::int64_t> sizes, edges, batch_idx;
  explicit Case(const std::string& name) : file(ModelFile::read(path_of(name))) {
    const std::string p = path_of(name);
    features = read<float>(p, "/golden/features", H5T_NATIVE_FLOAT);
    positions = read<float>(p, "/golden/positions", H5T_NATIVE_FLOAT);
    official = read<float>(p, "/golden/output", H5T_NATIVE_FLOAT);
    exact = read<double>(p, "/golden/output_f64", H5T_NATIVE_DOUBLE);
    sizes = read<std::int64_t>(p, "/golden/sample_sizes", H5T_NATIVE_INT64);
    edges = read<std::int64_t>(p, "/golden/edge_index", H5T_NATIVE_INT64);
    for (std::size_t b = 0; b < sizes.size(); ++b) batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(sizes[b]), static_cast<std::int64_t>(b));
  }
  std::int64_t n() const { return static_cast<std::int64_t>(batch_idx.size()); }
};

/// Model::predict in one process with the given geometry (rows in the given order).
std::vector<float> predict(surrogate::Model& m, const std::vector<std::int64_t>& batch_idx, const std::vector<float>& features,
                           const PointGeometry& g) {
  const SelfComm comm;
  const auto n = static_cast<std::int64_t>(batch_idx.size());
  const SampleLayout layout = SampleLayout::build(comm, n, batch_idx.data());
  std::vector<float> out(static_cast<std::size_t>(n * m.out_channels()));
  m.predict(comm, layout, g, features.empty() ? nullptr : features.data(), m.in_channels(), out.data(), m.out_channels());
  return out;
}

PointGeometry geometry(const std::vector<float>& positions, int dim, const std::vector<std::int64_t>* edges = nullptr,
                       const std::int64_t* ids = nullptr) {
  PointGeometry g;
  g.positions = positions.data();
  g.ld_positions = dim;
  g.global_ids = ids;
  if (edges) {
    g.edge_index = edges->data();
    g.num_edges = static_cast<std::int64_t>(edges->size() / 2);
  }
  return g;
}

ModelFile with_knn(ModelFile file, int k) {
  file.config.set("graph", std::string("knn"));
  file.config.set("graph_k", std::int64_t{k});
  return file;
}

TEST(ErwinModel, RegisteredAndDescribed) {
  const Case c("mpnn_rot");
  const auto m = surrogate::make_model(c.file);
  EXPECT_EQ(m->architecture(), "erwin");
  EXPECT_EQ(m->in_channels(), 4);
  EXPECT_EQ(m->out_channels(), 16);
  EXPECT_EQ(m->position_dim(), 3);
  EXPECT_TRUE(m->needs_positions());
  EXPECT_TRUE(m->needs_edges());  // message passing, no graph rule in the golden file
  EXPECT_FALSE(surrogate::make_model(with_knn(c.file, 6))->needs_edges());
  EXPECT_EQ(m->parameter_count(), ew::Network(c.file).parameter_count());
  bool graph_line = false;
  for (const auto& [name, value] : surrogate::make_model(with_knn(c.file, 6))->describe())
    graph_line |= name == "graph" && value.find("knn (k 6") != std::string::npos;
  EXPECT_TRUE(graph_line);
}

TEST(ErwinModel, BitwiseEqualToNetworkWithGivenAndBuiltEdges) {
  for (const char* name : {"mpnn_rot", "mpnn_norot", "plain_rot_2d"}) {
    const Case c(name);
    const ew::Network net(c.file);
    const int dim = net.config().dimensionality;
    const std::vector<float> want = net.forward(c.features, c.positions, bt::Batch::from_batch_idx(c.batch_idx), c.edges, 1);
    const auto m = surrogate::make_model(c.file);
    EXPECT_EQ(predict(*m, c.batch_idx, c.features, geometry(c.positions, dim, &c.edges)), want) << name;
    if (c.edges.empty()) continue;
    // The generator's kNN graph (float64, stable sort) and the library's are the same graph here.
    const int k = static_cast<int>(c.edges.size() / 2 / static_cast<std::size_t>(c.n()));
    const auto built = surrogate::make_model(with_knn(c.file, k));
    EXPECT_EQ(predict(*built, c.batch_idx, c.features, geometry(c.positions, dim)), want) << name << " (kNN " << k << ")";
  }
}

TEST(ErwinModel, RowOrderDoesNotMatterWithGlobalIds) {
  const Case c("mpnn_rot");
  const std::int64_t n = c.n();
  const auto m = surrogate::make_model(with_knn(c.file, 6));
  const std::vector<float> want = predict(*m, c.batch_idx, c.features, geometry(c.positions, 3));
  std::vector<std::int64_t> perm(static_cast<std::size_t>(n));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(3));
  std::vector<float> f(c.features.size()), p(c.positions.size());
  std::vector<std::int64_t> b(perm.size());
  for (std::int64_t r = 0; r < n; ++r) {
    const auto i = static_cast<std::size_t>(perm[static_cast<std::size_t>(r)]);
    std::copy_n(c.features.begin() + static_cast<std::ptrdiff_t>(i * 4), 4, f.begin() + r * 4);
    std::copy_n(c.positions.begin() + static_cast<std::ptrdiff_t>(i * 3), 3, p.begin() + r * 3);
    b[static_cast<std::size_t>(r)] = c.batch_idx[i];
  }
  const std::vector<float> got = predict(*m, b, f, geometry(p, 3, nullptr, perm.data()));
  for (std::int64_t r = 0; r < n; ++r)
    for (int ch = 0; ch < 16; ++ch)
      ASSERT_EQ(got[static_cast<std::size_t>(r * 16 + ch)], want[static_cast<std::size_t>(perm[static_cast<std::size_t>(r)] * 16 + ch)]);
}

TEST(ErwinModel, ShapenetCarWrapperMatchesOfficial) {
  const std::string p = path_of("shapenet_car");
  const ModelFile file = ModelFile::read(p);
  const auto positions = read<float>(p, "/golden/positions", H5T_NATIVE_FLOAT);
  const auto official = read<float>(p, "/golden/output", H5T_NATIVE_FLOAT);
  const auto exact = read<double>(p, "/golden/output_f64", H5T_NATIVE_DOUBLE);
  const auto edges = read<std::int64_t>(p, "/golden/edge_index", H5T_NATIVE_INT64);
  const auto sizes = read<std::int64_t>(p, "/golden/sample_sizes", H5T_NATIVE_INT64);
  std::vector<std::int64_t> batch_idx;
  for (std::size_t b = 0; b < sizes.size(); ++b) batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(sizes[b]), static_cast<std::int64_t>(b));
  const auto m = surrogate::make_model(file);
  EXPECT_EQ(m->in_channels(), 0);
  EXPECT_EQ(m->out_channels(), 1);
  EXPECT_FALSE(m->needs_edges());  // graph = knn, graph_k = 8
  const std::vector<float> built = predict(*m, batch_idx, {}, geometry(positions, 3));
  const std::vector<float> given = predict(*m, batch_idx, {}, geometry(positions, 3, &edges));
  EXPECT_EQ(built, given);  // the library's kNN graph is the data loader's here
  double scale = 0, err_exact = 0, err_official = 0, official_exact = 0;
  for (std::size_t i = 0; i < exact.size(); ++i) {
    scale = std::max(scale, std::abs(exact[i]));
    err_exact = std::max(err_exact, std::abs(built[i] - exact[i]));
    err_official = std::max(err_official, std::abs(static_cast<double>(built[i]) - official[i]));
    official_exact = std::max(official_exact, std::abs(official[i] - exact[i]));
  }
  std::printf("shapenet_car: max|y| %.3g, |ours - f64| %.3g, |ours - official| %.3g, |official - f64| %.3g\n", scale,
              err_exact, err_official, official_exact);
  // As tests/erwin/test_erwin.cpp: 4e-6 max|y| (about 8x the official float32 error of the plain model);
  // the head adds two small Linear layers, the Fourier features one cos/sin rounding each.
  EXPECT_LE(err_exact, 4e-6 * scale);
  EXPECT_LE(err_official, 4e-6 * scale + official_exact);
  // The wrapper's tensors matter: another frequency matrix changes the output.
  ModelFile changed = file;
  changed.weights.at("pos_enc.linear.weight").values[0] += 0.5f;
  const std::vector<float> moved = predict(*surrogate::make_model(changed), batch_idx, {}, geometry(positions, 3));
  double diff = 0;
  for (std::size_t i = 0; i < moved.size(); ++i) diff = std::max(diff, std::abs(static_cast<double>(moved[i]) - built[i]));
  EXPECT_GT(diff, 100 * 4e-6 * scale);
}

ErrorCode code_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.code();
  }
  return ErrorCode::ok;
}

TEST(ErwinModel, Errors) {
  const Case c("mpnn_rot");
  const auto m = surrogate::make_model(c.file);
  const SelfComm comm;
  const SampleLayout layout = SampleLayout::build(comm, c.n(), c.batch_idx.data());
  std::vector<float> out(static_cast<std::size_t>(c.n() * 16));
  // Positions missing: the generic predict and an empty geometry.
  try {
    m->predict(comm, layout, c.features.data(), 4, out.data(), 16);
    FAIL() << "no error without positions";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("needs the positions"), std::string::npos) << e.what();
  }
  // Message passing without edges and without a graph rule.
  try {
    predict(*m, c.batch_idx, c.features, geometry(c.positions, 3));
    FAIL() << "no error without edges";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("edge_index"), std::string::npos) << e.what();
  }
  // An edge across samples, an edge outside the ids, duplicate global ids, NaN positions.
  std::vector<std::int64_t> cross = c.edges;
  cross[0] = c.n() - 1;  // a point of sample 1 sending to a receiver of sample 0
  EXPECT_EQ(code_of([&] { predict(*m, c.batch_idx, c.features, geometry(c.positions, 3, &cross)); }), ErrorCode::input);
  std::vector<std::int64_t> outside = c.edges;
  outside[1] = c.n();
  EXPECT_EQ(code_of([&] { predict(*m, c.batch_idx, c.features, geometry(c.positions, 3, &outside)); }), ErrorCode::input);
  std::vector<std::int64_t> ids(static_cast<std::size_t>(c.n()));
  std::iota(ids.begin(), ids.end(), 0);
  ids[5] = 4;
  EXPECT_EQ(code_of([&] { predict(*m, c.batch_idx, c.features, geometry(c.positions, 3, &c.edges, ids.data())); }),
            ErrorCode::input);
  std::vector<float> nan_positions = c.positions;
  nan_positions[7] = std::nanf("");
  EXPECT_EQ(code_of([&] { predict(*m, c.batch_idx, c.features, geometry(nan_positions, 3, &c.edges)); }), ErrorCode::input);
  // Unknown graph rule and wrapper names in /config.
  ModelFile bad = c.file;
  bad.config.set("graph", std::string("delaunay"));
  EXPECT_EQ(code_of([&] { surrogate::make_model(bad); }), ErrorCode::format);
  bad = c.file;
  bad.config.set("wrapper", std::string("airfoil"));
  EXPECT_EQ(code_of([&] { surrogate::make_model(bad); }), ErrorCode::format);
}

}  // namespace
