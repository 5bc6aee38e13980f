// The Erwin device forward across 1-4 ranks on the device under test: golden models, random batches with
// ranks without slots and the ShapeNet-Car wrapper, bitwise the one-process device forward, within 4e-6
// max|y| of float64; errors agreed. ErwinDeviceMpiNoDevice (mpi.erwin_device_refusal.np*): without a device
// every rank reports the runtime's reason. share/docs/balltree.md, "Several ranks on devices".
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "ball_golden_checks.hpp"
#include "erwin/cuda/device.hpp"
#include "erwin_device_mpi_cases.hpp"
#include "gpu_mpi_test.hpp"
#include "host_backend_hooks.hpp"
#include "surrogate/error.hpp"

namespace {

using ball_golden::max_abs;
using ball_golden::max_error;

using namespace erwin_device_mpi;

/// Kernels launched on the emulated device so far (0 on a GPU).
int launches() { return st::on_host_backend() ? static_cast<int>(host_backend::launches) : 0; }

/// One process, the whole batch: the device forward on RotatedTrees (device_out) and the CPU forward.
struct OneProcess {
  std::vector<float> device_out, cpu_out;
};
OneProcess one_process(const Case& c, const std::vector<float>& features, int device) {
  const ew::Network net(c.file);
  const auto& cfg = net.config();
  const bt::Batch batch = bt::Batch::from_batch_idx(c.batch_idx);
  const std::vector<std::int64_t> edges = edges_of(c, net);
  const bt::RotatedTrees trees =
      bt::build_with_rotations(c.positions, cfg.dimensionality, batch, cfg.strides, cfg.ball_sizes, cfg.rotate);
  OneProcess r;
  r.device_out = ew::detail::make_erwin_cuda_forward(net, device)->forward(trees, features, c.positions, batch, edges);
  r.cpu_out = net.forward(trees, features, c.positions, batch, edges, 1);
  return r;
}

void expect_device_bitwise(const std::string& name, const Case& c) {
  const int device = st::local_device();
  const OneProcess ref = one_process(c, c.features, device);
  const double scale = c.exact.empty() ? ball_golden::max_abs(std::vector<double>(ref.cpu_out.begin(), ref.cpu_out.end()))
                                       : max_abs(c.exact);
  const double tol = 4e-6 * scale;
  for (const bool last_empty : {false, true}) {
    const std::string what = name + (last_empty ? " (last rank without points)" : " (one rank ~55 %)");
    const auto model = surrogate::make_model(c.file);
    Spread spread(*model, c, last_empty, 7u);
    const int before = launches();
    const std::vector<float> got = spread.predict(c.features, device);
    if (st::on_host_backend()) {
      EXPECT_GT(launches(), before) << what;  // the emulated device ran
    }
    EXPECT_EQ(first_difference(got, ref.device_out), got.size()) << what << ": not the one-process device result";
    EXPECT_LE(max_error(got, ref.cpu_out), 2 * tol) << what << ": CPU forward";
    if (!c.exact.empty()) {
      EXPECT_LE(max_error(got, c.exact), tol) << what << ": float64 reference";
    }
    // The plan and its device geometry kept: the same call again, then new features.
    EXPECT_EQ(first_difference(spread.predict(c.features, device), got), got.size()) << what << ", again";
    if (!c.features.empty()) {
      std::vector<float> other = c.features;
      for (float& v : other) v = 0.5f * v + 0.25f;
      const std::vector<float> again = spread.predict(other, device);
      EXPECT_EQ(first_difference(again, one_process(c, other, device).device_out), again.size()) << what << ", new features";
    }
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0)
      std::printf("%s: max|y| %.3g, |device - cpu| %.3g, |device - f64| %s\n", what.c_str(), scale,
                  max_error(got, ref.cpu_out), c.exact.empty() ? "(no float64 reference)"
                                                               : std::to_string(max_error(got, c.exact)).c_str());
  }
}

TEST(ErwinDeviceMpi, GoldenModelsBitwiseEqualToTheOneProcessDeviceForward) {
  SURROGATE_SKIP_WITHOUT_GPU();
  for (const char* name : {"mpnn_rot", "plain_rot_2d", "mpnn_norot", "flash_ref"}) expect_device_bitwise(name, golden(name));
}

