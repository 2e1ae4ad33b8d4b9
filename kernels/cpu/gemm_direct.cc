// The direct GEMM's shape rule and CPU check (kernels/cpu/gemm_direct.h); the kernel is in
// gemm_direct_avx2.cc.
#include <strata/kernels/cpu/gemm_direct.h>

namespace strata::cpu_kernels {

namespace {

// The copied panel of op(B) (k rows of n rounded up to 8 floats) is read by every row
// tile: at most 128 KB keeps it in L2 (512 KB a core on Zen 3) with room for A's rows.
// Past that OpenBLAS's cache blocking wins (the CNN's dense1: 128 x 9216 panels, 0.3-0.6x).
constexpr int64_t kMaxPanelFloats = 32768;
// Where the kernel wins (gemm_direct.h): a narrow output, a short sum, or a small product.
constexpr int64_t kNarrowColumns = 16;
constexpr int64_t kShortSum = 32;
constexpr int64_t kSmallProduct = int64_t(1) << 20;  // multiply-adds; 64x128x128 ran 0.98-1.15x

}  // namespace

bool direct_gemm_suits(int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return false;
  const int64_t padded_n = (n + 7) / 8 * 8;
  if (k > kMaxPanelFloats / padded_n) return false;
  return n <= kNarrowColumns || k <= kShortSum || m * n * k < kSmallProduct;
}

DirectGemmFn direct_gemm_kernel() {
#if defined(__x86_64__)
  static const bool usable = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return usable ? detail::direct_gemm_avx2() : nullptr;
#else
  return nullptr;
#endif
}

}  // namespace strata::cpu_kernels
