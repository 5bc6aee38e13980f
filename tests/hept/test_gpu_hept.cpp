// HEPT's CUDA forward through the registered model (RunOptions::cuda_device), on the host backend (cuda.*)
// and on a GPU (gpu.*, skipped without one): both layouts against the official float32 stable runs with
// the CPU fp32 test's bound, the device plan against the CPU's, the caller's device arrays against host
// arrays, the host waits, repeatability, fp64 refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <type_traits>
#include <string>
#include <vector>

#include <random>

#include "gpu_test.hpp"
#include "precision_emulation.hpp"
#include "h5_io.hpp"
#include "hept/cuda/device.hpp"
#include "device_arrays.hpp"
#include "host_backend_hooks.hpp"
#include "surrogate/error.hpp"
#include "surrogate/hept.hpp"
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

// The plan's geometry built on the device (DeviceForward::build_geometry) against the CPU's quantile_bins
// <float> and finish_geometry: every array bit for bit. Graphs of several sizes (at and past the block
// size, padded by duplicates), coordinates drawn from a few values (ties in every sort), signed zeros,
// both layouts, and regions of one point each (codes past 2^24: the double sort keys).
TEST(GpuHept, DevicePlanIsTheCpuPlanBitForBit) {
  SURROGATE_SKIP_WITHOUT_GPU();
  namespace hept = surrogate::hept;
  for (const std::string name : {"example_small", "src_small"}) {
    for (const bool fine_regions : {false, true}) {
      SCOPED_TRACE(name + (fine_regions ? ", a region per point" : ""));
      surrogate::ModelFile file = surrogate::ModelFile::read(std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_" + name + ".h5");
      const hept::Config cfg = hept::Config::from_attributes(file.config);
      const bool src = cfg.layout == hept::Config::Layout::src;
      if (fine_regions)
        for (float& r : file.weights.at("regions").values) r = 4100.0f;
      const hept::Network<float> net(file, cfg);
      const auto forward = hept::gpu::make_cuda_forward(net, surrogate::testing::test_device());
      const std::vector<std::int64_t> sizes = src ? std::vector<std::int64_t>{fine_regions ? 4100 : 333}
                                                  : std::vector<std::int64_t>{32, 300, 97, fine_regions ? 4100 : 64};
      const std::vector<std::int64_t> ids = src ? std::vector<std::int64_t>{0} : std::vector<std::int64_t>{0, 3, 4, 9};
      std::int64_t n = 0;
      for (const std::int64_t size : sizes) n += size;
      std::mt19937 gen(11);
      std::uniform_int_distribution<int> level(-3, 3);
      std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
      std::vector<float> coords(static_cast<std::size_t>(n * cfg.coords_dim));
      for (std::int64_t i = 0; i < n; ++i)
        for (int c = 0; c < cfg.coords_dim; ++c)  // eta and phi from 7 levels in every other graph point; -0 for +0
          coords[static_cast<std::size_t>(i * cfg.coords_dim + c)] =
              c < 2 && i % 2 == 0 ? (level(gen) == 0 ? (i % 4 == 0 ? -0.0f : 0.0f) : 0.5f * static_cast<float>(level(gen)))
                                  : uniform(gen);
      hept::Geometry want;
      hept::quantile_bins<float>(cfg, net.regions(), coords.data(), sizes, want);
      hept::finish_geometry(cfg, ids, want);
      const auto built = forward->build_geometry(coords.data(), sizes, ids);
      EXPECT_EQ(built->points(), n);
      EXPECT_EQ(built->padded_points(), want.padded_points());
      const hept::Geometry got = built->download();
      EXPECT_EQ(got.sizes, want.sizes);
      EXPECT_EQ(got.padded_sizes, want.padded_sizes);
      EXPECT_EQ(got.bin_eta, want.bin_eta);
      EXPECT_EQ(got.bin_phi, want.bin_phi);
      EXPECT_EQ(got.bits_eta, want.bits_eta);
      EXPECT_EQ(got.bits_code1, want.bits_code1);
      EXPECT_TRUE(got.region_eta == want.region_eta) << "region_eta";
      EXPECT_TRUE(got.region_phi == want.region_phi) << "region_phi";
      EXPECT_TRUE(got.codes == want.codes) << "codes";
      EXPECT_EQ(got.pad_sort_order, want.pad_sort_order);
      EXPECT_EQ(got.pad_seq, want.pad_seq);
      EXPECT_EQ(got.unpad, want.unpad);
      EXPECT_TRUE(got.padded_codes == want.padded_codes) << "padded_codes";
      if (fine_regions && !src) {
        std::int64_t most = 0;
        for (const std::int64_t c : want.codes) most = std::max(most, c);
        EXPECT_GE(most, std::int64_t{1} << 24) << "the case meant to need the double sort keys does not";
      }
      if (fine_regions) continue;
      // The forward on the device's plan is the forward on the CPU's plan uploaded.
      std::vector<float> x(static_cast<std::size_t>(n * cfg.in_dim));
      for (float& v : x) v = uniform(gen);
      std::vector<float> on_built(static_cast<std::size_t>(n * cfg.out_dim())), on_uploaded(on_built.size());
      forward->forward(*built, x.data(), on_built.data(), nullptr);
      forward->forward(*forward->upload_geometry(want, coords.data(), n), x.data(), on_uploaded.data(), nullptr);
      EXPECT_EQ(on_built, on_uploaded);
    }
  }
}

// The CPU's errors, from the device plan: a graph below the block size, before anything runs.
TEST(GpuHept, DevicePlanRefusesWhatTheCpuPlanRefuses) {
  SURROGATE_SKIP_WITHOUT_GPU();
  namespace hept = surrogate::hept;
  const surrogate::ModelFile file =
      surrogate::ModelFile::read(std::string(SURROGATE_TEST_DATA_DIR) + "/hept/hept_example_small.h5");
  const hept::Config cfg = hept::Config::from_attributes(file.config);
  const hept::Network<float> net(file, cfg);
  const auto forward = hept::gpu::make_cuda_forward(net, surrogate::testing::test_device());
  const std::vector<float> coords(static_cast<std::size_t>(50 * cfg.coords_dim), 1.0f);
  try {
    forward->build_geometry(coords.data(), {32, 18}, {0, 7});
    FAIL() << "a graph of 18 points was accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("hept: graph 7 has 18 points, fewer than the block size 32"), std::string::npos)
        << e.what();
  }
}

/// A golden case in one process on the emulated device, with its plan (kept from one predict to the next).
struct OnKeptPlan {
  explicit OnKeptPlan(const std::string& name) : c(name) {
    const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n(), c.batch.data());
    surrogate::PointGeometry g;
    g.positions = c.coords.data();
    g.ld_positions = c.coords_dim;
    options.cuda_device = host_backend::kDevice;
    plan = c.model->plan(comm, layout, g, options);
  }
  std::int64_t n() const { return static_cast<std::int64_t>(c.batch.size()); }
  /// Model::predict of the case's rows on the plan.
  std::vector<float> predict() const {
    const int od = c.model->out_channels();
    std::vector<float> y(static_cast<std::size_t>(n() * od));
    c.model->predict(comm, *plan, c.x.data(), c.model->in_channels(), y.data(), od, options);
    return y;
  }
  const Case c;
  const surrogate::SelfComm comm;
  surrogate::RunOptions options;
  std::unique_ptr<surrogate::Plan> plan;
};

