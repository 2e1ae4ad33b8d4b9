// How one operand X[..., R, C] of a matmul is handed to a BLAS (OpenBLAS on the CPU,
// cuBLASLt on CUDA): the same rule on every device, so both backends pass the same
// operands without a copy.
//
// A BLAS reads a matrix with unit stride along one axis and a leading dimension along the
// other. X is passed as it lies when its last two axes are row-major (a contiguous matrix,
// a row slice: trans = false, ld = its row stride) or column-major (a transpose: trans =
// true, ld = its column stride); anything else (a step-2 column slice, a broadcast inside
// the matrix) is copied to contiguous once by the device's `make_contiguous`.
#pragma once

#include <algorithm>
#include <cstdint>

#include <strata/core/shape.h>
#include <strata/core/tensor.h>

namespace strata::kernels {

struct MatmulOperand {
  Tensor t;                // X, or its contiguous copy
  bool trans = false;      // stored as X^T (column-major) relative to row-major
  int64_t ld = 0;          // the leading dimension of the stored matrix
  Strides batch_strides;   // the batch axes' strides, broadcast to the output's batch shape
};

template <typename MakeContiguous>
MatmulOperand prepare_matmul_operand(const Tensor& x, const Shape& batch, MakeContiguous make_contiguous) {
  MatmulOperand op;
  op.t = x;
  const auto layout_ok = [&](const Tensor& t) {
    const int64_t r = t.dim(-2), c = t.dim(-1);
    const int64_t sr = t.strides()[size_t(t.ndim() - 2)], sc = t.strides()[size_t(t.ndim() - 1)];
    if (sc == 1 && sr >= std::max<int64_t>(c, 1)) {
      op.trans = false;
      op.ld = std::max<int64_t>(sr, 1);
      return true;
    }
    if (sr == 1 && sc >= std::max<int64_t>(r, 1) && c > 1) {
      op.trans = true;
      op.ld = sc;
      return true;
    }
    return false;
  };
  if (!layout_ok(op.t)) {
    op.t = make_contiguous(x);
    op.trans = false;
    op.ld = std::max<int64_t>(op.t.dim(-1), 1);
  }
  const Shape xb(op.t.shape().begin(), op.t.shape().end() - 2);
  const Strides xs(op.t.strides().begin(), op.t.strides().end() - 2);
  op.batch_strides = broadcast_strides(xb, xs, batch);
  return op;
}

}  // namespace strata::kernels
