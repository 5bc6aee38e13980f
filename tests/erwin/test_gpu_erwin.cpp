// The Erwin forward on a CUDA device (libsurrogate/src/erwin/cuda/device.hpp) against the CPU forward and
// the float64 reference on the golden models of tests/data/erwin (official Erwin weights and inputs), the
// reuse of an uploaded geometry, determinism, and the registered model with RunOptions::cuda_device
// (ShapeNet-Car wrapper, graph built by the model's rule). On the host backend (cuda.*) always; on a GPU
// (gpu.*) SKIPPED without one, except the check of the error a machine without one gives.
//
// Tolerance: the device forward differs from the CPU one only by float32 rounding (other summation orders
// in the norms and the attention's softmax sums, the device's erff in GELU); tests/erwin/test_erwin.cpp
// bounds a float32 forward at 4e-6 max|y| from the float64 reference (about 8x the official float32
// output's own error on these cases), so the device output must be within that of the float64 reference,
// and within twice that of the CPU output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "erwin/cuda/device.hpp"
#include "gpu_test.hpp"
#include "h5_io.hpp"
#include "host_backend_hooks.hpp"
#include "ball_golden_checks.hpp"
#include "golden.hpp"
#include "precision_emulation.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace {

namespace bt = surrogate::balltree;
namespace ew = surrogate::erwin;
namespace st = surrogate::testing;
using ball_golden::max_abs;
using ball_golden::max_error;
using surrogate::Error;
using surrogate::ErrorCode;

struct Case {
  surrogate::ModelFile file;
  std::vector<float> features, positions;
  std::vector<double> exact;
  std::vector<std::int64_t> sizes, edges;
  bt::Batch batch() const {
    std::vector<std::int64_t> offsets{0};
    for (const auto s : sizes) offsets.push_back(offsets.back() + s);
    return bt::Batch::from_offsets(offsets);
  }
};

std::string path_of(const std::string& name) { return st::data_dir() + "/erwin/erwin_" + name + ".h5"; }

Case load(const std::string& name) {
  const std::string p = path_of(name);
  Case c;
  c.file = surrogate::ModelFile::read(p);
  c.features = st::to_float(st::read_array(p, "/golden/features").values);
  c.positions = st::to_float(st::read_array(p, "/golden/positions").values);
  c.exact = st::read_array(p, "/golden/output_f64").values;
  for (const double s : st::read_array(p, "/golden/sample_sizes").values) c.sizes.push_back(static_cast<std::int64_t>(s));
  if (st::has_dataset(p, "/golden/edge_index"))
    for (const double e : st::read_array(p, "/golden/edge_index").values) c.edges.push_back(static_cast<std::int64_t>(e));
  return c;
}

class GpuErwinGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuErwinGolden, DeviceForwardMatchesTheCpuForwardAndTheFloat64Reference) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c = load(GetParam());
  const ew::Network net(c.file);
  const auto& cfg = net.config();
  const bt::RotatedTrees trees =
      bt::build_with_rotations(c.positions, cfg.dimensionality, c.batch(), cfg.strides, cfg.ball_sizes, cfg.rotate);
  const std::vector<float> cpu = net.forward(trees, c.features, c.positions, c.batch(), c.edges, 1);
  const auto device = ew::detail::make_erwin_cuda_forward(net, st::test_device());
  const auto geometry = device->upload_geometry(trees, c.positions, c.batch(), c.edges);
  const double geometry_ms = device->last_geometry_ms();
  const std::vector<float> gpu = device->forward(*geometry, c.features);
  const double tol = 4e-6 * max_abs(c.exact);
  const double err_exact = max_error(gpu, c.exact), err_cpu = max_error(gpu, cpu);
  std::printf("%s: max|y| %.3g, |gpu - f64| %.3g, |gpu - cpu| %.3g, |cpu - f64| %.3g; device %.3f ms (geometry %.3f ms)\n",
              GetParam(), max_abs(c.exact), err_exact, err_cpu, max_error(cpu, c.exact), device->last_forward_ms(),
              geometry_ms);
  EXPECT_LE(err_exact, tol);
  EXPECT_LE(err_cpu, 2 * tol);

  // The uploaded geometry is reused (same trees, positions, edges): other features give the same bits as
  // a fresh upload, and the same call twice gives the same bits (the kernels are deterministic).
  std::vector<float> other = c.features;
  for (float& v : other) v = 0.5f * v + 0.25f;
  const std::vector<float> reused = device->forward(*geometry, other);
  EXPECT_EQ(device->last_geometry_ms(), 0.0);
  const std::vector<float> fresh = device->forward(trees, other, c.positions, c.batch(), c.edges);
  EXPECT_EQ(reused, fresh);
  EXPECT_GT(max_error(reused, gpu), 100 * tol);  // the features matter
  EXPECT_EQ(device->forward(*geometry, c.features), gpu);
  // Messages in chunks of at most 7 / 13 edges on a graph with uneven receiver degrees (every seventh edge
  // dropped): the bits of one chunk.
  if (!c.edges.empty()) {
    const std::size_t E = c.edges.size() / 2;
    std::vector<std::int64_t> src, dst;
    for (std::size_t e = 0; e < E; ++e)
      if (e % 7 != 3) {
        src.push_back(c.edges[e]);
        dst.push_back(c.edges[E + e]);
      }
    std::vector<std::int64_t> uneven = src;
    uneven.insert(uneven.end(), dst.begin(), dst.end());
    const std::vector<float> whole = device->forward(trees, c.features, c.positions, c.batch(), uneven);
    EXPECT_LE(max_error(whole, net.forward(trees, c.features, c.positions, c.batch(), uneven, 1)), 2 * tol);
    for (const surrogate::index_t chunk : {7, 13})
      EXPECT_EQ(ew::detail::make_erwin_cuda_forward(net, st::test_device(), chunk)->forward(trees, c.features, c.positions, c.batch(), uneven),
                whole)
          << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Erwin, GpuErwinGolden, ::testing::Values("mpnn_rot", "plain_rot_2d", "mpnn_norot", "flash_ref"));

// The geometry is computed on the device from the points' positions and the edges (cuda.md, "Ball-tree
// geometry"): uploading it sends the positions once, the edges and the tree's index arrays (slot of each
// point, point of each slot, each level's rotation), brings back only the edges' offsets and the bad-edge
// flag (none without message passing) and waits for the device twice (counted by the host backend, which
// counts a wait only when work is queued): once for the geometry's launches (with message passing, the
// offsets' copy), once for the upload's timing.
TEST(ErwinHostBackend, TheGeometryIsComputedOnTheDevice) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const char* name : {"mpnn_rot", "plain_rot_2d"}) {
    SCOPED_TRACE(name);
    const Case c = load(name);
    const ew::Network net(c.file);
    const auto& cfg = net.config();
    const bt::RotatedTrees trees =
        bt::build_with_rotations(c.positions, cfg.dimensionality, c.batch(), cfg.strides, cfg.ball_sizes, cfg.rotate);
    const auto device = ew::detail::make_erwin_cuda_forward(net, st::test_device());
    const long long waits = host_backend::host_waits, down = host_backend::bytes_to_host,
                    up = host_backend::bytes_to_device;
    const auto geometry = device->upload_geometry(trees, c.positions, c.batch(), c.edges);
    long long points = 0;
    for (const std::int64_t s : c.sizes) points += s;
    const bool messages = cfg.mp_steps > 0;
    long long index_values = trees.tree.slots() + points;
    if (cfg.rotate > 0)
      for (const auto& r : trees.rotated) index_values += static_cast<long long>(r.size());
    const long long edge_values = messages ? static_cast<long long>(c.edges.size()) : 0;
    EXPECT_EQ(host_backend::bytes_to_device - up, points * cfg.dimensionality * 4 + (edge_values + index_values) * 8);
    EXPECT_EQ(host_backend::bytes_to_host - down, messages ? (points + 2) * 8 : 0);
    EXPECT_EQ(host_backend::host_waits - waits, 2);
  }
}

