// Finite-difference checks (float64) of the gradients of the elementwise, reduction and
// shape/indexing ops, over several shapes, broadcasts and non-contiguous (strided) inputs.
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;
using strata::testing::away_from_zero64;
using strata::testing::check_gradient;
using strata::testing::distinct64;
using strata::testing::rand64;

namespace {

using Unary = std::function<Tensor(const Tensor&)>;
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;

struct UnaryCase {
  const char* name;
  Unary f;
  // Input values: uniform in [lo, hi), or |x| in [lo, hi] with a random sign.
  double lo, hi;
  bool signed_magnitude = false;
};

Tensor unary_input(const UnaryCase& c, const Shape& shape, uint64_t seed) {
  return c.signed_magnitude ? away_from_zero64(shape, seed, c.lo, c.hi)
                            : rand64(shape, seed, c.lo, c.hi);
}

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return neg(x); }, -2, 2},
      {"exp", [](const Tensor& x) { return exp(x); }, -2, 2},
      {"log", [](const Tensor& x) { return log(x); }, 0.2, 3},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, 0.2, 3},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, 0.2, 3},
      {"abs", [](const Tensor& x) { return abs(x); }, 0.1, 2, true},
      {"square", [](const Tensor& x) { return square(x); }, -2, 2},
      {"sin", [](const Tensor& x) { return sin(x); }, -3, 3},
      {"cos", [](const Tensor& x) { return cos(x); }, -3, 3},
      {"tanh", [](const Tensor& x) { return tanh(x); }, -2, 2},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, -4, 4},
      {"relu", [](const Tensor& x) { return relu(x); }, 0.1, 2, true},
      {"softplus", [](const Tensor& x) { return softplus(x); }, -4, 4},
      {"gelu(erf)", [](const Tensor& x) { return gelu(x, false); }, -3, 3},
      {"gelu(tanh)", [](const Tensor& x) { return gelu(x, true); }, -3, 3},
      {"erf", [](const Tensor& x) { return erf(x); }, -2, 2},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, 0.3, 2, true},
      {"contiguous(copy)", [](const Tensor& x) { return contiguous(x); }, -1, 1},
      {"x*x*x", [](const Tensor& x) { return x * x * x; }, -2, 2},
      {"scalar ops", [](const Tensor& x) { return (2.0 - x) * 3.0 / (x + 4.0) - 1.5 / (x - 5.0); },
       -2, 2},
  };
}

}  // namespace

TEST_CASE("gradcheck: unary ops over shapes and strided inputs", "[gradcheck]") {
  const std::vector<Shape> shapes = {{}, {5}, {3, 4}, {2, 3, 4}};
  uint64_t seed = 100;
  for (const UnaryCase& c : unary_cases()) {
    for (const Shape& s : shapes) {
      check_gradient(std::string(c.name) + " " + shape_str(s),
                     [&](const std::vector<Tensor>& xs) { return c.f(xs[0]); },
                     {unary_input(c, s, ++seed)});
    }
    // Non-contiguous inputs: a transposed view and a strided slice, taken inside fn so
    // the view's own gradient is part of the check.
    check_gradient(std::string(c.name) + " transposed",
                   [&](const std::vector<Tensor>& xs) { return c.f(transpose(xs[0], {1, 0})); },
                   {unary_input(c, {4, 3}, ++seed)});
    check_gradient(std::string(c.name) + " sliced step 2",
                   [&](const std::vector<Tensor>& xs) { return c.f(slice(xs[0], 1, 1, 8, 2)); },
                   {unary_input(c, {3, 8}, ++seed)});
  }
}

