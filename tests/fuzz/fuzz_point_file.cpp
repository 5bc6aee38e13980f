// libFuzzer harness for the point-file reader (share/docs/reliability.md, "Fuzzing"): each input is
// written as a file and read with read_point_file on a one-rank communicator. A surrogate::Error is the
// expected outcome for bad bytes; any other exception, a crash or a hang is a finding.
#include <mpi.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

#include "surrogate/error.hpp"
#include "surrogate/mpi_comm.hpp"
#include "surrogate/point_file.hpp"

namespace {
std::unique_ptr<surrogate::MpiComm> comm;
}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  MPI_Init(argc, argv);
  comm = std::make_unique<surrogate::MpiComm>(MPI_COMM_SELF);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string path = "/dev/shm/surrogate_fuzz_points_" + std::to_string(::getpid()) + ".h5";
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) return 0;
  std::fwrite(data, 1, size, file);
  std::fclose(file);
  try {
    const surrogate::PointSlab slab = surrogate::read_point_file(*comm, path);
  } catch (const surrogate::Error&) {
  }
  std::remove(path.c_str());  // no scratch file left in /dev/shm
  return 0;
}
