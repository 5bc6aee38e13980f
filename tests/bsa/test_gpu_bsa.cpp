// The BSA forward on a CUDA device (libsurrogate/src/bsa/cuda/device.hpp) against the CPU forward and the
// official float64 output on the golden models of tests/data/bsa, the reuse of an uploaded geometry,
// determinism, the registered model with RunOptions::cuda_device, bad sizes. On the host backend (cuda.*)
// always; on a GPU (gpu.*) SKIPPED without one, except the check of the error a machine without one gives.
//
// Tolerance (as test_gpu_erwin.cpp): the device forward differs from the CPU one only by float32
// rounding (the RMSNorm's summation order, the device's expf in the gate's sigmoid, the attention
// kernels' scaling order); the block selection is the CPU's function on the device's compressed blocks,
// and the golden sizes have no near tie. 4e-6 max|y| from float64, twice that from the CPU output.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <string>
#include <vector>

#include "ball_golden_checks.hpp"
#include "bsa/cuda/device.hpp"
#include "golden.hpp"
#include "gpu_test.hpp"
#include "h5_io.hpp"
#include "host_backend_hooks.hpp"
#include "precision_emulation.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace {

namespace bt = surrogate::balltree;
namespace bsa = surrogate::bsa;
namespace st = surrogate::testing;
using ball_golden::bsa_trees_for;
using ball_golden::max_abs;
using ball_golden::max_error;
using surrogate::Error;
using surrogate::ErrorCode;

struct Case {
  surrogate::ModelFile file;
  std::vector<float> features, positions;
  std::vector<double> exact;
  std::vector<std::int64_t> offsets{0};
  bt::Batch batch() const { return bt::Batch::from_offsets(offsets); }
};

Case load(const std::string& name) {
  const std::string p = st::data_dir() + "/bsa/bsa_" + name + ".h5";
  Case c;
  c.file = surrogate::ModelFile::read(p);
  c.features = st::to_float(st::read_array(p, "/golden/features").values);
  c.positions = st::to_float(st::read_array(p, "/golden/positions").values);
  c.exact = st::read_array(p, "/golden/output_f64").values;
  for (const double s : st::read_array(p, "/golden/sample_sizes").values)
    c.offsets.push_back(c.offsets.back() + static_cast<std::int64_t>(s));
  return c;
}

class GpuBsaGolden : public ::testing::TestWithParam<const char*> {};

TEST_P(GpuBsaGolden, DeviceForwardMatchesTheCpuForwardAndTheFloat64Reference) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c = load(GetParam());
  const bsa::Network net(c.file);
  const bt::RotatedTrees trees = bsa_trees_for(net.config(), c.positions, c.batch());
  const std::vector<float> cpu = net.forward(trees, c.features, c.positions, c.batch(), 1);
  const auto device = bsa::detail::make_bsa_cuda_forward(net, st::test_device());
  const auto geometry = device->upload_geometry(trees, c.positions, c.batch());
  const double geometry_ms = device->last_geometry_ms();
  const std::vector<float> gpu = device->forward(*geometry, c.features);
  const double tol = 4e-6 * max_abs(c.exact);
  std::printf("%s: max|y| %.3g, |gpu - f64| %.3g, |gpu - cpu| %.3g, |cpu - f64| %.3g; device %.3f ms (geometry %.3f ms)\n",
              GetParam(), max_abs(c.exact), max_error(gpu, c.exact), max_error(gpu, cpu), max_error(cpu, c.exact),
              device->last_forward_ms(), geometry_ms);
  EXPECT_LE(max_error(gpu, c.exact), tol);
  EXPECT_LE(max_error(gpu, cpu), 2 * tol);
  std::vector<float> other = c.features;
  for (float& v : other) v = 0.5f * v + 0.25f;
  const std::vector<float> reused = device->forward(*geometry, other);
  EXPECT_EQ(device->last_geometry_ms(), 0.0);
  EXPECT_EQ(reused, device->forward(trees, other, c.positions, c.batch()));
  EXPECT_GT(max_error(reused, gpu), 100 * tol);  // the features matter
  EXPECT_EQ(device->forward(*geometry, c.features), gpu);
  // tf32 / bf16 dense layers: within twice the error of the CPU forward with the same operand rounding
  // (a changed block selection moves the outputs of the sparse models far more than the rounding does).
  for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
    std::vector<float> emulated;
    {
      st::ScopedPrecisionEmulation emulate(precision);
      emulated = net.forward(trees, c.features, c.positions, c.batch(), 1);
    }
    device->set_precision(precision);
    const std::vector<float> tc = device->forward(*geometry, c.features);
    const double emulated_error = max_error(emulated, c.exact);
    EXPECT_LE(max_error(tc, c.exact), 2 * emulated_error + tol) << surrogate::precision_name(precision);
    std::printf("  %s: |device - f64| %.3g, emulated on the CPU %.3g\n", surrogate::precision_name(precision),
                max_error(tc, c.exact), emulated_error);
  }
}

