// Maps an Options::device string to the CUDA device a rank uses (-1: the CPU), and tells host from device
// pointers for the CUDA path of predict.
#pragma once

#include <cstddef>
#include <string>

#include "surrogate/mpi_comm.hpp"

namespace surrogate::detail {

/// "cpu" -> -1; "cuda" -> the node-local rank modulo the visible devices; "cuda:N" -> N; "cuda-emulated" ->
/// kernels::cuda::kEmulatedDevice (the host backend). Local (no
/// collective calls); throws Error(unsupported) for CUDA in builds without it or when no device is
/// visible, Error(invalid_argument) for malformed strings.
int select_device(const std::string& device, const MpiComm& comm);

/// Whether `p` points into CUDA device memory (cudaPointerGetAttributes reports cudaMemoryTypeDevice).
/// Host, pinned and managed memory, null, and every pointer in builds without CUDA: false. Never throws.
bool is_device_pointer(const void* p) noexcept;

/// Blocking copies between host memory and device memory (cudaMemcpy); throw Error(unsupported) in builds
/// without CUDA and Error naming the call otherwise.
void copy_device_to_host(void* host, const void* device, std::size_t bytes);
void copy_host_to_device(void* device, const void* host, std::size_t bytes);

}  // namespace surrogate::detail
