// check() and check_launch() as the host backend's launchers see them: the emulator's errors, with its
// message (what failed, in which kernel). share/docs/cuda.md, "The host backend".
#include <string>

#include "emulator.hpp"
#include "host_backend.hpp"

namespace surrogate::kernels::cuda::host {

void check(cudaError_t code, const char* call) {
  if (code == cudaSuccess) return;
  (void)emulator::get_last_error();
  throw CudaError(code, std::string(call) + " (emulated device): " + emulator::last_message());
}

void check_launch(const char* kernel) {
  emulator::name_last_launch(kernel);
  const cudaError_t code = emulator::get_last_error();
  if (code != cudaSuccess)
    throw CudaError(code, std::string("launch of ") + kernel + " (emulated device): " + emulator::last_message());
}

}  // namespace surrogate::kernels::cuda::host
