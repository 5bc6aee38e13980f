// The host backend's emulator (kernels/cuda/host/, share/docs/cuda.md "The host backend"): CUDA's lane
// semantics, and the planted bugs it exists to catch. This file is compiled as the host backend's .cu
// copies are (host/emulation.hpp forced in), so its kernels are CUDA source run by the emulator.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "host/emulator.hpp"
#include "async_copy.cuh"
#include "launch.cuh"
#include "mma_softmax.cuh"
#include "surrogate/kernels/cuda.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace emu = surrogate::kernels::cuda::emulator;
using cu::host::launch;

constexpr int kDevice = cu::kEmulatedDevice;
constexpr int kThreads = 128;
// The emulated device is current on the main thread: the null stream is its.
const cu::DeviceGuard host_backend_current(kDevice);

template <class T>
std::vector<T> download(const cu::DeviceBuffer<T>& d) {
  std::vector<T> h(d.size());
  cu::device_synchronize(kDevice);
  cu::copy_blocking(h.data(), d.data(), d.bytes(), kDevice);
  return h;
}

/// Sets a schedule for the scope of the object, then restores the previous one.
struct WithSchedule {
  explicit WithSchedule(const char* s) : saved(emu::schedule()) { emu::set_schedule(emu::parse_schedule(s)); }
  ~WithSchedule() { emu::set_schedule(saved); }
  emu::ScheduleChoice saved;
};

