// e^a over an Eigen array expression, vectorised, with results below the smallest normal
// number flushed to zero.
//
// Why flush: Eigen's packet exp clamps its argument at log(min normal), so exp(-inf) and
// exp(-100) come out as ~1.2e-38 rather than 0 and ~4e-44 (softmax([0, -1000]) would give
// 1.2e-38, where TensorFlow and PyTorch give 0).
// Why not `(a < lo).select(0, a.exp())`: Eigen 3.4 evaluates select() one coefficient at a
// time, which also makes the exp inside it scalar (measured 4-5x slower on a softmax row).
// The mask here is plain packet arithmetic instead: for a > lo, a - lo is at least one ulp
// of lo (2^-17 for float, 2^-43 for double), above `tiny`, so min(max(a - lo, 0), tiny)
// * 2^k is exactly 1; for a <= lo it is exactly 0. NaN stays NaN (NaN * anything).
#pragma once

#include <cmath>
#include <limits>

namespace strata::cpu_kernels {

template <typename C, typename A>
auto flushed_exp(const A& a) {
  static_assert(std::is_same_v<C, float> || std::is_same_v<C, double>);
  constexpr int kTinyExponent = std::is_same_v<C, float> ? 20 : 46;
  const C lo = std::log(std::numeric_limits<C>::min());
  const C tiny = std::ldexp(C(1), -kTinyExponent);
  const C inv_tiny = std::ldexp(C(1), kTinyExponent);
  return a.exp() * ((a - lo).max(C(0)).min(tiny) * inv_tiny);
}

}  // namespace strata::cpu_kernels