// The registered model (surrogate::make_model, Model::predict) with cuda_device 0 against cuda_device -1:
// the ShapeNet-Car wrapper (positions only, kNN graph built by the model's rule, Fourier features and
// head on the device), one process.
TEST(GpuErwinModel, PredictOnTheDeviceMatchesTheCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const std::string p = path_of("shapenet_car");
  const surrogate::ModelFile file = surrogate::ModelFile::read(p);
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const std::vector<double> exact = st::read_array(p, "/golden/output_f64").values;
  std::vector<std::int64_t> batch_idx;
  std::int64_t b = 0;
  for (const double s : st::read_array(p, "/golden/sample_sizes").values) {
    batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(s), b);
    ++b;
  }
  const auto model = surrogate::make_model(file);
  const surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(batch_idx.size());
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, batch_idx.data());
  surrogate::PointGeometry g;
  g.positions = positions.data();
  g.ld_positions = 3;
  std::vector<float> cpu(static_cast<std::size_t>(n)), gpu(cpu.size()), again(cpu.size());
  model->predict(comm, layout, g, nullptr, 0, cpu.data(), 1);
  surrogate::RunOptions options;
  options.cuda_device = st::test_device();
  const auto plan = model->plan(comm, layout, g);
  model->predict(comm, *plan, nullptr, 0, gpu.data(), 1, options);
  model->predict(comm, *plan, nullptr, 0, again.data(), 1, options);  // the plan's device geometry kept
  const double tol = 4e-6 * max_abs(exact);
  EXPECT_LE(max_error(gpu, exact), tol);
  EXPECT_LE(max_error(gpu, cpu), 2 * tol);
  EXPECT_EQ(gpu, again);
  // tf32 / bf16: the dense layers on the tensor cores. The error against float64 within twice that of
  // the CPU forward with the same rounding of the dense layers' operands (tests/support/
  // precision_emulation), plus the fp32 bound; repeatable on the kept plan.
  for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
    std::vector<float> emulated(cpu.size()), tc(cpu.size()), tc_again(cpu.size());
    {
      st::ScopedPrecisionEmulation emulate(precision);
      model->predict(comm, layout, g, nullptr, 0, emulated.data(), 1);
    }
    options.precision = precision;
    model->predict(comm, *plan, nullptr, 0, tc.data(), 1, options);
    model->predict(comm, *plan, nullptr, 0, tc_again.data(), 1, options);
    const double emulated_error = max_error(emulated, exact);
    EXPECT_LE(max_error(tc, exact), 2 * emulated_error + tol)
        << surrogate::precision_name(precision) << ": emulated error " << emulated_error;
    EXPECT_GT(max_error(tc, exact), 4 * max_error(gpu, exact)) << surrogate::precision_name(precision) << " not applied";
    EXPECT_EQ(tc, tc_again);
    std::printf("  %s: |device - f64| %.3g, emulated on the CPU %.3g (fp32 %.3g)\n", surrogate::precision_name(precision),
                max_error(tc, exact), emulated_error, max_error(gpu, exact));
  }
}

// Without a visible device (this test skips where there is one) the factory refuses with Error(unsupported)
// naming the reason, and so does the registered model.
TEST(GpuErwinModel, WithoutADeviceTheCudaForwardIsRefused) {
  std::string why;
  if (st::cuda_device_visible(&why)) GTEST_SKIP() << "a CUDA device is visible: the refusal is not reachable";
  const Case c = load("mpnn_rot");
  const ew::Network net(c.file);
  try {
    static_cast<void>(ew::detail::make_erwin_cuda_forward(net, 0));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos) << e.what();
  }
}

}  // namespace
