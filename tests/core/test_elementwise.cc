// Unary and binary elementwise ops: values against std:: references, broadcasting edge
// cases, non-contiguous inputs, zero-size and rank-0 tensors, NaN/Inf propagation.
#include <functional>

#include "tests/core/core_test_helpers.h"

using namespace strata;
using Catch::Matchers::Contains;
using strata::testing::identical;
using strata::testing::noncontiguous_variants;

namespace {

struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input domain
};

double gelu_exact_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh_ref(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double v) { return -v; }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double v) { return std::exp(v); }, -5, 5},
      {"log", [](const Tensor& x) { return log(x); }, [](double v) { return std::log(v); }, 0.01, 10},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double v) { return std::sqrt(v); }, 0, 10},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double v) { return 1 / std::sqrt(v); }, 0.1, 10},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double v) { return std::abs(v); }, -3, 3},
      {"square", [](const Tensor& x) { return square(x); }, [](double v) { return v * v; }, -3, 3},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double v) { return std::sin(v); }, -7, 7},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double v) { return std::cos(v); }, -7, 7},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double v) { return std::tanh(v); }, -5, 5},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double v) { return 1 / (1 + std::exp(-v)); }, -8, 8},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double v) { return v > 0 ? v : 0; }, -3, 3},
      {"softplus", [](const Tensor& x) { return softplus(x); }, [](double v) { return std::log1p(std::exp(v)); }, -10, 10},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_exact_ref, -4, 4},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, true); }, gelu_tanh_ref, -4, 4},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double v) { return double((0 < v) - (v < 0)); }, -3, 3},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double v) { return 1 / v; }, 0.1, 5},
      {"floor", [](const Tensor& x) { return floor(x); }, [](double v) { return std::floor(v); }, -5, 5},
      {"stop_gradient", [](const Tensor& x) { return stop_gradient(x); }, [](double v) { return v; }, -3, 3},
  };
  return cases;
}

Tensor reference_unary(const Tensor& x, const std::function<double(double)>& f) {
  auto v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return Tensor::from_vector(v, x.shape(), kFloat64);
}

}  // namespace

TEST_CASE("elementwise: unary ops match std:: references in float32 and float64", "[elementwise]") {
  for (const auto& c : unary_cases()) {
    for (DType dt : {kFloat32, kFloat64}) {
      INFO(c.name << " " << dtype_name(dt));
      Tensor x = testing::rand_tensor({7, 33}, 11, c.lo, c.hi, dt);
      Tensor y = c.op(x);
      CHECK(y.dtype() == dt);
      CHECK(y.shape() == x.shape());
      const double tol = dt == kFloat32 ? 2e-6 : 1e-13;
      CHECK(testing::allclose(y.cast(kFloat64), reference_unary(x, c.ref), tol, tol));
    }
  }
}

TEST_CASE("elementwise: unary ops on float16/bfloat16 round the float32 result", "[elementwise][half]") {
  for (const auto& c : unary_cases()) {
    for (DType dt : {kFloat16, kBFloat16}) {
      INFO(c.name << " " << dtype_name(dt));
      Tensor x = testing::rand_tensor({5, 9}, 12, c.lo, c.hi, dt);
      Tensor y = c.op(x);
      REQUIRE(y.dtype() == dt);
      // The exact value of the float32 computation, rounded once to the half type.
      Tensor want = c.op(x.cast(kFloat32)).cast(dt);
      CHECK(testing::allclose(y.cast(kFloat32), want.cast(kFloat32), dt == kFloat16 ? 1e-3 : 8e-3, 1e-3));
    }
  }
}

