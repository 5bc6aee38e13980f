// The BSA device forward (libsurrogate/src/bsa/bsa_cuda.cpp, the code compiled into the library) run on
// the CPU, as tests/gpu/test_erwin_device_emulated.cpp does for Erwin: this executable defines the
// CUDA-backend functions the forward calls (memory, streams, events, copies, the launchers of the point
// layers, of the three ball-tree attention kernels, of BSA's gate kernels, and the norm) with host
// versions, which take the place of libsurrogate_kernels.so's (ELF symbol interposition; shared-library
// builds only). The launchers run the unchanged device code of point_layers_kernels.cuh,
// ball_attention_kernels.cuh and bsa_gate_kernels.cuh, the threads of a block one after another (those
// kernels use neither shared memory nor __syncthreads); the norm (warp shuffles) is its arithmetic
// written out, as in the Erwin test.
//
// What this checks without a GPU: the orchestration of the device forward (weights arena, geometry,
// compression index arrays, the host block selection, strides, rotated layers, the long residual, the
// gate) against the CPU forward on the golden BSA models, within a float32 bound. What it does not check:
// nvcc's code, the real runtime, the hardware. Labels unit;cuda, CUDA builds with shared libraries.
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel sources below

#include "ball_attention_kernels.cuh"
#include "bsa_gate_kernels.cuh"
#include "point_layers_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "bsa/bsa_device.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/bsa.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/model.hpp"

// ---------------------------------------------------------------------------------------------------
// Host versions of the CUDA backend's functions (replacing the library's in this process).

namespace {

/// Runs kernel() for every thread of every block of grid (x, y), the threads of a block one after another.
template <class Kernel>
void run_sequentially(dim3 grid, unsigned block, Kernel kernel) {
  cuda_host_emulation::block_dim = dim3(block);
  for (unsigned y = 0; y < grid.y; ++y)
    for (unsigned b = 0; b < grid.x; ++b) {
      cuda_host_emulation::block_index = dim3(b, y);
      for (unsigned t = 0; t < block; ++t) {
        cuda_host_emulation::thread_index = dim3(t);
        kernel();
      }
    }
}
dim3 grid_for(surrogate::kernels::index_t threads, unsigned block, int y = 1) {
  return dim3(static_cast<unsigned>((threads + block - 1) / block), static_cast<unsigned>(y));
}

/// Calls run(std::integral_constant<int, kMaxE>) for E's head-width bucket, as ball_attention.cu does.
template <class Run>
void with_head_dim(int E, Run&& run) {
  switch (surrogate::kernels::cuda::detail::head_dim_bucket(E)) {
    case 4: run(std::integral_constant<int, 4>{}); break;
    case 8: run(std::integral_constant<int, 8>{}); break;
    case 16: run(std::integral_constant<int, 16>{}); break;
    case 32: run(std::integral_constant<int, 32>{}); break;
    default: run(std::integral_constant<int, 64>{}); break;
  }
}

int launches = 0;  // kernels "launched" in this process (the test checks the device path ran)

}  // namespace

namespace surrogate::kernels::cuda {

void check(cudaError_t code, const char* call) {
  if (code != cudaSuccess) throw CudaError(code, std::string(call) + ": emulated runtime error");
}
void check_launch(const char*) {}
int device_count(std::string*) noexcept { return 1; }
DeviceGuard::DeviceGuard(int device) : device_(device) {}
DeviceGuard::~DeviceGuard() = default;
void* device_alloc(std::size_t bytes, int) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw CudaError(cudaErrorMemoryAllocation, "emulated device_alloc");
  return p;
}
void device_free(void* p, int) noexcept { std::free(p); }
Stream::Stream(int device) : device_(device) {}
Stream::~Stream() = default;
void Stream::synchronize() const {}
Event::Event(int device) : device_(device) {}
Event::~Event() = default;
void Event::record(cudaStream_t) {}
float Event::elapsed_ms_since(const Event&) const { return 0.0f; }
void copy_to_device(void* dst, const void* src, std::size_t bytes, cudaStream_t) { std::memcpy(dst, src, bytes); }
void copy_to_host(void* dst, const void* src, std::size_t bytes, cudaStream_t) { std::memcpy(dst, src, bytes); }

