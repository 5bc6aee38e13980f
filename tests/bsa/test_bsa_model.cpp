// BSA as a registered Model (make_model, Model::predict with PointGeometry) in one process: bit for bit
// equal to bsa::Network on the golden cases (tests/data/bsa) and within the golden tolerance of the
// official float64 output, in any row order (global ids); the ShapeNet-Car wrapper (positions only)
// equal to Network::forward_shapenet; describe(); a CUDA device and missing positions refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "h5_io.hpp"
#include "shapenet_wrapped.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"

namespace bt = surrogate::balltree;
namespace bsa = surrogate::bsa;
namespace st = surrogate::testing;
using surrogate::Error;
using surrogate::ErrorCode;
using surrogate::ModelFile;
using surrogate::PointGeometry;
using surrogate::SampleLayout;
using surrogate::SelfComm;

namespace {

struct Case {
  ModelFile file;
  std::vector<float> features, positions;
  std::vector<double> exact;  // official forward in float64
  std::vector<std::int64_t> batch_idx;
  explicit Case(const std::string& name) {
    const std::string path = std::string(SURROGATE_TEST_DATA_DIR) + "/bsa/bsa_" + name + ".h5";
    file = ModelFile::read(path);
    features = st::to_float(st::read_array(path, "/golden/features").values);
    positions = st::to_float(st::read_array(path, "/golden/positions").values);
    exact = st::read_array(path, "/golden/output_f64").values;
    const auto sizes = st::read_array(path, "/golden/sample_sizes").values;
    for (std::size_t b = 0; b < sizes.size(); ++b)
      batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(sizes[b]), static_cast<std::int64_t>(b));
  }
  std::int64_t n() const { return static_cast<std::int64_t>(batch_idx.size()); }
  bt::Batch batch() const { return bt::Batch::from_batch_idx(batch_idx); }
};

/// Model::predict in one process, rows in the given order.
std::vector<float> predict(surrogate::Model& m, const std::vector<std::int64_t>& batch_idx, const std::vector<float>& features,
                           const PointGeometry& g, const surrogate::RunOptions& options = {}) {
  const SelfComm comm;
  const auto n = static_cast<std::int64_t>(batch_idx.size());
  const SampleLayout layout = SampleLayout::build(comm, n, batch_idx.data());
  std::vector<float> out(static_cast<std::size_t>(n * m.out_channels()));
  m.predict(comm, layout, g, features.empty() ? nullptr : features.data(), m.in_channels(), out.data(), m.out_channels(),
            options);
  return out;
}

PointGeometry geometry(const std::vector<float>& positions, int dim, const std::vector<std::int64_t>* ids = nullptr) {
  PointGeometry g;
  g.positions = positions.data();
  g.ld_positions = dim;
  if (ids) g.global_ids = ids->data();
  return g;
}

const char* const kCases[] = {"sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball", "global"};

class Registered : public ::testing::TestWithParam<const char*> {};

TEST_P(Registered, BitwiseEqualToNetworkAndWithinGoldenTolerance) {
  const Case c(GetParam());
  const auto model = surrogate::make_model(c.file);
  const bsa::Network net(c.file);
  EXPECT_EQ(model->architecture(), "bsa");
  EXPECT_EQ(model->in_channels(), net.in_channels());
  EXPECT_EQ(model->out_channels(), net.out_channels());
  EXPECT_EQ(model->position_dim(), net.config().dimensionality);
  EXPECT_FALSE(model->needs_edges());
  EXPECT_EQ(model->parameter_count(), net.parameter_count());
  const std::vector<float> direct = net.forward(c.features, c.positions, c.batch(), 1);
  surrogate::RunOptions options;
  options.threads = 2;
  const std::vector<float> y = predict(*model, c.batch_idx, c.features, geometry(c.positions, model->position_dim()), options);
  EXPECT_EQ(y, direct);  // the same forward on the same arrays (results do not depend on the thread count)
  // The golden tolerance of tests/bsa/test_bsa.cpp: 2e-6 * max|y| from the official float64 output.
  double err = 0.0, scale = 0.0;
  ASSERT_EQ(y.size(), c.exact.size());
  for (std::size_t i = 0; i < y.size(); ++i) {
    err = std::max(err, std::abs(double(y[i]) - c.exact[i]));
    scale = std::max(scale, std::abs(c.exact[i]));
  }
  EXPECT_LE(err, 2e-6 * scale) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Golden, Registered, ::testing::ValuesIn(kCases));

