// The CUDA forward of FLARE (CUDA builds): hooks shared with the coupling layer and the GPU benchmark.
// Internal header; needs the CUDA toolkit's include directory (link CUDA::cudart).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

#include "flare_device.hpp"

namespace surrogate::detail {

/// A reduction of DEVICE buffers over the ranks of a communicator (NCCL; implemented in the coupling
/// layer). The CUDA forward uses it for the encode reduction instead of copying the partial sums through
/// host memory and the Comm.
class DeviceTransport {
 public:
  virtual ~DeviceTransport() = default;
  virtual std::string name() const = 0;
  /// Whether this transport connects exactly the ranks of `comm`, in its order (local check).
  virtual bool serves(const Comm& comm) const = 0;
  /// In-place allreduce of `count` values at `device_data`, enqueued on `stream`. Collective.
  virtual void allreduce(void* device_data, std::size_t count, DType type, ReduceOp op, cudaStream_t stream) = 0;
};

/// Creates the transport for `comm` (every rank passes its own CUDA device), or returns nullptr when it
/// cannot be used (then every rank must return nullptr: the decision is collective). Collective.
using DeviceTransportFactory = std::unique_ptr<DeviceTransport> (*)(const Comm& comm, int device);
/// Installed by the coupling layer in NCCL builds; nullptr (the default) keeps the host path.
void set_device_transport_factory(DeviceTransportFactory factory) noexcept;
DeviceTransportFactory device_transport_factory() noexcept;

/// CUDA-event timings of the last forward (milliseconds on the device's clock: upload of the inputs,
/// everything between, download of the outputs) and the transport used for the encode reduction.
struct FlareCudaTiming {
  float upload_ms = 0, compute_ms = 0, download_ms = 0, total_ms = 0;
  std::string transport;  // "none" (one rank), "MPI (host staging)" or the device transport's name
};
/// Throws Error(invalid_argument) when `forward` is not a CUDA forward.
FlareCudaTiming last_cuda_timing(const FlareDeviceForward& forward);

}  // namespace surrogate::detail
