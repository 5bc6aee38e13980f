// The Erwin device forward (libsurrogate/src/erwin/cuda/, the code compiled into the library)
// run on the CPU with the host-emulated CUDA backend of emulated_cuda_backend.cpp (compiled into this
// executable, where its definitions replace libsurrogate_kernels.so's: memory, streams, events, copies,
// the launchers of the point layers and the ball attention, which run the unchanged device code block by
// block, and norm.cu's arithmetic written out; see emulated_cuda_backend.hpp). Shared-library builds only.
//
// What this checks without a GPU: the orchestration of the device forward (geometry upload, index arrays,
// strides, chunking of the messages, pooling/unpooling layouts, rotated orders, the level sequence, the
// registered model's device path) against the CPU forward on the golden models, within the float32 bound
// of tests/erwin/test_gpu_erwin.cpp. What it does not check: nvcc's code, the real runtime, the hardware.
// Labels unit;cuda, CUDA builds with shared libraries.
#include "host_backend_hooks.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ball_golden_checks.hpp"
#include "erwin/cuda/device.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/model.hpp"

namespace {

namespace bt = surrogate::balltree;
namespace ew = surrogate::erwin;
namespace st = surrogate::testing;
using ball_golden::max_abs;
using ball_golden::max_error;
using host_backend::launches;

std::string path_of(const std::string& name) { return st::data_dir() + "/erwin/erwin_" + name + ".h5"; }

std::vector<std::int64_t> to_int(const std::vector<double>& v) {
  std::vector<std::int64_t> out;
  for (const double x : v) out.push_back(static_cast<std::int64_t>(x));
  return out;
}

class ErwinDeviceEmulated : public ::testing::TestWithParam<const char*> {};

// The device forward on the golden models against the CPU forward (same trees) and the float64 reference,
// with the bound of test_gpu_erwin.cpp (4e-6 max|y| from float64, twice that from the CPU); the reused
// geometry gives the bits of a fresh upload.
TEST_P(ErwinDeviceEmulated, MatchesTheCpuForward) {
  const std::string p = path_of(GetParam());
  const surrogate::ModelFile file = surrogate::ModelFile::read(p);
  const std::vector<float> features = st::to_float(st::read_array(p, "/golden/features").values);
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const std::vector<double> exact = st::read_array(p, "/golden/output_f64").values;
  const std::vector<std::int64_t> edges =
      st::has_dataset(p, "/golden/edge_index") ? to_int(st::read_array(p, "/golden/edge_index").values) : std::vector<std::int64_t>{};
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t s : to_int(st::read_array(p, "/golden/sample_sizes").values)) offsets.push_back(offsets.back() + s);
  const bt::Batch batch = bt::Batch::from_offsets(offsets);
  const ew::Network net(file);
  const auto& cfg = net.config();
  const bt::RotatedTrees trees =
      bt::build_with_rotations(positions, cfg.dimensionality, batch, cfg.strides, cfg.ball_sizes, cfg.rotate);
  const std::vector<float> cpu = net.forward(trees, features, positions, batch, edges, 1);
  const auto device = ew::detail::make_erwin_cuda_forward(net, host_backend::kDevice);
  const int before = launches;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> emulated = device->forward(trees, features, positions, batch, edges);
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
  const auto geometry = device->upload_geometry(trees, positions, batch, edges);
  EXPECT_EQ(device->forward(*geometry, features), emulated);
  const std::vector<float> reused = device->forward(*geometry, other);
  EXPECT_EQ(reused, device->forward(trees, other, positions, batch, edges));
  EXPECT_LE(max_error(reused, net.forward(trees, other, positions, batch, edges, 1)), 2 * tol + 1e-6);
  // Messages in chunks of at most 7 / 13 edges (receivers grouped, a receiver with more edges alone) on a
  // graph with uneven receiver degrees (every seventh edge dropped): the bits of one chunk, and the CPU's
  // result within the bound.
  if (!edges.empty()) {
    const std::size_t E = edges.size() / 2;
    std::vector<std::int64_t> src, dst;
    for (std::size_t e = 0; e < E; ++e)
      if (e % 7 != 3) {
        src.push_back(edges[e]);
        dst.push_back(edges[E + e]);
      }
    std::vector<std::int64_t> uneven = src;
    uneven.insert(uneven.end(), dst.begin(), dst.end());
    const std::vector<float> whole = device->forward(trees, features, positions, batch, uneven);
    EXPECT_LE(max_error(whole, net.forward(trees, features, positions, batch, uneven, 1)), 2 * tol);
    for (const surrogate::index_t chunk : {7, 13})
      EXPECT_EQ(ew::detail::make_erwin_cuda_forward(net, host_backend::kDevice, chunk)->forward(trees, features, positions, batch, uneven), whole)
          << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Erwin, ErwinDeviceEmulated, ::testing::Values("mpnn_rot", "plain_rot_2d", "mpnn_norot", "flash_ref"));

// The registered model with RunOptions::cuda_device = 0 (ShapeNet-Car wrapper, kNN graph by the model's
// rule) against cuda_device = -1, and a second call on the same plan (its device geometry kept).
TEST(ErwinDeviceEmulatedModel, PredictWithCudaDeviceMatchesTheCpu) {
  const std::string p = path_of("shapenet_car");
  const auto model = surrogate::make_model(surrogate::ModelFile::read(p));
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const std::vector<double> exact = st::read_array(p, "/golden/output_f64").values;
  std::vector<std::int64_t> batch_idx;
  std::int64_t b = 0;
  for (const std::int64_t s : to_int(st::read_array(p, "/golden/sample_sizes").values)) {
    batch_idx.insert(batch_idx.end(), static_cast<std::size_t>(s), b);
    ++b;
  }
  const surrogate::SelfComm comm;
  const auto n = static_cast<std::int64_t>(batch_idx.size());
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(comm, n, batch_idx.data());
  surrogate::PointGeometry g;
  g.positions = positions.data();
  g.ld_positions = 3;
  std::vector<float> cpu(static_cast<std::size_t>(n)), emulated(cpu.size()), again(cpu.size());
  model->predict(comm, layout, g, nullptr, 0, cpu.data(), 1);
  surrogate::RunOptions options;
  options.cuda_device = host_backend::kDevice;
  const int before = launches;
  const auto plan = model->plan(comm, layout, g);
  model->predict(comm, *plan, nullptr, 0, emulated.data(), 1, options);
  EXPECT_GT(launches, before);
  model->predict(comm, *plan, nullptr, 0, again.data(), 1, options);
  const double tol = 4e-6 * max_abs(exact);
  std::printf("shapenet_car: |emulated - f64| %.3g, |emulated - cpu| %.3g, tolerance %.3g\n", max_error(emulated, exact),
              max_error(emulated, cpu), tol);
  EXPECT_LE(max_error(emulated, exact), tol);
  EXPECT_LE(max_error(emulated, cpu), 2 * tol);
  EXPECT_EQ(emulated, again);
}

}  // namespace
