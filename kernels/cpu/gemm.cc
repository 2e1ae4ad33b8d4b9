// The CPU GEMM (kernels/cpu/gemm.h): OpenBLAS or, in builds without it, Eigen's own product.
#include <strata/kernels/cpu/gemm.h>

#include "strata_build_config.h"

#include <limits>

#include <strata/core/error.h>
#include <strata/kernels/cpu/gemm_direct.h>

#if STRATA_HAS_OPENBLAS
#include <cblas.h>
extern "C" void openblas_set_num_threads(int num_threads);
#else
#include <Eigen/Core>
#endif

namespace strata::cpu_kernels {

namespace {

#if STRATA_HAS_OPENBLAS

// The CBLAS interface takes 32-bit ints: a larger extent or leading dimension would be
// truncated, and OpenBLAS then prints "parameter number N had an illegal value" (or
// computes on the wrong memory). Raise instead.
void check_blas_int(int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb, int64_t ldc) {
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  STRATA_CHECK(m <= kMax && n <= kMax && k <= kMax && lda <= kMax && ldb <= kMax && ldc <= kMax,
               "matmul: a GEMM of m=", m, ", n=", n, ", k=", k, " (leading dimensions ", lda, ", ", ldb, ", ",
               ldc, ") exceeds the 32-bit BLAS interface (every extent must be <= ", kMax, ")");
}

// OpenBLAS held at one thread before its first product, whoever calls the GEMM first: a
// caller of these kernels that never registered them (a test of the split, say) would
// otherwise run OpenBLAS's own threads, racing strata's pool for the cores, and on CPUs
// whose kernels clear C through memset (Cooperlake's sgemm_beta) ThreadSanitizer sees
// those threads' writes without the spin-waits that order them.
void hold_blas_at_one_thread() {
  static const bool held = (gemm_init(), true);
  (void)held;
}

void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  check_blas_int(m, n, k, lda, ldb, ldc);
  hold_blas_at_one_thread();
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), 1.0f, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  check_blas_int(m, n, k, lda, ldb, ldc);
  hold_blas_at_one_thread();
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n),
              int(k), 1.0, a, int(lda), b, int(ldb), beta, c, int(ldc));
}

#else

// Row-major A (m x k, row stride lda) is A itself; stored transposed (k x m row-major) it is
// the column-major m x k matrix with column stride lda. Likewise for B.
template <typename T>
void blas(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T beta, T* c, int64_t ldc) {
  using Stride = Eigen::OuterStride<>;
  using RowMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
  using ColMajor = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::ColMajor>;
  Eigen::Map<RowMajor, 0, Stride> C(c, m, n, Stride(ldc));
  auto product = [&](const auto& A, const auto& B) {
    if (beta == T(0)) {
      C.noalias() = A * B;  // C is not read (it may hold NaN), as with BLAS
    } else {
      if (beta != T(1)) C *= beta;
      C.noalias() += A * B;
    }
  };
  auto with_b = [&](const auto& A) {
    if (tb) {
      product(A, Eigen::Map<const ColMajor, 0, Stride>(b, k, n, Stride(ldb)));
    } else {
      product(A, Eigen::Map<const RowMajor, 0, Stride>(b, k, n, Stride(ldb)));
    }
  };
  if (ta) {
    with_b(Eigen::Map<const ColMajor, 0, Stride>(a, m, k, Stride(lda)));
  } else {
    with_b(Eigen::Map<const RowMajor, 0, Stride>(a, m, k, Stride(lda)));
  }
}

#endif

}  // namespace

GemmKernel choose_gemm_kernel(int64_t m, int64_t n, int64_t k) {
  return direct_gemm_suits(m, n, k) && direct_gemm_kernel() != nullptr ? GemmKernel::Direct : GemmKernel::Blas;
}

void gemm(GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
          const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (kernel == GemmKernel::Direct) {
    const DirectGemmFn direct = direct_gemm_kernel();
    STRATA_CHECK(direct != nullptr, "matmul: the direct GEMM kernel needs a CPU with AVX2 and FMA");
    direct(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
    return;
  }
  blas(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  gemm(choose_gemm_kernel(m, n, k), ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
          int64_t ldb, double beta, double* c, int64_t ldc) {
  blas(ta, tb, m, n, k, a, lda, b, ldb, beta, c, ldc);
}

void gemm_init() {
#if STRATA_HAS_OPENBLAS
  // Concurrent single-threaded sgemm calls from strata's pool and replica threads are
  // safe with the pthread build and avoid its spinning workers (PLATFORM.md).
  openblas_set_num_threads(1);
#else
  Eigen::initParallel();  // Eigen's cache-size statics, before threads call the product
#endif
}

}  // namespace strata::cpu_kernels
