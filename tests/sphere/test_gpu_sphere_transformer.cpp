// The SphericalTransformer device forward on the device under test, on the golden transformer files and the
// registered models: within 4 gap + 16 u' mag of float64 (gap = |official f32 - f64|, u' = 6e-8, mag =
// max|y|) and twice that of the CPU; the SHT kernels against the CPU transforms; latitude bands bitwise the
// whole grid. share/docs/sphere.md, "CUDA forward of the SphericalTransformer".
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "golden.hpp"
#include "gpu_test.hpp"
#include "host_backend_hooks.hpp"
#include "h5_io.hpp"
#include "precision_emulation.hpp"
#include "sphere/cuda/transformer.hpp"
#include "sphere_rows.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/kernels/cuda_sphere_sht.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"
#include "surrogate/sphere/attention_device.hpp"
#include "surrogate/sphere/disco.hpp"
#include "surrogate/sphere/grid_ops_device.hpp"
#include "surrogate/sphere/neighborhood_attention.hpp"
#include "surrogate/sphere/sht.hpp"
#include "surrogate/sphere/transformer.hpp"

namespace {

namespace sp = surrogate::sphere;
namespace st = surrogate::testing;
namespace cu = surrogate::kernels::cuda;
using surrogate::index_t;

/// Kernel launches counted by the host backend (0 on a GPU, where the checks that use them are skipped).
int launches() { return st::on_host_backend() ? static_cast<int>(host_backend::launches) : 0; }
int sht_launches() { return st::on_host_backend() ? static_cast<int>(host_backend::sht_launches) : 0; }
int wide_attention_launches() {
  return st::on_host_backend() ? static_cast<int>(host_backend::wide_attention_launches) : 0;
}

struct Golden {
  std::vector<float> rows;           // (B * P, C_in)
  std::vector<double> ref32, ref64;  // (B * P, C_out)
  int batch = 0;
};

std::vector<double> to_rows(const st::Array& a) {
  const index_t B = a.shape[0], C = a.shape[1], P = a.shape[2] * a.shape[3];
  std::vector<double> r(a.values.size());
  for (index_t b = 0; b < B; ++b)
    for (index_t c = 0; c < C; ++c)
      for (index_t p = 0; p < P; ++p) r[static_cast<std::size_t>((b * P + p) * C + c)] = a.values[static_cast<std::size_t>((b * C + c) * P + p)];
  return r;
}

Golden read_golden(const std::string& dir) {
  Golden g;
  const st::Array x = st::read_array(dir + "/io.h5", "input");
  const std::vector<double> xr = to_rows(x);
  g.rows.assign(xr.begin(), xr.end());
  g.batch = static_cast<int>(x.shape[0]);
  g.ref32 = to_rows(st::read_array(dir + "/io.h5", "output"));
  g.ref64 = to_rows(st::read_array(dir + "/io.h5", "output_f64"));
  return g;
}

template <class A, class B>
double max_diff(const A& a, const B& b) {
  double m = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

std::string model_dir(const char* name) { return st::data_dir() + "/sphere/models/" + name; }

TEST(GpuSphereTransformer, GoldenModelsWithinTheFloat32Bound) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm self;
  for (const char* name : {"st_global_instance_spectral", "st_global_none_morlet", "st_neighborhood_instance_latlon_cutoff",
                           "st_neighborhood_layernorm_lat"}) {
    const std::string dir = model_dir(name);
    const auto file = surrogate::ModelFile::read(self, dir + "/model.h5");
    const sp::SphericalTransformer net(file);
    const Golden g = read_golden(dir);
    std::vector<float> cpu(g.ref64.size()), dev(g.ref64.size(), -7.0f);
    net.forward(g.batch, g.rows.data(), cpu.data());
    auto device = sp::make_sphere_transformer_device_forward(net, st::test_device());
    const int before = launches();
    device->forward(g.batch, g.rows.data(), dev.data());
    if (st::on_host_backend()) {
      EXPECT_GT(launches(), before) << name;
    }
    double mag = 0.0;
    for (double v : g.ref64) mag = std::max(mag, std::fabs(v));
    const double gap = max_diff(g.ref32, g.ref64);
    const double tol = 4 * gap + 16 * 6e-8 * mag;
    const double err64 = max_diff(dev, g.ref64), err_cpu = max_diff(dev, cpu);
    std::printf("%s: |device - f64| %.3g, |device - CPU| %.3g, |CPU - f64| %.3g, bound %.3g (gap %.3g, mag %.3g)\n", name,
                err64, err_cpu, max_diff(cpu, g.ref64), tol, gap, mag);
    EXPECT_LE(err64, tol) << name;
    EXPECT_LE(err_cpu, 2 * tol) << name;
    if (std::string(name) != "st_global_instance_spectral") continue;  // the emulation is slow: once is enough
    // A second forward on the same object (buffers reused) gives the same values; another input changes them.
    std::vector<float> again(dev.size()), other(dev.size());
    device->forward(g.batch, g.rows.data(), again.data());
    EXPECT_EQ(again, dev) << name;
    std::vector<float> shifted = g.rows;
    for (float& v : shifted) v = 0.5f * v + 0.25f;
    device->forward(g.batch, shifted.data(), other.data());
    EXPECT_GT(max_diff(other, dev), 100 * tol) << name;
    // The whole grid's band is planned once per batch size: one sample alone is the batch's first, and the
    // batch again after it is what it was.
    ASSERT_GT(g.batch, 1) << name;
    std::vector<float> first(dev.size() / static_cast<std::size_t>(g.batch));
    device->forward(1, g.rows.data(), first.data());
    EXPECT_LE(max_diff(first, std::vector<float>(dev.begin(), dev.begin() + static_cast<std::ptrdiff_t>(first.size()))), tol)
        << name;
    device->forward(g.batch, g.rows.data(), again.data());
    EXPECT_EQ(again, dev) << name;
  }
}

// The registered model with RunOptions::cuda_device = 0 against cuda_device = -1 (row strides wider than
// the rows), also with the SHT decoder (st_sht_global_lobatto).
TEST(GpuSphereTransformer, RegisteredModelWithCudaDevice) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm comm;
  const std::string dir = model_dir("st_neighborhood_layernorm_lat");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(dir + "/model.h5"));
  const Golden g = read_golden(dir);
  const int cin = model->in_channels(), cout = model->out_channels();
  const auto n = static_cast<index_t>(g.rows.size()) / cin, points = n / g.batch;
  std::vector<std::int64_t> sample(static_cast<std::size_t>(n));
  for (index_t r = 0; r < n; ++r) sample[static_cast<std::size_t>(r)] = r / points;
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, sample.data());
  const index_t ld_in = cin + 3, ld_out = cout + 2;
  std::vector<float> in(static_cast<std::size_t>(n * ld_in), 99.0f);
  for (index_t r = 0; r < n; ++r) std::copy_n(g.rows.data() + r * cin, cin, in.data() + r * ld_in);
  std::vector<float> cpu(static_cast<std::size_t>(n * ld_out), -7.0f), dev(cpu.size(), -7.0f);
  model->predict(comm, layout, in.data(), ld_in, cpu.data(), ld_out);
  surrogate::RunOptions options;
  options.cuda_device = st::test_device();
  const int before = launches();
  model->predict(comm, layout, in.data(), ld_in, dev.data(), ld_out, options);
  if (st::on_host_backend()) {
    EXPECT_GT(launches(), before);
  }
  double mag = 0.0;
  for (double v : g.ref64) mag = std::max(mag, std::fabs(v));
  const double tol = 4 * max_diff(g.ref32, g.ref64) + 16 * 6e-8 * mag;
  for (index_t r = 0; r < n; ++r)
    for (int c = 0; c < ld_out; ++c) {
      const std::size_t i = static_cast<std::size_t>(r * ld_out + c);
      if (c >= cout) {
        ASSERT_EQ(dev[i], -7.0f) << "padding written, row " << r;
      } else {
        ASSERT_LE(std::fabs(static_cast<double>(dev[i]) - cpu[i]), 2 * tol) << "row " << r << " channel " << c;
      }
    }
  // The SHT decoder through the registered path too (it used to be refused).
  const std::string sht_dir = model_dir("st_sht_global_lobatto");
  const auto sht = surrogate::make_model(surrogate::ModelFile::read(sht_dir + "/model.h5"));
  const Golden gs = read_golden(sht_dir);
  const index_t n_sht = static_cast<index_t>(gs.rows.size()) / sht->in_channels();
  const surrogate::SampleLayout one = surrogate::SampleLayout::build(comm, n_sht, nullptr);
  std::vector<float> y_cpu(gs.ref64.size()), y_dev(gs.ref64.size(), -7.0f);
  sht->predict(comm, one, gs.rows.data(), sht->in_channels(), y_cpu.data(), sht->out_channels());
  sht->predict(comm, one, gs.rows.data(), sht->in_channels(), y_dev.data(), sht->out_channels(), options);
  double mag_sht = 0.0;
  for (double v : gs.ref64) mag_sht = std::max(mag_sht, std::fabs(v));
  EXPECT_LE(max_diff(y_dev, y_cpu), 2 * (4 * max_diff(gs.ref32, gs.ref64) + 16 * 6e-8 * mag_sht)) << "upsample_sht";
}