TEST_CASE("elementwise: unary ops on non-contiguous inputs equal their contiguous copies", "[elementwise][strided]") {
  for (const auto& c : unary_cases()) {
    INFO(c.name);
    Tensor x = testing::rand_tensor({6, 10}, 13, c.lo, c.hi);
    const Tensor want = c.op(x);
    for (const Tensor& v : noncontiguous_variants(x)) {
      REQUIRE_FALSE(v.is_contiguous());
      CHECK(identical(c.op(v), want));
    }
    // A broadcast (stride-0) input.
    Tensor row = testing::rand_tensor({10}, 14, c.lo, c.hi);
    CHECK(identical(c.op(row.broadcast_to({4, 10})), c.op(row.broadcast_to({4, 10}).contiguous())));
    // A rank-3 permutation that no dimension merge can hide.
    Tensor z = testing::rand_tensor({3, 4, 5}, 15, c.lo, c.hi);
    CHECK(identical(c.op(z.permute({2, 0, 1})), c.op(z.permute({2, 0, 1}).contiguous())));
  }
}

TEST_CASE("elementwise: integer and bool unary ops", "[elementwise]") {
  Tensor i = Tensor::from_vector(std::vector<int32_t>{-3, 0, 5});
  CHECK(neg(i).to_vector<int>() == std::vector<int>{3, 0, -5});
  CHECK(abs(i).to_vector<int>() == std::vector<int>{3, 0, 5});
  CHECK(square(i).to_vector<int>() == std::vector<int>{9, 0, 25});
  CHECK(relu(i).to_vector<int>() == std::vector<int>{0, 0, 5});
  CHECK(sign(i).to_vector<int>() == std::vector<int>{-1, 0, 1});
  CHECK(floor(i).to_vector<int>() == std::vector<int>{-3, 0, 5});
  CHECK(neg(i).dtype() == kInt32);
  CHECK(is_finite(i).to_vector<bool>() == std::vector<bool>{true, true, true});
  Tensor l = Tensor::from_vector(std::vector<int64_t>{int64_t(1) << 40, -7});
  CHECK(neg(l).to_vector<int64_t>() == std::vector<int64_t>{-(int64_t(1) << 40), 7});
  Tensor b = Tensor::from_vector(std::vector<bool>{true, false});
  CHECK(logical_not(b).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(logical_not(testing::strided_copy(b)).to_vector<bool>() == std::vector<bool>{false, true});
  CHECK(is_finite(b).to_vector<bool>() == std::vector<bool>{true, true});
  REQUIRE_THROWS_WITH(exp(i), Contains("exp: expected a floating-point tensor, got int32 with shape [3]"));
  REQUIRE_THROWS_WITH(sigmoid(l), Contains("sigmoid: expected a floating-point tensor, got int64"));
  REQUIRE_THROWS_WITH(neg(b), Contains("neg: expected a numeric tensor, got bool"));
  REQUIRE_THROWS_WITH(logical_not(i), Contains("logical_not: expected a bool tensor, got int32"));
}

TEST_CASE("elementwise: special values", "[elementwise][nan]") {
  Tensor x = Tensor::from_vector(std::vector<float>{NAN, INFINITY, -INFINITY, 0.0f, -0.0f});
  auto v = [](const Tensor& t) { return t.to_vector<float>(); };
  CHECK(std::isnan(v(exp(x))[0]));
  CHECK(v(exp(x))[1] == INFINITY);
  CHECK(v(exp(x))[2] == 0.0f);  // exactly: exp(-inf) is 0, not the smallest normal
  CHECK(v(exp(tensor({-200.0f, -80.0f})))[0] == 0.0f);
  CHECK(v(exp(tensor({-200.0f, -80.0f})))[1] == Approx(std::exp(-80.0)).epsilon(1e-5));
  CHECK(exp(Tensor::from_vector(std::vector<double>{-INFINITY, -800})).to_vector<double>() == std::vector<double>{0, 0});
  CHECK(std::isnan(v(relu(x))[0]));  // relu keeps NaN wherever it sits
  CHECK(std::isnan(relu(testing::strided_copy(x)).to_vector<float>()[0]));
  CHECK(std::isnan(relu(full({37}, NAN)).to_vector<float>()[36]));
  CHECK(v(log(x))[3] == -INFINITY);
  CHECK(std::isnan(v(log(tensor({-1.0f})))[0]));
  CHECK(v(tanh(x))[1] == 1.0f);
  CHECK(v(tanh(x))[2] == -1.0f);
  CHECK(v(sigmoid(x))[1] == 1.0f);
  CHECK(v(sigmoid(x))[2] == 0.0f);
  CHECK(std::isnan(v(sign(x))[0]));
  CHECK(v(sign(x))[1] == 1.0f);
  CHECK(v(reciprocal(x))[3] == INFINITY);
  CHECK(v(reciprocal(x))[4] == -INFINITY);
  CHECK(std::isnan(v(abs(x))[0]));
  CHECK(v(abs(x))[2] == INFINITY);
  CHECK(is_finite(x).to_vector<bool>() == std::vector<bool>{false, false, false, true, true});
  // softplus never overflows: log(1 + e^x) ~ x for large x, ~ e^x for very negative x.
  Tensor big = tensor({100.0f, -100.0f, 1000.0f});
  CHECK(v(softplus(big))[0] == 100.0f);
  CHECK(v(softplus(big))[1] >= 0.0f);  // e^-100 is below float32's normal range: 0 or tiny
  CHECK(v(softplus(big))[1] <= 1e-38f);
  CHECK(v(softplus(tensor({-20.0f})))[0] == Approx(std::exp(-20.0)).epsilon(1e-5));
  CHECK(v(softplus(big))[2] == 1000.0f);
  CHECK(v(softplus(x))[1] == INFINITY);
  CHECK(v(softplus(x))[2] == 0.0f);
  // sigmoid saturates without NaN.
  CHECK(v(sigmoid(tensor({-1000.0f})))[0] == 0.0f);
  CHECK(v(sigmoid(tensor({1000.0f})))[0] == 1.0f);
}

namespace {

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(abs(a), b); },
       [](double a, double b) { return std::pow(std::abs(a), b); }},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, [](double a, double b) { return std::max(a, b); }},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, [](double a, double b) { return std::min(a, b); }},
  };
  return cases;
}

