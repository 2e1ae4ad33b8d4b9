// Reductions, arg-reductions and cumsum: values against a naive float64 reference over
// every axis subset, keepdims, negative axes, non-contiguous inputs, zero-size and rank-0
// tensors, NaN/Inf propagation, accuracy, and independence from the thread count.
#include <cmath>
#include <functional>
#include <limits>

#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;

namespace {

enum class Red { Sum, Mean, Max, Min, Prod, LogSumExp };

const char* red_name(Red r) {
  switch (r) {
    case Red::Sum: return "sum";
    case Red::Mean: return "mean";
    case Red::Max: return "max";
    case Red::Min: return "min";
    case Red::Prod: return "prod";
    case Red::LogSumExp: return "logsumexp";
  }
  return "?";
}

Tensor run_red(Red r, const Tensor& x, const Axes& axes, bool keepdims) {
  switch (r) {
    case Red::Sum: return sum(x, axes, keepdims);
    case Red::Mean: return mean(x, axes, keepdims);
    case Red::Max: return max(x, axes, keepdims);
    case Red::Min: return min(x, axes, keepdims);
    case Red::Prod: return prod(x, axes, keepdims);
    case Red::LogSumExp: return logsumexp(x, axes, keepdims);
  }
  return {};
}

// Naive reduction in float64 over the (normalised) axes.
Tensor reference_reduce(Red r, const Tensor& x, std::vector<int64_t> axes, bool keepdims) {
  const Shape& in = x.shape();
  const int64_t rank = x.ndim();
  std::vector<bool> reduced(size_t(rank), false);
  for (int64_t a : axes) reduced[size_t(a)] = true;
  Shape out_keep, out;
  for (int64_t d = 0; d < rank; ++d) {
    out_keep.push_back(reduced[size_t(d)] ? 1 : in[size_t(d)]);
    if (!reduced[size_t(d)]) out.push_back(in[size_t(d)]);
  }
  const auto v = x.to_vector<double>();
  const Strides in_st = contiguous_strides(in), out_st = contiguous_strides(out_keep);
  std::vector<std::vector<double>> groups(size_t(numel_of(out_keep)));
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    int64_t rem = i, o = 0;
    for (int64_t d = 0; d < rank; ++d) {
      const int64_t idx = rem / in_st[size_t(d)];
      rem %= in_st[size_t(d)];
      if (!reduced[size_t(d)]) o += idx * out_st[size_t(d)];
    }
    groups[size_t(o)].push_back(v[size_t(i)]);
  }
  std::vector<double> res;
  for (const auto& g : groups) {
    double acc = 0;
    switch (r) {
      case Red::Sum: for (double e : g) acc += e; break;
      case Red::Mean: for (double e : g) acc += e; acc /= double(g.size()); break;
      case Red::Prod: acc = 1; for (double e : g) acc *= e; break;
      case Red::Max: acc = -INFINITY; for (double e : g) acc = std::max(acc, e); break;
      case Red::Min: acc = INFINITY; for (double e : g) acc = std::min(acc, e); break;
      case Red::LogSumExp: {
        double m = -INFINITY;
        for (double e : g) m = std::max(m, e);
        double s = 0;
        for (double e : g) s += std::exp(e - m);
        acc = m + std::log(s);
        break;
      }
    }
    res.push_back(acc);
  }
  return Tensor::from_vector(res, keepdims ? out_keep : out, kFloat64);
}

// Every subset of the axes of a rank-`rank` tensor (the empty subset excluded).
std::vector<std::vector<int64_t>> axis_subsets(int64_t rank) {
  std::vector<std::vector<int64_t>> out;
  for (int mask = 1; mask < (1 << rank); ++mask) {
    std::vector<int64_t> s;
    for (int64_t d = 0; d < rank; ++d) {
      if (mask & (1 << d)) s.push_back(d);
    }
    out.push_back(s);
  }
  return out;
}

const std::vector<Red> kAllReductions = {Red::Sum, Red::Mean, Red::Max, Red::Min, Red::Prod, Red::LogSumExp};

}  // namespace