/// tf32 and bf16 through `predict` (RunOptions -> outputs) against `ref`: the device's error at most twice
/// that of the CPU forward under ScopedPrecisionEmulation (the same operands rounded) plus `tol`, above
/// four times the fp32 device forward's (the precision took effect), the same bits from a second
/// forward, and fp32 afterwards the fp32 bits again.
template <class Predict>
void expect_tensor_core_precisions(const char* name, Predict&& predict, const std::vector<double>& ref, double tol,
                                   double mag) {
  surrogate::RunOptions options;
  options.cuda_device = st::test_device();
  const std::vector<float> fp32 = predict(options);
  const double fp32_error = max_diff(fp32, ref);
  for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
    std::vector<float> emulated;
    {
      st::ScopedPrecisionEmulation emulate(precision);
      emulated = predict(surrogate::RunOptions{});
    }
    options.precision = precision;
    const std::vector<float> tc = predict(options);
    const double emulated_error = max_diff(emulated, ref), error = max_diff(tc, ref);
    EXPECT_LE(error, 2 * emulated_error + tol) << surrogate::precision_name(precision);
    EXPECT_GT(error, 4 * fp32_error) << surrogate::precision_name(precision) << " not applied";
    EXPECT_EQ(predict(options), tc) << "a second forward differs";
    std::printf("  %s %s: |device - reference| %.3g, emulated on the CPU %.3g (fp32 %.3g, max|y| %.3g)\n", name,
                surrogate::precision_name(precision), error, emulated_error, fp32_error, mag);
  }
  options.precision = surrogate::Precision::fp32;
  EXPECT_EQ(predict(options), fp32) << "fp32 after tf32 / bf16";
}

// tf32 / bf16 through the registered model: the dense layers on the tensor cores (the DISCO convolutions,
// attention operators, norms and transforms stay fp32). The error against float64 within twice that of the
// CPU forward with the same rounding of the dense layers' operands (tests/support/precision_emulation) plus
// the fp32 bound, above the fp32 device forward's (the precision took effect); repeatable.
TEST(GpuSphereTransformer, DenseLayersInTf32AndBf16) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm comm;
  for (const char* name : {"st_neighborhood_layernorm_lat", "st_sht_global_lobatto"}) {
    SCOPED_TRACE(name);
    const std::string dir = model_dir(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(dir + "/model.h5"));
    const Golden g = read_golden(dir);
    const int cin = model->in_channels(), cout = model->out_channels();
    const auto n = static_cast<index_t>(g.rows.size()) / cin;
    const surrogate::SampleLayout one = surrogate::SampleLayout::build(comm, n, nullptr);
    const auto predict = [&](const surrogate::RunOptions& options) {
      std::vector<float> y(static_cast<std::size_t>(n * cout));
      model->predict(comm, one, g.rows.data(), cin, y.data(), cout, options);
      return y;
    };
    double mag = 0.0;
    for (double v : g.ref64) mag = std::max(mag, std::fabs(v));
    const double tol = 4 * max_diff(g.ref32, g.ref64) + 16 * 6e-8 * mag;
    expect_tensor_core_precisions(name, predict, g.ref64, tol, mag);
  }
}