TEST_CASE("gradcheck: binary ops with broadcasting", "[gradcheck]") {
  struct BinaryCase {
    const char* name;
    Binary f;
    std::function<Tensor(const Shape&, uint64_t)> a, b;
  };
  auto uni = [](const Shape& s, uint64_t seed) { return rand64(s, seed, -2, 2); };
  auto pos = [](const Shape& s, uint64_t seed) { return rand64(s, seed, 0.3, 2.5); };
  auto nonzero = [](const Shape& s, uint64_t seed) { return away_from_zero64(s, seed, 0.5, 2); };
  // a on the grid k*0.1, b on the grid k*0.1 + 0.05: never tied.
  auto grid = [](const Shape& s, uint64_t seed) { return distinct64(s, seed, 0.1); };
  auto offgrid = [](const Shape& s, uint64_t seed) { return distinct64(s, seed, 0.1, 0.05); };
  const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, uni, uni},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, uni, uni},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, uni, uni},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, uni, nonzero},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); }, pos, uni},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, grid, offgrid},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); }, grid, offgrid},
  };
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{3, 4}, {3, 4}}, {{3, 4}, {4}},       {{4}, {3, 4}}, {{2, 1, 4}, {3, 1}},
      {{3, 1}, {1, 4}}, {{}, {2, 3}},        {{2, 3}, {}},  {{}, {}},
      {{2, 3, 1}, {1}}, {{1, 3, 1}, {2, 1, 5}},
  };
  uint64_t seed = 200;
  for (const BinaryCase& c : cases) {
    for (const auto& [sa, sb] : shapes) {
      check_gradient(std::string(c.name) + " " + shape_str(sa) + " with " + shape_str(sb),
                     [&](const std::vector<Tensor>& xs) { return c.f(xs[0], xs[1]); },
                     {c.a(sa, ++seed), c.b(sb, ++seed)});
    }
    // Strided operands: a transposed [4,3] -> [3,4] and a step-2 slice [3,8] -> [3,4].
    check_gradient(std::string(c.name) + " strided",
                   [&](const std::vector<Tensor>& xs) {
                     return c.f(transpose(xs[0], {1, 0}), slice(xs[1], 1, 0, 8, 2));
                   },
                   {c.a({4, 3}, ++seed), c.b({3, 8}, ++seed)});
    // The same tensor on both sides: its two gradient contributions add up.
    check_gradient(std::string(c.name) + " same operand twice",
                   [&](const std::vector<Tensor>& xs) { return c.f(xs[0], xs[0] * 1.25 + 0.5); },
                   {pos({3, 2}, ++seed)});
  }
}

TEST_CASE("gradcheck: where, clip and cast", "[gradcheck]") {
  Tensor cond = greater(rand64({3, 1}, 1), scalar_like(rand64({}, 2), 0.0));
  Tensor cond2 = greater(rand64({3, 4}, 3), full({}, 0.0, kFloat64));
  check_gradient("where [3,1] ? [3,4] : [4]",
                 [](const std::vector<Tensor>& xs) { return where(xs[0], xs[1], xs[2]); },
                 {cond, rand64({3, 4}, 4), rand64({4}, 5)});
  check_gradient("where [3,4] ? [] : [3,1]",
                 [](const std::vector<Tensor>& xs) { return where(xs[0], xs[1], xs[2]); },
                 {cond2, rand64({}, 6), rand64({3, 1}, 7)});
  check_gradient("where strided",
                 [](const std::vector<Tensor>& xs) {
                   return where(xs[0], transpose(xs[1], {1, 0}), slice(xs[2], 0, 0, 6, 2));
                 },
                 {cond2, rand64({4, 3}, 8), rand64({6, 4}, 9)});

  // Grid values never equal the bounds, so clip is differentiable at every probe.
  for (const Shape& s : std::vector<Shape>{{7}, {3, 5}}) {
    check_gradient("clip " + shape_str(s),
                   [](const std::vector<Tensor>& xs) { return clip(xs[0], -0.33, 0.27); },
                   {distinct64(s, 11, 0.1)});
  }

  check_gradient("cast f64 -> f32 -> f64",
                 [](const std::vector<Tensor>& xs) {
                   return cast(cast(xs[0], kFloat32) * 2.0f, kFloat64) * xs[0];
                 },
                 {rand64({3, 4}, 12)}, GradcheckOptions{1e-2, 1e-4, 1e-4});
  // Exact: the gradient of cast is the upstream gradient cast back to the input dtype.
  Tensor x32 = tensor({1.5f, -2.0f, 0.25f});
  GradientTape tape;
  tape.watch(x32);
  Tensor w = Tensor::from_vector(std::vector<double>{3, -1, 0.5});
  Tensor y = sum(cast(x32, kFloat64) * w);
  Tensor g = tape.gradient(y, x32);
  REQUIRE(g.dtype() == kFloat32);
  REQUIRE_CLOSE(g, tensor({3.0f, -1.0f, 0.5f}));
}

