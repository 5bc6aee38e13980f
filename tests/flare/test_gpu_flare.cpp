// Whole FLARE models on the device under test (gpu_test.hpp: host backend or GPU), one process: golden cases
// within 4x the official float32 error of float64 and of the CPU, both modes; random awkward shapes; plan
// reuse, point order, device arrays; refusals; an injected launch failure (host backend). share/docs/cuda.md,
// "Tests and benchmark".
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <type_traits>

#include "golden.hpp"
#include "gpu_test.hpp"
#include "host_backend_hooks.hpp"
#include "precision_emulation.hpp"
#include "random_models.hpp"
#include "surrogate/flare.hpp"
#include "surrogate/model.hpp"

namespace st = surrogate::testing;
using surrogate::flare::Config;
using surrogate::RunOptions;

namespace {

constexpr double kTolerance = 4.0;  // x float32_error, as tests/golden

RunOptions on_gpu(bool reproducible) {
  RunOptions o;
  o.cuda_device = st::test_device();
  o.reproducible = reproducible;
  return o;
}

RunOptions on_cpu(bool reproducible) {
  RunOptions o;
  o.threads = 1;
  o.reproducible = reproducible;
  return o;
}

std::vector<float> predict(surrogate::Model& model, const std::vector<float>& features,
                           const std::vector<std::int64_t>& ids, const RunOptions& options) {
  surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(ids.size());
  const auto layout = surrogate::SampleLayout::build(comm, n, ids.data());
  std::vector<float> out(static_cast<std::size_t>(n) * model.out_channels(), -1.0f);
  model.predict(comm, layout, features.data(), model.in_channels(), out.data(), model.out_channels(), options);
  return out;
}

/// max |a - b| / max |b|
double relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return num / den;
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

class FlareGoldenGpu : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
};

TEST_P(FlareGoldenGpu, MatchesTheOfficialModelAndTheCpu) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  for (bool reproducible : {false, true}) {
    const auto gpu = predict(*model, c.features, c.sample_ids, on_gpu(reproducible));
    const double err = st::relative_max_error(gpu, c.reference);
    EXPECT_LE(err, kTolerance * c.float32_error) << c.name << (reproducible ? " reproducible" : " default")
                                                 << ": error " << err << ", official float32 error " << c.float32_error;
    const auto cpu = predict(*model, c.features, c.sample_ids, on_cpu(reproducible));
    double worst = 0;
    for (std::size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::abs(double(gpu[i]) - double(cpu[i])));
    EXPECT_LE(worst / max_abs(c.reference), kTolerance * c.float32_error)
        << c.name << (reproducible ? " reproducible" : " default") << ": GPU vs CPU " << worst / max_abs(c.reference);
  }
}

// Predictions on one kept plan (its device tables built by the first; the CPU runs on it in between),
// and on a fresh plan of the same points, are bitwise identical; one process moves no rows.
TEST_P(FlareGoldenGpu, RepeatedPredictionsAreBitwiseIdentical) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const auto plan = model->plan(comm, surrogate::SampleLayout::build(comm, c.points(), c.sample_ids.data()));
  for (bool reproducible : {false, true}) {
    auto on_plan = [&](const RunOptions& options) {
      std::vector<float> out(c.sample_ids.size() * static_cast<std::size_t>(c.out_dim), -1.0f);
      model->predict(comm, *plan, c.features.data(), c.in_dim, out.data(), c.out_dim, options);
      return out;
    };
    const auto first = on_plan(on_gpu(reproducible));
    on_plan(on_cpu(reproducible));
    const auto second = on_plan(on_gpu(reproducible));
    EXPECT_EQ(first, second) << c.name << (reproducible ? " reproducible" : " default");
    EXPECT_EQ(predict(*model, c.features, c.sample_ids, on_gpu(reproducible)), first)
        << c.name << (reproducible ? " reproducible" : " default") << ": a fresh plan";
  }
  EXPECT_EQ(plan->traffic().moves, 0u);
}