TEST_CASE("reduce: every reduction over every axis subset matches a float64 reference", "[reduce]") {
  for (Red r : kAllReductions) {
    for (DType dt : {kFloat32, kFloat64}) {
      Tensor x = testing::rand_tensor({3, 4, 5}, 51, 0.5, 1.5, dt);
      const double tol = dt == kFloat32 ? 2e-6 : 1e-13;
      for (bool keepdims : {false, true}) {
        for (const auto& axes : axis_subsets(3)) {
          INFO(red_name(r) << " " << dtype_name(dt) << " axes " << shape_str(axes) << " keepdims " << keepdims);
          Tensor y = run_red(r, x, axes, keepdims);
          CHECK(y.dtype() == dt);
          CHECK(testing::allclose(y.cast(kFloat64), reference_reduce(r, x, axes, keepdims), tol, tol));
          // Negative spellings of the same axes.
          std::vector<int64_t> neg_axes;
          for (int64_t a : axes) neg_axes.push_back(a - 3);
          CHECK(identical(run_red(r, x, neg_axes, keepdims), y));
        }
        INFO(red_name(r) << " all axes");
        Tensor all = run_red(r, x, std::nullopt, keepdims);
        CHECK(all.shape() == (keepdims ? Shape{1, 1, 1} : Shape{}));
        CHECK(testing::allclose(all.cast(kFloat64), reference_reduce(r, x, {0, 1, 2}, keepdims), tol, tol));
      }
    }
  }
}

TEST_CASE("reduce: an explicit empty axis list reduces nothing, nullopt reduces everything", "[reduce]") {
  Tensor x = testing::rand_tensor({2, 3}, 52);
  CHECK(identical(sum(x, std::vector<int64_t>{}), x));
  CHECK(identical(max(x, std::vector<int64_t>{}, true), x));
  CHECK(sum(x).ndim() == 0);
  CHECK(sum(x, {}).ndim() == 0);  // {} is std::nullopt
}

TEST_CASE("reduce: integer reductions stay exact", "[reduce]") {
  Tensor i = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4, 5, 6}, {2, 3});
  CHECK(sum(i).dtype() == kInt32);
  CHECK(sum(i).item<int>() == 21);
  CHECK(sum(i, std::vector<int64_t>{0}).to_vector<int>() == std::vector<int>{5, 7, 9});
  CHECK(sum(i, std::vector<int64_t>{1}).to_vector<int>() == std::vector<int>{6, 15});
  CHECK(max(i, std::vector<int64_t>{0}).to_vector<int>() == std::vector<int>{4, 5, 6});
  CHECK(min(i, std::vector<int64_t>{1}).to_vector<int>() == std::vector<int>{1, 4});
  CHECK(prod(i).item<int>() == 720);
  Tensor big = full({3}, double(int64_t(1) << 40), kInt64);
  CHECK(sum(big).item<int64_t>() == 3 * (int64_t(1) << 40));
  REQUIRE_THROWS_WITH(mean(i), Contains("mean: expected a floating-point tensor, got int32"));
  REQUIRE_THROWS_WITH(logsumexp(i), Contains("logsumexp: expected a floating-point tensor"));
  REQUIRE_THROWS_WITH(sum(zeros({2}, kBool)), Contains("sum: cannot reduce a bool tensor (cast it first)"));
}

TEST_CASE("reduce: non-contiguous inputs equal their contiguous copies", "[reduce][strided]") {
  Tensor x = testing::rand_tensor({6, 7, 8}, 53, 0.5, 1.5);
  for (Red r : kAllReductions) {
    for (const Tensor& v : testing::noncontiguous_variants(x)) {
      for (const auto& axes : axis_subsets(3)) {
        INFO(red_name(r) << " axes " << shape_str(axes));
        CHECK(identical(run_red(r, v, axes, false), run_red(r, x, axes, false)));
      }
      CHECK(identical(run_red(r, v, std::nullopt, true), run_red(r, x, std::nullopt, true)));
    }
    // A broadcast view reduces like its materialised copy.
    Tensor row = testing::rand_tensor({8}, 54, 0.5, 1.5);
    Tensor b = row.broadcast_to({5, 8});
    CHECK(testing::allclose(run_red(r, b, std::vector<int64_t>{0}, false),
                            run_red(r, b.contiguous(), std::vector<int64_t>{0}, false), 1e-6, 1e-6));
  }
  for (const Tensor& v : testing::noncontiguous_variants(x)) {
    for (int64_t axis : {0, 1, 2}) {
      CHECK(identical(argmax(v, axis), argmax(x, axis)));
      CHECK(identical(argmin(v, axis, true), argmin(x, axis, true)));
      CHECK(identical(cumsum(v, axis), cumsum(x, axis)));
      CHECK(identical(cumsum(v, axis, true, true), cumsum(x, axis, true, true)));
    }
  }
}