// In one process a predict on a kept plan waits for the device once, for its outputs' copy into host
// memory: the padding, the ranges and the sorts stay on the device. The first predict on a plan also builds
// its geometry there, which reads the rows' maxima twice (the bit widths).
TEST(HeptHostBackend, OneProcessWaitsForTheDeviceOnlyForItsOutputs) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const std::string name : {"example_small", "src_pileup"}) {
    SCOPED_TRACE(name);
    const OnKeptPlan k(name);
    const long long at_start = host_backend::host_waits;
    const std::vector<float> first = k.predict();
    const long long after_first = host_backend::host_waits;
    const std::vector<float> again = k.predict();
    const long long kept = host_backend::host_waits - after_first;
    std::printf("  host waits: %lld with the geometry built, %lld on the kept plan\n", after_first - at_start, kept);
    EXPECT_EQ(kept, 1);
    EXPECT_EQ(again, first);
  }
}

// One graph per kept plan: in one process the network on a kept plan runs directly on the plan's first
// predict, is captured as one CUDA graph on the second and replayed from the third, with the direct
// forward's bits (both layouts); a predict_device on the same plan replays the same graph between its own
// gather and scatter.
TEST(HeptHostBackend, AKeptPlansForwardIsOneGraph) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const std::string name : {"example_small", "src_pileup"}) {
    const OnKeptPlan k(name);
    host_backend::expect_one_graph_per_plan([&] { return k.predict(); }, name);
    const std::vector<float> host = k.predict();
    const host_backend::Counts before = host_backend::counts();
    surrogate::testing::expect_device_arrays_match(k.comm, *k.c.model, *k.plan, k.c.x, k.c.model->in_channels(), host,
                                                   k.c.model->out_channels(), 0.0f, k.options, name);
    EXPECT_EQ(host_backend::counts().captures, before.captures) << name;
    EXPECT_EQ(host_backend::counts().graphs, before.graphs + 1) << name;
  }
}

