// Sequoia's CUDA forward through the registered model (RunOptions::cuda_device), on the host backend
// (cuda.*) and on a GPU (gpu.*, skipped without one), against the CPU forward of the same model: the golden
// batches and random clouds of 1,350-1,500 points for both test models and both example models (cls with
// root and leaf heads). Bitwise on the host backend, which runs the CPU's arithmetic and exp; within 1e-5 of
// max|y| on a GPU, whose double exp may differ in the last bit (a float ulp now and then, carried through
// the blocks). Also: repeatable, the dense layers in tf32 / bf16 against their emulation on the CPU, fp64
// refused, the caller's device arrays with per-sample host arrays, a kept plan's hierarchy kept on the
// device (host backend).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "device_arrays.hpp"
#include "gpu_test.hpp"
#include "host_backend_hooks.hpp"
#include "precision_emulation.hpp"
#include "sequoia_batches.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"

namespace {

using sequoia_test::Batch;
namespace st = surrogate::testing;

/// The model's plan of the batch's points in one process (a new hierarchy every call).
std::unique_ptr<surrogate::Plan> plan_of(const surrogate::Comm& comm, surrogate::Model& model, const Batch& c,
                                         const surrogate::RunOptions& options) {
  const auto layout = surrogate::SampleLayout::build(comm, c.n(), c.batch_idx.data());
  surrogate::PointGeometry g;
  g.positions = c.positions.data();
  g.ld_positions = 3;
  return model.plan(comm, layout, g, options);
}

/// The registered model's prediction of the batch in one process: per point (seg) or per sample (cls).
/// Model::predict on `plan`: the points' rows (segmentation) or the samples' rows (classification).
std::vector<float> predict_on(surrogate::Model& model, surrogate::Plan& plan, const Batch& c,
                              const surrogate::RunOptions& options) {
  const surrogate::SelfComm comm;
  const int in = model.in_channels(), out = model.out_channels(), s_out = model.sample_out_channels();
  std::vector<float> per_point(static_cast<std::size_t>(c.n() * std::max(out, 1)));
  std::vector<float> per_sample(c.sizes.size() * static_cast<std::size_t>(std::max(s_out, 1)));
  surrogate::Model::SampleArrays sa;
  sa.in = model.sample_in_channels() > 0 ? c.sample_features.data() : nullptr;
  sa.ld_in = model.sample_in_channels();
  sa.out = s_out > 0 ? per_sample.data() : nullptr;
  sa.ld_out = s_out;
  model.predict(comm, plan, c.features.data(), in, out > 0 ? per_point.data() : nullptr, out, sa, options);
  return out > 0 ? per_point : per_sample;
}

std::vector<float> predict(const Batch& c, int device, surrogate::Precision precision = surrogate::Precision::fp32) {
  const surrogate::SelfComm comm;
  const auto model = surrogate::make_model(c.file);
  surrogate::RunOptions options;
  options.cuda_device = device;
  options.precision = precision;
  const auto plan = plan_of(comm, *model, c, options);
  return predict_on(*model, *plan, c, options);
}

std::vector<Batch> batches() {
  std::vector<Batch> all;
  for (const auto& [model, name] : std::vector<std::pair<std::string, std::string>>{
           {"seg", "small"}, {"seg", "ties"}, {"seg", "unequal_sizes"}, {"cls", "small"}, {"cls", "medium"}})
    all.push_back(sequoia_test::golden(model, name));
  all.push_back(sequoia_test::synthetic(sequoia_test::data_path("seg"), {1500}, 5u));
  all.push_back(sequoia_test::synthetic(sequoia_test::data_path("cls"), {1200, 150}, 6u));
  all.push_back(sequoia_test::synthetic(sequoia_test::example_model("seg"), {150, 1200}, 7u));
  all.push_back(sequoia_test::synthetic(sequoia_test::example_model("cls"), {1500}, 8u));
  return all;
}

TEST(GpuSequoia, MatchesTheCpuForward) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const int device = surrogate::testing::test_device();
  for (const Batch& c : batches()) {
    SCOPED_TRACE(c.model);
    const std::vector<float> cpu = predict(c, -1), gpu = predict(c, device);
    ASSERT_EQ(gpu.size(), cpu.size());
    float top = 1.0f, err = 0.0f;
    for (std::size_t i = 0; i < cpu.size(); ++i) {
      top = std::max(top, std::fabs(cpu[i]));
      err = std::max(err, std::fabs(gpu[i] - cpu[i]));
    }
    if (surrogate::testing::on_host_backend())
      EXPECT_EQ(std::memcmp(gpu.data(), cpu.data(), cpu.size() * sizeof(float)), 0) << "max |difference| " << err;
    else
      EXPECT_LE(err, 1e-5f * top);
    EXPECT_EQ(predict(c, device), gpu) << "a second device forward differs";
  }
}

