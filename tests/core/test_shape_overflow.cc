// Shapes whose element count does not fit in int64 raise strata::Error naming the op and
// the shape, before anything is allocated. Before checked size arithmetic,
// zeros({1 << 32, 1 << 32}) wrapped to 0 elements, allocated 0 bytes, and the next slice
// or matmul crashed the process. None of these cases allocates more than a few bytes.
#include <limits>

#include <strata/core/checked_math.h>
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kHuge = int64_t(1) << 32;  // two of these multiply to 2^64

// Runs fn, requires a strata::Error, and returns its message.
template <typename Fn>
std::string shape_overflow_message(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("expected strata::Error, nothing was thrown");
  return "";
}

}  // namespace

TEST_CASE("shape overflow: creation ops raise instead of allocating a wrapped size") {
  std::string m = shape_overflow_message([] { zeros({kHuge, kHuge}); });
  CHECK_THAT(m, Contains("[4294967296,4294967296]"));
  CHECK_THAT(m, Contains("overflows int64"));
  m = shape_overflow_message([] { ones({kHuge, kHuge, 2}, kFloat64); });
  CHECK_THAT(m, Contains("[4294967296,4294967296,2]"));
  m = shape_overflow_message([] { Tensor::empty({kHuge, kHuge}, kInt32); });
  CHECK_THAT(m, Contains("empty"));
  // The element count fits, the byte count does not: 2^62 float32 values are 2^64 bytes.
  m = shape_overflow_message([] { Tensor::empty({int64_t(1) << 62}, kFloat32); });
  CHECK_THAT(m, Contains("empty"));
  CHECK_THAT(m, Contains("bytes"));
  // Zero elements, but the contiguous strides of the other extents overflow.
  m = shape_overflow_message([] { zeros({0, kHuge, kHuge}); });
  CHECK_THAT(m, Contains("[0,4294967296,4294967296]"));
}

TEST_CASE("shape overflow: reshape, broadcast_to and broadcasting ops check their products") {
  const Tensor x = zeros({2, 3});
  std::string m = shape_overflow_message([&] { reshape(x, {kHuge, kHuge, 0}); });
  CHECK_THAT(m, Contains("reshape"));
  m = shape_overflow_message([&] { reshape(x, {kHuge, kHuge, -1}); });
  CHECK_THAT(m, Contains("reshape"));
  m = shape_overflow_message([] { broadcast_to(zeros({1, 1}), {kHuge, kHuge}); });
  CHECK_THAT(m, Contains("broadcast_to"));
  // Two broadcastable operands of 0 elements whose result's contiguous strides overflow.
  m = shape_overflow_message([] { add(zeros({kHuge, 1, 0}), zeros({1, kHuge, 0})); });
  CHECK_THAT(m, Contains("add"));
  CHECK_THAT(m, Contains("[4294967296,4294967296,0]"));
}

TEST_CASE("shape overflow: concat and pad add extents with a check") {
  const int64_t big = std::numeric_limits<int64_t>::max() / 2 + 1;  // two of these overflow
  const Tensor empty_rows = zeros({big, 0});                           // 0 elements
  std::string m = shape_overflow_message([&] { concat({empty_rows, empty_rows}, 0); });
  CHECK_THAT(m, Contains("concat"));
  m = shape_overflow_message([&] { pad(zeros({1, 0}), {{big, big}, {0, 0}}); });
  CHECK_THAT(m, Contains("pad"));
}

TEST_CASE("shape overflow: matmul's output shape is checked under its own name") {
  // Batch dimensions that broadcast to 2^64 matrices; the operands themselves hold 0 elements.
  const Tensor a = zeros({kHuge, 1, 0, 0});
  const Tensor b = zeros({1, kHuge, 0, 0});
  const std::string m = shape_overflow_message([&] { matmul(a, b); });
  CHECK_THAT(m, Contains("matmul"));
  CHECK_THAT(m, Contains("[4294967296,4294967296,0,0]"));
}

TEST_CASE("checked_numel and checked_nbytes: exact at the int64 boundary") {
  CHECK(checked_numel({}, "t") == 1);
  CHECK(checked_numel({3, 0, 5}, "t") == 0);
  CHECK(checked_numel({int64_t(1) << 31, int64_t(1) << 31}, "t") == int64_t(1) << 62);
  CHECK(checked_nbytes({int64_t(1) << 61}, 2, "t") == size_t(1) << 62);
  CHECK_THROWS_AS(checked_nbytes({int64_t(1) << 62}, 2, "t"), Error);
  CHECK_THROWS_WITH(checked_numel({2, -1}, "myop"), Contains("myop: negative extent"));
  CHECK_THROWS_WITH(numel_of({kHuge, kHuge}), Contains("numel"));
}