struct CompareCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<bool(double, double)> ref;
};

const std::vector<CompareCase>& compare_cases() {
  static const std::vector<CompareCase> cases = {
      {"equal", [](const Tensor& a, const Tensor& b) { return equal(a, b); }, [](double a, double b) { return a == b; }},
      {"not_equal", [](const Tensor& a, const Tensor& b) { return not_equal(a, b); }, [](double a, double b) { return a != b; }},
      {"less", [](const Tensor& a, const Tensor& b) { return less(a, b); }, [](double a, double b) { return a < b; }},
      {"less_equal", [](const Tensor& a, const Tensor& b) { return less_equal(a, b); }, [](double a, double b) { return a <= b; }},
      {"greater", [](const Tensor& a, const Tensor& b) { return greater(a, b); }, [](double a, double b) { return a > b; }},
      {"greater_equal", [](const Tensor& a, const Tensor& b) { return greater_equal(a, b); }, [](double a, double b) { return a >= b; }},
  };
  return cases;
}

// NumPy broadcasting, computed naively in float64.
Tensor reference_binary(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "reference");
  const Tensor ab = a.broadcast_to(shape), bb = b.broadcast_to(shape);
  const auto va = ab.to_vector<double>(), vb = bb.to_vector<double>();
  std::vector<double> out(va.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = f(va[i], vb[i]);
  return Tensor::from_vector(out, shape, kFloat64);
}

// Pairs of broadcast-compatible shapes covering the edge cases.
const std::vector<std::pair<Shape, Shape>>& broadcast_pairs() {
  static const std::vector<std::pair<Shape, Shape>> pairs = {
      {{3, 4}, {3, 4}},       {{3, 4}, {4}},          {{4}, {3, 4}},       {{3, 1}, {1, 4}},
      {{2, 1, 4}, {3, 1}},    {{3, 4}, {}},           {{}, {3, 4}},        {{}, {}},
      {{1}, {5}},             {{2, 3, 1, 5}, {4, 1}}, {{0, 3}, {1, 3}},    {{0, 3}, {3}},
      {{2, 0}, {2, 1}},       {{1, 1, 1}, {7}},       {{5, 1, 3}, {1, 2, 1}}, {{130, 70}, {70}},
  };
  return pairs;
}

}  // namespace