/// The golden case's points in a shuffled order (graphs interleaved, so the layout's working order is not
/// the caller's), with a plan on `device`, and the host-array prediction of that order.
struct Shuffled {
  const Case& c;
  surrogate::SelfComm comm;
  std::vector<float> x, coords;
  std::vector<std::int64_t> batch;
  std::unique_ptr<surrogate::Plan> plan;
  surrogate::RunOptions options;
  std::vector<float> host;
  Shuffled(const Case& k, int device) : c(k) {
    const std::size_t n = c.batch.size(), in = static_cast<std::size_t>(c.model->in_channels());
    std::vector<std::size_t> perm(n);
    for (std::size_t i = 0; i < n; ++i) perm[i] = i;
    std::shuffle(perm.begin(), perm.end(), std::mt19937(11));
    for (const std::size_t p : perm) {
      x.insert(x.end(), c.x.begin() + static_cast<std::ptrdiff_t>(p * in), c.x.begin() + static_cast<std::ptrdiff_t>((p + 1) * in));
      coords.insert(coords.end(), c.coords.begin() + static_cast<std::ptrdiff_t>(p * c.coords_dim),
                    c.coords.begin() + static_cast<std::ptrdiff_t>((p + 1) * c.coords_dim));
      batch.push_back(c.batch[p]);
    }
    options.cuda_device = device;
    surrogate::PointGeometry g;
    g.positions = coords.data();
    g.ld_positions = c.coords_dim;
    const auto layout = surrogate::SampleLayout::build(comm, n_points(), batch.data());
    plan = c.model->plan(comm, layout, g, options);
    host = predict_host(x);
  }
  std::int64_t n_points() const { return static_cast<std::int64_t>(batch.size()); }
  std::vector<float> predict_host(const std::vector<float>& in) const {
    const int od = c.model->out_channels();
    std::vector<float> out(static_cast<std::size_t>(n_points() * od));
    c.model->predict(comm, *plan, in.data(), c.model->in_channels(), out.data(), od, options);
    return out;
  }
  /// The caller's device arrays of `in_rows`: inputs in Fortran order (Real), outputs at a stride of
  /// out + 2, filled with -7.
  template <class Real>
  struct Arrays {
    surrogate::kernels::cuda::DeviceBuffer<Real> in, out;
    surrogate::Model::DeviceArrays a;
  };
  template <class Real>
  Arrays<Real> arrays(const std::vector<float>& in_rows) const {
    namespace st = surrogate::testing;
    const std::size_t n = batch.size(), in = static_cast<std::size_t>(c.model->in_channels());
    const int ld_out = c.model->out_channels() + 2;
    std::vector<Real> in_f(n * in);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < in; ++j) in_f[i + n * j] = static_cast<Real>(in_rows[i * in + j]);
    Arrays<Real> d;
    d.in = st::to_device(in_f, options.cuda_device);
    d.out = st::to_device(std::vector<Real>(n * static_cast<std::size_t>(ld_out), Real(-7)), options.cuda_device);
    d.a.in = d.in.data();
    d.a.out = d.out.data();
    d.a.is_double = std::is_same_v<Real, double>;
    d.a.in_point_stride = 1;
    d.a.in_component_stride = n_points();
    d.a.out_point_stride = ld_out;
    return d;
  }
  /// predict_device on arrays(in_rows); returns the caller's output array.
  template <class Real>
  std::vector<Real> predict_device(const std::vector<float>& in_rows) const {
    const Arrays<Real> d = arrays<Real>(in_rows);
    c.model->predict_device(comm, *plan, d.a, options);
    return surrogate::testing::to_host(d.out.data(), d.out.size(), options.cuda_device);
  }
};

/// The error of f, or a failure when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return {};
}