TEST(ErwinDeviceMpi, FewPointsAndBuiltGraph) {
  SURROGATE_SKIP_WITHOUT_GPU();
  // One sample of 100 points, granularity 64 slots: two chunks, so ranks 2 and 3 hold no slot (levels of
  // zero nodes there); the kNN graph built by the rule from each rank's block and its halo.
  expect_device_bitwise("mpnn_norot, 100 random points, kNN 5", random_case("mpnn_norot", {100}, 5, 9u));
  // Four samples, rotated trees, kNN 6.
  expect_device_bitwise("mpnn_rot, 4 random samples, kNN 6", random_case("mpnn_rot", {150, 97, 40, 201}, 6, 5u));
}

TEST(ErwinDeviceMpi, ShapenetCarWrapper) {
  SURROGATE_SKIP_WITHOUT_GPU();
  // The wrapper (Fourier features and head on the device, kNN 8 graph by its rule): every rank count gives
  // the bits of the one-process registered model on the device, within the bound of the float64 output.
  Case c = golden("shapenet_car");
  const surrogate::SelfComm self;
  const auto model = surrogate::make_model(c.file);
  const surrogate::SampleLayout layout = surrogate::SampleLayout::build(self, c.n(), c.batch_idx.data());
  surrogate::PointGeometry g;
  g.positions = c.positions.data();
  g.ld_positions = 3;
  surrogate::RunOptions options;
  options.cuda_device = st::local_device();
  std::vector<float> one(static_cast<std::size_t>(c.n())), cpu(one.size());
  model->predict(self, layout, g, nullptr, 0, one.data(), 1, options);
  model->predict(self, layout, g, nullptr, 0, cpu.data(), 1);
  const double tol = 4e-6 * max_abs(c.exact);
  for (const bool last_empty : {false, true}) {
    const auto m = surrogate::make_model(c.file);
    const std::vector<float> got = distributed(*m, c, {}, last_empty, 3u, options.cuda_device);
    EXPECT_EQ(first_difference(got, one), got.size()) << "last rank empty " << last_empty;
    EXPECT_LE(max_error(got, c.exact), tol);
    EXPECT_LE(max_error(got, cpu), 2 * tol);
  }
}

// A NaN feature (held by one rank): the same Error(input) on every rank; the next call is right.
TEST(ErwinDeviceMpi, ANanFeatureOnOneRankIsAgreed) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c = golden("mpnn_rot");
  const auto model = surrogate::make_model(c.file);
  const int device = st::local_device();
  Spread spread(*model, c, false, 7u);
  const std::vector<float> good = spread.predict(c.features, device);
  std::vector<float> bad = c.features;
  bad[bad.size() / 3] = std::numeric_limits<float>::quiet_NaN();
  try {
    spread.predict(bad, device);
    ADD_FAILURE() << "a NaN feature was accepted";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input) << e.what();
  }
  EXPECT_EQ(spread.predict(c.features, device), good) << "after the NaN";
}