// One graph per kept plan: on one rank the stages and exchanges of the transformer (neighborhood attention
// with the bilinear decoder, global attention with the SHT decoder) and of the single-layer models run
// directly on the plan's first forward, are captured as one CUDA graph on the second and replayed from the
// third, with the direct forward's bits; another plan of the same grid starts over.
TEST(GpuSphereHostBackend, AKeptPlansForwardIsOneGraph) {
  SURROGATE_HOST_BACKEND_ONLY();
  const surrogate::SelfComm comm;
  const auto check = [&](const std::string& name, const std::vector<float>& rows, index_t batch) {
    const std::string dir = model_dir(name.c_str());
    const auto model = surrogate::make_model(surrogate::ModelFile::read(dir + "/model.h5"));
    const int cin = model->in_channels(), cout = model->out_channels();
    const auto n = static_cast<index_t>(rows.size()) / cin, points = n / batch;
    std::vector<std::int64_t> sample(static_cast<std::size_t>(n));
    for (index_t r = 0; r < n; ++r) sample[static_cast<std::size_t>(r)] = r / points;
    const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, sample.data());
    surrogate::RunOptions options;
    options.cuda_device = st::test_device();
    const auto predict_on = [&](surrogate::Plan& plan) {
      std::vector<float> y(static_cast<std::size_t>(n * cout));
      model->predict(comm, plan, rows.data(), cin, y.data(), cout, options);
      return y;
    };
    const auto plan = model->plan(comm, layout, surrogate::PointGeometry{}, options);
    host_backend::expect_one_graph_per_plan([&] { return predict_on(*plan); }, name);
    // The caller's device arrays on the kept plan (other input rows: another graph, run directly once,
    // then captured): two waits for the device, the agreed counts of non-finite inputs and the end.
    const std::vector<float> host = predict_on(*plan);
    auto d_in = st::to_device(rows, options.cuda_device);
    auto d_out = st::to_device(std::vector<float>(host.size(), -7.0f), options.cuda_device);
    surrogate::Model::DeviceArrays arrays;
    arrays.in = d_in.data();
    arrays.out = d_out.data();
    arrays.in_point_stride = cin;
    arrays.out_point_stride = cout;
    model->predict_device(comm, *plan, arrays, options);
    model->predict_device(comm, *plan, arrays, options);
    const host_backend::Counts before = host_backend::counts();
    const long long waits = host_backend::host_waits;
    model->predict_device(comm, *plan, arrays, options);
    EXPECT_EQ(host_backend::host_waits - waits, 2) << name;
    EXPECT_EQ(host_backend::counts().captures, before.captures) << name;
    EXPECT_EQ(host_backend::counts().graphs, before.graphs + 1) << name;
    EXPECT_EQ(st::to_host(d_out.data(), d_out.size(), options.cuda_device), host) << name;
    const auto other = model->plan(comm, layout, surrogate::PointGeometry{}, options);
    host_backend::expect_one_graph_per_plan([&] { return predict_on(*other); }, name + ", another plan");
    EXPECT_EQ(predict_on(*plan), predict_on(*other)) << name;
  };
  for (const char* name : {"st_neighborhood_layernorm_lat", "st_sht_global_lobatto"}) {
    const Golden g = read_golden(model_dir(name));
    check(name, g.rows, g.batch);
  }
  for (const char* name : {"s2_attention_self_qknorm", "s2_neighborhood_self"}) {
    const st::Array x = st::read_array(model_dir(name) + "/io.h5", "input");
    const std::vector<double> xr = to_rows(x);
    check(name, std::vector<float>(xr.begin(), xr.end()), x.shape[0]);
  }
}

/// A single-layer model's self-attention golden file: the rows (channels last), the official float32
/// output and the float64 one where the file has it, and the bound of the models' tests
/// (tests/sphere/test_sphere_models.cpp): 4 gap + 16 u' mag of float64 with it, else 32 u' mag of the
/// official float32 output (NeighborhoodAttentionS2 alone: one projection, one softmax, the output projection).
struct LayerGolden {
  std::vector<float> rows;
  std::vector<double> ref;  // float64 where the file has it, else the official float32 output
  bool has64 = false;
  index_t batch = 0, points = 0;
  double mag = 0.0, tol = 0.0;
};

LayerGolden read_layer_golden(const std::string& dir) {
  LayerGolden g;
  const st::Array x = st::read_array(dir + "/io.h5", "input");
  const std::vector<double> xr = to_rows(x);
  g.rows.assign(xr.begin(), xr.end());
  g.batch = x.shape[0];
  g.points = x.shape[2] * x.shape[3];
  const std::vector<double> ref32 = to_rows(st::read_array(dir + "/io.h5", "output"));
  g.has64 = st::has_dataset(dir + "/io.h5", "output_f64");
  g.ref = g.has64 ? to_rows(st::read_array(dir + "/io.h5", "output_f64")) : ref32;
  for (double v : g.ref) g.mag = std::max(g.mag, std::fabs(v));
  g.tol = g.has64 ? 4 * max_diff(ref32, g.ref) + 16 * 6e-8 * g.mag : 32 * 6e-8 * g.mag;
  return g;
}

/// Every sample its own: the layout of a golden file's batch.
surrogate::SampleLayout layer_layout(const surrogate::Comm& comm, const LayerGolden& g) {
  const index_t n = g.batch * g.points;
  std::vector<std::int64_t> sample(static_cast<std::size_t>(n));
  for (index_t r = 0; r < n; ++r) sample[static_cast<std::size_t>(r)] = r / g.points;
  return surrogate::SampleLayout::build(comm, n, sample.data());
}