TEST_CASE("elementwise: binary ops broadcast like NumPy", "[elementwise][broadcast]") {
  for (const auto& c : binary_cases()) {
    for (const auto& [sa, sb] : broadcast_pairs()) {
      for (DType dt : {kFloat32, kFloat64}) {
        INFO(c.name << " " << shape_str(sa) << " with " << shape_str(sb) << " " << dtype_name(dt));
        Tensor a = testing::rand_tensor(sa, 21, -2, 2, dt);
        Tensor b = testing::rand_tensor(sb, 22, 0.5, 2, dt);
        Tensor y = c.op(a, b);
        CHECK(y.shape() == broadcast_shapes(sa, sb, "test"));
        CHECK(y.dtype() == dt);
        const double tol = dt == kFloat32 ? 2e-6 : 1e-14;
        CHECK(testing::allclose(y.cast(kFloat64), reference_binary(a, b, c.ref), tol, tol));
      }
    }
  }
}

TEST_CASE("elementwise: comparisons and logical ops", "[elementwise]") {
  Tensor a = tensor({1, 2, 3, NAN});
  Tensor b = tensor({3, 2, 1, NAN});
  for (const auto& c : compare_cases()) {
    INFO(c.name);
    Tensor y = c.op(a, b);
    CHECK(y.dtype() == kBool);
    const auto got = y.to_vector<bool>();
    for (size_t i = 0; i < 4; ++i) CHECK(got[i] == c.ref(a.to_vector<double>()[i], b.to_vector<double>()[i]));
    for (const auto& [sa, sb] : broadcast_pairs()) {
      INFO(shape_str(sa) << " with " << shape_str(sb));
      // Small integers so that equality happens often.
      Tensor x = floor(testing::rand_tensor(sa, 23, 0, 3));
      Tensor z = floor(testing::rand_tensor(sb, 24, 0, 3));
      Tensor want = reference_binary(x, z, [&](double u, double v) { return c.ref(u, v) ? 1.0 : 0.0; });
      CHECK(c.op(x, z).to_vector<double>() == want.to_vector<double>());
      CHECK(c.op(x.cast(kInt32), z.cast(kInt64)).to_vector<double>() == want.to_vector<double>());
      CHECK(c.op(x.cast(kFloat16), z.cast(kFloat16)).to_vector<double>() == want.to_vector<double>());
    }
  }
  Tensor t = Tensor::from_vector(std::vector<bool>{true, true, false, false});
  Tensor f = Tensor::from_vector(std::vector<bool>{true, false, true, false});
  CHECK(logical_and(t, f).to_vector<bool>() == std::vector<bool>{true, false, false, false});
  CHECK(logical_or(t, f).to_vector<bool>() == std::vector<bool>{true, true, true, false});
  CHECK(equal(t, f).to_vector<bool>() == std::vector<bool>{true, false, false, true});
  CHECK(not_equal(t, f).to_vector<bool>() == std::vector<bool>{false, true, true, false});
  CHECK(logical_and(t.reshape({4, 1}), f).shape() == Shape{4, 4});
  REQUIRE_THROWS_WITH(logical_and(t, a), Contains("logical_and: expected bool tensors, got bool and float32"));
  // Ordering of bools is false < true, as in NumPy.
  CHECK(less(t, f).to_vector<bool>() == std::vector<bool>{false, false, true, false});
  CHECK(greater(t, f).to_vector<bool>() == std::vector<bool>{false, true, false, false});
  CHECK(less_equal(t, f).to_vector<bool>() == std::vector<bool>{true, false, true, true});
  CHECK(greater_equal(t, f).to_vector<bool>() == std::vector<bool>{true, true, false, true});
}