// out[t] = the value thread t - 1 stored in shared memory. The racy version reads it without waiting for
// the block: right only when thread t - 1 happens to run first, as it always did when threads ran in order.
template <bool kBarrier>
__global__ void read_left_neighbour(float* out) {
  __shared__ float s[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  s[t] = static_cast<float>(blockIdx.x * 1000 + t);
  if constexpr (kBarrier) __syncthreads();
  out[blockIdx.x * kThreads + t] = t > 0 ? s[t - 1] : -1.0f;
}

template <bool kBarrier>
std::vector<float> run_neighbours(const char* schedule) {
  WithSchedule with(schedule);
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> out(3 * kThreads, kDevice);
  launch(read_left_neighbour<kBarrier>, 3, kThreads, 0, stream.get(), out.data());
  cu::host::check_launch("read_left_neighbour");
  stream.synchronize();
  return download(out);
}

std::vector<float> expected_neighbours() {
  std::vector<float> e(3 * kThreads);
  for (int b = 0; b < 3; ++b)
    for (int t = 0; t < kThreads; ++t) e[static_cast<std::size_t>(b * kThreads + t)] = t > 0 ? b * 1000.0f + t - 1 : -1.0f;
  return e;
}

TEST(CudaHostBackend, ARaceOnSharedMemoryFailsUnderAnotherSchedule) {
  const std::vector<float> expected = expected_neighbours();
  // In thread order (the old emulation's only order) the race is invisible ...
  EXPECT_EQ(run_neighbours<false>("forward"), expected);
  // ... in reverse order or shuffled, the reads come before the writes.
  EXPECT_NE(run_neighbours<false>("reverse"), expected);
  EXPECT_NE(run_neighbours<false>("shuffle:1"), expected);
  // With the barrier every schedule gives the right answer.
  for (const char* s : {"forward", "reverse", "shuffle:1", "shuffle:2"}) EXPECT_EQ(run_neighbours<true>(s), expected) << s;
}

__global__ void fill_value(float* out, int n, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

TEST(CudaHostBackend, WorkOnAStreamRunsOnlyWhenSynchronised) {
  const int n = 1000;
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> d(n, kDevice);
  cu::PinnedBuffer<float> h;
  h.resize(n);
  for (int i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = 1.0f;
  // A forward that forgets to synchronise before reading its output: it reads stale data.
  launch(fill_value, (n + kThreads - 1) / kThreads, kThreads, 0, stream.get(), d.data(), n, 7.0f);
  cu::host::check_launch("fill_value");
  cu::copy_to_host(h.data(), d.data(), n * sizeof(float), stream.get());
  EXPECT_EQ(h[0], 1.0f) << "the copy into pinned memory ran before the stream was synchronised";
  stream.synchronize();
  EXPECT_EQ(h[0], 7.0f);
  EXPECT_EQ(h[static_cast<std::size_t>(n - 1)], 7.0f);
}

TEST(CudaHostBackend, APageableSourceIsStagedAtTheCall) {
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> d(4, kDevice);
  std::vector<float> src{1, 2, 3, 4};
  cu::copy_to_device(d.data(), src.data(), 4 * sizeof(float), stream.get());
  src.assign(4, -1.0f);  // allowed by CUDA for pageable memory: the copy has read it
  std::vector<float> back(4);
  cu::copy_to_host(back.data(), d.data(), 4 * sizeof(float), stream.get());  // pageable: returns when done
  EXPECT_EQ(back, (std::vector<float>{1, 2, 3, 4}));
}

__global__ void add_one(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

// cuda::Graph on the emulated device: a capture records the stream's work without running it (nor
// counting its kernels as launches); each launch replays it in order with the captured arguments; a wait
// or an allocation inside a capture fails it as CUDA does, and an exception of the work ends it; the
// stream works after.
TEST(CudaHostBackend, AGraphReplaysTheCapturedWork) {
  const int n = 300;
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> x(n, kDevice), y(n, kDevice);
  cu::zero(x.data(), x.bytes(), stream.get());
  stream.synchronize();
  const emu::Counters before = emu::counters();
  cu::Graph graph;
  EXPECT_TRUE(graph.empty());
  graph.capture(kDevice, stream.get(), [&] {
    launch(add_one, (n + kThreads - 1) / kThreads, kThreads, 0, stream.get(), x.data(), n);
    cu::host::check_launch("add_one");
    cu::copy_on_device(y.data(), x.data(), x.bytes(), stream.get());
  });
  ASSERT_FALSE(graph.empty());
  EXPECT_EQ(download(x), std::vector<float>(n, 0.0f)) << "the captured kernel ran";
  EXPECT_EQ(emu::counters().launches, before.launches);
  EXPECT_EQ(emu::counters().graph_captures, before.graph_captures + 1);
  graph.launch(stream.get());
  graph.launch(stream.get());
  stream.synchronize();
  EXPECT_EQ(download(x), std::vector<float>(n, 2.0f));
  EXPECT_EQ(download(y), std::vector<float>(n, 2.0f)) << "the copy ran after the second kernel";
  EXPECT_EQ(emu::counters().graph_launches, before.graph_launches + 2);
  EXPECT_EQ(emu::counters().launches, before.launches);

  // A wait inside the capture: refused, no graph held; so is a copy into pageable memory.
  EXPECT_THROW(graph.capture(kDevice, stream.get(), [&] { stream.synchronize(); }), cu::CudaError);
  EXPECT_TRUE(graph.empty());
  std::vector<float> pageable(n);
  EXPECT_THROW(graph.capture(kDevice, stream.get(),
                             [&] { cu::copy_to_host(pageable.data(), x.data(), x.bytes(), stream.get()); }),
               cu::CudaError);
  // A copy from pageable memory (its values would be the capture's): refused.
  EXPECT_THROW(graph.capture(kDevice, stream.get(),
                             [&] { cu::copy_to_device(x.data(), pageable.data(), x.bytes(), stream.get()); }),
               cu::CudaError);
  // Work for the default stream while a stream captures: refused (unordered with the capture).
  EXPECT_THROW(graph.capture(kDevice, stream.get(), [&] { cu::zero(x.data(), x.bytes(), nullptr); }), cu::CudaError);
  // An allocation (a buffer that grows inside the compute): refused on the capturing thread, as by CUDA.
  EXPECT_THROW(graph.capture(kDevice, stream.get(), [&] { cu::DeviceBuffer<float> grown(n, kDevice); }), cu::CudaError);
  EXPECT_TRUE(graph.empty());
  EXPECT_THROW(graph.capture(kDevice, stream.get(), [] { throw std::runtime_error("the work failed"); }),
               std::runtime_error);
  EXPECT_THROW(graph.launch(stream.get()), std::logic_error);
  // The stream is not capturing any more: its work runs when synchronised.
  launch(add_one, (n + kThreads - 1) / kThreads, kThreads, 0, stream.get(), x.data(), n);
  cu::host::check_launch("add_one");
  stream.synchronize();
  EXPECT_EQ(download(x), std::vector<float>(n, 3.0f));
  EXPECT_THROW(graph.capture(kDevice, nullptr, [] {}), cu::CudaError) << "the null stream cannot capture";
}

TEST(CudaHostBackend, FreshDeviceMemoryIsPoisoned) {
  cu::DeviceBuffer<float> d(8, kDevice);
  for (float v : download(d)) EXPECT_TRUE(std::isnan(v));
}

// CUDA's copies are not memmove: overlapping ranges are undefined there, and refused here.
TEST(CudaHostBackend, OverlappingCopiesAreRefused) {
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> d(16, kDevice);
  const auto expect_refused = [](auto&& copy, const char* what) {
    try {
      copy();
      ADD_FAILURE() << what << ": copied";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("overlap"), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_refused([&] { cu::copy_on_device(d.data() + 4, d.data(), 8 * sizeof(float), stream.get()); }, "shifted up");
  expect_refused([&] { cu::copy_on_device(d.data(), d.data() + 1, 8 * sizeof(float), stream.get()); }, "shifted down");
  expect_refused([&] { cu::copy_on_device(d.data(), d.data(), 4 * sizeof(float), stream.get()); }, "onto itself");
  expect_refused([&] { cu::copy_blocking(d.data() + 2, d.data(), 4 * sizeof(float), kDevice); }, "blocking");
  // Adjacent halves do not overlap.
  std::vector<float> src(8);
  for (int i = 0; i < 8; ++i) src[static_cast<std::size_t>(i)] = static_cast<float>(i);
  cu::copy_to_device(d.data(), src.data(), 8 * sizeof(float), stream.get());
  cu::copy_on_device(d.data() + 8, d.data(), 8 * sizeof(float), stream.get());
  stream.synchronize();
  const std::vector<float> back = download(d);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(back[static_cast<std::size_t>(i)], static_cast<float>(i % 8)) << i;
}

// A butterfly sum, a rotation by shuffles and a ballot over the lanes of each warp.
__global__ void warp_ops(float* sums, int* rotated, unsigned* ballots) {
  const int t = static_cast<int>(threadIdx.x), lane = t % 32;
  float v = static_cast<float>(t);
  for (int offset = 16; offset >= 1; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  sums[t] = v;
  rotated[t] = __shfl_sync(0xffffffffu, t, lane + 1) + __shfl_down_sync(0xffffffffu, 0, 1);
  ballots[t] = __ballot_sync(0xffffffffu, lane % 3 == 0);
}

TEST(CudaHostBackend, WarpOperationsFollowCudaLaneSemantics) {
  for (const char* s : {"forward", "reverse", "shuffle:5"}) {
    WithSchedule with(s);
    cu::DeviceBuffer<float> sums(kThreads, kDevice);
    cu::DeviceBuffer<int> rotated(kThreads, kDevice);
    cu::DeviceBuffer<unsigned> ballots(kThreads, kDevice);
    launch(warp_ops, 1, kThreads, 0, nullptr, sums.data(), rotated.data(), ballots.data());
    cu::host::check_launch("warp_ops");
    const auto hs = download(sums);
    const auto hr = download(rotated);
    const auto hb = download(ballots);
    unsigned every_third = 0;
    for (int l = 0; l < 32; l += 3) every_third |= 1u << l;
    for (int t = 0; t < kThreads; ++t) {
      const int warp0 = t / 32 * 32;
      EXPECT_EQ(hs[static_cast<std::size_t>(t)], static_cast<float>(32 * warp0 + 496)) << s << " thread " << t;
      EXPECT_EQ(hr[static_cast<std::size_t>(t)], warp0 + (t % 32 + 1) % 32) << s << " thread " << t;
      EXPECT_EQ(hb[static_cast<std::size_t>(t)], every_third) << s;
    }
  }
}

__global__ void count_with_atomics(unsigned long long* total, unsigned* maximum) {
  __shared__ unsigned long long block_sum;
  if (threadIdx.x == 0) block_sum = 0;
  __syncthreads();
  atomicAdd(&block_sum, static_cast<unsigned long long>(threadIdx.x + 1));
  atomicMax(maximum, blockIdx.x * blockDim.x + threadIdx.x);
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(total, block_sum);
}

TEST(CudaHostBackend, BarriersAndAtomics) {
  WithSchedule with("shuffle:3");
  cu::DeviceBuffer<unsigned long long> total(1, kDevice);
  cu::DeviceBuffer<unsigned> maximum(1, kDevice);
  cu::zero(total.data(), total.bytes(), nullptr);
  cu::zero(maximum.data(), maximum.bytes(), nullptr);
  launch(count_with_atomics, 5, kThreads, 0, nullptr, total.data(), maximum.data());
  cu::host::check_launch("count_with_atomics");
  EXPECT_EQ(download(total)[0], 5ull * kThreads * (kThreads + 1) / 2);
  EXPECT_EQ(download(maximum)[0], 5u * kThreads - 1);
}

__global__ void write_one_past(float* out, int n) {
  if (threadIdx.x == 0) out[n] = 1.0f;
}

TEST(CudaHostBackend, AnOutOfBoundsWriteFailsTheLaunch) {
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> d(10, kDevice);
  launch(write_one_past, 1, 32, 0, stream.get(), d.data(), 10);
  cu::host::check_launch("write_one_past");
  try {
    stream.synchronize();
    FAIL() << "a write past the end of an allocation went unnoticed";
  } catch (const cu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("past the end of a device allocation of 40 bytes"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("write_one_past"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(stream.synchronize());  // the error was reported once; the stream works again
}

// Half the warp leaves before a full-mask shuffle: undefined on a GPU, a deadlock the emulator names.
__global__ void divergent_shuffle(float* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

TEST(CudaHostBackend, AShuffleWaitingForExitedLanesIsReported) {
  cu::Stream stream(kDevice);
  cu::DeviceBuffer<float> d(32, kDevice);
  launch(divergent_shuffle, 1, 32, 0, stream.get(), d.data());
  cu::host::check_launch("divergent_shuffle");
  try {
    stream.synchronize();
    FAIL() << "no error";
  } catch (const cu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
  }
}

TEST(CudaHostBackend, BadLaunchConfigurationsAreRefusedAtTheLaunch) {
  cu::DeviceBuffer<float> d(32, kDevice);
  launch(fill_value, 1, 2048, 0, nullptr, d.data(), 32, 1.0f);
  EXPECT_THROW(cu::host::check_launch("fill_value"), cu::CudaError);
  launch(fill_value, 0, 32, 0, nullptr, d.data(), 32, 1.0f);
  EXPECT_THROW(cu::host::check_launch("fill_value"), cu::CudaError);
  launch(fill_value, 1, 32, 300 * 1024, nullptr, d.data(), 32, 1.0f);
  EXPECT_THROW(cu::host::check_launch("fill_value"), cu::CudaError);
  launch(fill_value, 1, 32, 0, nullptr, d.data(), 32, 1.0f);
  EXPECT_NO_THROW(cu::host::check_launch("fill_value"));
}

// Above 48 KiB a kernel's dynamic shared memory needs its opt-in (cudaFuncSetAttribute), as on a GPU.
// allow_dynamic_shared only ever raises it: the attribute is shared by every host thread, so a smaller
// request in between must not fail another thread's larger launch.
__global__ void fill_value_wide(float* out, int n, float value) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) out[i] = value;
}

TEST(CudaHostBackend, SharedMemoryAbove48KiBNeedsTheKernelsOptIn) {
  cu::DeviceBuffer<float> d(32, kDevice);
  launch(fill_value_wide, 1, 32, 64 * 1024, nullptr, d.data(), 32, 1.0f);
  try {
    cu::host::check_launch("fill_value_wide");
    FAIL() << "a launch above 48 KiB without the opt-in was accepted";
  } catch (const cu::CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("MaxDynamicSharedMemorySize"), std::string::npos) << e.what();
  }
  cu::host::allow_dynamic_shared(fill_value_wide, 100 * 1024, "fill_value_wide");
  cu::host::allow_dynamic_shared(fill_value_wide, 64 * 1024, "fill_value_wide");  // leaves 100 KiB
  launch(fill_value_wide, 1, 32, 100 * 1024, nullptr, d.data(), 32, 2.0f);
  EXPECT_NO_THROW(cu::host::check_launch("fill_value_wide"));
  EXPECT_EQ(download(d)[31], 2.0f);
  launch(fill_value_wide, 1, 32, 120 * 1024, nullptr, d.data(), 32, 3.0f);
  EXPECT_THROW(cu::host::check_launch("fill_value_wide"), cu::CudaError);
  launch(fill_value, 1, 32, 64 * 1024, nullptr, d.data(), 32, 1.0f);  // the opt-in is per kernel
  EXPECT_THROW(cu::host::check_launch("fill_value"), cu::CudaError);
}

// cp.async (async_copy.cuh): lane l copies 16 bytes (row l of `src`) and then 4 bytes into shared memory,
// as two groups; the second 16-byte copy of odd lanes is invalid and lands as zeros. Under the forward
// schedule a copy lands at the wait that covers its group: before any wait the tile holds what was there,
// wait<1> lands the first group only, wait<0> all. Under the others it lands as issued. out: the lane's
// row seen at each of the three points, 3 x 5 floats a lane.
__global__ void async_copies(const float* src, float* out) {
  __align__(16) __shared__ float tile[32 * 8];
  const int l = static_cast<int>(threadIdx.x);
  float* row = tile + 8 * l;
  for (int c = 0; c < 8; ++c) row[c] = -1.0f;
  cu::host::async_copy::copy<16>(row, src + 4 * l, true);
  cu::host::async_copy::copy<16>(row + 4, src + 4 * l, l % 2 == 0);
  cu::host::async_copy::commit();
  cu::host::async_copy::copy<4>(row + 4, src + 128 + l, true);
  cu::host::async_copy::commit();
  auto seen = [&](int at) {
    for (int c = 0; c < 5; ++c) out[15 * l + 5 * at + c] = row[c];
  };
  seen(0);
  cu::host::async_copy::wait<1>();
  seen(1);
  cu::host::async_copy::wait<0>();
  seen(2);
}

TEST(CudaHostBackend, AsyncCopiesLandAtTheWaitThatCoversTheirGroup) {
  std::vector<float> h(160);
  for (int i = 0; i < 160; ++i) h[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  cu::DeviceBuffer<float> src(h.size(), kDevice), out(32 * 15, kDevice);
  cu::copy_blocking(src.data(), h.data(), h.size() * sizeof(float), kDevice);
  for (const char* schedule : {"forward", "reverse"}) {
    WithSchedule with(schedule);
    launch(async_copies, 1, 32, 0, nullptr, src.data(), out.data());
    cu::host::check_launch("async_copies");
    const auto o = download(out);
    const bool at_wait = std::string(schedule) == "forward";
    for (int l = 0; l < 32; ++l) {
      const float* at = o.data() + 15 * l;
      const float first = l % 2 == 0 ? static_cast<float>(4 * l + 1) : 0.0f, second = static_cast<float>(128 + l + 1);
      for (int c = 0; c < 4; ++c)
        EXPECT_EQ(at[c], at_wait ? -1.0f : static_cast<float>(4 * l + c + 1)) << schedule << " lane " << l << " col " << c;
      EXPECT_EQ(at[4], at_wait ? -1.0f : second) << schedule << " lane " << l;
      for (int c = 0; c < 4; ++c) EXPECT_EQ(at[5 + c], static_cast<float>(4 * l + c + 1)) << schedule << " lane " << l;
      EXPECT_EQ(at[9], at_wait ? first : second) << schedule << " lane " << l << ": after the first group";
      for (int c = 0; c < 4; ++c) EXPECT_EQ(at[10 + c], static_cast<float>(4 * l + c + 1)) << schedule << " lane " << l;
      EXPECT_EQ(at[14], second) << schedule << " lane " << l << ": the second group lands over the first";
    }
  }
}

// detail::stream_passes (mma_softmax.cuh), kStages deep: pass p's tile holds src[64 p ..] (zeros past n, by
// stage_columns_async), and every thread records what it reads of it at out[(p kThreads + t) 2], with the
// pass and slot it was handed at + 1.
template <int kStages>
__global__ void streamed_passes(const float* src, int n, float* out) {
  __shared__ float tile[kStages][64];
  const int t = static_cast<int>(threadIdx.x);
  cu::host::detail::stream_passes<kStages>(
      (n + 63) / 64,
      [&](int pass, int slot) {
        cu::host::detail::stage_columns_async<64, 1>(tile[slot], n - 64 * pass, 1, src,
                                                     [&](int j, int) { return src + 64 * pass + j; });
      },
      [&](int pass, int slot) {
        out[2 * (pass * kThreads + t)] = tile[slot][(t * 37) % 64];
        out[2 * (pass * kThreads + t) + 1] = static_cast<float>(pass * kStages + slot);
      });
}

TEST(CudaHostBackend, StreamedPassesHandEveryPassItsOwnTileAtEveryDepth) {
  constexpr int n = 6 * 64 + 29, passes = 7;  // the last pass partial: its tile's tail zeros
  std::vector<float> h(n);
  for (int i = 0; i < n; ++i) h[static_cast<std::size_t>(i)] = static_cast<float>(i + 1);
  cu::DeviceBuffer<float> src(h.size(), kDevice), out(2 * passes * kThreads, kDevice);
  cu::copy_blocking(src.data(), h.data(), h.size() * sizeof(float), kDevice);
  const auto check = [&](int stages, const char* schedule) {
    const auto o = download(out);
    for (int pass = 0; pass < passes; ++pass)
      for (int t = 0; t < kThreads; ++t) {
        const int i = 64 * pass + (t * 37) % 64;
        const auto at = static_cast<std::size_t>(2 * (pass * kThreads + t));
        ASSERT_EQ(o[at], i < n ? static_cast<float>(i + 1) : 0.0f)
            << stages << " stages, " << schedule << ", pass " << pass << ", thread " << t;
        ASSERT_EQ(o[at + 1], static_cast<float>(pass * stages + pass % stages)) << stages << " stages, pass " << pass;
      }
  };
  for (const char* schedule : {"forward", "reverse", "shuffle:7"}) {
    WithSchedule with(schedule);
    launch(streamed_passes<1>, 1, kThreads, 0, nullptr, src.data(), n, out.data());
    cu::host::check_launch("streamed_passes<1>");
    check(1, schedule);
    launch(streamed_passes<2>, 1, kThreads, 0, nullptr, src.data(), n, out.data());
    cu::host::check_launch("streamed_passes<2>");
    check(2, schedule);
    launch(streamed_passes<3>, 1, kThreads, 0, nullptr, src.data(), n, out.data());
    cu::host::check_launch("streamed_passes<3>");
    check(3, schedule);
  }
}

// y[i] = exp2_sfu(x[i]): the special-function unit's 2^x as the tensor-core softmax calls it.
__global__ void sfu_exp2(const float* x, float* y, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) y[i] = cu::host::detail::exp2_sfu(x[i]);
}

TEST(CudaHostBackend, SpecialFunctionExp2KeepsTheInstructionsContract) {
  // ex2.approx.ftz.f32: within 2 ulp of 2^x where the result is normal, subnormal results and inputs
  // flushed to zero, 2^-inf = +0 (what MmaSoftmax::weight relies on for masked columns).
  std::vector<float> x = {0.0f, -0.0f, 1e-40f, -1e-40f, -1.0f, -0.5f, -126.0f, -126.5f, -127.0f, -149.0f, -200.0f,
                          -std::numeric_limits<float>::infinity(), 3.0f, 127.5f};
  for (int i = 0; i < 4000; ++i) x.push_back(-125.0f * static_cast<float>(i) / 3999.0f - 0.3f * (i % 7) / 7.0f);
  const int n = static_cast<int>(x.size());
  cu::DeviceBuffer<float> dx(x.size(), kDevice), dy(x.size(), kDevice);
  cu::copy_blocking(dx.data(), x.data(), x.size() * sizeof(float), kDevice);
  launch(sfu_exp2, (n + kThreads - 1) / kThreads, kThreads, 0, nullptr, dx.data(), dy.data(), n);
  cu::host::check_launch("sfu_exp2");
  const auto y = download(dy);
  for (int i = 0; i < n; ++i) {
    const auto u = static_cast<std::size_t>(i);
    const double exact = std::exp2(static_cast<double>(std::fpclassify(x[u]) == FP_SUBNORMAL ? 0.0f : x[u]));
    if (exact < 0x1p-126) {
      EXPECT_EQ(y[u], 0.0f) << "2^" << x[u] << " is below the normal range: flushed";
      EXPECT_FALSE(std::signbit(y[u])) << "2^" << x[u];
      continue;
    }
    const double ulp = std::ldexp(1.0, std::ilogb(exact) - 23);
    EXPECT_LE(std::abs(static_cast<double>(y[u]) - exact), 2.0 * ulp) << "2^" << x[u];
  }
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[2], 1.0f) << "a subnormal input counts as 0";
}

TEST(CudaHostBackend, OccupancyCountsSharedMemoryAndThreads) {
  int blocks = 0;
  ASSERT_EQ(emu::occupancy(&blocks, 128, 73728), cudaSuccess);
  EXPECT_EQ(blocks, 3);  // 228 KiB over 72 + 1 KiB
  ASSERT_EQ(emu::occupancy(&blocks, 1024, 0), cudaSuccess);
  EXPECT_EQ(blocks, 2);  // 2,048 threads
  ASSERT_EQ(emu::occupancy(&blocks, 32, 0), cudaSuccess);
  EXPECT_EQ(blocks, 32);
  EXPECT_NE(emu::occupancy(&blocks, 2048, 0), cudaSuccess);
  (void)emu::get_last_error();
}

TEST(CudaHostBackend, SchedulesParse) {
  EXPECT_EQ(emu::parse_schedule("reverse").order, emu::Schedule::reverse);
  EXPECT_EQ(emu::parse_schedule("shuffle:42").seed, 42u);
  EXPECT_THROW(emu::parse_schedule("backwards"), std::invalid_argument);
  EXPECT_THROW(emu::parse_schedule("shuffle:x"), std::invalid_argument);
}

}  // namespace