// The registered single-layer models (s2_attention, s2_neighborhood_attention; cuda/layer.cpp) with
// RunOptions::cuda_device = 0 against cuda_device = -1 and the official output, on their self-attention
// golden files, within the bound of read_layer_golden and within twice that of the CPU forward. Also: the
// device path ran, a second forward (the same device object) repeats the values, and fp64 is refused.
TEST(GpuSphereTransformer, RegisteredLayerModelsWithCudaDevice) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm comm;
  for (const char* name : {"s2_attention_self_qknorm", "s2_neighborhood_self"}) {
    const std::string dir = model_dir(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(dir + "/model.h5"));
    const LayerGolden g = read_layer_golden(dir);
    const int cin = model->in_channels(), cout = model->out_channels();
    const index_t n = g.batch * g.points;
    ASSERT_EQ(static_cast<index_t>(g.rows.size()), n * cin) << name;
    const surrogate::SampleLayout layout = layer_layout(comm, g);
    const index_t ld_in = cin + 3, ld_out = cout + 2;  // strides wider than the rows
    std::vector<float> in(static_cast<std::size_t>(n * ld_in), 99.0f);
    for (index_t r = 0; r < n; ++r) std::copy_n(g.rows.data() + r * cin, cin, in.data() + r * ld_in);
    std::vector<float> cpu(static_cast<std::size_t>(n * ld_out), -7.0f), dev(cpu.size(), -7.0f), again(cpu.size(), -7.0f);
    model->predict(comm, layout, in.data(), ld_in, cpu.data(), ld_out);
    surrogate::RunOptions options;
    options.cuda_device = st::test_device();
    const int before = launches();
    const auto plan = model->plan(comm, layout);  // one plan for both forwards
    model->predict(comm, *plan, in.data(), ld_in, dev.data(), ld_out, options);
    if (st::on_host_backend()) {
      EXPECT_GT(launches(), before) << name;
    }
    model->predict(comm, *plan, in.data(), ld_in, again.data(), ld_out, options);
    EXPECT_EQ(again, dev) << name;
    double err_ref = 0.0, err_cpu = 0.0;
    for (index_t r = 0; r < n; ++r)
      for (int c = 0; c < ld_out; ++c) {
        const std::size_t i = static_cast<std::size_t>(r * ld_out + c);
        if (c >= cout) {
          ASSERT_EQ(dev[i], -7.0f) << name << ": padding written, row " << r;
          continue;
        }
        const double want = g.ref[static_cast<std::size_t>(r * cout + c)];
        err_ref = std::max(err_ref, std::fabs(static_cast<double>(dev[i]) - want));
        err_cpu = std::max(err_cpu, std::fabs(static_cast<double>(dev[i]) - static_cast<double>(cpu[i])));
      }
    std::printf("%s: |device - %s| %.3g, |device - CPU| %.3g, bound %.3g (mag %.3g)\n", name,
                g.has64 ? "f64" : "official f32", err_ref, err_cpu, g.tol, g.mag);
    EXPECT_LE(err_ref, g.tol) << name;
    EXPECT_LE(err_cpu, 2 * g.tol) << name;
    options.precision = surrogate::Precision::fp64;
    try {
      model->predict(comm, layout, in.data(), ld_in, dev.data(), ld_out, options);
      ADD_FAILURE() << name << ": fp64 accepted on a device";
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
    }
  }
}

// tf32 / bf16 through the registered single-layer models: the four projections on the tensor cores, the
// softmax FP32; the CPU emulation rounds the same projections (its Linear layers). Checks of
// expect_tensor_core_precisions against the golden output, with read_layer_golden's bound.
TEST(GpuSphereTransformer, LayerModelProjectionsInTf32AndBf16) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm comm;
  for (const char* name : {"s2_attention_self_qknorm", "s2_neighborhood_self"}) {
    SCOPED_TRACE(name);
    const std::string dir = model_dir(name);
    const auto model = surrogate::make_model(surrogate::ModelFile::read(dir + "/model.h5"));
    const LayerGolden g = read_layer_golden(dir);
    const int cout = model->out_channels();
    const surrogate::SampleLayout layout = layer_layout(comm, g);
    const auto plan = model->plan(comm, layout);
    const auto predict = [&](const surrogate::RunOptions& options) {
      std::vector<float> y(static_cast<std::size_t>(layout.local_points() * cout));
      model->predict(comm, *plan, g.rows.data(), model->in_channels(), y.data(), cout, options);
      return y;
    };
    expect_tensor_core_precisions(name, predict, g.ref, g.tol, g.mag);
  }
}

// The SHT decoder (upsample_sht: RealSHT on the internal grid, InverseRealSHT on the image grid, on the
// kernels of sphere_sht_kernels.cuh) on its two golden files (17x32 equiangular -> 9x16 LG, lmax = mmax = 9,
// neighbourhood attention, instance norm; 19x36 -> 7x12 Lobatto, lmax = mmax = 6, global attention, layer
// norm, residual prediction), with the bound of GoldenModelsWithinTheFloat32Bound; the SHT kernels ran.
TEST(GpuSphereTransformer, ShtDecoderGoldenModels) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm self;
  for (const char* name : {"st_sht_neighborhood_instance", "st_sht_global_lobatto"}) {
    const std::string dir = model_dir(name);
    const auto file = surrogate::ModelFile::read(self, dir + "/model.h5");
    const sp::SphericalTransformer net(file);
    ASSERT_TRUE(net.config().upsample_sht) << name;
    const Golden g = read_golden(dir);
    std::vector<float> cpu(g.ref64.size()), dev(g.ref64.size(), -7.0f);
    net.forward(g.batch, g.rows.data(), cpu.data());
    auto device = sp::make_sphere_transformer_device_forward(net, st::test_device());
    const int before = sht_launches();
    device->forward(g.batch, g.rows.data(), dev.data());
    if (st::on_host_backend()) {
      EXPECT_EQ(sht_launches(), before + 4) << name << ": the four SHT kernels";
    }
    double mag = 0.0;
    for (double v : g.ref64) mag = std::max(mag, std::fabs(v));
    const double tol = 4 * max_diff(g.ref32, g.ref64) + 16 * 6e-8 * mag;
    const double err64 = max_diff(dev, g.ref64), err_cpu = max_diff(dev, cpu);
    std::printf("%s: |device - f64| %.3g, |device - CPU| %.3g, |CPU - f64| %.3g, bound %.3g\n", name, err64, err_cpu,
                max_diff(cpu, g.ref64), tol);
    EXPECT_LE(err64, tol) << name;
    EXPECT_LE(err_cpu, 2 * tol) << name;
  }
}

