// The host backend's test hooks (kernels/cuda/host/emulator.hpp) for the device tests' cases that only the
// emulated device can run (SURROGATE_HOST_BACKEND_ONLY): error paths through injected launch failures, the
// launches and the bytes staged between host and device. Test binaries built with HOOKS can include it.
#pragma once

#include <cstdio>
#include <string>

#include "gpu_test.hpp"  // makes the emulated device current when it is the device under test
#include "host/emulator.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace host_backend {

namespace emu = surrogate::kernels::cuda::emulator;
inline constexpr int kDevice = surrogate::kernels::cuda::kEmulatedDevice;

/// Waits for the emulated device's queued work (its streams run only when synchronised).
inline void synchronize() { surrogate::kernels::cuda::device_synchronize(kDevice); }

/// Kernels launched so far on the emulated device.
struct Launches {
  operator int() const { return static_cast<int>(emu::counters().launches); }
};
inline const Launches launches;

/// Launches checked under a kernel name containing `part` (e.g. "sht ", "wide_").
struct NamedLaunches {
  const char* part;
  operator int() const { return static_cast<int>(emu::launches_named(part)); }
};
inline const NamedLaunches sht_launches{"sht "};
inline const NamedLaunches wide_attention_launches{"wide_"};

/// `fail_after = n`: the n-th launch from now fails as a CUDA launch failure; reads what is left.
struct FailAfter {
  FailAfter& operator=(int n) {
    emu::fail_launch_after(n);
    return *this;
  }
  operator int() const { return emu::launches_until_failure(); }
};
inline FailAfter fail_after;

/// Bytes copied host to device and device to host so far.
struct BytesToDevice {
  operator long long() const { return emu::counters().bytes_to_device; }
};
struct BytesToHost {
  operator long long() const { return emu::counters().bytes_to_host; }
};
inline const BytesToDevice bytes_to_device;
inline const BytesToHost bytes_to_host;

/// CUDA graphs captured and launched so far on the emulated device (their kernels are not `launches`).
struct GraphCaptures {
  operator long long() const { return emu::counters().graph_captures; }
};
struct GraphLaunches {
  operator long long() const { return emu::counters().graph_launches; }
};
inline const GraphCaptures graph_captures;
inline const GraphLaunches graph_launches;

/// Kernels launched one by one, graphs captured and graphs launched so far.
struct Counts {
  long long launches = 0, captures = 0, graphs = 0;
};
inline Counts counts() {
  const emu::Counters c = emu::counters();
  return {c.launches, c.graph_captures, c.graph_launches};
}

/// One graph per kept plan (device/compute_graph.hpp): `predict()`, a call on one kept plan returning its
/// result, runs directly the first time, is captured as one graph the second time and replayed from the
/// third, always with the first call's bits; apart from the graph it launches `outside` kernels per call
/// (its load and store).
template <class Predict>
void expect_one_graph_per_plan(Predict&& predict, const std::string& what, long long outside = 0) {
  Counts c0 = counts();
  const auto direct = predict();
  Counts c1 = counts();
  EXPECT_GT(c1.launches, c0.launches + outside) << what << ": the first forward runs directly";
  EXPECT_EQ(c1.graphs, c0.graphs) << what;
  std::printf("%s: %lld kernel launches per forward, then one graph launch\n", what.c_str(),
              c1.launches - c0.launches - outside);
  for (int repeat = 0; repeat < 2; ++repeat) {
    EXPECT_EQ(predict(), direct) << what << ", repeat " << repeat;
    const Counts c2 = counts();
    EXPECT_EQ(c2.launches, c1.launches + outside) << what << ": a kernel was launched outside the graph";
    EXPECT_EQ(c2.captures, c1.captures + (repeat == 0 ? 1 : 0)) << what << ", repeat " << repeat;
    EXPECT_EQ(c2.graphs, c1.graphs + 1) << what << ", repeat " << repeat;
    c1 = c2;
  }
}

/// Times the host waited for the emulated device so far (synchronisations, copies into pageable memory).
struct HostWaits {
  operator long long() const { return emu::counters().host_waits; }
};
inline const HostWaits host_waits;

}  // namespace host_backend
