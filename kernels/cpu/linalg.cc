// CPU matmul: OpenBLAS's sgemm/dgemm (pthread build held at one thread, PLATFORM.md; Eigen's
// own GEMM in builds without OpenBLAS, kernels/cpu/gemm.h), split by rows or columns
// across strata's pool for one product (kernels/cpu/gemm_split.h), or by batch for batched
// products. Strided operands
// whose last two axes are row- or column-major are passed to BLAS as they are (with the
// transpose flag flipped); others are copied once.
#include <cstring>

#include <strata/core/dispatch.h>
#include <strata/core/thread_pool.h>
#include <strata/kernels/cpu/gemm.h>
#include <strata/kernels/cpu/gemm_split.h>
#include <strata/kernels/cpu/loops.h>
#include <strata/kernels/matmul_operand.h>

namespace strata::cpu_kernels {

namespace {

using Operand = kernels::MatmulOperand;

// Prepares X [..., R, C] for BLAS (kernels/matmul_operand.h).
Operand prepare(const Tensor& x, const Shape& batch) {
  return kernels::prepare_matmul_operand(x, batch, [](const Tensor& t) { return contiguous_copy(t); });
}

// C = op(A) op(B): gemm.h for float/double, a plain loop for integers.
// `kernel` is the float kernel chosen for the whole product (gemm.h).
template <typename T>
void gemm_typed([[maybe_unused]] GemmKernel kernel, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
                const T* b, int64_t ldb, T* c, int64_t ldc) {
  if constexpr (std::is_same_v<T, float>) {
    gemm(kernel, ta, tb, m, n, k, a, lda, b, ldb, T(0), c, ldc);
  } else if constexpr (std::is_same_v<T, double>) {
    gemm(ta, tb, m, n, k, a, lda, b, ldb, T(0), c, ldc);
  } else {
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        T s = 0;
        for (int64_t p = 0; p < k; ++p) {
          s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
        }
        c[i * ldc + j] = s;
      }
    }
  }
}

template <typename T>
void matmul_typed(const Operand& A, const Operand& B, bool ta, bool tb, const Tensor& out) {
  const int64_t m = out.dim(-2), n = out.dim(-1);
  const int64_t k = ta ? A.t.dim(-2) : A.t.dim(-1);
  const int64_t batches = m > 0 && n > 0 ? out.numel() / (m * n) : 0;
  if (batches == 0) return;
  const T* pa = ptr<T>(A.t);
  const T* pb = ptr<T>(B.t);
  T* pc = ptr<T>(out);
  const bool eff_ta = ta != A.trans, eff_tb = tb != B.trans;
  if (k == 0) {
    std::memset(pc, 0, size_t(out.numel()) * sizeof(T));
    return;
  }
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  auto batch_offset = [&](int64_t bi, const Strides& st) {
    int64_t off = 0;
    for (size_t d = batch.size(); d-- > 0;) {
      off += (bi % batch[d]) * st[d];
      bi /= batch[d];
    }
    return off;
  };
  const GemmKernel kernel = choose_gemm_kernel(m, n, k);
  if (batches == 1) {
    // One product: split along the larger of m and n when the parts repay the threads
    // (kernels/cpu/gemm_split.h).
    const GemmSplit split = plan_gemm_split(m, n, k, available_threads());
    if (split.axis == GemmSplitAxis::None) {  // no std::function (a heap block) for one part
      gemm_typed<T>(kernel, eff_ta, eff_tb, m, n, k, pa, A.ld, pb, B.ld, pc, n);
      return;
    }
    run_gemm_split(split, m, n, [&](int64_t r0, int64_t r1, int64_t c0, int64_t c1) {
      const T* a = pa + r0 * (eff_ta ? 1 : A.ld);
      const T* b = pb + c0 * (eff_tb ? B.ld : 1);
      gemm_typed<T>(kernel, eff_ta, eff_tb, r1 - r0, c1 - c0, k, a, A.ld, b, B.ld, pc + r0 * n + c0, n);
    });
    return;
  }
  // Batched products: whole products per thread. ~100 GFLOP/s per core, scaled by 2.5:
  // parallel_for keeps work under ~0.5 ms on one thread, but a GEMM already repays a
  // wake-up (~25-50 us) from ~0.2 ms.
  const double flops_ns = 2.0 * double(k) * double(n) * 0.01 * 2.5;
  parallel_for(batches, flops_ns * double(m), [&](int64_t b0, int64_t b1) {
    for (int64_t bi = b0; bi < b1; ++bi) {
      gemm_typed<T>(kernel, eff_ta, eff_tb, m, n, k, pa + batch_offset(bi, A.batch_strides), A.ld,
                    pb + batch_offset(bi, B.batch_strides), B.ld, pc + bi * m * n, n);
    }
  });
}

void matmul_kernel(const KernelArgs& k) {
  const Tensor& out = k.out[0];
  const Shape batch(out.shape().begin(), out.shape().end() - 2);
  Tensor a = k.in[0], b = k.in[1];
  if (is_half(a.dtype())) {  // float16/bfloat16: compute in float32
    Tensor a32 = Tensor::empty(a.shape(), kFloat32, a.device());
    Tensor b32 = Tensor::empty(b.shape(), kFloat32, b.device());
    Tensor o32 = Tensor::empty(out.shape(), kFloat32, out.device());
    const Tensor ia[1] = {a}, oa[1] = {a32}, ib[1] = {b}, ob[1] = {b32};
    OpAttrs cast_attrs;
    run_kernel(OpId::Cast, cast_attrs, ia, oa);
    run_kernel(OpId::Cast, cast_attrs, ib, ob);
    matmul_typed<float>(prepare(a32, batch), prepare(b32, batch), k.attrs.transpose_a,
                        k.attrs.transpose_b, o32);
    const Tensor io[1] = {o32}, oo[1] = {out};
    run_kernel(OpId::Cast, cast_attrs, io, oo);
    return;
  }
  const Operand A = prepare(a, batch), B = prepare(b, batch);
  visit_dtype(a.dtype(), [&](auto z) {
    using T = decltype(z);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
      matmul_typed<T>(A, B, k.attrs.transpose_a, k.attrs.transpose_b, out);
    } else {
      fail("matmul: no CPU kernel for dtype ", a.dtype());
    }
  });
}

}  // namespace

void register_linalg_kernels() {
  gemm_init();
  register_kernel(OpId::MatMul, DeviceType::CPU, matmul_kernel);
}

}  // namespace strata::cpu_kernels