TEST_P(FlareGoldenGpu, ReproducibleModeDoesNotDependOnThePointOrder) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  std::vector<std::size_t> perm(c.sample_ids.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(99));
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  for (std::size_t p : perm) {
    ids.push_back(c.sample_ids[p]);
    for (int j = 0; j < c.in_dim; ++j) features.push_back(c.features[p * c.in_dim + j]);
  }
  for (bool reproducible : {false, true}) {
    const auto ordered = predict(*model, c.features, c.sample_ids, on_gpu(reproducible));
    const auto shuffled = predict(*model, features, ids, on_gpu(reproducible));
    double worst = 0, scale = 0;
    bool identical = true;
    for (std::size_t i = 0; i < perm.size(); ++i)
      for (int j = 0; j < c.out_dim; ++j) {
        const float a = shuffled[i * c.out_dim + j], b = ordered[perm[i] * c.out_dim + j];
        identical = identical && a == b;
        worst = std::max(worst, std::abs(double(a) - double(b)));
        scale = std::max(scale, std::abs(double(b)));
      }
    if (reproducible) EXPECT_TRUE(identical) << c.name << ": reproducible mode depends on the point order";
    else EXPECT_LE(worst / scale, 1e-6) << c.name;
  }
}

// Device-resident predict (Model::predict_device): the caller's arrays in device memory, in a shuffled
// order (sample ids not grouped, so the gather/scatter through the layout's order is exercised), inputs
// in Fortran order, outputs at a stride with gaps. Bitwise equal to the host-array predict on the same
// device (same normalisation arithmetic), float and double; gaps untouched; NaN refused on the device.
TEST_P(FlareGoldenGpu, DeviceArraysGiveTheHostArrayResultBitwise) {
  namespace cu = surrogate::kernels::cuda;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  const std::size_t n = c.sample_ids.size();
  std::vector<std::size_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), std::mt19937(7));
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  for (std::size_t p : perm) {
    ids.push_back(c.sample_ids[p]);
    for (int j = 0; j < c.in_dim; ++j) features.push_back(c.features[p * c.in_dim + j]);
  }
  surrogate::SelfComm comm;
  const auto layout = surrogate::SampleLayout::build(comm, static_cast<std::int64_t>(n), ids.data());
  const auto ni = static_cast<std::int64_t>(n);
  for (bool reproducible : {false, true}) {
    const auto host = predict(*model, features, ids, on_gpu(reproducible));
    auto run_with = [&](auto zero) {
      using Real = decltype(zero);
      std::vector<Real> in_f(n * static_cast<std::size_t>(c.in_dim));  // Fortran order
      for (std::size_t i = 0; i < n; ++i)
        for (int j = 0; j < c.in_dim; ++j) in_f[i + n * static_cast<std::size_t>(j)] = static_cast<Real>(features[i * c.in_dim + j]);
      const int ld_out = c.out_dim + 2;
      std::vector<Real> out(n * static_cast<std::size_t>(ld_out), Real(-7));
      auto d_in = st::to_device(in_f);
      auto d_out = st::to_device(out);
      surrogate::Model::DeviceArrays a;
      a.in = d_in.data();
      a.out = d_out.data();
      a.is_double = std::is_same_v<Real, double>;
      a.in_point_stride = 1;
      a.in_component_stride = ni;
      a.out_point_stride = ld_out;
      a.out_component_stride = 1;
      model->predict_device(comm, layout, a, on_gpu(reproducible));
      const auto back = st::to_host(d_out.data(), out.size());
      for (std::size_t i = 0; i < n; ++i) {
        for (int j = 0; j < c.out_dim; ++j)
          ASSERT_EQ(back[i * ld_out + j], static_cast<Real>(host[i * c.out_dim + j]))
              << c.name << " point " << i << " channel " << j << (a.is_double ? " (double)" : " (float)");
        ASSERT_EQ(back[i * ld_out + c.out_dim], Real(-7)) << "gap overwritten";
        ASSERT_EQ(back[i * ld_out + c.out_dim + 1], Real(-7)) << "gap overwritten";
      }
      // A NaN input is refused on the device with the host path's message.
      in_f[n / 2] = std::numeric_limits<Real>::quiet_NaN();
      auto d_bad = st::to_device(in_f);
      a.in = d_bad.data();
      try {
        model->predict_device(comm, layout, a, on_gpu(reproducible));
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

// The device-resident predict follows the caller's work on the default stream: inputs copied there
// asynchronously from pinned memory just before the call are the ones predicted, and bitwise the
// host-array result. (On the host backend the copy waits in the null queue until something orders after
// it, so a predict that did not would read the stale zeros.)
TEST_P(FlareGoldenGpu, DeviceArraysFollowTheCallersDefaultStreamWork) {
  namespace cu = surrogate::kernels::cuda;
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(c.sample_ids.size());
  const auto layout = surrogate::SampleLayout::build(comm, n, c.sample_ids.data());
  const auto host = predict(*model, c.features, c.sample_ids, on_gpu(false));
  auto d_in = st::to_device(std::vector<float>(c.features.size(), 0.0f));
  auto d_out = st::to_device(std::vector<float>(host.size(), -7.0f));
  const std::size_t bytes = c.features.size() * sizeof(float);
  cu::PinnedBuffer<float> pinned;
  pinned.resize(c.features.size());
  std::memcpy(pinned.data(), c.features.data(), bytes);
  cu::copy_to_device(d_in.data(), pinned.data(), bytes, nullptr);  // the default stream; the host goes on
  surrogate::Model::DeviceArrays a;
  a.in = d_in.data();
  a.out = d_out.data();
  a.in_point_stride = c.in_dim;
  a.in_component_stride = 1;
  a.out_point_stride = c.out_dim;
  a.out_component_stride = 1;
  model->predict_device(comm, layout, a, on_gpu(false));
  const auto back = st::to_host(d_out.data(), host.size());
  for (std::size_t i = 0; i < host.size(); ++i) ASSERT_EQ(back[i], host[i]) << c.name << " value " << i;
}

// The tensor-core precisions on whole models: the GPU's error against the official reference stays
// within twice the error of the CPU emulation of the same arithmetic (test_precision_emulation) plus the
// FP32 tolerance.
TEST_P(FlareGoldenGpu, TensorCorePrecisionsMatchTheirEmulatedAccuracy) {
  const st::GoldenCase c = st::load_golden_case(GetParam());
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  for (auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
    std::vector<float> emulated;
    {
      st::ScopedPrecisionEmulation emulate(precision);
      emulated = predict(*model, c.features, c.sample_ids, on_cpu(false));
    }
    const double emulated_error = st::relative_max_error(emulated, c.reference);
    RunOptions o = on_gpu(false);
    o.precision = precision;
    const auto gpu = predict(*model, c.features, c.sample_ids, o);
    const double err = st::relative_max_error(gpu, c.reference);
    EXPECT_LE(err, 2 * emulated_error + kTolerance * c.float32_error)
        << c.name << " " << surrogate::precision_name(precision) << ": GPU error " << err << ", emulated " << emulated_error;
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, FlareGoldenGpu, ::testing::ValuesIn(st::golden_case_names()),
                         [](const auto& param_info) { return param_info.param; });

// ---------------------------------------------------------------------------------------------------
// Random models: shapes the golden cases do not reach (head widths 3, 32, 64, 16; M = 1 and 300, two
// latent groups; MLP widths up to 256; single-Linear MLPs; several samples of very different sizes).

struct RandomCase {
  std::string name;
  Config cfg;
};

std::vector<RandomCase> random_cases() {
  std::vector<RandomCase> cases;
  {
    Config c;
    c.in_dim = 5, c.out_dim = 3, c.channel_dim = 12, c.num_heads = 4, c.num_latents = 1, c.num_blocks = 2;
    c.act = Config::Activation::silu;
    c.rmsnorm = true, c.qk_norm = true, c.out_proj_norm = false;
    c.attn_scale = 1.0 / std::sqrt(3.0);
    c.num_layers_in_out_proj = -1, c.in_proj_hidden_dim = 20, c.out_proj_hidden_dim = 20;
    c.num_layers_k_proj = 1, c.k_proj_hidden_dim = 20;
    c.num_layers_v_proj = 0, c.v_proj_hidden_dim = 7;
    c.num_layers_ffn = -1, c.ffn_hidden_dim = 9;
    cases.push_back({"heads_of_3_one_latent", c});
  }
  {
    Config c;
    c.in_dim = 2, c.out_dim = 1, c.channel_dim = 64, c.num_heads = 2, c.num_latents = 300, c.num_blocks = 1;
    c.in_proj_hidden_dim = c.out_proj_hidden_dim = c.k_proj_hidden_dim = c.v_proj_hidden_dim = c.ffn_hidden_dim = 256;
    c.num_layers_k_proj = c.num_layers_v_proj = c.num_layers_ffn = 2;
    cases.push_back({"wide_mlps_300_latents", c});
  }
  {
    Config c;
    c.in_dim = 3, c.out_dim = 2, c.channel_dim = 64, c.num_heads = 1, c.num_latents = 20, c.num_blocks = 2;
    c.qk_norm = true;
    c.attn_scale = 0.125;
    cases.push_back({"one_head_of_64", c});
  }
  {
    Config c;
    c.in_dim = 2, c.out_dim = 2, c.channel_dim = 128, c.num_heads = 8, c.num_latents = 64, c.num_blocks = 1;
    c.in_proj_hidden_dim = c.out_proj_hidden_dim = c.k_proj_hidden_dim = c.v_proj_hidden_dim = c.ffn_hidden_dim = 130;
    cases.push_back({"heads_of_16_hidden_130", c});
  }
  return cases;
}

void random_points(const std::vector<int>& sizes, int in_dim, std::vector<float>& features,
                   std::vector<std::int64_t>& ids) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> dist(0.0f, 1.0f);
  for (std::size_t s = 0; s < sizes.size(); ++s)
    for (int i = 0; i < sizes[s]; ++i) {
      ids.push_back(static_cast<std::int64_t>(s));
      for (int j = 0; j < in_dim; ++j) features.push_back(dist(gen));
    }
}

class FlareGpu : public ::testing::Test {
 protected:
  void SetUp() override { SURROGATE_SKIP_WITHOUT_GPU(); }
};

TEST_F(FlareGpu, RandomModelsWithAwkwardShapesMatchTheCpu) {
  for (const RandomCase& rc : random_cases()) {
    const auto model = surrogate::make_model(st::random_flare_file(rc.cfg, 11));
    std::vector<float> features;
    std::vector<std::int64_t> ids;
    random_points({1, 700, 2500}, rc.cfg.in_dim, features, ids);
    for (bool reproducible : {false, true}) {
      const auto gpu = predict(*model, features, ids, on_gpu(reproducible));
      const auto cpu = predict(*model, features, ids, on_cpu(reproducible));
      EXPECT_LE(relative_difference(gpu, cpu), 1e-4) << rc.name << (reproducible ? " reproducible" : " default");
    }
  }
}

TEST_F(FlareGpu, LargeSampleSpreadOverManyBlocksMatchesTheCpu) {
  const Config cfg = st::elasticity_config();
  const auto model = surrogate::make_model(st::random_flare_file(cfg, 12));
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  // Many blocks of the encode and decode sweeps (fewer on the host backend, where each block is slower).
  random_points({st::on_host_backend() ? 9000 : 70000}, cfg.in_dim, features, ids);
  for (bool reproducible : {false, true}) {
    const auto gpu = predict(*model, features, ids, on_gpu(reproducible));
    const auto cpu = predict(*model, features, ids, on_cpu(reproducible));
    EXPECT_LE(relative_difference(gpu, cpu), 1e-4) << (reproducible ? "reproducible" : "default");
  }
}

TEST_F(FlareGpu, UnsupportedShapesAreRefusedClearly) {
  Config cfg = st::elasticity_config();
  cfg.ffn_hidden_dim = 300;
  const auto model = surrogate::make_model(st::random_flare_file(cfg, 13));
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  random_points({10}, cfg.in_dim, features, ids);
  try {
    predict(*model, features, ids, on_gpu(false));
    FAIL() << "an MLP width of 300 was accepted on the GPU";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("ffn_hidden_dim 300 > 256"), std::string::npos) << e.what();
  }
  // the CPU still runs it
  EXPECT_NO_THROW(predict(*model, features, ids, on_cpu(false)));
}

// A failed launch is an Error(internal) naming the model and the device; the model works afterwards.
TEST(FlareGpuHostBackend, ALaunchFailureIsAnErrorNamingTheDevice) {
  SURROGATE_HOST_BACKEND_ONLY();
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  const auto good = predict(*model, c.features, c.sample_ids, on_gpu(false));
  host_backend::fail_after = 3;  // the third norm of the forward
  try {
    predict(*model, c.features, c.sample_ids, on_gpu(false));
    ADD_FAILURE() << "the failed launch was not reported";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("flare: CUDA device cuda-emulated"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
  }
  host_backend::fail_after = 0;
  EXPECT_EQ(predict(*model, c.features, c.sample_ids, on_gpu(false)), good);
}

// In one process a predict on a kept plan waits for the device once, for its outputs' copy into host memory
// (the ranks' agreements between the blocks need a wait each, one process does not). Reproducible mode adds
// the per-block read of the |v| maxima its exact scales are computed from.
TEST(FlareGpuHostBackend, OneProcessWaitsForTheDeviceOnlyForItsOutputs) {
  SURROGATE_HOST_BACKEND_ONLY();
  const st::GoldenCase c = st::load_golden_case("default");
  const surrogate::ModelFile file = surrogate::ModelFile::read(c.model_path);
  const auto model = surrogate::make_model(file);
  const int blocks = Config::from_attributes(file.config).num_blocks;
  const surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(c.sample_ids.size());
  const auto layout = surrogate::SampleLayout::build(comm, n, c.sample_ids.data());
  std::vector<float> out(static_cast<std::size_t>(n) * model->out_channels());
  for (const bool reproducible : {false, true}) {
    const auto plan = model->plan(comm, layout, surrogate::PointGeometry{}, on_gpu(reproducible));
    model->predict(comm, *plan, c.features.data(), model->in_channels(), out.data(), model->out_channels(),
                   on_gpu(reproducible));  // the plan's device tables, the work arrays
    const long long before = host_backend::host_waits;
    model->predict(comm, *plan, c.features.data(), model->in_channels(), out.data(), model->out_channels(),
                   on_gpu(reproducible));
    const long long waits = host_backend::host_waits - before;
    std::printf("  %s: %lld host waits per predict (%d blocks)\n", reproducible ? "reproducible" : "default", waits,
                blocks);
    EXPECT_EQ(waits, reproducible ? 1 + blocks : 1) << (reproducible ? "reproducible" : "default");
  }
}

// In one process a kept plan's default-mode forward is one captured CUDA graph from its second predict on:
// no kernel launched one by one, the bits of the direct forward. Another precision is another graph
// (run directly once, then captured); reproducible mode, which waits for the device between the blocks,
// never captures.
TEST(FlareGpuHostBackend, AKeptPlansForwardReplaysOneGraph) {
  SURROGATE_HOST_BACKEND_ONLY();
  const st::GoldenCase c = st::load_golden_case("default");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(c.model_path));
  const surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(c.sample_ids.size());
  const auto layout = surrogate::SampleLayout::build(comm, n, c.sample_ids.data());
  const auto plan = model->plan(comm, layout, surrogate::PointGeometry{}, on_gpu(false));
  const auto predict_on_plan = [&](const RunOptions& o) {
    std::vector<float> y(static_cast<std::size_t>(n) * model->out_channels());
    model->predict(comm, *plan, c.features.data(), model->in_channels(), y.data(), model->out_channels(), o);
    return y;
  };
  RunOptions bf16 = on_gpu(false);
  bf16.precision = surrogate::Precision::bf16;
  for (const RunOptions& o : {on_gpu(false), bf16})
    host_backend::expect_one_graph_per_plan([&] { return predict_on_plan(o); }, surrogate::precision_name(o.precision));
  const host_backend::Counts r0 = host_backend::counts();
  const auto reproducible = predict_on_plan(on_gpu(true));
  EXPECT_EQ(predict_on_plan(on_gpu(true)), reproducible);
  const host_backend::Counts r1 = host_backend::counts();
  EXPECT_EQ(r1.graphs, r0.graphs);
  EXPECT_EQ(r1.captures, r0.captures);
  EXPECT_GT(r1.launches, r0.launches);
  EXPECT_EQ(predict_on_plan(on_gpu(false)).size(), reproducible.size());  // back to default: recaptured
}

TEST_F(FlareGpu, AMissingDeviceIsRefusedClearly) {
  if (st::on_host_backend()) GTEST_SKIP() << "a device index beyond the visible ones: real devices only";
  const int count = surrogate::kernels::cuda::device_count();
  const auto model = surrogate::make_model(st::random_flare_file(st::elasticity_config(), 14));
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  random_points({10}, 2, features, ids);
  RunOptions o;
  o.cuda_device = count;
  try {
    predict(*model, features, ids, o);
    FAIL() << "device " << count << " was accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    EXPECT_NE(std::string(e.what()).find("device(s) are visible"), std::string::npos) << e.what();
  }
}

TEST_F(FlareGpu, TheCallersCurrentDeviceIsRestored) {
  if (st::on_host_backend()) GTEST_SKIP() << "the CUDA runtime's current device: real devices only";
  const int count = surrogate::kernels::cuda::device_count();
  ASSERT_EQ(cudaSetDevice(count - 1), cudaSuccess);
  const auto model = surrogate::make_model(st::random_flare_file(st::elasticity_config(), 15));
  std::vector<float> features;
  std::vector<std::int64_t> ids;
  random_points({100}, 2, features, ids);
  predict(*model, features, ids, on_gpu(false));
  predict(*model, features, ids, on_gpu(true));
  int current = -1;
  ASSERT_EQ(cudaGetDevice(&current), cudaSuccess);
  EXPECT_EQ(current, count - 1);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
}

}  // namespace