TEST_CASE("gradcheck: reductions over axes with and without keepdims", "[gradcheck]") {
  using Reduce = std::function<Tensor(const Tensor&, const Axes&, bool)>;
  const std::vector<std::pair<const char*, Reduce>> reductions = {
      {"sum", [](const Tensor& x, const Axes& a, bool k) { return sum(x, a, k); }},
      {"mean", [](const Tensor& x, const Axes& a, bool k) { return mean(x, a, k); }},
      {"max", [](const Tensor& x, const Axes& a, bool k) { return max(x, a, k); }},
      {"min", [](const Tensor& x, const Axes& a, bool k) { return min(x, a, k); }},
      {"prod", [](const Tensor& x, const Axes& a, bool k) { return prod(x, a, k); }},
      {"logsumexp", [](const Tensor& x, const Axes& a, bool k) { return logsumexp(x, a, k); }},
  };
  const std::vector<Axes> axes = {std::nullopt,
                                  std::vector<int64_t>{0},
                                  std::vector<int64_t>{1},
                                  std::vector<int64_t>{-1},
                                  std::vector<int64_t>{0, 2},
                                  std::vector<int64_t>{1, 2}};
  uint64_t seed = 300;
  for (const auto& [name, f] : reductions) {
    const bool is_prod = std::string(name) == "prod";
    for (const Axes& ax : axes) {
      for (bool keepdims : {false, true}) {
        std::string axes_str = "all";
        if (ax) {
          axes_str.clear();
          for (int64_t a : *ax) axes_str += std::to_string(a) + " ";
        }
        // Distinct values for max/min; |x| in [0.5, 1.5] keeps prod well scaled.
        Tensor x = is_prod ? away_from_zero64({2, 3, 4}, ++seed, 0.5, 1.5)
                           : distinct64({2, 3, 4}, ++seed, 0.05);
        check_gradient(std::string(name) + " axes " + axes_str + (keepdims ? " keepdims" : ""),
                       [&](const std::vector<Tensor>& xs) { return f(xs[0], ax, keepdims); },
                       {x});
      }
    }
    check_gradient(std::string(name) + " of a transposed view",
                   [&](const std::vector<Tensor>& xs) {
                     return f(permute(xs[0], {2, 0, 1}), std::vector<int64_t>{1}, false);
                   },
                   {is_prod ? away_from_zero64({2, 3, 4}, ++seed, 0.5, 1.5)
                            : distinct64({2, 3, 4}, ++seed, 0.05)});
    check_gradient(std::string(name) + " of a rank-0 tensor",
                   [&](const std::vector<Tensor>& xs) { return f(xs[0], std::nullopt, false); },
                   {rand64({}, ++seed, 0.5, 1.5)});
  }
}