// tf32 / bf16: the dense layers on the tensor cores (the tree attention, norms and pooling stay fp32). The
// error against the CPU's fp32 forward within twice that of the CPU forward with the same rounding of the
// dense layers' operands (tests/support/precision_emulation) plus the fp32 bound, well above the fp32
// device forward's (the precision took effect); repeatable. fp64 is refused.
TEST(GpuSequoia, Tf32AndBf16DenseLayersOnTheDevice) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const int device = surrogate::testing::test_device();
  const auto max_error = [](const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
    return e;
  };
  for (const Batch& c : {sequoia_test::golden("seg", "unequal_sizes"), sequoia_test::golden("cls", "medium"),
                         sequoia_test::synthetic(sequoia_test::example_model("seg"), {1200}, 9u)}) {
    SCOPED_TRACE(c.model);
    const std::vector<float> cpu = predict(c, -1), fp32 = predict(c, device);
    double top = 1.0;
    for (const float v : cpu) top = std::max(top, std::fabs(static_cast<double>(v)));
    const double tol = 1e-5 * top;
    for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
      std::vector<float> emulated;
      {
        st::ScopedPrecisionEmulation emulate(precision);
        emulated = predict(c, -1);
      }
      const std::vector<float> tc = predict(c, device, precision);
      const double emulated_error = max_error(emulated, cpu), error = max_error(tc, cpu);
      EXPECT_LE(error, 2 * emulated_error + tol) << surrogate::precision_name(precision) << ": emulated " << emulated_error;
      EXPECT_GT(error, 4 * max_error(fp32, cpu) + 1e-7 * top) << surrogate::precision_name(precision) << " not applied";
      EXPECT_EQ(predict(c, device, precision), tc) << "a second device forward differs";
      std::printf("  %s %s: |device - cpu fp32| %.3g, emulated on the CPU %.3g (max|y| %.3g)\n", c.model.c_str(),
                  surrogate::precision_name(precision), error, emulated_error, top);
    }
  }
  try {
    predict(sequoia_test::golden("cls", "small"), device, surrogate::Precision::fp64);
    FAIL() << "precision fp64 accepted on the device";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
  }
}

// Per-sample arrays beside the caller's device arrays (predict_device with SampleArrays, host memory): a
// classification's logits (its head on the device) and a segmentation's class vectors give predict()'s
// bits; without them, or with a NaN class vector, the host path's errors on a call that writes nothing.
TEST(GpuSequoia, PredictDeviceTakesPerSampleArraysOnTheHost) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const Batch& c : {sequoia_test::golden("cls", "small"), sequoia_test::golden("seg", "small"),
                         sequoia_test::synthetic(sequoia_test::example_model("cls"), {700, 800}, 12u)}) {
    SCOPED_TRACE(c.model);
    const auto model = surrogate::make_model(c.file);
    const surrogate::SelfComm comm;
    surrogate::RunOptions options;
    options.cuda_device = st::test_device();
    const auto plan = plan_of(comm, *model, c, options);
    const int in = model->in_channels(), out = model->out_channels();
    const int s_in = model->sample_in_channels(), s_out = model->sample_out_channels();
    ASSERT_GT(s_in + s_out, 0);
    std::vector<float> per_point(static_cast<std::size_t>(std::max<std::int64_t>(c.n() * out, 1)));
    std::vector<float> per_sample(c.sizes.size() * static_cast<std::size_t>(std::max(s_out, 1)));
    surrogate::Model::SampleArrays sa;
    sa.in = s_in > 0 ? c.sample_features.data() : nullptr;
    sa.ld_in = s_in;
    sa.out = s_out > 0 ? per_sample.data() : nullptr;
    sa.ld_out = s_out;
    model->predict(comm, *plan, c.features.data(), in, out > 0 ? per_point.data() : nullptr, out, sa, options);
    if (out == 0) per_point.clear();
    st::expect_device_arrays_match(comm, *model, *plan, c.features, in, per_point, out, 0.0f, options, c.model, sa);

    const auto refused = [&](const surrogate::Model::SampleArrays& samples, surrogate::ErrorCode code,
                             const std::string& words) {
      auto d_in = st::to_device(c.features, options.cuda_device);
      auto d_out = st::to_device(std::vector<float>(std::max<std::size_t>(per_point.size(), 1), -7.0f), options.cuda_device);
      surrogate::Model::DeviceArrays a;
      a.in = d_in.data();
      a.out = out > 0 ? d_out.data() : nullptr;
      a.in_point_stride = in;
      a.out_point_stride = out;
      try {
        model->predict_device(comm, *plan, a, samples, options);
        ADD_FAILURE() << "predict_device accepted " << words;
      } catch (const surrogate::Error& e) {
        EXPECT_EQ(e.code(), code) << e.what();
        EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("predict_device"), std::string::npos) << e.what();
      }
      const std::vector<float> left = st::to_host(d_out.data(), d_out.size(), options.cuda_device);
      EXPECT_TRUE(std::all_of(left.begin(), left.end(), [](float v) { return v == -7.0f; })) << "written";
    };
    if (s_out > 0) refused({}, surrogate::ErrorCode::invalid_argument, "per-sample output array");
    if (s_in > 0) {
      refused({}, surrogate::ErrorCode::input, "per-sample input");
      std::vector<float> bad = c.sample_features;
      bad[1] = std::nanf("");
      surrogate::Model::SampleArrays nan = sa;
      nan.in = bad.data();
      refused(nan, surrogate::ErrorCode::input, "NaN/Inf");
    }
  }
}