TEST_CASE("reduce: rank-0 and zero-size inputs", "[reduce]") {
  Tensor s = Tensor::scalar(2.5);
  for (Red r : kAllReductions) {
    INFO(red_name(r));
    CHECK(run_red(r, s, std::nullopt, false).ndim() == 0);
    CHECK(run_red(r, s, std::nullopt, false).item<float>() == 2.5f);
  }
  Tensor e = zeros({0, 3});
  CHECK(sum(e).item<float>() == 0.0f);
  CHECK(prod(e).item<float>() == 1.0f);
  CHECK(sum(e, std::vector<int64_t>{0}).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK(prod(e, std::vector<int64_t>{0}, true).shape() == Shape{1, 3});
  CHECK(sum(e, std::vector<int64_t>{1}).shape() == Shape{0});
  CHECK(max(e, std::vector<int64_t>{1}).shape() == Shape{0});  // reducing a non-empty axis of an empty tensor is fine
  CHECK(std::isnan(mean(e).item<float>()));
  CHECK(sum(zeros({0}, kInt64)).item<int64_t>() == 0);
  REQUIRE_THROWS_WITH(max(e), Contains("max: cannot reduce over the empty axis 0 of shape [0,3]"));
  REQUIRE_THROWS_WITH(min(e, std::vector<int64_t>{0}), Contains("min: cannot reduce over the empty axis 0"));
  REQUIRE_THROWS_WITH(logsumexp(e), Contains("logsumexp: cannot reduce over the empty axis"));
  REQUIRE_THROWS_WITH(argmax(e, 0), Contains("argmax: axis 0 of shape [0,3] is empty"));
  CHECK(argmax(e, 1).shape() == Shape{0});
  CHECK(cumsum(e, 0).shape() == Shape{0, 3});
}

TEST_CASE("reduce: NaN and Inf propagate through max/min/sum/logsumexp", "[reduce][nan]") {
  // Both kernel layouts: reducing the trailing axis (rows) and the leading axis (columns).
  Tensor x = tensor({{1, NAN, 3}, {4, 5, 6}, {NAN, -INFINITY, INFINITY}});
  const auto rows_max = max(x, std::vector<int64_t>{1}).to_vector<float>();
  CHECK(std::isnan(rows_max[0]));
  CHECK(rows_max[1] == 6);
  CHECK(std::isnan(rows_max[2]));
  const auto cols_max = max(x, std::vector<int64_t>{0}).to_vector<float>();
  CHECK(std::isnan(cols_max[0]));
  CHECK(std::isnan(cols_max[1]));
  CHECK(cols_max[2] == INFINITY);
  const auto cols_min = min(x, std::vector<int64_t>{0}).to_vector<float>();
  CHECK(std::isnan(cols_min[0]));
  CHECK(std::isnan(cols_min[1]));
  CHECK(cols_min[2] == 3);
  CHECK(std::isnan(max(x).item<float>()));
  CHECK(std::isnan(min(x).item<float>()));
  CHECK(std::isnan(sum(x).item<float>()));
  CHECK(std::isnan(sum(x, std::vector<int64_t>{0}).to_vector<float>()[0]));
  CHECK(std::isnan(sum(x, std::vector<int64_t>{1}).to_vector<float>()[2]));
  CHECK(std::isnan(logsumexp(x, std::vector<int64_t>{1}).to_vector<float>()[0]));
  // NaN in the first position of a column, then larger numbers.
  Tensor y = tensor({{NAN, 1}, {5, NAN}, {7, 2}});
  const auto ym = max(y, std::vector<int64_t>{0}).to_vector<float>();
  CHECK(std::isnan(ym[0]));
  CHECK(std::isnan(ym[1]));
  // Infinities.
  Tensor inf = tensor({{INFINITY, 1}, {-INFINITY, 2}});
  CHECK(max(inf, std::vector<int64_t>{1}).to_vector<float>() == std::vector<float>{INFINITY, 2});
  CHECK(min(inf, std::vector<int64_t>{1}).to_vector<float>() == std::vector<float>{1, -INFINITY});
  CHECK(std::isnan(sum(tensor({INFINITY, -INFINITY})).item<float>()));
  CHECK(sum(tensor({INFINITY, 1})).item<float>() == INFINITY);
  CHECK(logsumexp(tensor({INFINITY, 1})).item<float>() == INFINITY);
  CHECK(logsumexp(tensor({-INFINITY, -INFINITY})).item<float>() == -INFINITY);
  CHECK(logsumexp(tensor({-INFINITY, 0})).item<float>() == 0.0f);
  // argmax/argmin point at the first NaN, as NumPy does.
  CHECK(argmax(tensor({1, NAN, 3, NAN}), 0).item<int64_t>() == 1);
  CHECK(argmin(tensor({1, 0, NAN}), 0).item<int64_t>() == 2);
  CHECK(argmax(tensor({-INFINITY, -INFINITY}), 0).item<int64_t>() == 0);
}

TEST_CASE("reduce: logsumexp is stable for large magnitudes", "[reduce]") {
  Tensor x = tensor({1000, 1000, 999});
  CHECK(logsumexp(x).item<float>() == Approx(1000 + std::log(2 + std::exp(-1.0))).epsilon(1e-6));
  Tensor y = tensor({-1000, -1000});
  CHECK(logsumexp(y).item<float>() == Approx(-1000 + std::log(2.0)).epsilon(1e-6));
}

TEST_CASE("reduce: float32 sums accumulate accurately", "[reduce]") {
  // 2^24 + many small values: a float32 running sum would stall at 2^24.
  Tensor x = full({1 << 22}, 0.1);
  const double want = 0.1f * double(1 << 22);
  CHECK(std::abs(double(sum(x).item<float>()) - want) <= want * 1e-6);
  CHECK(std::abs(double(mean(x).item<float>()) - 0.1f) <= 2e-8);
  Tensor cols = full({1 << 20, 4}, 0.1);
  const auto colsum = sum(cols, std::vector<int64_t>{0}).to_vector<float>();
  CHECK(std::abs(double(colsum[3]) - 0.1f * double(1 << 20)) <= 0.1 * double(1 << 20) * 1e-7);
  // Column sums split into blocks of rows agree with a float64 sum, column by column, and a
  // column of -0.0 still sums to -0.0.
  Tensor many = testing::rand_tensor({40000, 33}, 58);
  CHECK(testing::allclose(sum(many, std::vector<int64_t>{0}).cast(kFloat64),
                          sum(many.cast(kFloat64), std::vector<int64_t>{0}), 1e-6, 1e-6));
  Tensor negzero = full({30000, 5}, -0.0);
  for (float v : sum(negzero, std::vector<int64_t>{0}).to_vector<float>()) CHECK(std::signbit(v));
}

TEST_CASE("reduce: results do not depend on the thread count", "[reduce][threads]") {
  Tensor x = testing::rand_tensor({512, 2049}, 55);
  Tensor x3 = testing::rand_tensor({64, 128, 65}, 56);
  // A conv bias gradient's shape (64 images x 26 x 26 pixels, 32 channels): split by rows.
  Tensor bias_grad = testing::rand_tensor({64 * 26 * 26, 32}, 57);
  auto run_all = [&] {
    std::vector<Tensor> r;
    r.push_back(sum(x));
    r.push_back(sum(x, std::vector<int64_t>{0}));
    r.push_back(sum(x, std::vector<int64_t>{1}));
    r.push_back(mean(x, std::vector<int64_t>{1}, true));
    r.push_back(max(x, std::vector<int64_t>{0}));
    r.push_back(min(x, std::vector<int64_t>{1}));
    r.push_back(logsumexp(x, std::vector<int64_t>{1}));
    r.push_back(sum(x3, std::vector<int64_t>{0, 2}));
    r.push_back(sum(x3, std::vector<int64_t>{1}));
    r.push_back(sum(x.transpose(), std::vector<int64_t>{1}));
    r.push_back(argmax(x, 1));
    r.push_back(argmin(x, 0));
    r.push_back(cumsum(x, 1));
    r.push_back(sum(bias_grad, std::vector<int64_t>{0}));
    r.push_back(sum(bias_grad.reshape({64, 26 * 26, 32}), std::vector<int64_t>{0, 1}));
    return r;
  };
  std::vector<Tensor> one, two;
  {
    testing::ThreadCountGuard g(1);
    one = run_all();
  }
  {
    testing::ThreadCountGuard g(2);
    two = run_all();
  }
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result #" << i);
    CHECK(identical(one[i], two[i]));
  }
}