TEST_CASE("gradient: max/min split the gradient evenly among ties", "[gradcheck]") {
  Tensor x = Tensor::from_vector(std::vector<double>{1, 3, 3, 2, 5, 5, 5, 0}, {2, 4});
  GradientTape tape(/*persistent=*/true);
  tape.watch(x);
  Tensor m = max(x, std::vector<int64_t>{1});
  Tensor g = tape.gradient(sum(m), x);
  REQUIRE_CLOSE(g, Tensor::from_vector(std::vector<double>{0, 0.5, 0.5, 0, 1. / 3, 1. / 3, 1. / 3, 0},
                                          {2, 4}));
  Tensor mn = min(x);  // the single minimum 0
  REQUIRE_CLOSE(tape.gradient(mn, x),
                   Tensor::from_vector(std::vector<double>{0, 0, 0, 0, 0, 0, 0, 1}, {2, 4}));
  // With a two-way tie, central differences see half the slope on each tied element:
  // exactly the even split.
  check_gradient("max with a two-way tie",
                 [](const std::vector<Tensor>& xs) { return max(xs[0], std::vector<int64_t>{0}); },
                 {Tensor::from_vector(std::vector<double>{0.5, 2.0, 2.0, -1.0}, {4})});
}

TEST_CASE("gradient: prod with zeros in the reduced slice", "[gradcheck]") {
  // prod is multilinear, so central differences are exact even at zeros.
  check_gradient("prod with one zero",
                 [](const std::vector<Tensor>& xs) { return prod(xs[0], std::vector<int64_t>{1}); },
                 {Tensor::from_vector(std::vector<double>{2, 0, 3, 1.5, -2, 0.5, 0, 0, 4}, {3, 3})});
  Tensor x = Tensor::from_vector(std::vector<double>{2, 0, 3, 0, 0, 4, 1, 2, 5}, {3, 3});
  GradientTape tape;
  tape.watch(x);
  Tensor g = tape.gradient(sum(prod(x, std::vector<int64_t>{1})), x);
  REQUIRE_CLOSE(g, Tensor::from_vector(std::vector<double>{0, 6, 0, 0, 0, 0, 10, 5, 2}, {3, 3}));
}

TEST_CASE("gradcheck: cumsum (exclusive, reverse)", "[gradcheck]") {
  uint64_t seed = 400;
  for (int64_t axis : {0, 1, -1}) {
    for (bool exclusive : {false, true}) {
      for (bool reverse : {false, true}) {
        check_gradient("cumsum axis " + std::to_string(axis) + (exclusive ? " exclusive" : "") +
                           (reverse ? " reverse" : ""),
                       [=](const std::vector<Tensor>& xs) {
                         return cumsum(xs[0], axis, exclusive, reverse);
                       },
                       {rand64({3, 4}, ++seed)});
      }
    }
  }
  check_gradient("cumsum of a transposed view",
                 [](const std::vector<Tensor>& xs) { return cumsum(transpose(xs[0], {1, 0}), 1, true, true); },
                 {rand64({4, 3}, ++seed)});
}

TEST_CASE("gradcheck: views (reshape, permute, slice, broadcast_to, expand/squeeze)", "[gradcheck]") {
  using strata::testing::TensorFn;
  const std::vector<std::pair<const char*, TensorFn>> cases = {
      {"reshape", [](const std::vector<Tensor>& xs) { return reshape(xs[0], {4, -1}) * xs[1]; }},
      {"reshape of a transposed view (copy)",
       [](const std::vector<Tensor>& xs) { return reshape(transpose(xs[0], {1, 0, 2}), {-1}); }},
      {"permute", [](const std::vector<Tensor>& xs) { return permute(xs[0], {2, 0, 1}) * 1.5; }},
      {"Tensor::transpose()", [](const std::vector<Tensor>& xs) { return exp(xs[0].transpose()); }},
      {"slice step 1", [](const std::vector<Tensor>& xs) { return slice(xs[0], 1, 1, 3); }},
      {"slice step 2", [](const std::vector<Tensor>& xs) { return slice(xs[0], 2, 0, 4, 2); }},
      {"slice step 3, offset start", [](const std::vector<Tensor>& xs) { return slice(xs[0], 2, 1, 4, 3); }},
      {"slice negative start", [](const std::vector<Tensor>& xs) { return slice(xs[0], 0, -1, 2); }},
      {"slice of a slice", [](const std::vector<Tensor>& xs) { return slice(slice(xs[0], 2, 1, 4), 1, 0, 3, 2); }},
      {"broadcast_to", [](const std::vector<Tensor>& xs) { return broadcast_to(slice(xs[0], 0, 0, 1), {3, 2, 3, 4}); }},
      {"expand_dims", [](const std::vector<Tensor>& xs) { return expand_dims(xs[0], 1) * rand64({2, 5, 3, 4}, 9); }},
      {"squeeze", [](const std::vector<Tensor>& xs) { return squeeze(slice(xs[0], 1, 2, 3), 1); }},
      {"Tensor::squeeze()", [](const std::vector<Tensor>& xs) { return slice(xs[0], 0, 1, 2).squeeze(); }},
      {"flatten", [](const std::vector<Tensor>& xs) { return flatten(xs[0], 1); }},
  };
  uint64_t seed = 500;
  for (const auto& [name, f] : cases) {
    check_gradient(name, f, {rand64({2, 3, 4}, ++seed), rand64({4, 6}, ++seed)});
  }
}

