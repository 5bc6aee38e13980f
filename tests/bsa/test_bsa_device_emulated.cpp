// The BSA device forward (libsurrogate/src/bsa/cuda/, the code compiled into the library) run on
// the CPU with the host-emulated CUDA backend of emulated_cuda_backend.cpp (memory, streams, copies, the
// point layers, the ball attention, the norm; see emulated_cuda_backend.hpp), as
// tests/erwin/test_erwin_device_emulated.cpp does for Erwin, with the launchers only BSA uses from
// emulated_bsa_launchers.cpp (its gate kernels, the coarse and selected-block attention). Shared-library
// builds only (ELF symbol interposition).
//
// What this checks without a GPU: the orchestration of the device forward (weights arena, geometry,
// compression index arrays, the host block selection, strides, rotated layers, the long residual, the
// gate) against the CPU forward on the golden BSA models, within a float32 bound. What it does not check:
// nvcc's code, the real runtime, the hardware. Labels unit;cuda, CUDA builds with shared libraries.
#include "host_backend_hooks.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ball_golden_checks.hpp"
#include "bsa/cuda/device.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/model.hpp"

namespace {

namespace bt = surrogate::balltree;
namespace bsa = surrogate::bsa;
namespace st = surrogate::testing;
using ball_golden::bsa_trees_for;
using ball_golden::max_abs;
using ball_golden::max_error;
using host_backend::launches;

class BsaDeviceEmulated : public ::testing::TestWithParam<const char*> {};

// The device forward on the golden models against the CPU forward (same trees) and the official float64
// output. Bound: the CPU forward meets 2e-6 max|y| from float64 (tests/bsa/test_bsa.cpp); the device
// path repeats the CPU's dense layers, copies, block means and selection arithmetic, and differs by the
// RMSNorm's summation order (warp butterfly), the device's expf in the gate's sigmoid and the
// attention kernels' scaling order, all float32 rounding of the same operations: 4e-6 max|y| from float64 and 8e-6 max|y|
// from the CPU (Erwin's bound, tests/erwin/test_gpu_erwin.cpp). The golden sizes are those where the CPU
// matches the official selection (no near tie). A second call with reused geometry gives the same bits.
TEST_P(BsaDeviceEmulated, MatchesTheCpuForward) {
  const std::string p = st::data_dir() + "/bsa/bsa_" + GetParam() + ".h5";
  const surrogate::ModelFile file = surrogate::ModelFile::read(p);
  const std::vector<float> features = st::to_float(st::read_array(p, "/golden/features").values);
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const std::vector<double> exact = st::read_array(p, "/golden/output_f64").values;
  std::vector<std::int64_t> offsets{0};
  for (const double s : st::read_array(p, "/golden/sample_sizes").values)
    offsets.push_back(offsets.back() + static_cast<std::int64_t>(s));
  const bt::Batch batch = bt::Batch::from_offsets(offsets);
  const bsa::Network net(file);
  const bt::RotatedTrees trees = bsa_trees_for(net.config(), positions, batch);
  const std::vector<float> cpu = net.forward(trees, features, positions, batch, 1);
  const auto device = bsa::detail::make_bsa_cuda_forward(net, host_backend::kDevice);
  const int before = launches;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> emulated = device->forward(trees, features, positions, batch, 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(launches, before);  // the host launchers ran (the library's were replaced)
  const double tol = 4e-6 * max_abs(exact);
  std::printf("%s: max|y| %.3g, |emulated - f64| %.3g, |emulated - cpu| %.3g, |cpu - f64| %.3g (%d launches, %.2f s)\n",
              GetParam(), max_abs(exact), max_error(emulated, exact), max_error(emulated, cpu), max_error(cpu, exact),
              launches - before, seconds);
  EXPECT_LE(max_error(emulated, exact), tol);
  EXPECT_LE(max_error(emulated, cpu), 2 * tol);
  std::vector<float> other = features;
  for (float& v : other) v = 0.5f * v + 0.25f;
  const auto geometry = device->upload_geometry(trees, positions, batch);
  EXPECT_EQ(device->forward(*geometry, features, 1), emulated);
  const std::vector<float> reused = device->forward(*geometry, other, 1);
  EXPECT_EQ(reused, device->forward(trees, other, positions, batch, 2));
  EXPECT_LE(max_error(reused, net.forward(trees, other, positions, batch, 1)), 2 * tol + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Bsa, BsaDeviceEmulated,
                         ::testing::Values("sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball",
                                           "global"));

// The registered model (Model::predict) with RunOptions::cuda_device = 0 against cuda_device = -1 (the
// plan on one rank), rows in the solver's order, then a second call on the same plan (its trees and device
// geometry kept: the same bits), and the refusal of tf32.
TEST(BsaDeviceEmulatedModel, PredictWithCudaDeviceMatchesTheCpu) {
  const std::string p = st::data_dir() + "/bsa/bsa_sparse_rot.h5";
  const auto model = surrogate::make_model(surrogate::ModelFile::read(p));
  const std::vector<float> features = st::to_float(st::read_array(p, "/golden/features").values);
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const std::vector<double> exact = st::read_array(p, "/golden/output_f64").values;
  std::vector<std::int64_t> batch_idx;
  std::int64_t b = 0;
  for (const double s : st::read_array(p, "/golden/sample_sizes").values) {
    batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(s), b);
    ++b;
  }
  const surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(batch_idx.size());
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, batch_idx.data());
  surrogate::PointGeometry g;
  g.positions = positions.data();
  g.ld_positions = 3;
  const int cin = model->in_channels(), cout = model->out_channels();
  std::vector<float> cpu(static_cast<std::size_t>(n * cout)), emulated(cpu.size()), again(cpu.size());
  model->predict(comm, layout, g, features.data(), cin, cpu.data(), cout);
  surrogate::RunOptions options;
  options.cuda_device = host_backend::kDevice;
  const int before = launches;
  const auto plan = model->plan(comm, layout, g);
  model->predict(comm, *plan, features.data(), cin, emulated.data(), cout, options);
  EXPECT_GT(launches, before);
  model->predict(comm, *plan, features.data(), cin, again.data(), cout, options);
  const double tol = 4e-6 * max_abs(exact);
  std::printf("sparse_rot (model): |emulated - f64| %.3g, |emulated - cpu| %.3g, tolerance %.3g\n",
              max_error(emulated, exact), max_error(emulated, cpu), tol);
  EXPECT_LE(max_error(emulated, exact), tol);
  EXPECT_LE(max_error(emulated, cpu), 2 * tol);
  EXPECT_EQ(emulated, again);
  options.precision = surrogate::Precision::tf32;
  try {
    model->predict(comm, layout, g, features.data(), cin, emulated.data(), cout, options);
    ADD_FAILURE() << "tf32 was accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
  }
}

TEST(BsaDeviceEmulatedErrors, WrongSizesAreInputErrors) {
  const std::string p = st::data_dir() + "/bsa/bsa_ball.h5";
  const bsa::Network net(surrogate::ModelFile::read(p));
  const auto device = bsa::detail::make_bsa_cuda_forward(net, host_backend::kDevice);
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const auto points = static_cast<std::int64_t>(positions.size()) / net.config().dimensionality;
  const std::vector<std::int64_t> offsets{0, points};
  const bt::Batch batch = bt::Batch::from_offsets(offsets);
  const bt::RotatedTrees trees = bsa_trees_for(net.config(), positions, batch);
  const std::vector<float> short_features(static_cast<std::size_t>(net.config().c_in));
  try {
    device->forward(trees, short_features, positions, batch, 1);
    ADD_FAILURE() << "no error for too few features";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("features"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bsa::detail::make_bsa_cuda_forward(net, 1), surrogate::Error);  // one emulated device
}

}  // namespace
