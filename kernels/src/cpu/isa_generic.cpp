// Kernel table compiled for the generic instruction set (flags set in kernels/CMakeLists.txt).
#define SURROGATE_ISA_NS generic
#define SURROGATE_ISA_ENUM Isa::generic
#define SURROGATE_LINEAR_ROWS 3
#define SURROGATE_LINEAR_VECS 4
#include "isa_table.hpp"

namespace surrogate::kernels {
const CpuKernels& kernels_generic() {
  static const CpuKernels table = generic::make_table();
  return table;
}
}  // namespace surrogate::kernels
