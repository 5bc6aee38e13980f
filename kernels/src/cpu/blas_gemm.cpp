// BLAS wrapper (OpenBLAS through CBLAS).
#include <cblas.h>

#include "surrogate/kernels/cpu.hpp"

namespace surrogate::kernels {

void blas_gemm_abt(index_t m, index_t n, index_t k, float alpha, const float* a, index_t lda, const float* b,
                   index_t ldb, float beta, float* c, index_t ldc) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<blasint>(m), static_cast<blasint>(n),
              static_cast<blasint>(k), alpha, a, static_cast<blasint>(lda), b, static_cast<blasint>(ldb), beta, c,
              static_cast<blasint>(ldc));
}

}  // namespace surrogate::kernels