// The one-process geometry is computed on the device from the points' positions (cuda.md, "Ball-tree
// geometry"): an upload sends the positions once (the slots' and the rotated order's are gathered on the
// device), the tree's index arrays (point of each slot, slot of each point, the rotation) and the sparse
// layers' compression index (one per compressed token row with the compression MLP, else each block's
// first row), and brings nothing back.
TEST(BsaHostBackend, TheGeometryIsComputedOnTheDevice) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const char* name : {"sparse_rot", "means_static", "ball", "global"}) {
    SCOPED_TRACE(name);
    const Case c = load(name);
    const bsa::Network net(c.file);
    const auto& cfg = net.config();
    const bt::RotatedTrees trees = bsa_trees_for(cfg, c.positions, c.batch());
    const auto device = bsa::detail::make_bsa_cuda_forward(net, st::test_device());
    const long long up = host_backend::bytes_to_device, down = host_backend::bytes_to_host;
    const auto geometry = device->upload_geometry(trees, c.positions, c.batch());
    const long long points = c.offsets.back(), slots = trees.tree.slots();
    long long index_values = slots + points + (cfg.should_rotate ? slots : 0);
    if (cfg.attention_type == bsa::AttentionType::sparse) {
      const long long blocks = slots / cfg.compress_block_size;
      index_values += cfg.use_compress_mlp ? blocks * cfg.num_heads * cfg.compress_block_size : blocks + 1;
    }
    EXPECT_EQ(host_backend::bytes_to_device - up, points * cfg.dimensionality * 4 + index_values * 8);
    EXPECT_EQ(host_backend::bytes_to_host - down, 0);
    // The forward on this geometry: within the golden bound of the float64 output.
    EXPECT_LE(max_error(device->forward(*geometry, c.features), c.exact), 4e-6 * max_abs(c.exact));
  }
}

INSTANTIATE_TEST_SUITE_P(Bsa, GpuBsaGolden,
                         ::testing::Values("sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball",
                                           "global"));

TEST(GpuBsaModel, PredictOnTheDeviceMatchesTheCpu) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c = load("sparse_rot");
  const auto model = surrogate::make_model(c.file);
  std::vector<std::int64_t> batch_idx;
  for (std::size_t s = 0; s + 1 < c.offsets.size(); ++s)
    batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(c.offsets[s + 1] - c.offsets[s]), static_cast<std::int64_t>(s));
  const surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(batch_idx.size());
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, batch_idx.data());
  surrogate::PointGeometry g;
  g.positions = c.positions.data();
  g.ld_positions = 3;
  const int cin = model->in_channels(), cout = model->out_channels();
  std::vector<float> cpu(static_cast<std::size_t>(n * cout)), gpu(cpu.size()), again(cpu.size());
  model->predict(comm, layout, g, c.features.data(), cin, cpu.data(), cout);
  surrogate::RunOptions options;
  options.cuda_device = st::test_device();
  const auto plan = model->plan(comm, layout, g);
  model->predict(comm, *plan, c.features.data(), cin, gpu.data(), cout, options);
  model->predict(comm, *plan, c.features.data(), cin, again.data(), cout, options);  // the plan's device geometry kept
  const double tol = 4e-6 * max_abs(c.exact);
  EXPECT_LE(max_error(gpu, c.exact), tol);
  EXPECT_LE(max_error(gpu, cpu), 2 * tol);
  EXPECT_EQ(gpu, again);
  // tf32 / bf16: the dense layers on the tensor cores (attention, gates, norms stay fp32). The error against
  // float64 within twice that of the CPU forward with the same rounding of the dense layers' operands
  // (tests/support/precision_emulation), plus the fp32 bound; repeatable on the kept plan.
  for (const auto precision : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
    std::vector<float> emulated(cpu.size()), tc(cpu.size()), tc_again(cpu.size());
    {
      st::ScopedPrecisionEmulation emulate(precision);
      model->predict(comm, layout, g, c.features.data(), cin, emulated.data(), cout);
    }
    options.precision = precision;
    model->predict(comm, *plan, c.features.data(), cin, tc.data(), cout, options);
    model->predict(comm, *plan, c.features.data(), cin, tc_again.data(), cout, options);
    const double emulated_error = max_error(emulated, c.exact);
    EXPECT_LE(max_error(tc, c.exact), 2 * emulated_error + tol)
        << surrogate::precision_name(precision) << ": emulated error " << emulated_error;
    EXPECT_GT(max_error(tc, c.exact), 4 * max_error(gpu, c.exact)) << surrogate::precision_name(precision) << " not applied";
    EXPECT_EQ(tc, tc_again);
    std::printf("  %s: |device - f64| %.3g, emulated on the CPU %.3g (fp32 %.3g)\n", surrogate::precision_name(precision),
                max_error(tc, c.exact), emulated_error, max_error(gpu, c.exact));
  }
}

TEST(GpuBsaModel, WrongSizesAreInputErrors) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c = load("ball");
  const bsa::Network net(c.file);
  const auto device = bsa::detail::make_bsa_cuda_forward(net, st::test_device());
  const bt::Batch batch = bt::Batch::from_offsets(c.offsets);
  const bt::RotatedTrees trees = bsa_trees_for(net.config(), c.positions, batch);
  const std::vector<float> short_features(static_cast<std::size_t>(net.config().c_in));
  try {
    device->forward(trees, short_features, c.positions, batch);
    ADD_FAILURE() << "no error for too few features";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("features"), std::string::npos) << e.what();
  }
}

// Without a visible device (this test skips where there is one) the factory refuses with Error(unsupported).
TEST(GpuBsaModel, WithoutADeviceTheCudaForwardIsRefused) {
  std::string why;
  if (st::cuda_device_visible(&why)) GTEST_SKIP() << "a CUDA device is visible: the refusal is not reachable";
  const bsa::Network net(load("ball").file);
  try {
    static_cast<void>(bsa::detail::make_bsa_cuda_forward(net, 0));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::unsupported);
    EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos) << e.what();
  }
}

}  // namespace
