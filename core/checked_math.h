// Checked size arithmetic: the one place where element counts, strides and byte counts
// are multiplied. A shape whose product does not fit in int64 (e.g. zeros({1 << 32, 1 << 32})
// with 2^64 elements) would otherwise wrap around — to 0 in that example — and allocate a
// buffer far smaller than the tensor, so that the first kernel writes out of bounds.
// Each helper throws strata::Error naming the op and the shape instead.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include <strata/core/error.h>
#include <strata/core/shape.h>

namespace strata {

// a * b for non-negative a and b; throws naming `op` and `shape` when it overflows int64.
inline int64_t checked_mul(int64_t a, int64_t b, const char* op, const Shape& shape) {
  int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) {
    fail(op, ": shape ", shape_str(shape), " is too large: the product of its extents overflows int64 (max ",
         std::numeric_limits<int64_t>::max(), ")");
  }
  return r;
}

// a + b for non-negative extents (concatenated or padded); throws naming `op` on overflow.
inline int64_t checked_add(int64_t a, int64_t b, const char* op, const Shape& shape) {
  int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) {
    fail(op, ": an extent of ", shape_str(shape), " grown by ", b, " overflows int64 (max ",
         std::numeric_limits<int64_t>::max(), ")");
  }
  return r;
}

// The number of elements of `shape` (1 for a scalar); throws naming `op` when an extent
// is negative or the product overflows int64. Zero-size shapes still have each prefix
// checked, so that their contiguous strides are representable too.
inline int64_t checked_numel(const Shape& shape, const char* op) {
  int64_t n = 1, strides_product = 1;
  for (int64_t d : shape) {
    STRATA_CHECK(d >= 0, op, ": negative extent in shape ", shape_str(shape));
    n = checked_mul(n, d, op, shape);
    strides_product = checked_mul(strides_product, d > 1 ? d : 1, op, shape);
  }
  return n;
}

// The bytes of a contiguous tensor of `shape` with elements of `itemsize` bytes; throws
// naming `op` when that exceeds int64 (and so any allocation the process could make).
inline size_t checked_nbytes(const Shape& shape, size_t itemsize, const char* op) {
  const int64_t n = checked_numel(shape, op);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(n, int64_t(itemsize), &bytes)) {
    fail(op, ": shape ", shape_str(shape), " of ", itemsize, "-byte elements needs more than ",
         std::numeric_limits<int64_t>::max(), " bytes");
  }
  return size_t(bytes);
}

}  // namespace strata
