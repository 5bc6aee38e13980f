// Device selection in CUDA builds: "cpu", "cuda" (the node-local rank's GPU), "cuda:N", or
// "cuda-emulated" (the host backend: the CUDA kernels run on the CPU, share/docs/cuda.md).
#include <cuda_runtime_api.h>

#include <string>

#include "device_select.hpp"
#include "surrogate/kernels/cuda.hpp"

namespace surrogate::detail {

namespace {

/// The N of "cuda:N" (decimal digits only), or -1.
int parse_index(const std::string& digits) {
  if (digits.empty() || digits.size() > 6) return -1;
  int n = 0;
  for (char c : digits) {
    if (c < '0' || c > '9') return -1;
    n = n * 10 + (c - '0');
  }
  return n;
}

/// This rank's index among the ranks of `comm` on the same node (MPI_Comm_split_type SHARED).
/// Collective over comm.
int node_local_rank(const MpiComm& comm) {
  MPI_Comm local = MPI_COMM_NULL;
  if (MPI_Comm_split_type(comm.get(), MPI_COMM_TYPE_SHARED, comm.rank(), MPI_INFO_NULL, &local) != MPI_SUCCESS)
    throw Error(ErrorCode::communication, "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) failed while selecting the CUDA device");
  int rank = 0;
  MPI_Comm_rank(local, &rank);
  MPI_Comm_free(&local);
  return rank;
}

}  // namespace

int select_device(const std::string& device, const MpiComm& comm) {
  if (device == "cpu") return -1;
  if (device == "cuda-emulated") return kernels::cuda::kEmulatedDevice;
  int requested = -1;  // -1: "cuda", the node-local rank's device
  if (device.rfind("cuda:", 0) == 0) {
    requested = parse_index(device.substr(5));
    if (requested < 0)
      throw Error(ErrorCode::invalid_argument, "device '" + device + "': expected cuda:N with N a device index");
  } else if (device != "cuda") {
    throw Error(ErrorCode::invalid_argument, "unknown device '" + device + "' (expected cpu, cuda, cuda:N or cuda-emulated)");
  }
  // "cuda" asks the node first (a collective every rank reaches, whatever its own devices).
  const int local_rank = requested < 0 ? node_local_rank(comm) : 0;
  std::string why;
  const int count = kernels::cuda::device_count(&why);
  if (count == 0)
    throw Error(ErrorCode::unsupported, "device '" + device + "': no CUDA device is visible to this process (" + why +
                                            "); use device 'cpu'");
  if (requested >= count)
    throw Error(ErrorCode::unsupported, "device '" + device + "': only " + std::to_string(count) +
                                            " CUDA device(s) are visible (0.." + std::to_string(count - 1) + ")");
  return requested >= 0 ? requested : local_rank % count;
}

namespace {
void copy(void* dst, const void* src, std::size_t bytes, const void* device_side, const char* what) {
  if (bytes == 0) return;
  const int device = kernels::cuda::pointer_device(device_side);
  if (device < 0) throw Error(ErrorCode::invalid_argument, std::string(what) + ": not a CUDA device pointer");
  try {
    kernels::cuda::copy_blocking(dst, src, bytes, device);
  } catch (const kernels::cuda::CudaError& e) {
    throw Error(e.code() == cudaErrorMemoryAllocation ? ErrorCode::out_of_memory : ErrorCode::internal,
                "CUDA device " + kernels::cuda::device_label(device) + ": " + e.what());
  }
}
}  // namespace

bool is_device_pointer(const void* p) noexcept { return kernels::cuda::pointer_device(p) >= 0; }

void copy_device_to_host(void* host, const void* device, std::size_t bytes) {
  copy(host, device, bytes, device, "cudaMemcpy(device to host)");
}

void copy_host_to_device(void* device, const void* host, std::size_t bytes) {
  copy(device, host, bytes, device, "cudaMemcpy(host to device)");
}

}  // namespace surrogate::detail
