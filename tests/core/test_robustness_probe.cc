// Arguments found by a robustness probe: each once overflowed, read outside its storage,
// returned a wrong value, or escaped as a standard-library exception (std::length_error,
// std::bad_alloc) instead of a strata::Error naming the op. None of these cases allocates
// more than a few bytes.
#include <cmath>
#include <limits>

#include <strata/autograd/tape.h>
#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

Tensor floats(std::vector<float> v) { return Tensor::from_vector(v); }

}  // namespace

TEST_CASE("split: sizes are compared with what is left of the axis, so their sum cannot wrap",
          "[shape][probe]") {
  const Tensor a = zeros({2, 3});
  // INT64_MAX + INT64_MAX + 5 wraps to 3: the pieces were [2,3], [2,0] and [2,2].
  REQUIRE_THROWS_WITH(split(a, std::vector<int64_t>{kMax, kMax, 5}, 1),
                      Contains("split: sizes add up to more than the 3 elements of axis 1 of shape [2,3]"));
  REQUIRE_THROWS_WITH(split(a, std::vector<int64_t>{1, kMax}, 1), Contains("split: sizes add up to more than"));
  REQUIRE_THROWS_WITH(split(a, std::vector<int64_t>{1, 1}, 1),
                      Contains("split: sizes add up to 2 but axis 1 of shape [2,3] has 3"));
  const auto p = split(a, std::vector<int64_t>{1, 0, 2}, 1);
  REQUIRE(p.size() == 3);
  CHECK(p[2].shape() == Shape{2, 2});
}

TEST_CASE("split: a count above the axis length is refused, and bounded on an empty axis",
          "[shape][probe]") {
  // 2^62 empty pieces threw std::length_error.
  REQUIRE_THROWS_WITH(split(zeros({0}), int64_t(1) << 62, 0),
                      Contains("split: axis 0 of shape [0] is empty; splitting it into 4611686018427387904"));
  // An empty axis still splits into empty pieces, as NumPy's and TensorFlow's do.
  const auto p = split(zeros({2, 0}), int64_t(3), 1);
  REQUIRE(p.size() == 3);
  for (const Tensor& t : p) CHECK(t.shape() == Shape{2, 0});
  REQUIRE_THROWS_WITH(split(zeros({2, 3}), int64_t(5), 1),
                      Contains("split: axis 1 of shape [2,3] does not split evenly into 5"));
  REQUIRE_THROWS_WITH(split(zeros({2, 3}), kMax, 1), Contains("does not split evenly"));
}

TEST_CASE("slice: a huge step takes one element, as in NumPy, without overflowing", "[shape][probe]") {
  const Tensor x = floats({1, 2, 3});
  // (end - start + step - 1) / step overflowed to an extent of -1.
  const Tensor s = slice(x, 0, 0, 3, kMax);
  REQUIRE(s.dim(0) == 1);
  CHECK(s.to_vector<float>() == std::vector<float>{1});
  CHECK(slice(x, 0, 1, 3, kMax).to_vector<float>() == std::vector<float>{2});
  CHECK(slice(x, 0, 3, 3, kMax).dim(0) == 0);
  CHECK(slice(x, 0, 0, 3, 2).to_vector<float>() == std::vector<float>{1, 3});
  // Along an axis of stride 3 the stride times the step overflows; one row is never stepped.
  const Tensor m = arange(0, 6).reshape({2, 3});
  CHECK(slice(m, 0, 1, 2, kMax).to_vector<float>() == std::vector<float>{3, 4, 5});
  CHECK(slice(m, 0, 0, 2, kMax).to_vector<float>() == std::vector<float>{0, 1, 2});
}

TEST_CASE("Tensor::view_of: refuses views that reach outside their storage", "[tensor][probe]") {
  const Tensor base = arange(0, 6);  // 24 bytes
  const auto& st = base.storage();
  CHECK(Tensor::view_of(st, 5, {1}, {1}, kFloat32).item<float>() == 5);
  CHECK(Tensor::view_of(st, 5, {6}, {-1}, kFloat32).to_vector<float>() == std::vector<float>{5, 4, 3, 2, 1, 0});
  CHECK(Tensor::view_of(st, 0, {3}, {1}, kFloat64).numel() == 3);
  CHECK(Tensor::view_of(st, 0, {4, 3}, {0, 2}, kFloat32).to_vector<float>().back() == 4);
  CHECK(Tensor::view_of(st, 100, {0, 7}, {7, 1}, kFloat32).numel() == 0);  // empty: reads nothing
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 0, {7}, {1}, kFloat32),
                      Contains("Tensor::view_of: a float32 view with offset 0, shape [7] and strides [1] "
                               "addresses elements 0 to 6, outside the 24-byte storage (6 elements)"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 6, {1}, {1}, kFloat32), Contains("outside the 24-byte storage"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, -1, {1}, {1}, kFloat32), Contains("outside the 24-byte storage"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 0, {2}, {-1}, kFloat32), Contains("addresses elements -1 to 0"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 0, {4}, {1}, kFloat64), Contains("outside the 24-byte storage"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 0, {2, 3}, {3}, kFloat32),
                      Contains("Tensor::view_of: shape [2,3] has rank 2 but strides [3] have rank 1"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 0, {-1}, {1}, kFloat32), Contains("Tensor::view_of: negative extent"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, 0, {3}, {kMax}, kFloat32), Contains("overflows int64"));
  REQUIRE_THROWS_WITH(Tensor::view_of(st, kMax, {1}, {1}, kFloat32), Contains("overflows int64"));
}

