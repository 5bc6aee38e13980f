// HEPT's CUDA forward through the registered model (RunOptions::cuda_device), on the host backend (cuda.*)
// and on a GPU (gpu.*, skipped without one): both layouts against the official float32 stable runs with
// the CPU fp32 test's bound, the layer-0 buckets against the CPU's, repeatability, fp64 refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu_test.hpp"
#include "h5_io.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"

namespace {

using surrogate::testing::read_array;

struct Case {
  std::string path;
  std::unique_ptr<surrogate::Model> model;
  std::vector<float> x, coords;
  std::vector<std::int64_t> batch;
  int coords_dim = 0;
  explicit Case(const std::string& name)
      : path(std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_" + name + ".h5"),
        model(surrogate::make_model(surrogate::ModelFile::read(path))) {
    x = surrogate::testing::to_float(read_array(path, "/golden/x").values);
    const auto c = read_array(path, "/golden/coords");
    coords = surrogate::testing::to_float(c.values);
    coords_dim = static_cast<int>(c.cols());
    for (const double b : read_array(path, "/golden/batch").values) batch.push_back(static_cast<std::int64_t>(b));
  }
  /// The model's prediction for the golden input on `device` (-1: the CPU).
  std::vector<float> predict(int device, surrogate::Precision precision = surrogate::Precision::fp32) const {
    const surrogate::SelfComm comm;
    const auto n = static_cast<std::int64_t>(batch.size());
    const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, batch.data());
    surrogate::PointGeometry g;
    g.positions = coords.data();
    g.ld_positions = coords_dim;
    surrogate::RunOptions options;
    options.cuda_device = device;
    options.precision = precision;
    const int in = model->in_channels(), od = model->out_channels();
    std::vector<float> out(static_cast<std::size_t>(n * od));
    model->predict(comm, layout, g, x.data(), in, out.data(), od, options);
    return out;
  }
};

/// max |got - want| / max(1, max |want|).
double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 1;
  for (std::size_t i = 0; i < want.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(got[i]) - want[i]));
    scale = std::max(scale, std::abs(want[i]));
  }
  std::printf("  max |difference| %.3g (relative %.3g)\n", err, err / scale);
  return err / scale;
}

// The official float32 stable runs to 2e-5 relative to max(1, max|y|), the bound of the CPU's fp32 golden
// tests (test_hept_golden: ~170 float32 ulps over ~10 chained layers of sums): the device computes the same
// stages in float with other summation orders in its norms and kernel sums and another exp. The keys are
// the CPU's bits (lsh_keys.cu), so the buckets are the same wherever the inputs to them are.
TEST(GpuHept, BothLayoutsMatchTheOfficialFloat32Runs) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const std::string name : {"example_small", "src_small", "src_pileup"}) {
    SCOPED_TRACE(name);
    const Case c(name);
    const std::vector<float> device = c.predict(surrogate::testing::test_device());
    const std::vector<double> official = read_array(c.path, "/golden/f32_stable/output").values;
    EXPECT_LT(relative_error(device, official), 2e-5);
    // And the CPU's fp32 prediction, which is within the same bound of the official run.
    const std::vector<float> cpu = c.predict(-1);
    EXPECT_LT(relative_error(device, std::vector<double>(cpu.begin(), cpu.end())), 4e-5);
    EXPECT_EQ(c.predict(surrogate::testing::test_device()), device) << "a second device forward differs";
  }
}

TEST(GpuHept, Float64IsRefusedOnTheDevice) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c("example_small");
  try {
    c.predict(surrogate::testing::test_device(), surrogate::Precision::fp64);
    FAIL() << "fp64 on the device was accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("fp32 only"), std::string::npos) << e.what();
  }
}

}  // namespace