TEST_CASE("gradcheck: concat, stack, split and pad", "[gradcheck]") {
  for (int64_t axis : {0, 1, -1}) {
    check_gradient("concat axis " + std::to_string(axis),
                   [=](const std::vector<Tensor>& xs) {
                     return concat({xs[0], xs[1] * 2.0, xs[0]}, axis);
                   },
                   {rand64({2, 3}, 1), rand64({2, 3}, 2)});
  }
  check_gradient("concat different extents",
                 [](const std::vector<Tensor>& xs) {
                   return concat({xs[0], transpose(xs[1], {1, 0})}, 1);
                 },
                 {rand64({3, 2}, 3), rand64({4, 3}, 4)});
  for (int64_t axis : {0, 1, 2}) {
    check_gradient("stack axis " + std::to_string(axis),
                   [=](const std::vector<Tensor>& xs) { return stack({xs[0], sin(xs[1]), xs[1]}, axis); },
                   {rand64({2, 3}, 5), rand64({2, 3}, 6)});
  }
  check_gradient("split sizes",
                 [](const std::vector<Tensor>& xs) {
                   std::vector<Tensor> parts = split(xs[0], std::vector<int64_t>{1, 3, 2}, 1);
                   return concat({parts[2] * 3.0, exp(parts[0]), parts[1]}, 1);
                 },
                 {rand64({2, 6}, 7)});
  check_gradient("split even, one part unused",
                 [](const std::vector<Tensor>& xs) {
                   std::vector<Tensor> parts = split(xs[0], 3, 0);
                   return parts[0] * parts[2];
                 },
                 {rand64({6, 2}, 8)});
  check_gradient("pad",
                 [](const std::vector<Tensor>& xs) { return pad(xs[0], {{1, 2}, {0, 1}}, 0.5) * 2.0; },
                 {rand64({3, 4}, 9)});
  check_gradient("pad 3-D of a strided view",
                 [](const std::vector<Tensor>& xs) {
                   return pad(slice(xs[0], 2, 0, 4, 2), {{0, 0}, {2, 0}, {1, 1}});
                 },
                 {rand64({2, 3, 4}, 10)});
}