// A predict on a kept plan uploads only its features (and class vectors): the hierarchy's arrays stay on
// the device from the plan's first device forward, with the same bits; a new plan of the same points
// uploads its own. Segmentation with class vectors, one sample and several.
TEST(GpuSequoiaHostBackend, AKeptPlanUploadsOnlyItsFeatures) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const std::vector<std::int64_t>& sizes : {std::vector<std::int64_t>{1500}, std::vector<std::int64_t>(4, 400)}) {
    const Batch c = sequoia_test::synthetic(sequoia_test::example_model("seg"), sizes, 9u);
    const surrogate::SelfComm comm;
    const auto model = surrogate::make_model(c.file);
    surrogate::RunOptions options;
    options.cuda_device = surrogate::testing::test_device();
    const int in = model->in_channels(), out = model->out_channels();
    surrogate::Model::SampleArrays sa;
    sa.in = c.sample_features.data();
    sa.ld_in = model->sample_in_channels();
    ASSERT_GT(sa.ld_in, 0);
    const auto run = [&](surrogate::Plan& plan) {
      std::vector<float> y(static_cast<std::size_t>(c.n() * out));
      const long long before = host_backend::bytes_to_device;
      model->predict(comm, plan, c.features.data(), in, y.data(), out, sa, options);
      return std::pair{y, host_backend::bytes_to_device - before};
    };
    const auto plan = plan_of(comm, *model, c, options);
    const auto [first, first_bytes] = run(*plan);
    const auto [kept, kept_bytes] = run(*plan);
    const long long inputs = (c.n() * in + static_cast<long long>(sizes.size()) * sa.ld_in) * 4;
    EXPECT_EQ(kept, first) << sizes.size() << " sample(s)";
    EXPECT_EQ(kept_bytes, inputs) << sizes.size() << " sample(s): the kept plan uploaded more than its inputs";
    EXPECT_GT(first_bytes, 2 * inputs) << sizes.size() << " sample(s)";  // the weights and the hierarchy
    const auto other = plan_of(comm, *model, c, options);  // the same points, a new hierarchy
    const auto [again, again_bytes] = run(*other);
    EXPECT_EQ(again, first);
    EXPECT_GT(again_bytes, 2 * inputs) << "a new plan must upload its own hierarchy";
    EXPECT_EQ(run(*other).second, inputs);
    EXPECT_EQ(run(*plan).first, first) << "back on the first plan (its hierarchy uploaded again)";
  }
}

// One graph per kept plan: a whole share's network (segmentation and classification) runs directly on the
// plan's first forward, is captured as one CUDA graph on the second and replayed from the third, with the
// direct forward's bits; another plan starts over.
TEST(GpuSequoiaHostBackend, AKeptPlansNetworkIsOneGraph) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const char* kind : {"seg", "cls"}) {
    const Batch c = sequoia_test::synthetic(sequoia_test::example_model(kind), {700, 800}, 9u);
    const surrogate::SelfComm comm;
    const auto model = surrogate::make_model(c.file);
    surrogate::RunOptions options;
    options.cuda_device = surrogate::testing::test_device();
    const auto run = [&](surrogate::Plan& plan) { return predict_on(*model, plan, c, options); };
    const auto plan = plan_of(comm, *model, c, options);
    host_backend::expect_one_graph_per_plan([&] { return run(*plan); }, kind);
    const auto other = plan_of(comm, *model, c, options);
    host_backend::expect_one_graph_per_plan([&] { return run(*other); }, std::string(kind) + ", another plan");
    EXPECT_EQ(run(*plan), run(*other));
  }
}

