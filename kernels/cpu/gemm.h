// One row-major GEMM for the CPU kernels (matmul, convolution):
//   C[m x n] = op(A)[m x k] * op(B)[k x n] + beta * C,   op(X) = X or X^T,
// with leading dimensions lda/ldb/ldc in elements (C is not read when beta is 0).
//
// OpenBLAS's cblas_?gemm (pthread build held at one thread, PLATFORM.md) when strata is
// built with STRATA_WITH_OPENBLAS (the default), else Eigen's own GEMM (single-threaded;
// ~0.8x OpenBLAS, PLATFORM.md). Float products of the shapes where packing dominates
// (narrow outputs, short sums, small products) run strata's direct kernel instead
// (kernels/cpu/gemm_direct.h) on CPUs with AVX2 and FMA. All are safe to call from several
// threads at once: the kernels split products across strata's pool and replica threads
// themselves.
#pragma once

#include <cstdint>

namespace strata::cpu_kernels {

// Which kernel runs a float product. Chosen from the whole product's shape, once: a caller
// that splits C into blocks passes the choice to every block, so that a split product is
// computed by one kernel (bit for bit the unsplit one where the kernel's tiles allow,
// kernels/cpu/gemm_split.h) rather than by whichever kernel each block's shape picks.
enum class GemmKernel { Blas, Direct };
GemmKernel choose_gemm_kernel(int64_t m, int64_t n, int64_t k);

void gemm(GemmKernel kernel, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
          int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// The kernel choose_gemm_kernel picks for this shape.
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
          const double* b, int64_t ldb, double beta, double* c, int64_t ldc);

// Once at start-up (kernel registration): holds OpenBLAS at one thread. The first product
// through these functions does it too, for callers that never registered the kernels.
void gemm_init();

}  // namespace strata::cpu_kernels
