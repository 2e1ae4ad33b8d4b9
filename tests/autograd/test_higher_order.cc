// Higher derivatives by nested tapes, compared with closed forms.
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;
using strata::testing::rand64;

namespace {

// d^2/dx^2 of an elementwise f: the inner tape gives f'(x); the outer tape records that
// computation and differentiates sum(f'(x)), whose gradient is f''(x).
Tensor second_derivative(const std::function<Tensor(const Tensor&)>& f, const Tensor& x) {
  GradientTape outer;
  outer.watch(x);
  Tensor first;
  {
    GradientTape inner;
    inner.watch(x);
    first = inner.gradient(sum(f(x)), x);
  }
  REQUIRE(first.defined());
  Tensor second = outer.gradient(sum(first), x);
  REQUIRE(second.defined());
  return second;
}

}  // namespace

TEST_CASE("higher order: second derivatives of elementwise functions", "[higher-order]") {
  Tensor x = rand64({7}, 42, -2, 2);
  SECTION("tanh: -2 tanh (1 - tanh^2)") {
    Tensor t = tanh(x);
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return tanh(v); }, x),
                     -2.0 * t * (1.0 - t * t), 1e-10, 1e-12);
  }
  SECTION("sin: -sin") {
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return sin(v); }, x), -sin(x), 1e-10,
                     1e-12);
  }
  SECTION("x^3: 6x") {
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return v * v * v; }, x), 6.0 * x,
                     1e-10, 1e-12);
  }
  SECTION("exp: exp") {
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return exp(v); }, x), exp(x), 1e-10,
                     1e-12);
  }
  SECTION("sigmoid: s (1 - s)(1 - 2 s)") {
    Tensor s = sigmoid(x);
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return sigmoid(v); }, x),
                     s * (1.0 - s) * (1.0 - 2.0 * s), 1e-10, 1e-12);
  }
  SECTION("pow(x, 3) with a tensor exponent: 6x") {
    Tensor xp = rand64({5}, 43, 0.5, 2);
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return pow(v, full_like(v, 3.0)); }, xp),
                     6.0 * xp, 1e-10, 1e-12);
  }
  SECTION("log: -1/x^2") {
    Tensor xp = rand64({5}, 44, 0.5, 2);
    REQUIRE_CLOSE(second_derivative([](const Tensor& v) { return log(v); }, xp),
                     -1.0 / (xp * xp), 1e-10, 1e-12);
  }
}

TEST_CASE("higher order: mixed partial d/dy (d/dx x*y*y) = 2y", "[higher-order]") {
  Tensor x = Tensor::scalar(1.5, kFloat64);
  Tensor y = Tensor::scalar(-0.75, kFloat64);
  GradientTape outer;
  outer.watch(y);
  Tensor dx;
  {
    GradientTape inner;
    inner.watch(x);
    inner.watch(y);
    dx = inner.gradient(x * y * y, x);  // = y^2
  }
  REQUIRE(dx.item<double>() == Approx(0.5625));
  Tensor dxy = outer.gradient(dx, y);
  REQUIRE(dxy.item<double>() == Approx(-1.5));  // 2y
}

TEST_CASE("higher order: third derivative by three nested tapes", "[higher-order]") {
  Tensor x = Tensor::from_vector(std::vector<double>{-1.5, 0.5, 2.0});
  GradientTape t3;
  t3.watch(x);
  Tensor d2;
  {
    GradientTape t2;
    t2.watch(x);
    Tensor d1;
    {
      GradientTape t1;
      t1.watch(x);
      d1 = t1.gradient(sum(square(square(x))), x);  // 4x^3
    }
    d2 = t2.gradient(sum(d1), x);  // 12x^2
  }
  Tensor d3 = t3.gradient(sum(d2), x);  // 24x
  REQUIRE_CLOSE(d3, 24.0 * x, 1e-12, 1e-12);
}

TEST_CASE("higher order: Hessian-vector product of a small MLP loss", "[higher-order]") {
  // Checks the outer gradient against finite differences of the inner gradient.
  Tensor xin = rand64({4, 3}, 1);
  Tensor w2 = rand64({5, 2}, 2);
  auto grad_fn = [&](const Tensor& w1) {
    GradientTape tape;
    tape.watch(w1);
    Tensor loss = sum(square(matmul(tanh(matmul(xin, w1)), w2)));
    return tape.gradient(loss, w1);
  };
  Tensor w1 = rand64({3, 5}, 3);
  Tensor v = rand64({3, 5}, 4);
  GradientTape outer;
  outer.watch(w1);
  Tensor g = grad_fn(w1);
  Tensor hv = outer.gradient(sum(g * v), w1);  // H v (H is symmetric)
  const double eps = 1e-5;
  Tensor fd = (grad_fn(w1 + v * eps) - grad_fn(w1 - v * eps)) / (2 * eps);
  REQUIRE_CLOSE(hv, fd, 1e-6, 1e-8);
}
