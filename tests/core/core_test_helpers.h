// Helpers of the core tests: non-contiguous copies of a tensor, exact comparisons, a
// thread-count guard and seeded random inputs.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include <strata/core/ops.h>
#include <strata/core/random.h>
#include <strata/core/tensor.h>
#include <strata/core/thread_pool.h>
#include "tests/test_util.h"

namespace strata::testing {

// A view with the values of t whose elements sit two apart along the last axis, after a
// leading offset: non-contiguous, offset, sharing storage with a larger buffer of NaNs.
inline Tensor strided_copy(const Tensor& t) {
  if (t.ndim() == 0) return t;
  Shape big = t.shape();
  const int64_t n = big.back();
  big.back() = 2 * n + 1;
  // Fill the gaps with a value that shows up if a kernel reads them.
  Tensor buf = full(big, is_floating(t.dtype()) ? std::nan("") : -12345.0, t.dtype());
  Tensor view = buf.slice(-1, 1, 1 + 2 * n, 2);
  view.copy_(t);
  return view;
}

// A view with the values of t laid out in memory with its axes reversed (a transposed
// view of a contiguous transposed copy). Rank < 2 falls back to strided_copy.
inline Tensor transposed_copy(const Tensor& t) {
  if (t.ndim() < 2) return strided_copy(t);
  return t.transpose().contiguous().transpose();
}

// Both non-contiguous layouts of t, each checked to really be non-contiguous when t has
// more than one element.
inline std::vector<Tensor> noncontiguous_variants(const Tensor& t) {
  return {transposed_copy(t), strided_copy(t)};
}

// Same shape, dtype and values (NaN equal to NaN, bit-identical otherwise).
inline bool identical(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (size_t i = 0; i < va.size(); ++i) {
    if (std::isnan(va[i]) && std::isnan(vb[i])) continue;
    if (std::memcmp(&va[i], &vb[i], sizeof(double)) != 0) return false;
  }
  return true;
}

// Uniform values in [lo, hi) of the given dtype (seeded: reproducible).
inline Tensor rand_tensor(const Shape& shape, uint64_t seed, double lo = -1.0, double hi = 1.0,
                          DType dtype = kFloat32) {
  return random::uniform(shape, seed, lo, hi, dtype);
}

// Sets the pool size for a scope and restores the previous size afterwards.
class ThreadCountGuard {
 public:
  explicit ThreadCountGuard(int n) : previous_(num_threads()) { set_num_threads(n); }
  ~ThreadCountGuard() { set_num_threads(previous_); }
  ThreadCountGuard(const ThreadCountGuard&) = delete;
  ThreadCountGuard& operator=(const ThreadCountGuard&) = delete;

 private:
  int previous_;
};

}  // namespace strata::testing

#define REQUIRE_IDENTICAL(a, b)                                 \
  do {                                                          \
    INFO("got " << (a) << "\nwant " << (b));                    \
    REQUIRE(::strata::testing::identical((a), (b)));            \
  } while (0)