TEST_CASE("gradcheck: gather, embedding, scatter_add", "[gradcheck]") {
  Tensor idx64 = Tensor::from_vector(std::vector<int64_t>{2, 0, 2, 3, 1});
  Tensor idx32 = Tensor::from_vector(std::vector<int32_t>{1, 1, 0, 3, 2, 1}, {2, 3});
  check_gradient("gather axis 0 with repeats",
                 [](const std::vector<Tensor>& xs) { return gather(xs[0], xs[1], 0); },
                 {rand64({4, 3}, 1), idx64});
  check_gradient("gather axis 1, 2-D int32 indices",
                 [](const std::vector<Tensor>& xs) { return gather(xs[0], xs[1], 1); },
                 {rand64({2, 4, 3}, 2), idx32});
  check_gradient("gather axis -1 of a transposed view",
                 [](const std::vector<Tensor>& xs) { return gather(transpose(xs[0], {1, 0}), xs[1], -1); },
                 {rand64({4, 3}, 3), idx64});
  check_gradient("embedding",
                 [](const std::vector<Tensor>& xs) { return embedding(xs[0], xs[1]); },
                 {rand64({5, 3}, 4), Tensor::from_vector(std::vector<int64_t>{4, 0, 4, 1, 0, 2}, {3, 2})});
  check_gradient("scatter_add with repeated indices",
                 [](const std::vector<Tensor>& xs) { return scatter_add(xs[0], xs[1], {4, 3}, 0) * 1.5; },
                 {rand64({5, 3}, 5), idx64});
  check_gradient("scatter_add axis 1",
                 [](const std::vector<Tensor>& xs) { return scatter_add(xs[0], xs[1], {2, 4, 3}, 1); },
                 {rand64({2, 2, 3, 3}, 6), idx32});
}

TEST_CASE("gradcheck: matmul flags, batching, broadcasting and 1-D operands", "[gradcheck]") {
  uint64_t seed = 600;
  auto mm = [](bool ta, bool tb) {
    return [=](const std::vector<Tensor>& xs) { return matmul(xs[0], xs[1], ta, tb); };
  };
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      const std::string flags = std::string(ta ? "T" : "N") + (tb ? "T" : "N");
      const Shape sa = ta ? Shape{4, 3} : Shape{3, 4};
      const Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
      check_gradient("matmul 2-D " + flags, mm(ta, tb), {rand64(sa, ++seed), rand64(sb, ++seed)});
      Shape ba = sa, bb = sb;
      ba.insert(ba.begin(), 2);
      bb.insert(bb.begin(), 2);
      check_gradient("matmul batched " + flags, mm(ta, tb), {rand64(ba, ++seed), rand64(bb, ++seed)});
      Shape ca = sa;
      ca.insert(ca.begin(), {2, 1});
      Shape cb = sb;
      cb.insert(cb.begin(), 3);
      check_gradient("matmul broadcast batch " + flags, mm(ta, tb),
                     {rand64(ca, ++seed), rand64(cb, ++seed)});
      check_gradient("matmul batch x 2-D " + flags, mm(ta, tb), {rand64(ba, ++seed), rand64(sb, ++seed)});
      check_gradient("matmul 2-D x batch " + flags, mm(ta, tb), {rand64(sa, ++seed), rand64(bb, ++seed)});
    }
  }
  check_gradient("matmul [4] @ [4,5]", mm(false, false), {rand64({4}, ++seed), rand64({4, 5}, ++seed)});
  check_gradient("matmul [3,4] @ [4]", mm(false, false), {rand64({3, 4}, ++seed), rand64({4}, ++seed)});
  check_gradient("matmul [4] @ [4]", mm(false, false), {rand64({4}, ++seed), rand64({4}, ++seed)});
  check_gradient("matmul [2,3,4] @ [4]", mm(false, false), {rand64({2, 3, 4}, ++seed), rand64({4}, ++seed)});
  check_gradient("matmul [4] @ [2,4,5]", mm(false, false), {rand64({4}, ++seed), rand64({2, 4, 5}, ++seed)});
  check_gradient("matmul [3] @ [5,3]^T", mm(false, true), {rand64({3}, ++seed), rand64({5, 3}, ++seed)});
  check_gradient("matmul strided operands",
                 [](const std::vector<Tensor>& xs) {
                   return matmul(transpose(xs[0], {1, 0}), slice(xs[1], 1, 0, 10, 2));
                 },
                 {rand64({4, 3}, ++seed), rand64({4, 10}, ++seed)});
  check_gradient("matmul x @ x^T (one tensor, both operands)",
                 [](const std::vector<Tensor>& xs) { return matmul(xs[0], xs[0], false, true); },
                 {rand64({3, 4}, ++seed)});
}
