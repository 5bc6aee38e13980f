// Device selection in builds without the CUDA backend.
#include "device_select.hpp"

namespace surrogate::detail {

int select_device(const std::string& device, const MpiComm&) {
  if (device == "cpu") return -1;
  if (device == "cuda" || device.rfind("cuda:", 0) == 0 || device == "cuda-emulated")
    throw Error(ErrorCode::unsupported, "device '" + device + "': this build of surrogate has no CUDA backend");
  throw Error(ErrorCode::invalid_argument, "unknown device '" + device + "' (expected cpu, cuda, cuda:N or cuda-emulated)");
}

bool is_device_pointer(const void*) noexcept { return false; }

void copy_device_to_host(void*, const void*, std::size_t) {
  throw Error(ErrorCode::unsupported, "device memory given, but this build of surrogate has no CUDA backend");
}

void copy_host_to_device(void*, const void*, std::size_t) {
  throw Error(ErrorCode::unsupported, "device memory given, but this build of surrogate has no CUDA backend");
}

}  // namespace surrogate::detail
