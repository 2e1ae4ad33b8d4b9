// Finite-difference checks (float64) of the gradients of the neural-network and image ops,
// including the backprop ops' own gradients and a few double-backward checks.
#include "tests/autograd/autograd_test_util.h"

using namespace strata;
using namespace strata::autograd;
using strata::testing::check_gradient;
using strata::testing::distinct64;
using strata::testing::grad_of;
using strata::testing::rand64;

TEST_CASE("gradcheck: softmax and log_softmax on several axes", "[gradcheck]") {
  uint64_t seed = 700;
  for (int64_t axis : {0, 1, 2, -1}) {
    check_gradient("softmax axis " + std::to_string(axis),
                   [=](const std::vector<Tensor>& xs) { return softmax(xs[0], axis); },
                   {rand64({3, 4, 5}, ++seed, -2, 2)});
    check_gradient("log_softmax axis " + std::to_string(axis),
                   [=](const std::vector<Tensor>& xs) { return log_softmax(xs[0], axis); },
                   {rand64({3, 4, 5}, ++seed, -2, 2)});
  }
  check_gradient("softmax 1-D", [](const std::vector<Tensor>& xs) { return softmax(xs[0]); },
                 {rand64({6}, ++seed, -2, 2)});
  check_gradient("log_softmax of a transposed view",
                 [](const std::vector<Tensor>& xs) { return log_softmax(transpose(xs[0], {1, 0}), -1); },
                 {rand64({5, 3}, ++seed, -2, 2)});
}

TEST_CASE("gradcheck: sparse_softmax_cross_entropy", "[gradcheck]") {
  auto f = [](const std::vector<Tensor>& xs) { return sparse_softmax_cross_entropy(xs[0], xs[1]); };
  check_gradient("xent int64 labels", f,
                 {rand64({4, 5}, 1, -3, 3), Tensor::from_vector(std::vector<int64_t>{0, 4, 2, 2})});
  check_gradient("xent int32 labels", f,
                 {rand64({3, 2}, 2, -3, 3), Tensor::from_vector(std::vector<int32_t>{1, 0, 1})});
  check_gradient("xent of strided logits",
                 [](const std::vector<Tensor>& xs) {
                   return sparse_softmax_cross_entropy(transpose(xs[0], {1, 0}), xs[1]);
                 },
                 {rand64({5, 4}, 3, -3, 3), Tensor::from_vector(std::vector<int64_t>{3, 1, 0, 4})});
  // Matches the composite -log_softmax[label].
  Tensor logits = rand64({4, 5}, 4, -3, 3);
  Tensor labels = Tensor::from_vector(std::vector<int64_t>{1, 0, 4, 3});
  GradientTape tape(/*persistent=*/true);
  tape.watch(logits);
  Tensor fused = sum(sparse_softmax_cross_entropy(logits, labels));
  Tensor composite = -sum(log_softmax(logits) * one_hot(labels, 5, kFloat64));
  REQUIRE_CLOSE(fused, composite, 1e-12, 1e-12);
  REQUIRE_CLOSE(tape.gradient(fused, logits), tape.gradient(composite, logits), 1e-10, 1e-12);
}

TEST_CASE("gradcheck: layer_norm", "[gradcheck]") {
  auto f = [](double eps) {
    return [=](const std::vector<Tensor>& xs) { return layer_norm(xs[0], xs[1], xs[2], eps); };
  };
  uint64_t seed = 800;
  for (const Shape& s : std::vector<Shape>{{6}, {3, 5}, {2, 3, 4}}) {
    const int64_t d = s.back();
    check_gradient("layer_norm " + shape_str(s), f(1e-5),
                   {rand64(s, ++seed, -2, 2), rand64({d}, ++seed, 0.5, 1.5), rand64({d}, ++seed)});
  }
  check_gradient("layer_norm eps 0.1", f(0.1),
                 {rand64({3, 4}, ++seed), rand64({4}, ++seed), rand64({4}, ++seed)});
  check_gradient("layer_norm of a transposed view",
                 [](const std::vector<Tensor>& xs) {
                   return layer_norm(transpose(xs[0], {1, 0}), xs[1], xs[2]);
                 },
                 {rand64({4, 3}, ++seed), rand64({4}, ++seed), rand64({4}, ++seed)});
}