namespace pk = point_kernels;
void dense(const DenseArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.rows * a.out, pk::kThreads), pk::kThreads, [&] { pk::dense_kernel(a); });
}
void copy_rows(const RowCopyArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.rows * a.width, pk::kThreads), pk::kThreads, [&] { pk::copy_rows_kernel(a); });
}
void row_binary(const RowBinaryArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.rows * a.width, pk::kThreads), pk::kThreads, [&] { pk::row_binary_kernel(a); });
}
void segment_mean(const SegmentMeanArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.receivers * a.width, pk::kThreads), pk::kThreads, [&] { pk::segment_mean_kernel(a); });
}

namespace gk = bsa_kernels;
void row_map(const RowMapArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.rows * a.width, gk::kThreads), gk::kThreads, [&] { gk::row_map_kernel(a); });
}
void gated_sum(const GatedSumArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(grid_for(a.rows * a.heads * a.E, gk::kThreads), gk::kThreads, [&] { gk::gated_sum_kernel(a); });
}

namespace bk = ball_kernels;
void ball_attention(const BallAttentionArgs& a, cudaStream_t) {
  ++launches;
  with_head_dim(a.E, [&](auto width) {
    constexpr int kE = decltype(width)::value;
    run_sequentially(grid_for(a.rows, bk::kThreads, a.heads), bk::kThreads, [&] {
      if (a.sigma) bk::ball_kernel<kE, true>(a);
      else bk::ball_kernel<kE, false>(a);
    });
  });
}
void coarse_attention(const CoarseAttentionArgs& a, cudaStream_t) {
  ++launches;
  with_head_dim(a.E, [&](auto width) {
    run_sequentially(grid_for(static_cast<index_t>(a.samples) * a.queries, bk::kThreads, a.heads), bk::kThreads,
                     [&] { bk::coarse_kernel<decltype(width)::value>(a); });
  });
}
void selected_block_attention(const SelectedBlockAttentionArgs& a, cudaStream_t) {
  ++launches;
  with_head_dim(a.E, [&](auto width) {
    run_sequentially(grid_for(static_cast<index_t>(a.samples) * a.n, bk::kThreads, a.heads), bk::kThreads,
                     [&] { bk::selected_block_kernel<decltype(width)::value>(a); });
  });
}

/// norm.cu's arithmetic per row (as in test_erwin_device_emulated.cpp): lane l sums channels l, l + 32,
/// ...; the warp butterfly (xor 16 .. 1); (x - mean) rstd weight [+ bias] per channel.
void norm(const NormArgs& a, cudaStream_t) {
  ++launches;
  auto warp_sum = [](float (&v)[32]) {
    for (int offset = 16; offset >= 1; offset /= 2) {
      float next[32];
      for (int l = 0; l < 32; ++l) next[l] = v[l] + v[l ^ offset];
      std::copy(next, next + 32, v);
    }
    return v[0];
  };
  const float inv_dim = 1.0f / static_cast<float>(a.dim);
  for (index_t r = 0; r < a.rows; ++r) {
    const float* x = a.x + r * a.ldx;
    float* y = a.y + r * a.ldy;
    float lanes[32] = {};
    float mean = 0.0f;
    if (!a.rms) {
      for (int c = 0; c < a.dim; ++c) lanes[c % 32] += x[c];
      mean = warp_sum(lanes) * inv_dim;
    }
    float squares[32] = {};
    for (int c = 0; c < a.dim; ++c) {
      const float d = x[c] - mean;
      squares[c % 32] = std::fma(d, d, squares[c % 32]);
    }
    const float rstd = 1.0f / std::sqrt(warp_sum(squares) * inv_dim + a.eps);
    for (int c = 0; c < a.dim; ++c) {
      const float scaled = (x[c] - mean) * rstd;
      y[c] = a.bias ? std::fma(scaled, a.weight[c], a.bias[c]) : scaled * a.weight[c];
    }
  }
}

}  // namespace surrogate::kernels::cuda

// ---------------------------------------------------------------------------------------------------

namespace {

namespace bt = surrogate::balltree;
namespace bsa = surrogate::bsa;
namespace st = surrogate::testing;

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (const double x : v) m = std::max(m, std::abs(x));
  return m;
}