TEST_CASE("elementwise: integer arithmetic", "[elementwise]") {
  Tensor a = Tensor::from_vector(std::vector<int32_t>{7, -7, 3}, {3});
  Tensor b = Tensor::from_vector(std::vector<int32_t>{2, 2, -5}, {3});
  CHECK((a + b).to_vector<int>() == std::vector<int>{9, -5, -2});
  CHECK((a - b).to_vector<int>() == std::vector<int>{5, -9, 8});
  CHECK((a * b).to_vector<int>() == std::vector<int>{14, -14, -15});
  CHECK(maximum(a, b).to_vector<int>() == std::vector<int>{7, 2, 3});
  CHECK(minimum(a, b).to_vector<int>() == std::vector<int>{2, -7, -5});
  CHECK((a + b).dtype() == kInt32);
  REQUIRE_THROWS_WITH(div(a, b), Contains("div: expected floating-point tensors, got int32 and int32"));
  REQUIRE_THROWS_WITH(pow(a, b), Contains("pow: expected floating-point tensors"));
  CHECK(div(a, b.cast(kFloat32)).to_vector<float>() == std::vector<float>{3.5f, -3.5f, -0.6f});
}

TEST_CASE("elementwise: binary ops on non-contiguous inputs equal their contiguous copies", "[elementwise][strided]") {
  std::vector<std::function<Tensor(const Tensor&, const Tensor&)>> ops;
  for (const auto& c : binary_cases()) ops.push_back(c.op);
  for (const auto& c : compare_cases()) ops.push_back(c.op);
  ops.push_back([](const Tensor& a, const Tensor& b) { return where(greater(a, b), a, b); });
  for (size_t k = 0; k < ops.size(); ++k) {
    INFO("op #" << k);
    Tensor a = testing::rand_tensor({8, 12}, 31, -2, 2);
    Tensor b = testing::rand_tensor({8, 12}, 32, 0.5, 2);
    const Tensor want = ops[k](a, b);
    for (const Tensor& va : noncontiguous_variants(a)) {
      CHECK(identical(ops[k](va, b), want));
      for (const Tensor& vb : noncontiguous_variants(b)) CHECK(identical(ops[k](va, vb), want));
    }
    // Broadcasting a non-contiguous row against a transposed matrix.
    Tensor row = testing::rand_tensor({12}, 33, 0.5, 2);
    CHECK(identical(ops[k](a.transpose().contiguous().transpose(), testing::strided_copy(row)), ops[k](a, row)));
    // Scalar on the left (the stride-0 operand first).
    Tensor s = Tensor::scalar(0.75);
    CHECK(identical(ops[k](s, testing::transposed_copy(b)), ops[k](s, b)));
  }
}

TEST_CASE("elementwise: relu_grad is the select where(x > 0, g, 0), special values included", "[elementwise][nan]") {
  // x: positive, zero, negative, NaN, +-inf; g: finite, inf and NaN against each.
  const std::vector<float> xs = {2, 0, -0.0f, -3, NAN, INFINITY, -INFINITY};
  const std::vector<float> gs = {1.5f, -INFINITY, NAN, 7};
  std::vector<float> xv, gv;
  for (float x : xs)
    for (float g : gs) xv.push_back(x), gv.push_back(g);
  for (DType dtype : {kFloat32, kFloat64, kBFloat16}) {
    INFO(dtype_name(dtype));
    const Tensor x = cast(Tensor::from_vector(xv), dtype), g = cast(Tensor::from_vector(gv), dtype);
    const Tensor got = relu_grad(x, g);
    const Tensor want = where(greater(x, zeros({}, dtype)), g, zeros({}, dtype));
    REQUIRE(got.dtype() == dtype);
    const auto a = got.to_vector<double>(), b = want.to_vector<double>();
    for (size_t i = 0; i < a.size(); ++i) {
      INFO("x " << xv[i] << ", g " << gv[i]);
      CHECK((std::isnan(a[i]) ? std::isnan(b[i]) : a[i] == b[i]));
      if (!(xv[i] > 0)) CHECK(a[i] == 0.0);  // 0, not NaN, even for a NaN or infinite g
    }
  }
  // Integers; broadcasting a scalar gradient; and relu's gradient goes through it.
  CHECK(relu_grad(Tensor::from_vector(std::vector<int32_t>{-2, 0, 3}), Tensor::from_vector(std::vector<int32_t>{5, 6, 7}))
            .to_vector<int32_t>() == std::vector<int32_t>{0, 0, 7});
  CHECK(relu_grad(tensor({-1, 2, 3}), Tensor::scalar(4.0, kFloat32)).to_vector<float>() == std::vector<float>{0, 4, 4});
}