TEST_CASE("gradcheck: conv2d (SAME/VALID, strides 1 and 2) and its backprop ops", "[gradcheck]") {
  struct ConvCase {
    Shape x, w;
    std::array<int64_t, 2> strides;
    Padding padding;
  };
  const std::vector<ConvCase> cases = {
      {{2, 5, 5, 2}, {3, 3, 2, 3}, {1, 1}, Padding::Valid},
      {{2, 5, 5, 2}, {3, 3, 2, 3}, {1, 1}, Padding::Same},
      {{1, 6, 5, 2}, {3, 3, 2, 2}, {2, 2}, Padding::Valid},
      {{1, 6, 5, 2}, {3, 3, 2, 2}, {2, 2}, Padding::Same},
      {{1, 4, 6, 1}, {2, 2, 1, 2}, {1, 2}, Padding::Same},  // even filter: asymmetric padding
      {{1, 5, 4, 3}, {1, 1, 3, 2}, {2, 1}, Padding::Valid},
  };
  uint64_t seed = 900;
  for (const ConvCase& c : cases) {
    const std::string tag = std::string("x") + shape_str(c.x) + " w" + shape_str(c.w) + " s" +
                            std::to_string(c.strides[0]) + std::to_string(c.strides[1]) +
                            (c.padding == Padding::Same ? " SAME" : " VALID");
    check_gradient("conv2d " + tag,
                   [&](const std::vector<Tensor>& xs) { return conv2d(xs[0], xs[1], c.strides, c.padding); },
                   {rand64(c.x, ++seed), rand64(c.w, ++seed)});
    const Shape y = conv2d(rand64(c.x, 1), rand64(c.w, 2), c.strides, c.padding).shape();
    check_gradient("conv2d_backprop_input " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return conv2d_backprop_input(c.x, xs[0], xs[1], c.strides, c.padding);
                   },
                   {rand64(c.w, ++seed), rand64(y, ++seed)});
    check_gradient("conv2d_backprop_filter " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return conv2d_backprop_filter(xs[0], c.w, xs[1], c.strides, c.padding);
                   },
                   {rand64(c.x, ++seed), rand64(y, ++seed)});
  }
  check_gradient("conv2d of a permuted (NCHW -> NHWC) view",
                 [](const std::vector<Tensor>& xs) {
                   return conv2d(permute(xs[0], {0, 2, 3, 1}), xs[1], {1, 1}, Padding::Same);
                 },
                 {rand64({1, 2, 4, 4}, ++seed), rand64({3, 3, 2, 2}, ++seed)});
}

TEST_CASE("gradcheck: max_pool2d, avg_pool2d and avg_pool2d_grad", "[gradcheck]") {
  struct PoolCase {
    Shape x;
    std::array<int64_t, 2> window, strides;
    Padding padding;
  };
  const std::vector<PoolCase> cases = {
      {{2, 4, 4, 2}, {2, 2}, {2, 2}, Padding::Valid},
      {{1, 5, 5, 2}, {3, 3}, {1, 1}, Padding::Same},
      {{1, 5, 6, 1}, {3, 3}, {2, 2}, Padding::Same},
      {{1, 5, 6, 2}, {3, 2}, {2, 1}, Padding::Valid},
      {{1, 4, 4, 1}, {2, 2}, {1, 1}, Padding::Same},
  };
  uint64_t seed = 1000;
  for (const PoolCase& c : cases) {
    const std::string tag = std::string("x") + shape_str(c.x) + " k" + std::to_string(c.window[0]) +
                            std::to_string(c.window[1]) + " s" + std::to_string(c.strides[0]) +
                            std::to_string(c.strides[1]) +
                            (c.padding == Padding::Same ? " SAME" : " VALID");
    // Distinct values (grid spacing 0.05 >> eps): the arg-max of every window is unique.
    check_gradient("max_pool2d " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return max_pool2d(xs[0], c.window, c.strides, c.padding);
                   },
                   {distinct64(c.x, ++seed)});
    check_gradient("avg_pool2d " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return avg_pool2d(xs[0], c.window, c.strides, c.padding);
                   },
                   {rand64(c.x, ++seed)});
    const Shape y = avg_pool2d(rand64(c.x, 1), c.window, c.strides, c.padding).shape();
    // max_pool2d_grad is linear in dy (x fixed, distinct values): its gradient w.r.t. dy
    // gathers the upstream gradient at each window's arg-max.
    const Tensor x_fixed = distinct64(c.x, ++seed);
    check_gradient("max_pool2d_grad " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return max_pool2d_grad(x_fixed, xs[0], c.window, c.strides, c.padding);
                   },
                   {rand64(y, ++seed)});
    check_gradient("d/dx max_pool2d squared " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return grad_of([&](const Tensor& x) { return square(max_pool2d(x, c.window, c.strides, c.padding)); },
                                    xs[0], rand64(y, 77));
                   },
                   {distinct64(c.x, ++seed)});
    check_gradient("avg_pool2d_grad " + tag,
                   [&](const std::vector<Tensor>& xs) {
                     return avg_pool2d_grad(c.x, xs[0], c.window, c.strides, c.padding);
                   },
                   {rand64(y, ++seed)});
  }
}