// Device-resident predict (Model::predict_device): the caller's arrays in device memory, the points
// shuffled (the working order is not the caller's), inputs in Fortran order, outputs at a stride with
// gaps, float and double. Bitwise the host-array predict on the same device: the same rows reach the same
// forward. A NaN input and (pileup) a particle class outside the embedding are refused on the device
// with the host path's messages; gaps are never written.
TEST(GpuHept, DeviceArraysGiveTheHostArrayResultBitwise) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const std::string name : {"example_small", "src_small", "src_pileup"}) {
    SCOPED_TRACE(name);
    const Case c(name);
    const Shuffled s(c, surrogate::testing::test_device());
    const int od = c.model->out_channels(), ld_out = od + 2;
    const auto check = [&](const auto& back) {
      for (std::int64_t i = 0; i < s.n_points(); ++i) {
        for (int j = 0; j < od; ++j)
          ASSERT_EQ(back[static_cast<std::size_t>(i * ld_out + j)],
                    static_cast<std::decay_t<decltype(back[0])>>(s.host[static_cast<std::size_t>(i * od + j)]))
              << "point " << i << " channel " << j;
        ASSERT_EQ(back[static_cast<std::size_t>(i * ld_out + od)], -7) << "gap overwritten";
        ASSERT_EQ(back[static_cast<std::size_t>(i * ld_out + od + 1)], -7) << "gap overwritten";
      }
    };
    check(s.predict_device<float>(s.x));
    check(s.predict_device<double>(s.x));
    std::vector<float> bad = s.x;
    bad[bad.size() / 2] = std::numeric_limits<float>::quiet_NaN();
    const std::string nan = error_of([&] { s.predict_device<float>(bad); });
    EXPECT_NE(nan.find("1 NaN/Inf value(s)"), std::string::npos) << nan;
    EXPECT_EQ(nan, error_of([&] { s.predict_host(bad); }));
    if (name == "src_pileup") {
      const int in = c.model->in_channels();
      bad = s.x;
      bad[static_cast<std::size_t>(7 * in + in - 1)] = 7.0f;   // one past the last class
      bad[static_cast<std::size_t>(40 * in + in - 1)] = -1.0f;  // a later row: the first one is named
      const std::string cls = error_of([&] { s.predict_device<float>(bad); });
      EXPECT_NE(cls.find("particle-id class"), std::string::npos) << cls;
      EXPECT_EQ(cls, error_of([&] { s.predict_host(bad); }));
    }
    check(s.predict_device<float>(s.x));  // and the next call is right
  }
}

// In one process a device-resident predict on a kept plan waits for the device twice: for the counts of
// non-finite inputs (the agreed check before the forward) and at its end (the caller's arrays written on
// return). The rows move between the working and the owners' order on the device.
TEST(HeptHostBackend, DeviceArraysWaitOnlyForTheChecksAndTheEnd) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const std::string name : {"example_small", "src_pileup"}) {
    SCOPED_TRACE(name);
    const Case c(name);
    const Shuffled s(c, host_backend::kDevice);
    const auto first = s.predict_device<float>(s.x);
    const auto d = s.arrays<float>(s.x);
    const long long before = host_backend::host_waits;
    c.model->predict_device(s.comm, *s.plan, d.a, s.options);
    const long long waits = host_backend::host_waits - before;
    std::printf("  host waits of a device-array predict on a kept plan: %lld\n", waits);
    EXPECT_EQ(waits, 2);
    EXPECT_EQ(surrogate::testing::to_host(d.out.data(), d.out.size(), host_backend::kDevice), first);
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
    EXPECT_NE(std::string(e.what()).find("'fp64'"), std::string::npos) << e.what();
  }
}

// tf32 / bf16: the dense layers on the tensor cores (the plan, the bucket attention and the norms stay
// fp32). Against the CPU's fp32 forward (its fp64 forward is no reference here: the hashes of q and k put
// points in other buckets at fp64, 9 % of max|y| away): within twice the error of the CPU forward with the
// same rounding of the dense layers' operands (tests/support/precision_emulation) plus the fp32 bound,
// above the fp32 device forward's (the precision took effect); repeatable.
TEST(GpuHept, DenseLayersInTf32AndBf16) {
  SURROGATE_SKIP_WITHOUT_GPU();
  namespace st = surrogate::testing;
  const auto max_error = [](const std::vector<float>& a, const std::vector<float>& b) {
    double e = 0.0;
    for (std::size_t i = 0; i < a.size(); ++i) e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
    return e;
  };
  for (const std::string name : {"example_small", "src_small"}) {
    SCOPED_TRACE(name);
    const Case c(name);
    const std::vector<float> exact = c.predict(-1), fp32 = c.predict(st::test_device());
    double top = 1.0;
    for (const float v : exact) top = std::max(top, std::fabs(static_cast<double>(v)));
    const double tol = 4e-5 * top, fp32_error = max_error(fp32, exact);
    for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
      std::vector<float> emulated;
      {
        st::ScopedPrecisionEmulation emulate(precision);
        emulated = c.predict(-1);
      }
      const std::vector<float> tc = c.predict(st::test_device(), precision);
      const double emulated_error = max_error(emulated, exact), error = max_error(tc, exact);
      EXPECT_LE(error, 2 * emulated_error + tol) << surrogate::precision_name(precision);
      EXPECT_GT(error, 4 * fp32_error) << surrogate::precision_name(precision) << " not applied";
      EXPECT_EQ(c.predict(st::test_device(), precision), tc) << "a second device forward differs";
      std::printf("  %s %s: |device - cpu fp32| %.3g, emulated on the CPU %.3g (fp32 %.3g, max|y| %.3g)\n", name.c_str(),
                  surrogate::precision_name(precision), error, emulated_error, fp32_error, top);
    }
  }
}

}  // namespace