TEST(ErwinDeviceMpiHostBackend, ALaunchFailureOnOneRankIsAgreedAndTheNextCallRecovers) {
  SURROGATE_HOST_BACKEND_ONLY();
  const Case c = golden("mpnn_rot");
  const auto model = surrogate::make_model(c.file);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  Spread spread(*model, c, false, 7u);
  const std::vector<float> good = spread.predict(c.features, host_backend::kDevice);
  // A second call on the kept plan and geometry: its launches on this rank, and the bytes it moves between
  // host and device (features and result included), per rank.
  const int before = launches();
  const long long to_device = host_backend::bytes_to_device, to_host = host_backend::bytes_to_host;
  EXPECT_EQ(spread.predict(c.features, host_backend::kDevice), good);
  const int per_call = launches() - before;
  long long moved[2] = {host_backend::bytes_to_device - to_device, host_backend::bytes_to_host - to_host};
  std::vector<long long> all(static_cast<std::size_t>(2 * ranks));
  MPI_Gather(moved, 2, MPI_LONG_LONG, all.data(), 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
  if (rank == 0)
    for (int r = 0; r < ranks; ++r)
      std::printf("mpnn_rot, %d ranks, kept geometry: rank %d uploads %lld bytes, downloads %lld bytes per forward\n", ranks, r,
                  all[static_cast<std::size_t>(2 * r)], all[static_cast<std::size_t>(2 * r + 1)]);
  // A launch failing half-way through the forward on the last rank only: every rank throws the same
  // Error (no rank left waiting in an exchange), and the next call on the plan uploads its geometry again
  // and is right.
  if (rank == ranks - 1) host_backend::fail_after = std::max(1, per_call / 2);
  try {
    spread.predict(c.features, host_backend::kDevice);
    ADD_FAILURE() << "a failed launch on rank " << ranks - 1 << " went unnoticed";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
    EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
  }
  EXPECT_EQ(host_backend::fail_after, 0);
  host_backend::fail_after = 0;
  EXPECT_EQ(spread.predict(c.features, host_backend::kDevice), good) << "after the failure";
}

// predict_device on a kept plan keeps the rows on the device: the caller's arrays reach the block and come
// back through the plan's exchanges on device rows. In one process it waits for the device twice (the
// agreed counts of non-finite inputs, and the end) and downloads only those counts; across ranks the
// staged transport adds its copies (NCCL would not), printed per rank. So with the ShapeNet-Car wrapper
// (no input rows; its Fourier features and head on the device). A launch failure in that path is agreed
// and the next call recovers.
TEST(ErwinDeviceMpiHostBackend, DeviceArraysStayOnTheDeviceOnAKeptPlan) {
  SURROGATE_HOST_BACKEND_ONLY();
  for (const char* name : {"mpnn_rot", "flash_ref", "shapenet_car"}) {
    SCOPED_TRACE(name);
    const Case c = golden(name);
    const auto model = surrogate::make_model(c.file);
    Spread spread(*model, c, false, 7u);
    const std::vector<float> reference = spread.predict(c.features, host_backend::kDevice);  // plan kept
    const int cin = model->in_channels(), cout = model->out_channels();
    const std::vector<float> in = spread.local_rows(c.features, cin);
    const std::int64_t local = spread.plan().layout().local_points();
    auto d_in = st::to_device(in, host_backend::kDevice);
    auto d_out = st::to_device(std::vector<float>(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cout))),
                               host_backend::kDevice);
    surrogate::Model::DeviceArrays arrays;
    arrays.in = d_in.data();
    arrays.out = d_out.data();
    arrays.in_point_stride = cin;
    arrays.out_point_stride = cout;
    surrogate::RunOptions options;
    options.cuda_device = host_backend::kDevice;
    const long long waits = host_backend::host_waits, down = host_backend::bytes_to_host;
    model->predict_device(spread.comm(), spread.plan(), arrays, options);
    long long moved[2] = {host_backend::host_waits - waits, host_backend::bytes_to_host - down};
    const int ranks = spread.comm().size();
    std::vector<long long> all(static_cast<std::size_t>(2 * ranks));
    MPI_Gather(moved, 2, MPI_LONG_LONG, all.data(), 2, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (spread.comm().rank() == 0)
      for (int r = 0; r < ranks; ++r)
        std::printf("%s, %d ranks, device arrays on a kept plan: rank %d waits %lld times, downloads %lld bytes\n", name,
                    ranks, r, all[static_cast<std::size_t>(2 * r)], all[static_cast<std::size_t>(2 * r + 1)]);
    if (ranks == 1) {
      EXPECT_EQ(moved[0], 2);
      EXPECT_LE(moved[1], static_cast<long long>(sizeof(unsigned long long)) * (cin + cout + 1));  // the counts
    }
    // The bits of the first call (whose predict_device matched predict's host arrays).
    const std::vector<float> expected = spread.local_rows(reference, cout);
    EXPECT_EQ(st::to_host(d_out.data(), d_out.size(), host_backend::kDevice), expected);
    // A launch failing inside the forward on the last rank is one Error on every rank, and the next call
    // (its geometry uploaded again) gives the same bits.
    if (spread.comm().rank() == ranks - 1) host_backend::fail_after = 5;
    try {
      model->predict_device(spread.comm(), spread.plan(), arrays, options);
      ADD_FAILURE() << "rank " << spread.comm().rank() << ": no error";
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), surrogate::ErrorCode::internal) << e.what();
      EXPECT_NE(std::string(e.what()).find("emulated launch failure"), std::string::npos) << e.what();
    }
    host_backend::fail_after = 0;
    model->predict_device(spread.comm(), spread.plan(), arrays, options);
    EXPECT_EQ(st::to_host(d_out.data(), d_out.size(), host_backend::kDevice), expected) << "after the failure";
  }
}

