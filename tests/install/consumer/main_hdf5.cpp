// Reads the model file with the installed HDF5 helpers (surrogate/hdf5.hpp), as a solver's own HDF5 code
// beside the library would: the public header, core's symbols and HDF5 from find_package(surrogate).
#include <cstdio>
#include <exception>

#include "surrogate/hdf5.hpp"

int main(int argc, char** argv) {
  namespace h5 = surrogate::h5;
  if (argc != 2) return 2;
  try {
    h5::check_regular_file(argv[1], "model file");
    const h5::QuietErrors quiet;
    const h5::Handle file = h5::file(
        h5::check(H5Fopen(argv[1], H5F_ACC_RDONLY, H5P_DEFAULT), surrogate::ErrorCode::io, "cannot open the model file"));
    std::printf("consumer_hdf5: /config %s\n", h5::link_exists(file, "config") ? "found" : "missing");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_hdf5: %s\n", e.what());
    return 1;
  }
  return 0;
}
