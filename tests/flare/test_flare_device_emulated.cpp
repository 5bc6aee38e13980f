// FLARE's device forward (libsurrogate/src/flare/cuda/, the code compiled into the library) run on the CPU
// with the host-emulated CUDA backend: tests/device/emulated_cuda_backend.cpp (memory, streams, copies,
// norms) and emulated_flare_launchers.cpp (the MLP, the latent encode and decode on the CPU kernels, the
// caller-array gather and scatter), compiled into this executable where they replace
// libsurrogate_kernels.so's. Shared-library CUDA builds only; labels unit;cuda;flare.
//
// What this checks without a GPU: the orchestration (the plan's device tables, the weight arena and layer
// table, buffer layouts, the block sweep, the device-resident gather/scatter, error mapping) against the
// official reference and the CPU forward. What it does not check: the kernels, nvcc's code, the hardware.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>

#include "host_backend_hooks.hpp"
#include "golden.hpp"
#include "random_models.hpp"
#include "surrogate/flare.hpp"
#include "surrogate/model.hpp"


namespace st = surrogate::testing;
using surrogate::RunOptions;

namespace {

constexpr double kTolerance = 4.0;  // x float32_error, as the golden tests

RunOptions on_device(bool reproducible) {
  RunOptions o;
  o.cuda_device = host_backend::kDevice;
  o.reproducible = reproducible;
  return o;
}

RunOptions on_cpu(bool reproducible) {
  RunOptions o;
  o.threads = 1;
  o.reproducible = reproducible;
  return o;
}

struct Points {
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  std::vector<std::size_t> perm;  // point i is the case's point perm[i]
};

/// The case's points in a shuffled order (sample ids not grouped: the layout's order is exercised).
Points shuffled(const st::GoldenCase& c, unsigned seed) {
  std::vector<std::size_t> perm(c.sample_ids.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
  Points p;
  p.perm = perm;
  for (std::size_t i : perm) {
    p.ids.push_back(c.sample_ids[i]);
    for (int j = 0; j < c.in_dim; ++j) p.features.push_back(c.features[i * c.in_dim + j]);
  }
  return p;
}

std::vector<float> predict(surrogate::Model& model, surrogate::Plan& plan, const std::vector<float>& features,
                           const RunOptions& options) {
  std::vector<float> out(static_cast<std::size_t>(plan.layout().local_points()) * model.out_channels(), -1.0f);
  surrogate::SelfComm comm;
  model.predict(comm, plan, features.data(), model.in_channels(), out.data(), model.out_channels(), options);
  return out;
}

class FlareDeviceEmulated : public ::testing::TestWithParam<std::string> {};

// Within the GPU tests' bound of the official float64 reference and of the CPU forward, both modes.
TEST_P(FlareDeviceEmulated, MatchesTheOfficialModelAndTheCpu) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data()));
  double scale = 0;
  for (double v : c.reference) scale = std::max(scale, std::abs(v));
  for (bool reproducible : {false, true}) {
    const int before = host_backend::launches;
    const auto device = predict(*model, *plan, c.features, on_device(reproducible));
    EXPECT_GT(host_backend::launches, before) << "the device path did not run";
    const double err = st::relative_max_error(device, c.reference);
    EXPECT_LE(err, kTolerance * c.float32_error) << c.name << (reproducible ? " reproducible" : " default") << ": error "
                                                 << err << ", official float32 error " << c.float32_error;
    const auto cpu = predict(*model, *plan, c.features, on_cpu(reproducible));
    double worst = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::abs(double(device[i]) - double(cpu[i])));
    EXPECT_LE(worst / scale, kTolerance * c.float32_error) << c.name << ": device vs CPU " << worst / scale;
  }
}

// One kept plan (used by the CPU in between), a second plan of the points and the one-shot predict give
// the same bits; the reproducible mode does not depend on the point order.
TEST_P(FlareDeviceEmulated, PlansAreReusedBitwiseAndTheOrderDoesNotMatter) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const Points p = shuffled(c, 5);
  const auto layout = surrogate::SampleLayout::build(comm, c.points(), p.ids.data());
  const auto plan = model->plan(comm, layout), second = model->plan(comm, layout);
  const auto ordered_plan = model->plan(comm, surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data()));
  for (bool reproducible : {false, true}) {
    const std::string mode = reproducible ? " reproducible" : " default";
    const auto first = predict(*model, *plan, p.features, on_device(reproducible));
    predict(*model, *plan, p.features, on_cpu(reproducible));
    EXPECT_EQ(predict(*model, *plan, p.features, on_device(reproducible)), first) << c.name << mode << ": kept plan";
    EXPECT_EQ(predict(*model, *second, p.features, on_device(reproducible)), first) << c.name << mode << ": second plan";
    std::vector<float> one_shot(first.size());
    model->predict(comm, layout, p.features.data(), c.in_dim, one_shot.data(), c.out_dim, on_device(reproducible));
    EXPECT_EQ(one_shot, first) << c.name << mode << ": one-shot predict";
    if (!reproducible) continue;
    const auto ordered = predict(*model, *ordered_plan, c.features, on_device(true));
    bool identical = true;
    for (std::size_t i = 0; i < p.perm.size(); ++i)
      for (int j = 0; j < c.out_dim; ++j)
        identical = identical && first[i * c.out_dim + j] == ordered[p.perm[i] * c.out_dim + j];
    EXPECT_TRUE(identical) << c.name << ": reproducible mode depends on the point order";
  }
  EXPECT_EQ(plan->traffic().moves, 0u);
}

