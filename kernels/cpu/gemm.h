// One row-major GEMM for the CPU kernels (matmul, convolution):
//   C[m x n] = op(A)[m x k] * op(B)[k x n] + beta * C,   op(X) = X or X^T,
// with leading dimensions lda/ldb/ldc in elements (C is not read when beta is 0).
//
// OpenBLAS's cblas_?gemm (pthread build held at one thread, PLATFORM.md) when strata is
// built with STRATA_WITH_OPENBLAS (the default), else Eigen's own GEMM (single-threaded;
// ~0.8x OpenBLAS, PLATFORM.md). Both are safe to call from several threads at once: the
// kernels split products across strata's pool and replica threads themselves.
#pragma once

#include <cstdint>

namespace strata::cpu_kernels {

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Once at start-up (kernel registration): holds OpenBLAS at one thread.
void gemm_init();

}  // namespace strata::cpu_kernels
