// Kernel table compiled for the avx2 instruction set (flags set in kernels/CMakeLists.txt).
#define SURROGATE_ISA_NS avx2
#define SURROGATE_ISA_ENUM Isa::avx2
#define SURROGATE_LINEAR_ROWS 6
#define SURROGATE_LINEAR_VECS 2
#include "isa_table.hpp"

namespace surrogate::kernels {
const CpuKernels& kernels_avx2() {
  static const CpuKernels table = avx2::make_table();
  return table;
}
}  // namespace surrogate::kernels
