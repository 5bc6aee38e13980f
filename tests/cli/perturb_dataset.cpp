// Changes one value of a float64 dataset (the corrupted-reference test of `surrogate selftest`):
//   perturb_dataset FILE NAME INDEX DELTA     value INDEX (row-major) of /NAME += DELTA; the file is
//                                             rewritten with /NAME alone, stored as float64
#include <iostream>
#include <string>

#include "h5_io.hpp"

using namespace surrogate::testing;

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: perturb_dataset FILE NAME INDEX DELTA\n";
    return 2;
  }
  try {
    Array a = read_array(argv[1], argv[2]);
    const std::size_t index = std::stoul(argv[3]);
    if (index >= a.values.size()) {
      std::cerr << "perturb_dataset: /" << argv[2] << " has " << a.values.size() << " values\n";
      return 1;
    }
    a.values[index] += std::stod(argv[4]);
    write_file(argv[1], {{argv[2], a.shape, a.values, false, /*as_float64=*/true}});
    std::cout << "/" << argv[2] << "[" << index << "] is now " << a.values[index] << "\n";
  } catch (const std::exception& e) {
    std::cerr << "perturb_dataset: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