TEST_CASE("elementwise: NaN and Inf propagation in maximum/minimum", "[elementwise][nan]") {
  Tensor a = tensor({NAN, 1, NAN, INFINITY, -INFINITY, 2});
  Tensor b = tensor({1, NAN, NAN, 5, 3, -INFINITY});
  const auto mx = maximum(a, b).to_vector<float>();
  const auto mn = minimum(a, b).to_vector<float>();
  CHECK(std::isnan(mx[0]));
  CHECK(std::isnan(mx[1]));
  CHECK(std::isnan(mx[2]));
  CHECK(mx[3] == INFINITY);
  CHECK(mx[4] == 3);
  CHECK(mx[5] == 2);
  CHECK(std::isnan(mn[0]));
  CHECK(std::isnan(mn[1]));
  CHECK(std::isnan(mn[2]));
  CHECK(mn[3] == 5);
  CHECK(mn[4] == -INFINITY);
  CHECK(mn[5] == -INFINITY);
  // Through broadcasting and float64 as well.
  Tensor n = Tensor::from_vector(std::vector<double>{NAN}, {});
  CHECK(std::isnan(maximum(ones({3}, kFloat64), n).to_vector<double>()[2]));
  // clip keeps NaN.
  CHECK(std::isnan(clip(tensor({NAN}), 0, 1).item<float>()));
  // Arithmetic with NaN/Inf follows IEEE.
  const auto s = (a + b).to_vector<float>();
  CHECK(std::isnan(s[0]));
  CHECK(s[3] == INFINITY);
  CHECK(std::isnan(s[5] + s[3]));
  CHECK(std::isnan((tensor({INFINITY}) - tensor({INFINITY})).item<float>()));
  CHECK((tensor({1.0f}) / tensor({0.0f})).item<float>() == INFINITY);
}

TEST_CASE("elementwise: where and clip", "[elementwise]") {
  Tensor c = Tensor::from_vector(std::vector<bool>{true, false, true});
  Tensor a = tensor({1, 2, 3});
  Tensor b = tensor({10, 20, 30});
  CHECK(where(c, a, b).to_vector<float>() == std::vector<float>{1, 20, 3});
  // All three broadcast together.
  Tensor w = where(c.reshape({3, 1}), a, Tensor::scalar(-1));
  CHECK(w.shape() == Shape{3, 3});
  CHECK(w.to_vector<float>() == std::vector<float>{1, 2, 3, -1, -1, -1, 1, 2, 3});
  CHECK(where(c, Tensor::from_vector(std::vector<int32_t>{1, 2, 3}), b).dtype() == kFloat32);
  CHECK(where(zeros({0}, kBool), zeros({0}), zeros({0})).shape() == Shape{0});
  REQUIRE_THROWS_WITH(where(a, a, b), Contains("where: condition must be bool, got float32"));
  REQUIRE_THROWS_WITH(where(c, a, ones({2})), Contains("where: shapes [3] and [2] cannot be broadcast together"));

  CHECK(clip(tensor({-5, 0.5f, 5}), -1, 1).to_vector<float>() == std::vector<float>{-1, 0.5f, 1});
  CHECK(clip(Tensor::from_vector(std::vector<int32_t>{-5, 0, 5}), -2, 2).to_vector<int>() ==
        std::vector<int>{-2, 0, 2});
  REQUIRE_THROWS_WITH(clip(a, 2, 1), Contains("clip: lower bound 2 exceeds upper bound 1"));
}