TEST_CASE("reduce: argmax/argmin", "[reduce][arg]") {
  Tensor x = tensor({{1, 5, 5}, {7, 2, 7}});
  CHECK(argmax(x, 1).to_vector<int64_t>() == std::vector<int64_t>{1, 0});  // ties: first
  CHECK(argmax(x, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 0, 1});
  CHECK(argmin(x, -1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  CHECK(argmax(x, 1).dtype() == kInt64);
  CHECK(argmax(x, 1, true).shape() == Shape{2, 1});
  CHECK(argmax(Tensor::from_vector(std::vector<int32_t>{3, 9, 9, 1}), 0).item<int64_t>() == 1);
  CHECK(argmax(Tensor::from_vector(std::vector<bool>{false, true}), 0).item<int64_t>() == 1);
  CHECK(argmin(x.cast(kBFloat16), 1).to_vector<int64_t>() == std::vector<int64_t>{0, 1});
  Tensor r = testing::rand_tensor({9, 13, 4}, 57);
  for (int64_t axis = 0; axis < 3; ++axis) {
    // argmax agrees with gather-ing the max.
    Tensor idx = argmax(r, axis, true);
    Tensor m = max(r, std::vector<int64_t>{axis}, true);
    std::vector<int64_t> picked_shape = r.shape();
    picked_shape[size_t(axis)] = 1;
    const auto rv = r.to_vector<float>(), mv = m.to_vector<float>();
    const auto iv = idx.to_vector<int64_t>();
    const Strides st = contiguous_strides(r.shape()), ost = contiguous_strides(picked_shape);
    for (int64_t o = 0; o < int64_t(mv.size()); ++o) {
      int64_t rem = o, base = 0;
      for (int64_t d = 0; d < 3; ++d) {
        const int64_t k = rem / ost[size_t(d)];
        rem %= ost[size_t(d)];
        base += k * st[size_t(d)];
      }
      REQUIRE(rv[size_t(base + iv[size_t(o)] * st[size_t(axis)])] == mv[size_t(o)]);
    }
  }
  REQUIRE_THROWS_WITH(argmax(x, 2), Contains("argmax: axis 2 is out of range for rank 2"));
  REQUIRE_THROWS_WITH(argmin(Tensor::scalar(1), 0), Contains("argmin: axis 0 is out of range for rank 0"));
}

TEST_CASE("reduce: cumsum forward, exclusive and reversed along any axis", "[reduce][cumsum]") {
  Tensor x = tensor({{1, 2, 3}, {4, 5, 6}});
  CHECK(cumsum(x, 1).to_vector<float>() == std::vector<float>{1, 3, 6, 4, 9, 15});
  CHECK(cumsum(x, 0).to_vector<float>() == std::vector<float>{1, 2, 3, 5, 7, 9});
  CHECK(cumsum(x, -1, true).to_vector<float>() == std::vector<float>{0, 1, 3, 0, 4, 9});
  CHECK(cumsum(x, 1, false, true).to_vector<float>() == std::vector<float>{6, 5, 3, 15, 11, 6});
  CHECK(cumsum(x, 1, true, true).to_vector<float>() == std::vector<float>{5, 3, 0, 11, 6, 0});
  CHECK(cumsum(x, 0, true, true).to_vector<float>() == std::vector<float>{4, 5, 6, 0, 0, 0});
  Tensor i = Tensor::from_vector(std::vector<int64_t>{1, 2, 3});
  CHECK(cumsum(i, 0).dtype() == kInt64);
  CHECK(cumsum(i, 0).to_vector<int64_t>() == std::vector<int64_t>{1, 3, 6});
  CHECK(cumsum(tensor({1, NAN, 1}), 0).to_vector<float>()[0] == 1);
  CHECK(std::isnan(cumsum(tensor({1, NAN, 1}), 0).to_vector<float>()[2]));
  // Accumulates in float64: 2^24 + 1 + 1 does not stall.
  Tensor big = tensor({16777216.0f, 1, 1});
  CHECK(cumsum(big, 0).to_vector<float>()[2] == 16777218.0f);
  REQUIRE_THROWS_WITH(cumsum(zeros({2}, kBool), 0), Contains("cumsum: expected a numeric tensor, got bool"));
  REQUIRE_THROWS_WITH(cumsum(x, 2), Contains("cumsum: axis 2 is out of range for rank 2"));
}

TEST_CASE("reduce: axis errors name the op", "[reduce][errors]") {
  Tensor x = zeros({2, 3});
  REQUIRE_THROWS_WITH(sum(x, std::vector<int64_t>{2}), Contains("sum: axis 2 is out of range for rank 2 (expected -2 <= axis < 2)"));
  REQUIRE_THROWS_WITH(max(x, std::vector<int64_t>{-3}), Contains("max: axis -3 is out of range for rank 2"));
  REQUIRE_THROWS_WITH(sum(x, std::vector<int64_t>{1, -1}), Contains("sum: repeated axis in the axis list"));
  REQUIRE_THROWS_WITH(mean(x, std::vector<int64_t>{0, 0}), Contains("mean: repeated axis"));
}