TEST_CASE("gradcheck: double backward through VJPs", "[gradcheck][higher-order]") {
  // gradcheck over x -> d/dx sum(f(x) * w) checks the derivative of each VJP.
  Tensor w34 = rand64({3, 4}, 1);
  auto second = [](std::function<Tensor(const Tensor&)> f, Tensor w) {
    return [=](const std::vector<Tensor>& xs) { return strata::testing::grad_of(f, xs[0], w); };
  };
  check_gradient("d/dx tanh", second([](const Tensor& x) { return tanh(x); }, w34), {rand64({3, 4}, 2)});
  check_gradient("d/dx softmax", second([](const Tensor& x) { return softmax(x, 1); }, w34),
                 {rand64({3, 4}, 3)});
  check_gradient("d/dx log_softmax", second([](const Tensor& x) { return log_softmax(x, 0); }, w34),
                 {rand64({3, 4}, 4)});
  check_gradient("d/dx logsumexp",
                 second([](const Tensor& x) { return logsumexp(x, std::vector<int64_t>{1}, true); },
                        rand64({3, 1}, 5)),
                 {rand64({3, 4}, 6)});
  check_gradient("d/dx layer_norm",
                 second([](const Tensor& x) { return layer_norm(x, full({4}, 1.3, kFloat64), full({4}, 0.2, kFloat64)); },
                        w34),
                 {rand64({3, 4}, 7)});
  check_gradient("d/dx gelu(tanh)", second([](const Tensor& x) { return gelu(x, true); }, w34),
                 {rand64({3, 4}, 8)});
  check_gradient("d/dx gelu(erf)", second([](const Tensor& x) { return gelu(x, false); }, w34),
                 {rand64({3, 4}, 9)});
  check_gradient("d/dx pow", second([](const Tensor& x) { return pow(x, x * 0.5); }, w34),
                 {rand64({3, 4}, 10, 0.5, 2)});
  Tensor w_mm = rand64({4, 5}, 11);
  check_gradient("d/dx x@B then square",
                 second([=](const Tensor& x) { return square(matmul(x, w_mm)); }, rand64({3, 5}, 12)),
                 {rand64({3, 4}, 13)});
  check_gradient("d/dx sparse xent",
                 second([](const Tensor& x) {
                   return sparse_softmax_cross_entropy(x, Tensor::from_vector(std::vector<int64_t>{1, 3, 0}));
                 }, rand64({3}, 14)),
                 {rand64({3, 4}, 15)});
  // conv2d: the gradient w.r.t. x as a function of (x, w) is linear in w, constant in x;
  // differentiate d/dw as a function of w through a square (so it depends on w).
  Tensor x_img = rand64({1, 4, 4, 2}, 16);
  Tensor wy = rand64({1, 4, 4, 2}, 17);
  check_gradient("d/dw conv2d (backprop_filter, backprop_input chain)",
                 [=](const std::vector<Tensor>& xs) {
                   return grad_of([=](const Tensor& w) { return square(conv2d(x_img, w, {1, 1}, Padding::Same)); },
                                  xs[0], wy);
                 },
                 {rand64({3, 3, 2, 2}, 18)});
  check_gradient("d/dx conv2d SAME stride 2 squared",
                 [=](const std::vector<Tensor>& xs) {
                   Tensor w = rand64({3, 3, 2, 2}, 19);
                   return grad_of([=](const Tensor& x) { return square(conv2d(x, w, {2, 2}, Padding::Same)); },
                                  xs[0], rand64({1, 2, 2, 2}, 20));
                 },
                 {rand64({1, 4, 4, 2}, 21)});
  check_gradient("d/dx avg_pool2d squared",
                 [=](const std::vector<Tensor>& xs) {
                   return grad_of([](const Tensor& x) { return square(avg_pool2d(x, {2, 2}, {1, 1}, Padding::Same)); },
                                  xs[0], rand64({1, 4, 4, 2}, 22));
                 },
                 {rand64({1, 4, 4, 2}, 23)});
  check_gradient("d/dx prod",
                 second([](const Tensor& x) { return prod(x, std::vector<int64_t>{1}); }, rand64({3}, 24)),
                 {strata::testing::away_from_zero64({3, 4}, 25, 0.5, 1.5)});
  check_gradient("d/dx max (distinct)",
                 second([](const Tensor& x) { return square(max(x, std::vector<int64_t>{0})); }, rand64({4}, 26)),
                 {distinct64({3, 4}, 27)});
}

TEST_CASE("gradient: max_pool2d_grad's gradient follows the kernel's first-maximum rule", "[gradcheck]") {
  // One 2x2 window (VALID) holding a tie between positions 0 and 1: max_pool2d_grad sends
  // dy to position 0 only, so its gradient w.r.t. dy reads the upstream gradient there.
  Tensor x = Tensor::from_vector(std::vector<double>{1, 1, 0, -1}, {1, 2, 2, 1});
  Tensor dy = Tensor::from_vector(std::vector<double>{2}, {1, 1, 1, 1});
  Tensor up = Tensor::from_vector(std::vector<double>{5, 7, 11, 13}, {1, 2, 2, 1});
  GradientTape tape;
  tape.watch(dy);
  Tensor dx = max_pool2d_grad(x, dy, {2, 2}, {2, 2}, Padding::Valid);
  REQUIRE_CLOSE(dx, Tensor::from_vector(std::vector<double>{2, 0, 0, 0}, {1, 2, 2, 1}));
  REQUIRE_CLOSE(tape.gradient(sum(dx * up), dy), Tensor::from_vector(std::vector<double>{5}, {1, 1, 1, 1}));
}
