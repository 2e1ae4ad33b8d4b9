// One-pass in-place optimizer updates over CPU memory.
//
// Written with tensor ops, an SGD or Adam step makes 3-16 passes over each variable and
// allocates as many temporaries; on CPU the same arithmetic runs as one loop per variable,
// split across the intra-op pool. Each loop evaluates the op-by-op formula in the same
// order and precision (the build does not contract a*b+c into FMAs), so results match the
// op-by-op path except where that path used an approximation (sqrt here is exact).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/tensor.h"

namespace strata::optim::detail {

// Contiguous float32/float64 CPU views of param, grad and slots (grad made contiguous when
// it is not), or nothing when the fused path does not apply (another device or dtype, a
// slot that is a view, or a gradient aliasing the parameter).
struct FusedOperands {
  bool ok = false;
  Tensor grad;
};
FusedOperands fused_operands(const Tensor& param, const Tensor& grad, std::span<const Tensor> slots);

// Runs fn(begin, end) over [0, n) element ranges on the intra-op pool.
void fused_for(int64_t n, double ns_per_element, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace strata::optim::detail
