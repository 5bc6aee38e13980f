// The Erwin device forward (libsurrogate/src/erwin/erwin_cuda.cpp, the code compiled into the library)
// run on the CPU: this executable defines the CUDA-backend functions it calls (kernels/cuda/runtime.cpp's
// memory, streams, events, copies, and the launchers of the point layers, the ball attention and the
// norm) with host versions, which take the place of the library's (ELF symbol interposition: the
// executable's definitions win over those of libsurrogate_kernels.so, so the CMake target exists only for
// shared-library builds). "Device" memory is host memory, copies are memcpy, and the launchers run the
// unchanged device code of point_layers_kernels.cuh and ball_attention_kernels.cuh block by block, the
// threads of a block one after another (those kernels use neither shared memory nor __syncthreads). The
// norm kernel (warp shuffles, not emulated) is replaced by its arithmetic written out here: per lane the
// strided sums, the butterfly over 32 lanes, then the lane's outputs.
//
// What this checks without a GPU: the orchestration of the device forward (geometry upload, index arrays,
// strides, chunking of the messages, pooling/unpooling layouts, rotated orders, the level sequence, the
// registered model's device path) against the CPU forward on the golden models, within the float32 bound
// of tests/gpu/test_gpu_erwin.cpp. What it does not check: nvcc's code, the real runtime, the hardware.
// Labels unit;cuda, CUDA builds with shared libraries.
#include "cuda_host_emulation.hpp"  // first: replaces the CUDA keywords for the kernel sources below

#include "ball_attention_kernels.cuh"
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

#include "erwin/erwin_device.hpp"
#include "golden.hpp"
#include "h5_io.hpp"
#include "surrogate/balltree.hpp"
#include "surrogate/comm.hpp"
#include "surrogate/erwin.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/model.hpp"

// ---------------------------------------------------------------------------------------------------
// Host versions of the CUDA backend's functions (replacing the library's in this process).

namespace {

/// Runs kernel() for every thread of every block, the threads of a block one after another.
template <class Kernel>
void run_sequentially(surrogate::kernels::index_t threads_total, unsigned block, Kernel kernel) {
  const auto blocks = static_cast<unsigned>((threads_total + block - 1) / block);
  cuda_host_emulation::block_dim = dim3(block);
  for (unsigned b = 0; b < blocks; ++b) {
    cuda_host_emulation::block_index = dim3(b);
    for (unsigned t = 0; t < block; ++t) {
      cuda_host_emulation::thread_index = dim3(t);
      kernel();
    }
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
  run_sequentially(a.rows * a.out, pk::kThreads, [&] { pk::dense_kernel(a); });
}
void copy_rows(const RowCopyArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(a.rows * a.width, pk::kThreads, [&] { pk::copy_rows_kernel(a); });
}
void row_binary(const RowBinaryArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(a.rows * a.width, pk::kThreads, [&] { pk::row_binary_kernel(a); });
}
void batch_norm(const BatchNormArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(a.rows * a.dim, pk::kThreads, [&] { pk::batch_norm_kernel(a); });
}
void segment_mean(const SegmentMeanArgs& a, cudaStream_t) {
  ++launches;
  run_sequentially(a.receivers * a.width, pk::kThreads, [&] { pk::segment_mean_kernel(a); });
}

void ball_attention(const BallAttentionArgs& a, cudaStream_t) {
  ++launches;
  namespace bk = ball_kernels;
  auto launch = [&](auto width) {
    constexpr int kE = decltype(width)::value;
    for (int h = 0; h < a.heads; ++h) {  // grid.y = heads
      cuda_host_emulation::block_dim = dim3(bk::kThreads);
      for (unsigned b = 0; b < static_cast<unsigned>((a.rows + bk::kThreads - 1) / bk::kThreads); ++b) {
        cuda_host_emulation::block_index = dim3(b, static_cast<unsigned>(h));
        for (unsigned t = 0; t < bk::kThreads; ++t) {
          cuda_host_emulation::thread_index = dim3(t);
          if (a.sigma) bk::ball_kernel<kE, true>(a);
          else bk::ball_kernel<kE, false>(a);
        }
      }
    }
  };
  switch (detail::head_dim_bucket(a.E)) {
    case 4: launch(std::integral_constant<int, 4>{}); break;
    case 8: launch(std::integral_constant<int, 8>{}); break;
    case 16: launch(std::integral_constant<int, 16>{}); break;
    case 32: launch(std::integral_constant<int, 32>{}); break;
    default: launch(std::integral_constant<int, 64>{}); break;
  }
}

/// norm.cu's arithmetic per row: lane l sums channels l, l + 32, ...; the warp butterfly (xor 16 .. 1);
/// (x - mean) rstd weight [+ bias] per channel (the multiply-add fused, as nvcc contracts it).
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
namespace ew = surrogate::erwin;
namespace st = surrogate::testing;

std::string path_of(const std::string& name) { return st::data_dir() + "/erwin/erwin_" + name + ".h5"; }

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
  const auto device = ew::detail::make_erwin_cuda_forward(net, 0);
  const int before = launches;
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<float> emulated = device->forward(trees, features, positions, batch, edges, false);
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
  const std::vector<float> reused = device->forward(trees, other, positions, batch, edges, true);
  EXPECT_EQ(reused, device->forward(trees, other, positions, batch, edges, false));
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
    const std::vector<float> whole = device->forward(trees, features, positions, batch, uneven, false);
    EXPECT_LE(max_error(whole, net.forward(trees, features, positions, batch, uneven, 1)), 2 * tol);
    for (const surrogate::index_t chunk : {7, 13})
      EXPECT_EQ(ew::detail::make_erwin_cuda_forward(net, 0, chunk)->forward(trees, features, positions, batch, uneven, false),
                whole)
          << "chunk " << chunk;
  }
}

INSTANTIATE_TEST_SUITE_P(Erwin, ErwinDeviceEmulated, ::testing::Values("mpnn_rot", "plain_rot_2d", "mpnn_norot", "flash_ref"));

// The registered model with RunOptions::cuda_device = 0 (ShapeNet-Car wrapper, kNN graph by the model's
// rule) against cuda_device = -1, and a second call on the kept trees and geometry.
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
  options.cuda_device = 0;
  const int before = launches;
  model->predict(comm, layout, g, nullptr, 0, emulated.data(), 1, options);
  EXPECT_GT(launches, before);
  model->predict(comm, layout, g, nullptr, 0, again.data(), 1, options);
  const double tol = 4e-6 * max_abs(exact);
  std::printf("shapenet_car: |emulated - f64| %.3g, |emulated - cpu| %.3g, tolerance %.3g\n", max_error(emulated, exact),
              max_error(emulated, cpu), tol);
  EXPECT_LE(max_error(emulated, exact), tol);
  EXPECT_LE(max_error(emulated, cpu), 2 * tol);
  EXPECT_EQ(emulated, again);
}

}  // namespace