// The SHT kernels against the CPU transforms (surrogate::sphere::RealSHT / InverseRealSHT) on random fields:
// the Legendre analysis bitwise equal to RealSHT::legendre on the CPU's Fourier rows; the Fourier analysis
// (a direct DFT in double where the CPU runs an FFT in double) within 2^-23 |cpu| + 2^-40 sum_j |x_j| / nlon
// of RealSHT::fourier_rows (two double evaluations of one sum of at most 36 terms, each within 2^-48 of
// the magnitudes' sum, then one rounding to float32 each: 2^-24 |y| apiece); the inverse (the Legendre
// synthesis with the CPU's operations, then a direct DFT) within 2^-23 |cpu| + 2^-40 S, S = sum_m c_m
// (|Re G_m| + |Im G_m|) of the row and channel, of InverseRealSHT::forward. Grids: even and odd nlon, the
// Nyquist order present and absent, every latitude rule, row strides wider than the rows.
TEST(GpuSphereTransformer, ShtKernelsAreTheCpuTransforms) {
  SURROGATE_SKIP_WITHOUT_GPU();
  struct ShtCase {
    int nlat_in, nlon_in;
    sp::Grid grid_in;
    int nlat_out, nlon_out;
    sp::Grid grid_out;
    int channels, batch;
  };
  const ShtCase cases[] = {{9, 16, sp::Grid::legendre_gauss, 17, 32, sp::Grid::equiangular, 5, 2},
                           {7, 12, sp::Grid::lobatto, 19, 36, sp::Grid::equiangular, 3, 1},
                           {8, 15, sp::Grid::equiangular, 8, 15, sp::Grid::legendre_gauss, 4, 1},  // odd nlon
                           {6, 10, sp::Grid::legendre_gauss, 11, 10, sp::Grid::lobatto, 2, 1}};  // Nyquist out
  std::mt19937 rng(31);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (const ShtCase& t : cases) {
    const sp::RealSHT sht(t.nlat_in, t.nlon_in, t.grid_in);
    const sp::InverseRealSHT isht(t.nlat_out, t.nlon_out, t.grid_out, sht.lmax(), sht.mmax());
    const int C = t.channels, L = sht.lmax(), M = sht.mmax();
    const std::string name = std::to_string(t.nlat_in) + "x" + std::to_string(t.nlon_in) + " -> " +
                             std::to_string(t.nlat_out) + "x" + std::to_string(t.nlon_out) + ", lmax " + std::to_string(L) +
                             ", mmax " + std::to_string(M);
    const index_t rows_in = static_cast<index_t>(t.batch) * t.nlat_in, rows_out = static_cast<index_t>(t.batch) * t.nlat_out;
    const index_t ldx = C + 2;  // a wider row stride: padding never read
    std::vector<float> x(static_cast<std::size_t>(rows_in * t.nlon_in * ldx), NAN);
    for (index_t p = 0; p < rows_in * t.nlon_in; ++p)
      for (int c = 0; c < C; ++c) x[static_cast<std::size_t>(p * ldx + c)] = normal(rng);
    const auto twiddles = [](int n) {
      std::vector<double> tw(2 * static_cast<std::size_t>(n));
      for (int k = 0; k < n; ++k) {
        tw[2 * static_cast<std::size_t>(k)] = std::cos(2.0 * M_PI * k / n);
        tw[2 * static_cast<std::size_t>(k) + 1] = std::sin(2.0 * M_PI * k / n);
      }
      return tw;
    };
    const std::vector<double> tw_in = twiddles(t.nlon_in), tw_out = twiddles(t.nlon_out);
    // Forward: the Fourier rows, then the coefficients.
    const std::size_t width = static_cast<std::size_t>(sht.fourier_width(C));
    std::vector<float> fourier_cpu(static_cast<std::size_t>(rows_in) * width), fourier_dev(fourier_cpu.size(), -7.0f);
    sht.fourier_rows(rows_in, C, x.data(), ldx, fourier_cpu.data());
    const auto d_x = st::to_device(x);
    const auto d_tw_in = st::to_device(tw_in), d_tw_out = st::to_device(tw_out);
    auto d_fourier = st::to_device(fourier_dev);
    cu::ShtFourierArgs fa;
    fa.x = d_x.data();
    fa.ldx = ldx;
    fa.y = d_fourier.data();
    fa.twiddle = d_tw_in.data();
    fa.rows = rows_in;
    fa.nlon = t.nlon_in;
    fa.channels = C;
    fa.mmax = M;
    fa.modes = std::min(M, t.nlon_in / 2 + 1);
    cu::sht_fourier_analysis(fa, nullptr);
    fourier_dev = st::to_host(d_fourier.data(), fourier_dev.size());
    double worst_fourier = 0.0;
    for (index_t r = 0; r < rows_in; ++r) {
      std::vector<double> sum_abs(static_cast<std::size_t>(C), 0.0);
      for (int j = 0; j < t.nlon_in; ++j)
        for (int c = 0; c < C; ++c)
          sum_abs[static_cast<std::size_t>(c)] += std::fabs(x[static_cast<std::size_t>((r * t.nlon_in + j) * ldx + c)]);
      for (std::size_t i = 0; i < width; ++i) {
        const std::size_t at = static_cast<std::size_t>(r) * width + i;
        const double bound = std::ldexp(std::fabs(fourier_cpu[at]), -23) +
                             std::ldexp(sum_abs[i % static_cast<std::size_t>(C)] / t.nlon_in, -40);
        worst_fourier = std::max(worst_fourier, std::fabs(static_cast<double>(fourier_dev[at]) - fourier_cpu[at]) / bound);
      }
    }
    std::vector<float> coeff_cpu(static_cast<std::size_t>(t.batch) * static_cast<std::size_t>(L * M) * 2 * static_cast<std::size_t>(C)),
        coeff_dev(coeff_cpu.size(), -7.0f);
    sht.legendre(t.batch, C, fourier_cpu.data(), coeff_cpu.data());
    const auto d_weights = st::to_device(sht.weights()), d_fourier_cpu = st::to_device(fourier_cpu);
    auto d_coeff = st::to_device(coeff_dev);
    cu::ShtLegendreArgs la;
    la.table = d_weights.data();
    la.x = d_fourier_cpu.data();  // the CPU's rows: bitwise comparison of the Legendre step alone
    la.y = d_coeff.data();
    la.batch = t.batch;
    la.nlat = t.nlat_in;
    la.lmax = L;
    la.mmax = M;
    la.channels = C;
    cu::sht_legendre_analysis(la, nullptr);
    coeff_dev = st::to_host(d_coeff.data(), coeff_dev.size());
    EXPECT_EQ(0, std::memcmp(coeff_cpu.data(), coeff_dev.data(), coeff_cpu.size() * sizeof(float)))
        << name << ": the Legendre analysis is not RealSHT::legendre's arithmetic";
    // Inverse: the synthesis rows, then the fields on the output grid.
    const int modes = std::min(M, t.nlon_out / 2 + 1);
    const index_t ldy = C + 1;
    std::vector<float> f_cpu(static_cast<std::size_t>(rows_out * t.nlon_out * ldy), -7.0f), f_dev(f_cpu.size(), -7.0f);
    isht.forward(t.batch, C, coeff_cpu.data(), f_cpu.data(), ldy);
    std::vector<float> g(static_cast<std::size_t>(rows_out * modes * 2 * C), -7.0f);
    const auto d_table = st::to_device(isht.table()), d_coeff_cpu = st::to_device(coeff_cpu);
    auto d_g = st::to_device(g), d_f = st::to_device(f_dev);
    cu::ShtLegendreArgs ls = la;
    ls.table = d_table.data();
    ls.x = d_coeff_cpu.data();
    ls.y = d_g.data();
    ls.nlat = t.nlat_out;
    ls.modes = modes;
    ls.nyquist = t.nlon_out % 2 == 0 && t.nlon_out / 2 < modes ? t.nlon_out / 2 : -1;
    cu::sht_legendre_synthesis(ls, nullptr);
    g = st::to_host(d_g.data(), g.size());
    cu::ShtFourierArgs fs;
    fs.x = d_g.data();
    fs.y = d_f.data();
    fs.ldy = ldy;
    fs.twiddle = d_tw_out.data();
    fs.rows = rows_out;
    fs.nlon = t.nlon_out;
    fs.channels = C;
    fs.mmax = fs.modes = modes;
    cu::sht_fourier_synthesis(fs, nullptr);
    f_dev = st::to_host(d_f.data(), f_dev.size());
    double worst_inverse = 0.0, max_err = 0.0;
    std::size_t padding_written = 0;
    for (index_t r = 0; r < rows_out; ++r)
      for (int j = 0; j < t.nlon_out; ++j)
        for (index_t c = 0; c < ldy; ++c) {
          const std::size_t at = static_cast<std::size_t>((r * t.nlon_out + j) * ldy + c);
          if (c >= C) {
            padding_written += f_dev[at] != -7.0f ? 1 : 0;
            continue;
          }
          double s_abs = 0.0;  // sum_m c_m (|Re G| + |Im G|) of this row and channel
          for (int m = 0; m < modes; ++m)
            s_abs += (m == 0 || 2 * m == t.nlon_out ? 1.0 : 2.0) *
                     (std::fabs(g[static_cast<std::size_t>((r * modes + m) * 2 * C + c)]) +
                      std::fabs(g[static_cast<std::size_t>((r * modes + m) * 2 * C + C + c)]));
          const double bound = std::ldexp(std::fabs(f_cpu[at]), -23) + std::ldexp(s_abs, -40);
          const double err = std::fabs(static_cast<double>(f_dev[at]) - f_cpu[at]);
          max_err = std::max(max_err, err);
          worst_inverse = std::max(worst_inverse, err / bound);
        }
    std::printf("  %-40s Fourier analysis %.3g of its bound, inverse %.3g of its bound (max err %.3g)\n", name.c_str(),
                worst_fourier, worst_inverse, max_err);
    EXPECT_LE(worst_fourier, 1.0) << name;
    EXPECT_LE(worst_inverse, 1.0) << name;
    EXPECT_EQ(padding_written, 0u) << name;
  }
}

