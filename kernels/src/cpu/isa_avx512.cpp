// Kernel table compiled for the avx512 instruction set (flags set in kernels/CMakeLists.txt).
#define SURROGATE_ISA_NS avx512
#define SURROGATE_ISA_ENUM Isa::avx512
#define SURROGATE_LINEAR_ROWS 6
#define SURROGATE_LINEAR_VECS 4
#include "isa_table.hpp"

namespace surrogate::kernels {
const CpuKernels& kernels_avx512() {
  static const CpuKernels table = avx512::make_table();
  return table;
}
}  // namespace surrogate::kernels