// Model::predict_device on "device" arrays (host memory under the emulation): Fortran-order inputs,
// outputs at a stride with gaps, float and double, shuffled sample ids: bitwise the host-array device
// forward; gaps untouched; a NaN refused with the host path's message.
TEST_P(FlareDeviceEmulated, DeviceArraysGiveTheHostArrayResultBitwise) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const Points p = shuffled(c, 7);
  const std::size_t n = p.ids.size();
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(n), p.ids.data()));
  for (bool reproducible : {false, true}) {
    const auto host = predict(*model, *plan, p.features, on_device(reproducible));
    auto run_with = [&](auto zero) {
      using Real = decltype(zero);
      std::vector<Real> in_f(n * static_cast<std::size_t>(c.in_dim));  // Fortran order
      for (std::size_t i = 0; i < n; ++i)
        for (int j = 0; j < c.in_dim; ++j)
          in_f[i + n * static_cast<std::size_t>(j)] = static_cast<Real>(p.features[i * c.in_dim + j]);
      const int ld_out = c.out_dim + 2;
      std::vector<Real> out(n * static_cast<std::size_t>(ld_out), Real(-7));
      surrogate::Model::DeviceArrays a;
      a.in = in_f.data();
      a.out = out.data();
      a.is_double = std::is_same_v<Real, double>;
      a.in_point_stride = 1;
      a.in_component_stride = static_cast<std::int64_t>(n);
      a.out_point_stride = ld_out;
      a.out_component_stride = 1;
      model->predict_device(comm, *plan, a, on_device(reproducible));
      for (std::size_t i = 0; i < n; ++i) {
        for (int j = 0; j < c.out_dim; ++j)
          ASSERT_EQ(out[i * ld_out + j], static_cast<Real>(host[i * c.out_dim + j]))
              << c.name << " point " << i << " channel " << j << (a.is_double ? " (double)" : " (float)");
        ASSERT_EQ(out[i * ld_out + c.out_dim], Real(-7)) << "gap overwritten";
        ASSERT_EQ(out[i * ld_out + c.out_dim + 1], Real(-7)) << "gap overwritten";
      }
      in_f[n / 2] = std::numeric_limits<Real>::quiet_NaN();
      try {
        model->predict_device(comm, *plan, a, on_device(reproducible));
        ADD_FAILURE() << "a NaN input on the device was accepted";
      } catch (const surrogate::Error& e) {
        EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
        EXPECT_NE(std::string(e.what()).find("1 NaN/Inf value(s)"), std::string::npos) << e.what();
      }
    };
    run_with(0.0f);
    run_with(0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FlareDeviceEmulated, ::testing::ValuesIn(st::golden_case_names()),
                         [](const auto& param_info) { return param_info.param; });

// A failed launch is an Error(internal) naming the model and the device; the model works afterwards.
TEST(FlareDeviceEmulatedErrors, ALaunchFailureIsAnErrorNamingTheDevice) {
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data()));
  const auto good = predict(*model, *plan, c.features, on_device(false));
  host_backend::fail_after = 3;  // the third norm of the forward
  try {
    predict(*model, *plan, c.features, on_device(false));
    ADD_FAILURE() << "the failed launch was not reported";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("flare: CUDA device cuda-emulated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
  }
  host_backend::fail_after = 0;
  EXPECT_EQ(predict(*model, *plan, c.features, on_device(false)), good);
}

// Shapes the kernels do not cover are refused before any upload, naming the width; the CPU runs them.
TEST(FlareDeviceEmulatedErrors, UnsupportedShapesAreRefusedClearly) {
  surrogate::flare::Config cfg = st::elasticity_config();
  cfg.ffn_hidden_dim = 300;
  const auto model = surrogate::make_model(st::random_flare_file(cfg, 13));
  surrogate::SelfComm comm;
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, 10, nullptr));
  const std::vector<float> features(20, 0.5f);
  try {
    predict(*model, *plan, features, on_device(false));
    FAIL() << "an MLP width of 300 was accepted on the device";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("ffn_hidden_dim 300 > 256"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(predict(*model, *plan, features, on_cpu(false)));
}

}  // namespace