template <class T>
double max_error(const std::vector<float>& got, const std::vector<T>& want) {
  EXPECT_EQ(got.size(), want.size());
  double m = 0.0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    m = std::max(m, std::abs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  return m;
}

/// The trees Network::forward builds (rotated with strides [1] when the model rotates).
bt::RotatedTrees trees_for(const bsa::Config& c, const std::vector<float>& positions, const bt::Batch& batch) {
  bt::RotatedTrees trees;
  if (c.should_rotate) {
    const std::vector<int> strides{1}, balls{c.ball_size, c.ball_size};
    trees = bt::build_with_rotations(positions, c.dimensionality, batch, strides, balls, c.rotation_angle);
  } else {
    trees.tree = bt::build(positions, c.dimensionality, batch);
  }
  return trees;
}

class BsaDeviceEmulated : public ::testing::TestWithParam<const char*> {};

// The device forward on the golden models against the CPU forward (same trees) and the official float64
// output. Bound: the CPU forward meets 2e-6 max|y| from float64 (tests/bsa/test_bsa.cpp); the device
// path repeats the CPU's dense layers, copies, block means and selection arithmetic, and differs by the
// RMSNorm's summation order (warp butterfly), the device's expf in the gate's sigmoid and the
// attention kernels' scaling order, all float32 rounding of the same operations: 4e-6 max|y| from float64 and 8e-6 max|y|
// from the CPU (Erwin's bound, tests/gpu/test_gpu_erwin.cpp). The golden sizes are those where the CPU
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
  const bt::RotatedTrees trees = trees_for(net.config(), positions, batch);
  const std::vector<float> cpu = net.forward(trees, features, positions, batch, 1);
  const auto device = bsa::detail::make_bsa_cuda_forward(net, 0);
  const int before = launches;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> emulated = device->forward(trees, features, positions, batch, false, 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GT(launches, before);  // the host versions above ran (the library's were replaced)
  const double tol = 4e-6 * max_abs(exact);
  std::printf("%s: max|y| %.3g, |emulated - f64| %.3g, |emulated - cpu| %.3g, |cpu - f64| %.3g (%d launches, %.2f s)\n",
              GetParam(), max_abs(exact), max_error(emulated, exact), max_error(emulated, cpu), max_error(cpu, exact),
              launches - before, seconds);
  EXPECT_LE(max_error(emulated, exact), tol);
  EXPECT_LE(max_error(emulated, cpu), 2 * tol);
  std::vector<float> other = features;
  for (float& v : other) v = 0.5f * v + 0.25f;
  const std::vector<float> reused = device->forward(trees, other, positions, batch, true, 1);
  EXPECT_EQ(reused, device->forward(trees, other, positions, batch, false, 2));
  EXPECT_LE(max_error(reused, net.forward(trees, other, positions, batch, 1)), 2 * tol + 1e-6);
}

INSTANTIATE_TEST_SUITE_P(Bsa, BsaDeviceEmulated,
                         ::testing::Values("sparse_rot", "means_static", "token_groups_2d", "per_token_nomask", "ball",
                                           "global"));

// The registered model (Model::predict) with RunOptions::cuda_device = 0 against cuda_device = -1 (the
// distributed plan on one rank), rows in the solver's order, then a second call on the kept trees and
// geometry (the same bits), and the refusal of tf32.
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
  options.cuda_device = 0;
  const int before = launches;
  model->predict(comm, layout, g, features.data(), cin, emulated.data(), cout, options);
  EXPECT_GT(launches, before);
  model->predict(comm, layout, g, features.data(), cin, again.data(), cout, options);
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
  const auto device = bsa::detail::make_bsa_cuda_forward(net, 0);
  const std::vector<float> positions = st::to_float(st::read_array(p, "/golden/positions").values);
  const auto points = static_cast<std::int64_t>(positions.size()) / net.config().dimensionality;
  const std::vector<std::int64_t> offsets{0, points};
  const bt::Batch batch = bt::Batch::from_offsets(offsets);
  const bt::RotatedTrees trees = trees_for(net.config(), positions, batch);
  const std::vector<float> short_features(static_cast<std::size_t>(net.config().c_in));
  try {
    device->forward(trees, short_features, positions, batch, false, 1);
    ADD_FAILURE() << "no error for too few features";
  } catch (const surrogate::Error& e) {
    EXPECT_EQ(e.code(), surrogate::ErrorCode::input);
    EXPECT_NE(std::string(e.what()).find("features"), std::string::npos) << e.what();
  }
  EXPECT_THROW(bsa::detail::make_bsa_cuda_forward(net, 1), surrogate::Error);  // one emulated device
}

}  // namespace