TEST_CASE("elementwise: scalar operators", "[elementwise]") {
  Tensor a = tensor({1, 2, 4});
  CHECK((a + 1.0).to_vector<float>() == std::vector<float>{2, 3, 5});
  CHECK((1.0 + a).to_vector<float>() == std::vector<float>{2, 3, 5});
  CHECK((a - 1.0).to_vector<float>() == std::vector<float>{0, 1, 3});
  CHECK((1.0 - a).to_vector<float>() == std::vector<float>{0, -1, -3});
  CHECK((a * 2.0).to_vector<float>() == std::vector<float>{2, 4, 8});
  CHECK((2.0 * a).to_vector<float>() == std::vector<float>{2, 4, 8});
  CHECK((a / 2.0).to_vector<float>() == std::vector<float>{0.5f, 1, 2});
  CHECK((4.0 / a).to_vector<float>() == std::vector<float>{4, 2, 1});
  CHECK((-a).to_vector<float>() == std::vector<float>{-1, -2, -4});
  CHECK((a + a).to_vector<float>() == std::vector<float>{2, 4, 8});
  CHECK((a - a).to_vector<float>() == std::vector<float>{0, 0, 0});
  CHECK((a * a).to_vector<float>() == std::vector<float>{1, 4, 16});
  CHECK((a / a).to_vector<float>() == std::vector<float>{1, 1, 1});
  CHECK(scalar_like(a.cast(kFloat64), 3).dtype() == kFloat64);
  CHECK(scalar_like(a, 3).ndim() == 0);
}

TEST_CASE("elementwise: zero-size and rank-0 operands", "[elementwise]") {
  Tensor e = zeros({0, 4});
  CHECK(exp(e).shape() == Shape{0, 4});
  CHECK((e + ones({4})).shape() == Shape{0, 4});
  CHECK((e * Tensor::scalar(2)).shape() == Shape{0, 4});
  CHECK(maximum(e, e).shape() == Shape{0, 4});
  CHECK(less(e, 1.0 + e).shape() == Shape{0, 4});
  CHECK(e.transpose().contiguous().shape() == Shape{4, 0});
  Tensor s = Tensor::scalar(-2.0);
  CHECK(abs(s).ndim() == 0);
  CHECK(abs(s).item<float>() == 2.0f);
  CHECK((s * s).ndim() == 0);
  CHECK(maximum(s, Tensor::scalar(1)).item<float>() == 1.0f);
  CHECK(equal(s, s).item<bool>());
  REQUIRE_THROWS_WITH(e + ones({3}), Contains("add: shapes [0,4] and [3] cannot be broadcast together"));
  REQUIRE_THROWS_WITH(ones({2, 3}) + ones({4}), Contains("add: shapes [2,3] and [4] cannot be broadcast together"));
  REQUIRE_THROWS_WITH(ones({2, 3}) * ones({3, 2}), Contains("mul: shapes [2,3] and [3,2] cannot be broadcast together"));
}

TEST_CASE("elementwise: large tensors give the same values at 1 and 2 threads", "[elementwise][threads]") {
  // An odd length, so the two threads' halves start at unaligned positions, and a strided
  // operand, so runs are short.
  const int64_t n = (1 << 21) + 37;
  Tensor a = testing::rand_tensor({n}, 41);
  Tensor b = testing::strided_copy(testing::rand_tensor({n}, 42));
  auto compute = [&] { return tanh(exp(a) * b + sqrt(abs(a))) + sigmoid(b); };
  Tensor one, two;
  {
    testing::ThreadCountGuard g(1);
    one = compute();
  }
  {
    testing::ThreadCountGuard g(2);
    two = compute();
  }
  CHECK(identical(one, two));
}