// The model zoo's one-head transformers (s2ntransformer_sc2_layers4_e128 and s2transformer_sc2_layers4_e128:
// embed_dim 128, one head of width 128, instance norm, spectral embedding, piecewise linear (5, 4) encoder,
// scale factor 2) on the golden file zoo_s2ntransformer_e128_reduced (25x48 -> 13x24, one layer), in
// neighbourhood attention as exported and in global attention (the same weights with attention_mode =
// "global": the zoo's s2transformer; its official float32 / float64 outputs on the same input are
// tests/data/sphere/zoo_s2transformer_e128_global_io.h5, share/tools/golden/sphere_zoo_global_io.py). Bound
// as above, from each mode's own gap and magnitude: within 4 gap + 16 u' mag of float64 (the CPU forward
// too), within twice that of the CPU forward. The wide-head kernels must have run.
TEST(GpuSphereTransformer, ZooOneHeadE128BothAttentionModes) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const surrogate::SelfComm self;
  const std::string dir = model_dir("zoo_s2ntransformer_e128_reduced");
  const std::string global_io = st::data_dir() + "/sphere/zoo_s2transformer_e128_global_io.h5";
  for (const char* mode : {"neighborhood", "global"}) {
    const bool global = std::string(mode) == "global";
    Golden g = read_golden(dir);
    if (global) {
      const std::vector<double> x = to_rows(st::read_array(global_io, "input"));
      ASSERT_EQ(std::vector<float>(x.begin(), x.end()), g.rows) << "the global file's input is the zoo file's";
      g.ref32 = to_rows(st::read_array(global_io, "output"));
      g.ref64 = to_rows(st::read_array(global_io, "output_f64"));
    }
    double mag = 0.0;
    for (double v : g.ref64) mag = std::max(mag, std::fabs(v));
    const double tol = 4 * max_diff(g.ref32, g.ref64) + 16 * 6e-8 * mag;
    auto file = surrogate::ModelFile::read(self, dir + "/model.h5");
    ASSERT_EQ(file.config.get_int("num_heads", 1), 1);
    ASSERT_EQ(file.config.get_int("embed_dim"), 128);
    file.config.set("attention_mode", std::string(mode));
    const sp::SphericalTransformer net(file);
    std::vector<float> cpu(g.ref64.size()), dev(g.ref64.size(), -7.0f);
    net.forward(g.batch, g.rows.data(), cpu.data());
    auto device = sp::make_sphere_transformer_device_forward(net, st::test_device());
    const int before = wide_attention_launches();
    device->forward(g.batch, g.rows.data(), dev.data());
    if (st::on_host_backend()) {
      EXPECT_EQ(wide_attention_launches(), before + 1) << mode << ": one wide-head attention launch per layer";
    }
    if (!st::on_host_backend()) {  // a second forward, timed (host arrays in and out)
      const auto start = std::chrono::steady_clock::now();
      device->forward(g.batch, g.rows.data(), dev.data());
      std::printf("zoo e128, %s: forward %.3f ms\n", mode,
                  std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    }
    const double err64 = max_diff(dev, g.ref64), err_cpu = max_diff(dev, cpu), cpu64 = max_diff(cpu, g.ref64);
    std::printf("zoo e128, %s: |device - f64| %.3g, |device - CPU| %.3g, |CPU - f64| %.3g, bound %.3g (gap %.3g, mag %.3g)\n",
                mode, err64, err_cpu, cpu64, tol, max_diff(g.ref32, g.ref64), mag);
    EXPECT_LE(err64, tol) << mode;
    EXPECT_LE(cpu64, tol) << mode;
    EXPECT_LE(err_cpu, 2 * tol) << mode;
  }
}