// The caller's device arrays on a kept plan: the rows reach the share's points and come back by the plan's
// exchanges on device rows, bitwise predict()'s result; once the first call has set up the device's
// normalisation and order, a call waits for the device twice (the agreed counts of non-finite inputs, and
// the end) and downloads only those counts; a classification's second wait is for its B x classes logits,
// which it downloads besides (its end has nothing left to wait for). A segmentation model without and with
// class vectors (uploaded every call).
TEST(GpuSequoiaHostBackend, DeviceArraysStayOnTheDeviceOnAKeptPlan) {
  SURROGATE_HOST_BACKEND_ONLY();
  const Batch seg = sequoia_test::synthetic(sequoia_test::data_path("seg"), {700, 800}, 11u);
  for (const Batch& c : {sequoia_test::without_class_vectors(seg), seg,
                         sequoia_test::synthetic(sequoia_test::data_path("cls"), {700, 800}, 11u)}) {
    SCOPED_TRACE(c.model);
    const surrogate::SelfComm comm;
    const auto model = surrogate::make_model(c.file);
    surrogate::RunOptions options;
    options.cuda_device = host_backend::kDevice;
    const int in = model->in_channels(), out = model->out_channels(), s_out = model->sample_out_channels();
    const auto B = static_cast<long long>(c.sizes.size());
    const auto plan = plan_of(comm, *model, c, options);
    std::vector<float> want(static_cast<std::size_t>(std::max<long long>(c.n() * out, 1)));
    std::vector<float> want_samples(static_cast<std::size_t>(std::max<long long>(B * s_out, 1)));
    surrogate::Model::SampleArrays sa;
    sa.in = model->sample_in_channels() > 0 ? c.sample_features.data() : nullptr;
    sa.ld_in = model->sample_in_channels();
    sa.out = s_out > 0 ? want_samples.data() : nullptr;
    sa.ld_out = s_out;
    model->predict(comm, *plan, c.features.data(), in, out > 0 ? want.data() : nullptr, out, sa, options);  // uploads
    std::vector<float> got_samples(want_samples.size());
    surrogate::Model::SampleArrays device_sa = sa;
    device_sa.out = s_out > 0 ? got_samples.data() : nullptr;
    auto d_in = st::to_device(c.features, options.cuda_device);
    auto d_out = st::to_device(std::vector<float>(want.size()), options.cuda_device);
    surrogate::Model::DeviceArrays arrays;
    arrays.in = d_in.data();
    arrays.out = out > 0 ? d_out.data() : nullptr;
    arrays.in_point_stride = in;
    arrays.out_point_stride = out;
    model->predict_device(comm, *plan, arrays, device_sa, options);  // the first also uploads the normalisation and order
    EXPECT_EQ(st::to_host(d_out.data(), d_out.size(), options.cuda_device), want);
    EXPECT_EQ(got_samples, want_samples);
    std::fill(got_samples.begin(), got_samples.end(), 0.0f);
    const long long waits = host_backend::host_waits, down = host_backend::bytes_to_host, up = host_backend::bytes_to_device;
    model->predict_device(comm, *plan, arrays, device_sa, options);
    const long long waited = host_backend::host_waits - waits, downloaded = host_backend::bytes_to_host - down,
                    uploaded = host_backend::bytes_to_device - up;
    std::printf("  %s: %lld waits, %lld bytes down, %lld bytes up on a kept plan\n", c.model.c_str(), waited,
                downloaded, uploaded);
    EXPECT_EQ(waited, 2);
    EXPECT_LE(downloaded, static_cast<long long>(sizeof(unsigned long long)) * (in + out + 1) + B * s_out * 4);
    EXPECT_EQ(uploaded, B * model->sample_in_channels() * 4) << "only the class vectors";
    EXPECT_EQ(st::to_host(d_out.data(), d_out.size(), options.cuda_device), want);
    EXPECT_EQ(got_samples, want_samples);
  }
}

}  // namespace
