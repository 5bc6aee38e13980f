// libFuzzer harness for the model-file reader (share/docs/reliability.md, "Fuzzing"): each input is
// written as a file, read with ModelFile::read and, when it reads, built with make_model. A surrogate::Error
// is the expected outcome for bad bytes; any other exception, a crash, an HDF5 object left open or a hang
// is a finding.
#include <hdf5.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/model.hpp"
#include "surrogate/model_file.hpp"

namespace {
std::string scratch_path() {
  return "/dev/shm/surrogate_fuzz_model_" + std::to_string(::getpid()) + ".h5";
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = scratch_path();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    const surrogate::ModelFile model_file = surrogate::ModelFile::read(path);
    auto model = surrogate::make_model(model_file);
  } catch (const surrogate::Error&) {
  }
  std::remove(path.c_str());  // no scratch file left in /dev/shm
  // Every HDF5 object the reader opened must be closed again, on every path (a leaked handle keeps the
  // file open: the next read of the same path would see the old file).
  if (H5Fget_obj_count(static_cast<hid_t>(H5F_OBJ_ALL), H5F_OBJ_ALL) != 0) __builtin_trap();
  return 0;
}