// The row-range device forwards (latitude bands: attention_device.cpp's and grid_ops_device.cpp's
// forward_rows) against the whole-grid device forward, bitwise: every single-row band (the widest halo
// relative to the band, poles included) and the two halves; DISCO encoder-like (17x32 equiangular -> 9x16
// Legendre-Gauss, a halo of several rows) and decoder-like (same grid); neighbourhood attention with a
// cutoff of several rows; global attention; ResampleS2 (poles expanded, spherical, downsampling, identity).
// One input row less than the band needs is refused.
TEST(GpuSphereTransformer, BandRowsAreTheWholeDeviceForward) {
  SURROGATE_SKIP_WITHOUT_GPU();
  std::mt19937 gen(77);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  const auto random = [&](std::size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = normal(gen);
    return v;
  };
  // f(device input, device output) on device copies of `in` and `out`; `out` takes the result.
  const auto on_device = [](const std::vector<float>& in, std::vector<float>& out, const auto& f) {
    const auto d_in = st::to_device(in);
    auto d_out = st::to_device(out);
    f(d_in.data(), d_out.data());
    out = st::to_host(d_out.data(), out.size());
  };
  const auto bands = [](int nlat) {
    std::vector<std::pair<int, int>> out;
    for (int t = 0; t < nlat; ++t) out.push_back({t, t + 1});
    out.push_back({0, nlat / 2});
    out.push_back({nlat / 2, nlat});
    return out;
  };
  const int B = 2;
  // DISCO.
  struct DiscoCase {
    int hi, wi, ho, wo;
    sp::Grid gi, go;
    double cutoff;
  };
  const double pi = 3.14159265358979;
  for (const DiscoCase& k : {DiscoCase{17, 32, 9, 16, sp::Grid::equiangular, sp::Grid::legendre_gauss, 3 * 0.5 * pi / 16},
                             DiscoCase{13, 24, 13, 24, sp::Grid::equiangular, sp::Grid::equiangular, 5 * 0.5 * pi / 6}}) {
    sp::DiscoConfig c;
    c.in_channels = 4;
    c.out_channels = 6;
    c.groups = 2;
    c.nlat_in = k.hi;
    c.nlon_in = k.wi;
    c.nlat_out = k.ho;
    c.nlon_out = k.wo;
    c.grid_in = k.gi;
    c.grid_out = k.go;
    c.kernel_shape = {3, 3};
    c.theta_cutoff = k.cutoff;
    c.bias = true;
    const int K = sp::filter_basis_size(c.basis, c.kernel_shape);
    sp::DiscoConvS2Device conv(c, random(static_cast<std::size_t>(6 * 2 * K)), random(6), nullptr, st::test_device());
    const auto x = random(static_cast<std::size_t>(B * k.hi * k.wi * 4));
    std::vector<float> whole(static_cast<std::size_t>(B * k.ho * k.wo * 6));
    on_device(x, whole, [&](const float* d_x, float* d_whole) { conv.forward(B, d_x, d_whole, nullptr); });
    int widest = 0;
    for (const auto& [t0, t1] : bands(k.ho)) {
      const auto [i0, i1] = conv.host().input_rows(t0, t1);
      widest = std::max(widest, i1 - i0 - (t1 - t0));
      const auto in = rows_of(x, B, k.hi, k.wi, 4, i0, i1);
      std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * k.wo * 6), -7.0f);
      on_device(in, out, [&](const float* d_in, float* d_out) {
        conv.forward_rows(B, d_in, i0, i1, d_out, t0, t1, nullptr);
        if (t1 == t0 + 1 && i0 > 0) {  // one input row short
          EXPECT_THROW(conv.forward_rows(B, d_in + k.wi * 4, i0 + 1, i1, d_out, t0, t1, nullptr), surrogate::Error);
        }
      });
      EXPECT_EQ(out, rows_of(whole, B, k.ho, k.wo, 6, t0, t1)) << "DISCO " << k.hi << "x" << k.wi << " rows " << t0 << ".." << t1;
    }
    EXPECT_GE(widest, 2) << "the DISCO case should need a halo";
  }
  // ResampleS2 (ResampleS2Device::forward_rows): with the poles expanded (the pole rows read input row 0 /
  // nlat_in - 1, which a band holds only when it reaches them), spherical and not, a downsampling, the
  // identity. The band forwards run on an object of their own, so that pole rows left over in the
  // scratch of the whole-grid forward cannot hide a pole row not computed.
  struct ResampleCase {
    int hi, wi, ho, wo;
    sp::Grid gi, go;
    sp::ResampleMode mode;
  };
  using RM = sp::ResampleMode;
  for (const ResampleCase& k : {ResampleCase{8, 16, 17, 32, sp::Grid::legendre_gauss, sp::Grid::equiangular, RM::bilinear},
                                ResampleCase{8, 16, 17, 32, sp::Grid::legendre_gauss, sp::Grid::equiangular,
                                             RM::bilinear_spherical},
                                ResampleCase{5, 10, 9, 7, sp::Grid::legendre_gauss, sp::Grid::lobatto, RM::bilinear},
                                ResampleCase{17, 32, 9, 16, sp::Grid::equiangular, sp::Grid::legendre_gauss, RM::bilinear},
                                ResampleCase{9, 16, 9, 16, sp::Grid::legendre_gauss, sp::Grid::legendre_gauss, RM::bilinear}}) {
    sp::ResampleConfig c;
    c.nlat_in = k.hi;
    c.nlon_in = k.wi;
    c.grid_in = k.gi;
    c.nlat_out = k.ho;
    c.nlon_out = k.wo;
    c.grid_out = k.go;
    c.mode = k.mode;
    const int ch = 3;
    sp::ResampleS2Device whole_op(c, st::test_device());
    sp::ResampleS2Device band_op(c, st::test_device());
    const auto x = random(static_cast<std::size_t>(B * k.hi * k.wi * ch));
    std::vector<float> whole(static_cast<std::size_t>(B * k.ho * k.wo * ch));
    on_device(x, whole, [&](const float* d_x, float* d_whole) { whole_op.forward(B, ch, d_x, d_whole, nullptr); });
    const std::string name = std::to_string(k.hi) + "x" + std::to_string(k.wi) + " -> " + std::to_string(k.ho) + "x" +
                             std::to_string(k.wo) + (k.mode == RM::bilinear_spherical ? " spherical" : "");
    for (const auto& [t0, t1] : bands(k.ho)) {
      const auto [i0, i1] = band_op.host().input_rows(t0, t1);
      const auto in = rows_of(x, B, k.hi, k.wi, ch, i0, i1);
      std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * k.wo * ch), -7.0f);
      on_device(in, out, [&](const float* d_in, float* d_out) {
        band_op.forward_rows(B, ch, d_in, i0, i1, d_out, t0, t1, nullptr);
        if (i1 > i0 + 1) {  // one input row short at either end
          EXPECT_THROW(band_op.forward_rows(B, ch, d_in, i0, i1 - 1, d_out, t0, t1, nullptr), surrogate::Error);
          EXPECT_THROW(band_op.forward_rows(B, ch, d_in, i0 + 1, i1, d_out, t0, t1, nullptr), surrogate::Error);
        }
      });
      EXPECT_EQ(out, rows_of(whole, B, k.ho, k.wo, ch, t0, t1)) << "resample " << name << " rows " << t0 << ".." << t1;
    }
  }
  // Attention (self-attention on one grid, 2 heads, qk-norm).
  const int nlat = 10, nlon = 20, cin = 6;
  sp::AttentionS2Weights w;
  w.q_weights = random(static_cast<std::size_t>(8 * cin));
  w.k_weights = random(static_cast<std::size_t>(8 * cin));
  w.v_weights = random(static_cast<std::size_t>(8 * cin));
  w.proj_weights = random(64);
  w.q_bias = random(8);
  w.k_bias = random(8);
  w.v_bias = random(8);
  w.proj_bias = random(8);
  w.q_norm_weights = random(4);
  w.k_norm_weights = random(4);
  const auto x = random(static_cast<std::size_t>(B * nlat * nlon * cin));
  sp::NeighborhoodAttentionS2Config nc;
  nc.in_channels = cin;
  nc.num_heads = 2;
  nc.k_channels = 8;
  nc.out_channels = 8;
  nc.nlat_in = nc.nlat_out = nlat;
  nc.nlon_in = nc.nlon_out = nlon;
  nc.grid_in = nc.grid_out = sp::Grid::legendre_gauss;
  nc.use_qknorm = true;
  nc.theta_cutoff = 0.6;
  sp::NeighborhoodAttentionS2Device na(nc, w, st::test_device());
  sp::AttentionS2Config gc;
  gc.in_channels = cin;
  gc.num_heads = 2;
  gc.k_channels = 8;
  gc.out_channels = 8;
  gc.nlat_in = gc.nlat_out = nlat;
  gc.nlon_in = gc.nlon_out = nlon;
  gc.grid_in = gc.grid_out = sp::Grid::legendre_gauss;
  gc.use_qknorm = true;
  sp::AttentionS2Device ga(gc, w, st::test_device());
  std::vector<float> whole_n(static_cast<std::size_t>(B * nlat * nlon * 8)), whole_g(whole_n.size());
  on_device(x, whole_n, [&](const float* d_x, float* d_y) { na.forward(B, d_x, nullptr, nullptr, d_y, nullptr); });
  on_device(x, whole_g, [&](const float* d_x, float* d_y) { ga.forward(B, d_x, nullptr, nullptr, d_y, nullptr); });
  const auto d_x = st::to_device(x);
  int widest = 0;
  for (const auto& [t0, t1] : bands(nlat)) {
    const auto q = rows_of(x, B, nlat, nlon, cin, t0, t1);
    const auto [i0, i1] = na.host().input_rows(t0, t1);
    widest = std::max(widest, i1 - i0 - (t1 - t0));
    const auto kv = rows_of(x, B, nlat, nlon, cin, i0, i1);
    std::vector<float> out(static_cast<std::size_t>(B * (t1 - t0) * nlon * 8), -7.0f), out_g(out.size(), -7.0f);
    const auto d_kv = st::to_device(kv);
    on_device(q, out, [&](const float* d_q_, float* d_out) {
      na.forward_rows(B, t0, t1, d_q_, i0, i1, d_kv.data(), d_kv.data(), d_out, nullptr);
      if (t1 == t0 + 1 && i0 > 0) {  // one key row short
        EXPECT_THROW(na.forward_rows(B, t0, t1, d_q_, i0 + 1, i1, d_kv.data() + nlon * cin, d_kv.data() + nlon * cin,
                                     d_out, nullptr),
                     surrogate::Error);
      }
    });
    EXPECT_EQ(out, rows_of(whole_n, B, nlat, nlon, 8, t0, t1)) << "neighbourhood rows " << t0 << ".." << t1;
    on_device(q, out_g, [&](const float* d_q_, float* d_out) {
      ga.forward_rows(B, t0, t1, d_q_, d_x.data(), d_x.data(), d_out, nullptr);
    });
    EXPECT_EQ(out_g, rows_of(whole_g, B, nlat, nlon, 8, t0, t1)) << "global rows " << t0 << ".." << t1;
  }
  EXPECT_GE(widest, 2) << "the neighbourhood case should need a halo";
}

}  // namespace
