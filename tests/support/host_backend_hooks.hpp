// The host backend's test hooks (kernels/cuda/host/emulator.hpp) for the device tests' cases that only the
// emulated device can run (SURROGATE_HOST_BACKEND_ONLY): error paths through injected launch failures, the
// launches and the bytes staged between host and device. Test binaries built with HOOKS can include it.
#pragma once

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

/// Times the host waited for the emulated device so far (synchronisations, copies into pageable memory).
struct HostWaits {
  operator long long() const { return emu::counters().host_waits; }
};
inline const HostWaits host_waits;

}  // namespace host_backend
