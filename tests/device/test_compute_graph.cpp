// device::ComputeGraph (libsurrogate/src/device/compute_graph.hpp) on the host backend: when a compute runs
// directly, is captured and is replayed; what changes its key; what a failed capture leaves; the traffic a
// replay counts. The compute here is one library kernel (a row copy) and a counter of its host code.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <vector>

#include "device/compute_graph.hpp"
#include "host/emulator.hpp"
#include "surrogate/kernels/cuda.hpp"
#include "surrogate/kernels/cuda_point_layers.hpp"

namespace {

namespace cu = surrogate::kernels::cuda;
namespace emu = surrogate::kernels::cuda::emulator;
using surrogate::device::ComputeGraph;

constexpr int kDevice = cu::kEmulatedDevice;
const cu::DeviceGuard host_backend_current(kDevice);

std::vector<float> download(const cu::DeviceBuffer<float>& d, std::size_t n) {
  std::vector<float> h(n);
  cu::device_synchronize(kDevice);
  cu::copy_blocking(h.data(), d.data(), n * sizeof(float), kDevice);
  return h;
}

/// A forward's compute: copies `rows` rows of src into dst (one launch; dst grown to fit on the way, as
/// a family's work buffers are) and counts how often its host code ran.
struct Copy {
  cu::Stream stream{kDevice};
  cu::DeviceBuffer<float> src{64, kDevice}, dst;
  std::int64_t rows = 4;
  int host_runs = 0;
  surrogate::Traffic* traffic = nullptr;  // counts one move per run, as an exchange plan would

  Copy() {
    std::vector<float> values(64);
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i);
    cu::copy_blocking(src.data(), values.data(), values.size() * sizeof(float), kDevice);
  }
  void operator()() {
    ++host_runs;
    dst.resize(static_cast<std::size_t>(rows) * 4, kDevice);
    cu::RowCopyArgs a;
    a.src = src.data();
    a.ld_src = 4;
    a.dst = dst.data();
    a.ld_dst = 4;
    a.rows = rows;
    a.width = 4;
    cu::copy_rows(a, stream.get());
    if (traffic) {
      surrogate::Traffic t;
      t.local = static_cast<std::uint64_t>(rows) * 16;
      t.moves = 1;
      *traffic += t;
    }
  }
  ComputeGraph::Key key() const { return ComputeGraph::key({static_cast<std::uintptr_t>(rows)}, {dst.data()}); }
  void run(ComputeGraph& graph) {
    graph.run(kDevice, stream.get(), [&] { return key(); }, [&] { (*this)(); }, traffic);
  }
};

struct Counts {
  long long launches, captures, graphs;
};
Counts counts() {
  const emu::Counters c = emu::counters();
  return {c.launches, c.graph_captures, c.graph_launches};
}

// The first run with a key is direct (and grows dst: the key is read again after it), the second captures,
// the third replays without running host code or launching a kernel; each gives the copy.
TEST(ComputeGraph, DirectThenCapturedThenReplayed) {
  Copy copy;
  ComputeGraph graph;
  const Counts c0 = counts();
  copy.run(graph);
  const Counts c1 = counts();
  EXPECT_EQ(c1.launches, c0.launches + 1);
  EXPECT_EQ(c1.captures, c0.captures);
  copy.run(graph);
  const Counts c2 = counts();
  EXPECT_EQ(c2.launches, c1.launches) << "a captured kernel is not launched by itself";
  EXPECT_EQ(c2.captures, c1.captures + 1) << "the key after the direct run's growth is met again";
  EXPECT_EQ(c2.graphs, c1.graphs + 1);
  EXPECT_EQ(copy.host_runs, 2);
  cu::zero(copy.dst.data(), copy.dst.bytes(), copy.stream.get());
  copy.run(graph);
  const Counts c3 = counts();
  EXPECT_EQ(c3.launches, c2.launches);
  EXPECT_EQ(c3.captures, c2.captures);
  EXPECT_EQ(c3.graphs, c2.graphs + 1);
  EXPECT_EQ(copy.host_runs, 2) << "a replay runs no host code";
  const std::vector<float> got = download(copy.dst, 16);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], static_cast<float>(i));
}

// Another key drops the graph and runs directly; back on the first key: directly, then captured again.
// Off: every run is direct.
TEST(ComputeGraph, AnotherKeyStartsOver) {
  Copy copy;
  ComputeGraph graph;
  copy.run(graph);
  copy.run(graph);  // captured
  copy.rows = 8;    // another size: dst grows
  const Counts c0 = counts();
  copy.run(graph);
  copy.run(graph);
  const Counts c1 = counts();
  EXPECT_EQ(c1.launches, c0.launches + 1) << "direct once, then captured";
  EXPECT_EQ(c1.captures, c0.captures + 1);
  EXPECT_EQ(download(copy.dst, 32)[31], 31.0f);
  graph.set_enabled(false);
  const int before = copy.host_runs;
  copy.run(graph);
  copy.run(graph);
  EXPECT_EQ(counts().launches, c1.launches + 2);
  EXPECT_EQ(counts().graphs, c1.graphs);
  EXPECT_EQ(copy.host_runs, before + 2);
}

// A compute that fails while captured leaves no graph and passes its error; the next run is direct and the
// one after captures. A wait inside the compute fails the capture the same way.
TEST(ComputeGraph, AFailedCaptureLeavesNoGraph) {
  Copy copy;
  ComputeGraph graph;
  copy.run(graph);
  bool fail = true;
  EXPECT_THROW(graph.run(
                   kDevice, copy.stream.get(), [&] { return copy.key(); },
                   [&] {
                     copy();
                     if (fail) throw std::runtime_error("the compute failed");
                   }),
               std::runtime_error);
  fail = false;
  const Counts c0 = counts();
  copy.run(graph);
  EXPECT_EQ(counts().launches, c0.launches + 1) << "runs directly after a failed capture";
  copy.run(graph);
  EXPECT_EQ(counts().captures, c0.captures + 1);
  EXPECT_EQ(counts().graphs, c0.graphs + 1);

  Copy waits;
  ComputeGraph other;
  const auto run_waiting = [&] {
    other.run(kDevice, waits.stream.get(), [&] { return waits.key(); }, [&] {
      waits();
      waits.stream.synchronize();
    });
  };
  run_waiting();  // direct: the wait is allowed
  EXPECT_THROW(run_waiting(), cu::CudaError) << "a wait inside a capture";
  EXPECT_NO_THROW(run_waiting()) << "direct again";
}

// A replay, which runs no host code, adds the traffic the captured compute counted: every run counts the
// same.
TEST(ComputeGraph, AReplayCountsTheCapturedTraffic) {
  Copy copy;
  surrogate::Traffic traffic;
  copy.traffic = &traffic;
  ComputeGraph graph;
  for (int run = 0; run < 4; ++run) {
    const surrogate::Traffic before = traffic;
    copy.run(graph);
    EXPECT_EQ(traffic.moves, before.moves + 1) << "run " << run;
    EXPECT_EQ(traffic.local, before.local + 64) << "run " << run;
  }
  EXPECT_EQ(copy.host_runs, 2);
}

}  // namespace