TEST_CASE("mean: float16 and bfloat16 accumulate in float32 and keep their dtype", "[reduce][half][probe]") {
  // The float16 sum of 70000 ones is inf (max 65504); NumPy and TensorFlow give 1.
  const Tensor h = full({70000}, 1.0, kFloat16);
  const Tensor mh = mean(h);
  CHECK(mh.dtype() == kFloat16);
  CHECK(mh.item<float>() == 1.0f);
  CHECK(mean(full({2, 70000}, 0.5, kFloat16), std::vector<int64_t>{1}).to_vector<float>() ==
        std::vector<float>{0.5f, 0.5f});
  const Tensor b = full({70000}, 1.0, kBFloat16);
  CHECK(mean(b).dtype() == kBFloat16);
  CHECK(mean(b).item<float>() == 1.0f);
  CHECK(std::isnan(mean(zeros({0}, kFloat16)).item<float>()));
  CHECK(mean(zeros({0}, kFloat16)).dtype() == kFloat16);

  autograd::GradientTape tape;
  tape.watch(h);
  const Tensor g = tape.gradient(mean(h), h);
  CHECK(g.dtype() == kFloat16);
  CHECK(g.shape() == Shape{70000});
  CHECK(g.to_vector<float>()[123] == Approx(1.0 / 70000).epsilon(0.01));
}

TEST_CASE("random::permutation: an impossible n is a strata::Error", "[random][probe]") {
  // A std::vector of 2^62 threw std::length_error.
  REQUIRE_THROWS_WITH(random::permutation(int64_t(1) << 62, 1),
                      Contains("random::permutation: shape [4611686018427387904] of 8-byte elements"));
  CHECK(random::permutation(5, 1).shape() == Shape{5});
}

TEST_CASE("Tensor::to_vector: an impossible host buffer is a strata::Error", "[tensor][probe]") {
  // Reading 2^61 float32 elements needs 2^63 bytes (std::length_error before).
  const Tensor one = floats({1});
  REQUIRE_THROWS_WITH(broadcast_to(one, {int64_t(1) << 61}).to_vector<float>(), Contains("Tensor::to_vector"));
  REQUIRE_THROWS_WITH(broadcast_to(one, {int64_t(1) << 60}).to_vector<double>(), Contains("Tensor::to_vector"));
}

TEST_CASE("printing a summarised tensor reads only the elements it prints", "[tensor][print][probe]") {
  // Copying all 2^40 elements of this view to print six of them threw std::bad_alloc.
  CHECK(broadcast_to(floats({1}), {int64_t(1) << 40}).str() ==
        "tensor([1, 1, 1, ..., 1, 1, 1], shape=[1099511627776], dtype=float32)");
  const std::string rows = broadcast_to(arange(0, 10).reshape({10, 1}), {10, int64_t(1) << 30}).str();
  CHECK(rows.find("[[0, 0, 0, ..., 0, 0, 0],\n        [1, 1, 1, ..., 1, 1, 1],") == 7);
  CHECK(rows.find("[9, 9, 9, ..., 9, 9, 9]]") != std::string::npos);
  CHECK(rows.find("[3, 3") == std::string::npos);
  // Heads and tails of every summarised axis of a strided view land in place.
  const std::string t = arange(0, 2000).reshape({40, 50}).transpose().str();  // t[i][j] = 50j + i
  CHECK(t.find("tensor([[0, 50, 100, ..., 1850, 1900, 1950],") == 0);
  CHECK(t.find("[2, 52, 102, ..., 1852, 1902, 1952],\n        ...,\n        [47, 97, 147,") != std::string::npos);
  CHECK(t.find("[3, 53") == std::string::npos);
  CHECK(t.find("[49, 99, 149, ..., 1899, 1949, 1999]], shape=[50,40]") != std::string::npos);
}

TEST_CASE("random::truncated_normal: stddev must be >= 0, as normal's", "[random][probe]") {
  REQUIRE_THROWS_WITH(random::truncated_normal({2}, 1, 0.0, -1.0),
                      Contains("random::truncated_normal: stddev must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(random::truncated_normal({2}, 1, 0.0, std::nan("")),
                      Contains("random::truncated_normal: stddev must be >= 0, got nan"));
  CHECK(random::truncated_normal({2}, 1, 0.0, 0.0).to_vector<float>() == std::vector<float>{0, 0});
}

TEST_CASE("arange: a range too large or not finite is refused before converting its count",
          "[tensor][probe]") {
  // Converting inf or 1e30 to int64 is undefined behaviour (it reported a negative extent).
  REQUIRE_THROWS_WITH(arange(0, INFINITY), Contains("arange: start 0, stop inf and step 1 give a range "
                                                   "that is too large or not finite"));
  REQUIRE_THROWS_WITH(arange(0, 1e30), Contains("too large or not finite"));
  REQUIRE_THROWS_WITH(arange(-INFINITY, 0), Contains("too large or not finite"));
  CHECK(arange(5, 0).numel() == 0);
}
