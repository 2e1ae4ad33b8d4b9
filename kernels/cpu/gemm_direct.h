// The direct GEMM: a float product C = op(A) op(B) (+ beta C) computed straight from the
// operands, for the shapes where OpenBLAS spends more on packing and edge tiles than on
// arithmetic -- a narrow output (n <= 16: a 10-class head), a short sum (k <= 32: the
// im2col product of a 3x3 single-channel convolution, the input gradient of a narrow
// layer) or a product of under a million multiply-adds.
//
// How: op(B) is copied once into a panel of k rows of n floats rounded up to whole 8-lane
// vectors (zero padded); op(A) is read where it lies, one broadcast element at a time, so
// its transpose costs nothing. Register tiles of 4x24, 6x16 or 8x8 outputs (12 or 8 AVX2
// accumulators) run over the whole sum. When op(A) is stored transposed (A^T, the weight
// gradient x^T dy), the output is narrow and A fits in L1, the roles swap: C^T = op(B)^T
// A_stored reads A's rows directly as the panel (no copy at all), every vector lane is a
// useful output (a 10-wide panel would use 10 of 16 lanes), and 4x8 blocks of C^T are
// transposed in registers on the way out.
//
// Numerics: every output element is one sum over p = 0..k-1 in order, one fused
// multiply-add per term, then + beta * C (one more FMA) -- independent of the tiling, the
// swap, the memory layout and of how a caller splits C into blocks, so a product is bit
// for bit the same split by rows or columns over any number of threads. It differs from
// OpenBLAS's result in the last bits (a different summation order), as OpenBLAS's own
// kernels differ between CPUs.
//
// Measured through the matmul op against OpenBLAS 0.3.21's cblas_sgemm on Zen 3, one
// thread, paired medians (session 10, bench/README.md "Direct GEMM"): the CNN's dense2
// products 64x10x128 1.18-1.24x, 128x10x64 A^T 1.25-1.40x, 64x128x10 B^T 1.17-1.47x; the
// MLP's 512->10 layer 1.07-1.47x; conv1's im2col product 43264x32x9 2.7-3.0x. Larger
// products (128^3, 256^3, the CNN's conv2 and dense1) stay with OpenBLAS, whose cache
// blocking wins there (0.5-0.97x for this kernel in a standalone loop).
#pragma once

#include <cstdint>

namespace strata::cpu_kernels {

// Whether the direct kernel is chosen for an m x n x k float product: a function of the
// shape alone (run-to-run determinism), false for empty products. The CPU check is
// separate (direct_gemm_kernel).
bool direct_gemm_suits(int64_t m, int64_t n, int64_t k);

using DirectGemmFn = void (*)(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a,
                              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

// The AVX2 + FMA direct kernel, or nullptr where it is not compiled in (not x86-64) or the
// CPU lacks AVX2 or FMA (checked once, as vec_math's Note [Runtime ISA dispatch]).
DirectGemmFn direct_gemm_kernel();

namespace detail {
// The kernel itself, unchecked (gemm_direct_avx2.cc); callers go through direct_gemm_kernel().
DirectGemmFn direct_gemm_avx2();
}  // namespace detail

}  // namespace strata::cpu_kernels