TEST(BsaModel, RowOrderDoesNotMatterWithGlobalIds) {
  const Case c("sparse_rot");
  const auto model = surrogate::make_model(c.file);
  const int d = model->position_dim(), cin = model->in_channels(), cout = model->out_channels();
  const std::vector<float> reference = predict(*model, c.batch_idx, c.features, geometry(c.positions, d));
  // Rows shuffled; global ids give every row its place in the original order.
  std::vector<std::int64_t> perm(static_cast<std::size_t>(c.n()));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(11));
  std::vector<float> f(c.features.size()), p(c.positions.size());
  std::vector<std::int64_t> b(perm.size()), ids(perm.size());
  for (std::size_t r = 0; r < perm.size(); ++r) {
    const auto s = static_cast<std::size_t>(perm[r]);
    std::copy_n(c.features.begin() + static_cast<std::ptrdiff_t>(s * cin), cin, f.begin() + static_cast<std::ptrdiff_t>(r * cin));
    std::copy_n(c.positions.begin() + static_cast<std::ptrdiff_t>(s * d), d, p.begin() + static_cast<std::ptrdiff_t>(r * d));
    b[r] = c.batch_idx[s];
    ids[r] = static_cast<std::int64_t>(s);
  }
  const std::vector<float> y = predict(*model, b, f, geometry(p, d, &ids));
  for (std::size_t r = 0; r < perm.size(); ++r)
    for (int ch = 0; ch < cout; ++ch)
      ASSERT_EQ(y[r * static_cast<std::size_t>(cout) + static_cast<std::size_t>(ch)],
                reference[static_cast<std::size_t>(perm[r]) * static_cast<std::size_t>(cout) + static_cast<std::size_t>(ch)])
          << "row " << r;
  // Without global ids the shuffled order is the order the network sees: another ball tree, other values.
  const std::vector<float> unordered = predict(*model, b, f, geometry(p, d));
  std::vector<float> back(unordered.size());
  for (std::size_t r = 0; r < perm.size(); ++r)
    std::copy_n(unordered.begin() + static_cast<std::ptrdiff_t>(r * cout), cout,
                back.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(perm[r]) * cout));
  EXPECT_NE(back, reference);
}

/// The sparse_rot case inside the ShapeNet-Car wrapper with random head weights (as tests/bsa/test_bsa.cpp).
ModelFile shapenet_file(const Case& c) { return bsa_testing::shapenet_wrapped(c.file, 3); }

TEST(BsaModel, ShapenetWrapperTakesPositionsOnly) {
  const Case c("sparse_rot");
  const ModelFile f = shapenet_file(c);
  const auto model = surrogate::make_model(f);
  EXPECT_EQ(model->in_channels(), 0);
  EXPECT_EQ(model->out_channels(), 1);
  const std::vector<float> direct = bsa::Network(f).forward_shapenet(c.positions, c.batch(), 1);
  EXPECT_EQ(predict(*model, c.batch_idx, {}, geometry(c.positions, 3)), direct);
  bool found = false;
  for (const auto& [key, value] : model->describe())
    if (key == "wrapper") found = value.find("shapenet_car") != std::string::npos;
  EXPECT_TRUE(found);
}

TEST(BsaModel, Described) {
  const Case c("sparse_rot");
  const auto model = surrogate::make_model(c.file);
  std::string text;
  for (const auto& [key, value] : model->describe()) text += key + ": " + value + "\n";
  EXPECT_NE(text.find("attention: sparse"), std::string::npos) << text;
  EXPECT_NE(text.find("compress_block_size / selected_blocks: 8 / 4"), std::string::npos) << text;
  EXPECT_NE(text.find("rotation: 45 degrees"), std::string::npos) << text;
  EXPECT_NE(text.find("multi-rank mode: distributed ball tree"), std::string::npos) << text;
}

TEST(BsaModel, Errors) {
  const Case c("sparse_rot");
  const auto model = surrogate::make_model(c.file);
  // A CUDA device that no machine has (or a build without CUDA): Error(unsupported) naming the device.
  surrogate::RunOptions cuda;
  cuda.cuda_device = 1000;
  try {
    (void)predict(*model, c.batch_idx, c.features, geometry(c.positions, 3), cuda);
    ADD_FAILURE() << "CUDA device 1000 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("CUDA device 1000"), std::string::npos) << e.what();
  }
  // No positions.
  try {
    (void)predict(*model, c.batch_idx, c.features, PointGeometry{});
    ADD_FAILURE() << "missing positions were accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::input);
  }
  // Samples that pad to different sizes (the official reshape needs equal sizes): the network's error.
  std::vector<std::int64_t> uneven = c.batch_idx;
  std::fill(uneven.begin(), uneven.begin() + 400, 0);
  std::fill(uneven.begin() + 400, uneven.end(), 1);
  EXPECT_THROW((void)predict(*model, uneven, c.features, geometry(c.positions, 3)), Error);
}

}  // namespace