// One graph per kept plan: on one rank a kept plan's device forward runs directly once, is captured as one
// CUDA graph on the second predict and replayed from the third, with the direct forward's bits and the
// plan's traffic counted per call as before; another precision is another graph. Across ranks (messages
// between the steps) nothing is captured.
TEST(ErwinDeviceMpiHostBackend, AKeptPlansForwardIsOneGraphOnOneRank) {
  SURROGATE_HOST_BACKEND_ONLY();
  const Case c = golden("mpnn_rot");
  const auto model = surrogate::make_model(c.file);
  Spread spread(*model, c, false, 11u);
  const int cin = model->in_channels(), cout = model->out_channels();
  const std::vector<float> in = spread.local_rows(c.features, cin);
  const std::int64_t local = spread.plan().layout().local_points();
  const auto predict = [&](surrogate::Precision precision) {
    std::vector<float> out(static_cast<std::size_t>(std::max<std::int64_t>(1, local * cout)));
    surrogate::RunOptions options;
    options.cuda_device = host_backend::kDevice;
    options.precision = precision;
    model->predict(spread.comm(), spread.plan(), in.data(), cin, out.data(), cout, options);
    return out;
  };
  if (spread.comm().size() > 1) {
    const host_backend::Counts before = host_backend::counts();
    EXPECT_EQ(predict(surrogate::Precision::fp32), predict(surrogate::Precision::fp32));
    EXPECT_EQ(host_backend::counts().captures, before.captures);
    EXPECT_EQ(host_backend::counts().graphs, before.graphs);
    return;
  }
  for (const surrogate::Precision p : {surrogate::Precision::fp32, surrogate::Precision::bf16})
    host_backend::expect_one_graph_per_plan([&] { return predict(p); }, surrogate::precision_name(p));
  surrogate::Traffic t[3];
  for (auto& traffic : t) {  // a call after another precision's graph runs directly, then one is captured
    traffic = spread.plan().traffic();
    predict(surrogate::Precision::fp32);
  }
  const surrogate::Traffic& now = spread.plan().traffic();
  EXPECT_GT(t[1].moves, t[0].moves);
  EXPECT_EQ(t[1].moves - t[0].moves, t[2].moves - t[1].moves);
  EXPECT_EQ(t[1].moves - t[0].moves, now.moves - t[2].moves) << "the replay counts the captured moves";
  EXPECT_EQ(t[1].local - t[0].local, now.local - t[2].local);
}

// tf32 and bf16 (the dense layers on the tensor cores) across ranks: bitwise the one-process device forward
// in the same precision, with unequal and empty shares, and away from fp32 (the precision is applied).
TEST(ErwinDeviceMpi, TensorCorePrecisionsAreBitwiseTheOneProcessDeviceForward) {
  SURROGATE_SKIP_WITHOUT_GPU();
  const Case c = golden("mpnn_rot");
  const int device = st::local_device();
  const ew::Network net(c.file);
  const auto& cfg = net.config();
  const bt::Batch batch = bt::Batch::from_batch_idx(c.batch_idx);
  const bt::RotatedTrees trees =
      bt::build_with_rotations(c.positions, cfg.dimensionality, batch, cfg.strides, cfg.ball_sizes, cfg.rotate);
  const auto fp32 = one_process(c, c.features, device).device_out;
  for (const surrogate::Precision p : {surrogate::Precision::tf32, surrogate::Precision::bf16}) {
    const std::string what = surrogate::precision_name(p);
    const auto forward = ew::detail::make_erwin_cuda_forward(net, device);
    forward->set_precision(p);
    const auto ref = forward->forward(trees, c.features, c.positions, batch, edges_of(c, net));
    EXPECT_NE(first_difference(ref, fp32), ref.size()) << what << ": the same bits as fp32";
    for (const bool last_empty : {false, true}) {
      const auto model = surrogate::make_model(c.file);
      Spread spread(*model, c, last_empty, 7u);
      const std::vector<float> got = spread.predict(c.features, device, p);
      EXPECT_EQ(first_difference(got, ref), got.size()) << what << (last_empty ? ", last rank without points" : "");
    }
  }
}

// Registered separately (mpi.erwin_device_refusal.np*, labels mpi;cuda): without a visible device every
// rank reports the runtime's reason, agreed, instead of hanging; skipped where a device is visible (the
// test above covers that case).
TEST(ErwinDeviceMpiNoDevice, EveryRankNamesTheReason) {
  std::string why;
  if (st::cuda_device_visible(&why)) GTEST_SKIP() << "a CUDA device is visible: the tests above run on it";
  for (const char* name : {"mpnn_rot", "shapenet_car"}) {
    const Case c = golden(name);
    const auto model = surrogate::make_model(c.file);
    try {
      (void)distributed(*model, c, c.features, false, 5u, 0);
      ADD_FAILURE() << name << ": no device, but no error";
    } catch (const surrogate::Error& e) {
      EXPECT_EQ(e.code(), surrogate::ErrorCode::unsupported) << e.what();
      EXPECT_NE(std::string(e.what()).find("no CUDA device is visible"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
