// nn layers: forward values computed by hand, gradients by finite differences (float64),
// BatchNormalization's two modes, Module paths and Sequential naming, initializers.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include <strata/autograd/autograd.h>
#include <strata/core/random.h>
#include "tests/test_util.h"
#include "tests/train/layer_gradcheck.h"
#include <strata/train/adam.h>
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>

using namespace strata;
using strata::testing::check_variable_gradients;

namespace {

Tensor f64(const std::vector<double>& v, const Shape& shape) {
  return Tensor::from_vector(v, shape, kFloat64);
}

// Checks d/dx by autograd::gradcheck and d/dvariables by perturbing them in place.
void check_layer_gradients(const nn::AnyModule& layer, const Tensor& x) {
  auto input_check = autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return layer(in[0]); }, {x});
  INFO(input_check.message);
  CHECK(input_check.ok);
  auto var_check = check_variable_gradients([&] { return layer(x); }, layer.trainable_variables());
  INFO(var_check.message);
  CHECK(var_check.ok);
}

}  // namespace

TEST_CASE("Dense: forward by hand and gradients", "[train][layers]") {
  nn::Dense dense(2, 3, {.dtype = kFloat64});
  dense->kernel().assign(f64({1, 2, 3, 4, 5, 6}, {2, 3}));
  dense->bias().assign(f64({0.5, -0.5, 1}, {3}));
  Tensor y = dense(f64({1, 2, -1, 0}, {2, 2}));
  REQUIRE_ALLCLOSE(y, f64({9.5, 11.5, 16, -0.5, -2.5, -2}, {2, 3}));
  // Rank-3 inputs apply the kernel to the last axis.
  Tensor y3 = dense(f64({1, 2, -1, 0}, {1, 2, 2}));
  REQUIRE(y3.shape() == Shape{1, 2, 3});
  REQUIRE_ALLCLOSE(y3.reshape({2, 3}), y);
  check_layer_gradients(dense, random::normal({4, 2}, 3, 0.0, 1.0, kFloat64));

  nn::Dense no_bias(3, 2, {.use_bias = false});
  CHECK(no_bias.variables().size() == 1);
  CHECK_THROWS_AS(dense(f64({1, 2, 3}, {1, 3})), Error);
  CHECK_THROWS_AS(nn::Dense(0, 3), Error);
  nn::Dense empty;
  CHECK_THROWS_AS(empty(y), Error);
}

TEST_CASE("Conv2D: NHWC forward by hand, SAME padding, gradients", "[train][layers]") {
  // 1x3x3x1 input 1..9, a 2x2 kernel of ones, bias 0.5: each output is a 2x2 window sum.
  nn::Conv2D conv(1, 1, 2, {.dtype = kFloat64});
  conv->kernel().assign(ones({2, 2, 1, 1}, kFloat64));
  conv->bias().assign(f64({0.5}, {1}));
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1});
  REQUIRE_ALLCLOSE(conv(x), f64({12.5, 16.5, 24.5, 28.5}, {1, 2, 2, 1}));

  // SAME, stride 1: TensorFlow pads the extra row/column at the bottom/right.
  nn::Conv2D same(1, 1, 2, {.padding = Padding::Same, .use_bias = false, .dtype = kFloat64});
  same->kernel().assign(ones({2, 2, 1, 1}, kFloat64));
  REQUIRE_ALLCLOSE(same(x), f64({12, 16, 9, 24, 28, 15, 15, 17, 9}, {1, 3, 3, 1}));

  nn::Conv2D strided(2, 3, {3, 2}, {.strides = {2, 1}, .dtype = kFloat64});
  CHECK(strided->kernel().shape() == Shape{3, 2, 2, 3});
  Tensor xs = random::normal({2, 5, 4, 2}, 5, 0.0, 1.0, kFloat64);
  CHECK(strided(xs).shape() == Shape{2, 2, 3, 3});
  check_layer_gradients(strided, xs);
  CHECK_THROWS_AS(strided(random::normal({2, 5, 4, 3}, 5, 0.0, 1.0, kFloat64)), Error);
}

TEST_CASE("MaxPool2D and AvgPool2D", "[train][layers]") {
  Tensor x = f64({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, {1, 4, 4, 1});
  REQUIRE_ALLCLOSE(nn::MaxPool2D(2)(x), f64({6, 8, 14, 16}, {1, 2, 2, 1}));
  REQUIRE_ALLCLOSE(nn::AvgPool2D(2)(x), f64({3.5, 5.5, 11.5, 13.5}, {1, 2, 2, 1}));
  // Window 3, stride 1.
  REQUIRE_ALLCLOSE(nn::MaxPool2D({3, 3}, {.strides = std::array<int64_t, 2>{1, 1}})(x),
                   f64({11, 12, 15, 16}, {1, 2, 2, 1}));
  // Distinct values so the max is unique and differentiable.
  Tensor xr = random::normal({2, 4, 4, 3}, 9, 0.0, 1.0, kFloat64);
  check_layer_gradients(nn::MaxPool2D(2), xr);
  check_layer_gradients(nn::AvgPool2D(2), xr);
  CHECK_THROWS_AS(nn::MaxPool2D(0), Error);
  CHECK_THROWS_AS(nn::MaxPool2D(2)(f64({1, 2}, {2})), Error);
}

TEST_CASE("Flatten keeps the batch axis", "[train][layers]") {
  nn::Flatten flat;
  Tensor x = random::normal({2, 3, 4, 5}, 1);
  CHECK(flat(x).shape() == Shape{2, 60});
  CHECK(flat(random::normal({7}, 1)).shape() == Shape{7, 1});
  check_layer_gradients(flat, random::normal({2, 3, 2}, 2, 0.0, 1.0, kFloat64));
}

TEST_CASE("Activations: values by hand and gradients", "[train][layers]") {
  Tensor x = f64({-2, -0.5, 0.25, 1, 3}, {5});
  REQUIRE_ALLCLOSE(nn::ReLU()(x), f64({0, 0, 0.25, 1, 3}, {5}));
  REQUIRE_ALLCLOSE(nn::Tanh()(x), f64({std::tanh(-2.0), std::tanh(-0.5), std::tanh(0.25),
                                       std::tanh(1.0), std::tanh(3.0)}, {5}));
  auto sig = [](double v) { return 1 / (1 + std::exp(-v)); };
  REQUIRE_ALLCLOSE(nn::Sigmoid()(x), f64({sig(-2), sig(-0.5), sig(0.25), sig(1), sig(3)}, {5}));
  auto gelu = [](double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); };
  REQUIRE_ALLCLOSE(nn::GELU()(x), f64({gelu(-2), gelu(-0.5), gelu(0.25), gelu(1), gelu(3)}, {5}));
  auto gelu_tanh = [](double v) {
    return 0.5 * v * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (v + 0.044715 * v * v * v)));
  };
  REQUIRE_ALLCLOSE(nn::GELU(true)(x), f64({gelu_tanh(-2), gelu_tanh(-0.5), gelu_tanh(0.25),
                                           gelu_tanh(1), gelu_tanh(3)}, {5}));
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  REQUIRE_ALLCLOSE(nn::Softmax()(f64({1, 2, 3}, {1, 3})),
                   f64({std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z}, {1, 3}));
  REQUIRE_ALLCLOSE(nn::Softmax(0)(f64({1, 1}, {2, 1})), f64({0.5, 0.5}, {2, 1}));
  Tensor xr = random::normal({3, 4}, 4, 0.0, 1.0, kFloat64);
  for (const nn::AnyModule& act :
       {nn::AnyModule(nn::Tanh()), nn::AnyModule(nn::Sigmoid()), nn::AnyModule(nn::GELU()),
        nn::AnyModule(nn::GELU(true)), nn::AnyModule(nn::Softmax())})
    check_layer_gradients(act, xr);
  check_layer_gradients(nn::ReLU(), f64({-1.5, -0.3, 0.2, 0.7, 2.0, 1.1}, {2, 3}));
}

TEST_CASE("Dropout: training drops and rescales, inference is the identity", "[train][layers]") {
  nn::Dropout drop(0.25, /*seed=*/7);
  Tensor x = full({1000}, 2.0, kFloat64);
  Tensor y = drop(x);
  int zeros_seen = 0;
  for (double v : y.to_vector<double>()) {
    if (v == 0) {
      ++zeros_seen;
    } else {
      REQUIRE(v == Approx(2.0 / 0.75));
    }
  }
  CHECK(zeros_seen > 180);
  CHECK(zeros_seen < 320);
  // Successive calls draw fresh masks; the same seed reproduces the sequence.
  Tensor y2 = drop(x);
  CHECK_FALSE(testing::allclose(y, y2));
  nn::Dropout again(0.25, 7);
  Tensor y_again = again(x);  // (REQUIRE_ALLCLOSE evaluates its arguments twice)
  REQUIRE_ALLCLOSE(y_again, y);
  // The gradient is the mask scaled by 1/(1-rate): y / x here.
  {
    nn::Dropout d(0.5, 3);
    Tensor xs = random::uniform({50}, 1, 1.0, 2.0, kFloat64);
    GradientTape tape;
    tape.watch(xs);
    Tensor ys = d(xs);
    Tensor g = tape.gradient(sum(ys), xs);
    REQUIRE_ALLCLOSE(g, div(ys, xs));
  }
  drop.set_training(false);
  REQUIRE_ALLCLOSE(drop(x), x);
  CHECK_THROWS_AS(nn::Dropout(1.0), Error);
  CHECK_THROWS_AS(nn::Dropout(-0.1), Error);
}

TEST_CASE("Module: set_trainable freezes a layer and its sublayers as Keras's layer.trainable") {
  nn::Dense first(2, 3), second(3, 1);
  nn::BatchNormalization bn(3, {.momentum = 0.5});
  nn::Sequential model{first, bn, second};
  CHECK(model.trainable_variables().size() == 6);  // 2 kernels, 2 biases, gamma, beta
  first.set_trainable(false);
  CHECK_FALSE(first.trainable());
  const auto trainable = model.trainable_variables();
  CHECK(trainable.size() == 4);
  for (const Variable& v : first.variables())
    CHECK(std::none_of(trainable.begin(), trainable.end(), [&](const Variable& t) { return t == v; }));
  CHECK(model.non_trainable_variables().size() == 4);  // the frozen kernel and bias, the moving statistics
  CHECK(first.variables()[0].trainable());  // the variable's own flag is unchanged

  // A frozen model freezes everything below; a sublayer set trainable again stays frozen.
  model.set_trainable(false);
  second.set_trainable(true);
  CHECK(model.trainable_variables().empty());
  model.set_trainable(true);
  CHECK(model.trainable_variables().size() == 6);

  // A frozen BatchNormalization normalises with its moving statistics and keeps them.
  bn.set_trainable(false);
  const Tensor x = Tensor::from_vector<float>({1, 2, 3, 5, 6, 9}, {2, 3});
  const Tensor y = bn(x);
  CHECK(bn->moving_mean().value().to_vector<float>() == std::vector<float>{0, 0, 0});
  REQUIRE_ALLCLOSE(y, x / std::sqrt(1.0 + 1e-3), 1e-6, 1e-6);
  bn.set_trainable(true);
  bn(x);
  CHECK(bn->moving_mean().value().to_vector<float>() == std::vector<float>{1.5f, 2.0f, 3.0f});
}

TEST_CASE("Module: a submodule that contains the module is refused (a cycle)") {
  nn::Sequential outer{nn::Dense(2, 2)};
  nn::Sequential inner{nn::Dense(2, 2)};
  outer->add(inner);
  REQUIRE_THROWS_WITH(inner->add(outer), Catch::Contains("would make a cycle"));
  // Sharing a submodule twice is not a cycle.
  nn::Dense shared(2, 2);
  nn::Sequential twice{shared, shared};
  CHECK(twice(Tensor::from_vector<float>({1, 2}, {1, 2})).shape() == Shape{1, 2});
}

TEST_CASE("BatchNormalization: batch statistics in training, moving averages in inference",
          "[train][layers]") {
  nn::BatchNormalization bn(2, {.momentum = 0.9, .dtype = kFloat64});
  CHECK(bn.trainable_variables().size() == 2);   // gamma, beta
  CHECK(bn.non_trainable_variables().size() == 2);  // moving_mean, moving_variance
  CHECK(bn->moving_mean().synchronization() == autograd::VariableSynchronization::OnRead);
  CHECK(bn->moving_mean().aggregation() == autograd::VariableAggregation::Mean);
  CHECK_FALSE(bn->moving_variance().trainable());

  // Features: column 0 = {1, 3} (mean 2, var 1), column 1 = {2, 6} (mean 4, var 4).
  Tensor x = f64({1, 2, 3, 6}, {2, 2});
  const double eps = 1e-3;
  Tensor y = bn(x);
  REQUIRE_ALLCLOSE(y, f64({-1 / std::sqrt(1 + eps), -2 / std::sqrt(4 + eps), 1 / std::sqrt(1 + eps),
                           2 / std::sqrt(4 + eps)}, {2, 2}), 1e-12, 1e-12);
  // moving = moving - (moving - batch) * (1 - momentum), from 0 and 1.
  REQUIRE_ALLCLOSE(bn->moving_mean().value(), f64({0.2, 0.4}, {2}), 1e-12, 1e-12);
  REQUIRE_ALLCLOSE(bn->moving_variance().value(), f64({1.0, 1.3}, {2}), 1e-12, 1e-12);

  bn.set_training(false);
  CHECK_FALSE(bn.training());
  Tensor yi = bn(x);
  REQUIRE_ALLCLOSE(yi, f64({(1 - 0.2) / std::sqrt(1 + eps), (2 - 0.4) / std::sqrt(1.3 + eps),
                            (3 - 0.2) / std::sqrt(1 + eps), (6 - 0.4) / std::sqrt(1.3 + eps)},
                           {2, 2}), 1e-12, 1e-12);
  // Inference leaves the moving statistics alone.
  REQUIRE_ALLCLOSE(bn->moving_mean().value(), f64({0.2, 0.4}, {2}), 1e-12, 1e-12);

  // gamma and beta apply per feature.
  bn->gamma().assign(f64({2, 3}, {2}));
  bn->beta().assign(f64({1, -1}, {2}));
  REQUIRE_ALLCLOSE(bn(x), add(mul(yi, f64({2, 3}, {2})), f64({1, -1}, {2})), 1e-12, 1e-12);

  // NHWC input: statistics over N, H and W per channel; gradients in both modes.
  nn::BatchNormalization bn4(3, {.dtype = kFloat64});
  Tensor x4 = random::normal({2, 3, 2, 3}, 8, 1.0, 2.0, kFloat64);
  bn4->gamma().assign(f64({1.5, 0.5, -1}, {3}));
  Tensor y4 = bn4(x4);
  Tensor per_channel_mean = mean(div(y4, f64({1.5, 0.5, -1}, {3})), std::vector<int64_t>{0, 1, 2});
  REQUIRE_ALLCLOSE(per_channel_mean, zeros({3}, kFloat64), 1e-9, 1e-9);
  check_layer_gradients(bn4, x4);
  bn4.set_training(false);
  check_layer_gradients(bn4, x4);

  // Channels on axis 1.
  nn::BatchNormalization bn_axis1(3, {.axis = 1, .dtype = kFloat64});
  Tensor xa = random::normal({4, 3, 5}, 2, 0.0, 1.0, kFloat64);
  Tensor ya = bn_axis1(xa);
  REQUIRE_ALLCLOSE(mean(ya, std::vector<int64_t>{0, 2}), zeros({3}, kFloat64), 1e-9, 1e-9);
  CHECK_THROWS_AS(bn(f64({1, 2, 3}, {1, 3})), Error);
}

TEST_CASE("LayerNormalization: per-example statistics over the last axis", "[train][layers]") {
  nn::LayerNormalization ln(3, {.dtype = kFloat64});
  const double eps = 1e-3;
  const double s = std::sqrt(2.0 / 3.0 + eps);
  REQUIRE_ALLCLOSE(ln(f64({1, 2, 3, 10, 20, 30}, {2, 3})),
                   f64({-1 / s, 0, 1 / s, -10 / std::sqrt(200.0 / 3 + eps), 0,
                        10 / std::sqrt(200.0 / 3 + eps)}, {2, 3}), 1e-12, 1e-12);
  ln->gamma().assign(f64({1, 2, 3}, {3}));
  ln->beta().assign(f64({0.5, 0.5, 0.5}, {3}));
  REQUIRE_ALLCLOSE(ln(f64({1, 2, 3}, {1, 3})), f64({0.5 - 1 / s, 0.5, 0.5 + 3 / s}, {1, 3}),
                   1e-12, 1e-12);
  check_layer_gradients(ln, random::normal({2, 2, 3}, 6, 0.0, 1.0, kFloat64));
  CHECK_THROWS_AS(ln(f64({1, 2}, {1, 2})), Error);
}

TEST_CASE("Embedding: rows of the table", "[train][layers]") {
  nn::Embedding emb(4, 2, {.dtype = kFloat64});
  // Default table: uniform in [-0.05, 0.05].
  for (double v : emb->embeddings().value().to_vector<double>()) CHECK(std::abs(v) <= 0.05);
  emb->embeddings().assign(f64({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2}));
  Tensor ids = Tensor::from_vector<int64_t>({3, 0, 2, 2}, {2, 2});
  REQUIRE_ALLCLOSE(emb(ids), f64({30, 31, 0, 1, 20, 21, 20, 21}, {2, 2, 2}));
  // Float ids are cast, as in Keras.
  REQUIRE_ALLCLOSE(emb(f64({1}, {1})), f64({10, 11}, {1, 2}));
  auto check = check_variable_gradients([&] { return emb(ids); }, emb.trainable_variables());
  INFO(check.message);
  CHECK(check.ok);
  CHECK_THROWS_AS(emb(Tensor::from_vector<int64_t>({4}, {1})), Error);
}

TEST_CASE("Initializers: seeded, Keras fans and ranges", "[train][layers]") {
  CHECK(nn::compute_fans({3, 4}) == std::pair<double, double>{3, 4});
  CHECK(nn::compute_fans({3, 3, 2, 8}) == std::pair<double, double>{18, 72});
  CHECK(nn::compute_fans({5}) == std::pair<double, double>{5, 5});

  Tensor g = nn::glorot_uniform(1)({200, 100}, kFloat64);
  const double limit = std::sqrt(6.0 / 300.0);
  double max_abs = 0;
  for (double v : g.to_vector<double>()) max_abs = std::max(max_abs, std::abs(v));
  CHECK(max_abs <= limit);
  CHECK(max_abs > 0.95 * limit);
  REQUIRE_ALLCLOSE(g, nn::glorot_uniform(1)({200, 100}, kFloat64));
  CHECK_FALSE(testing::allclose(g, nn::glorot_uniform(2)({200, 100}, kFloat64)));

  Tensor h = nn::he_normal(3)({400, 100}, kFloat64);
  const double sd = std::sqrt(mean(square(h)).item<double>());
  CHECK(sd == Approx(std::sqrt(2.0 / 400)).epsilon(0.05));
  const double bound = 2 * std::sqrt(2.0 / 400) / .87962566103423978;
  for (double v : h.to_vector<double>()) REQUIRE(std::abs(v) <= bound + 1e-12);

  REQUIRE_ALLCLOSE(nn::zeros_initializer()({2, 2}, kFloat32), zeros({2, 2}));
  REQUIRE_ALLCLOSE(nn::ones_initializer()({2}, kFloat64), ones({2}, kFloat64));
  REQUIRE_ALLCLOSE(nn::constant(0.5)({3}, kFloat32), full({3}, 0.5));
  CHECK_THROWS_AS(nn::glorot_uniform()({2, 2}, kInt64), Error);

  // Unseeded initializers draw from the global counter: reproducible after set_global_seed.
  nn::set_global_seed(42);
  nn::Dense a(3, 4);
  nn::set_global_seed(42);
  nn::Dense b(3, 4);
  REQUIRE_ALLCLOSE(a->kernel().value(), b->kernel().value());
  nn::Dense c(3, 4);
  CHECK_FALSE(testing::allclose(b->kernel().value(), c->kernel().value()));
}

TEST_CASE("Module: structural object paths, Sequential naming, training flag", "[train][layers]") {
  nn::Sequential model{nn::Conv2D(1, 2, 3), nn::ReLU(), nn::Flatten(), nn::Dense(8, 4),
                       nn::BatchNormalization(4), nn::Dense(4, 2)};
  std::vector<std::string> paths;
  for (auto& nv : model.named_variables("model")) paths.push_back(nv.path);
  CHECK(paths == std::vector<std::string>{
                     "model/conv2d/kernel", "model/conv2d/bias", "model/dense/kernel",
                     "model/dense/bias", "model/batch_normalization/gamma",
                     "model/batch_normalization/beta", "model/batch_normalization/moving_mean",
                     "model/batch_normalization/moving_variance", "model/dense_1/kernel",
                     "model/dense_1/bias"});
  CHECK(model->layer_names() == std::vector<std::string>{"conv2d", "re_lu", "flatten", "dense",
                                                          "batch_normalization", "dense_1"});
  CHECK(model.trainable_variables().size() == 8);
  CHECK(model.variables().size() == 10);
  CHECK(model.named_variables()[0].path == "conv2d/kernel");

  // Nested Sequential and explicit names.
  nn::Sequential outer;
  outer.add(model);
  outer.add("head", nn::Dense(2, 1));
  outer.add(nn::Dense(1, 1));
  auto nv = outer.named_variables();
  CHECK(nv.front().path == "sequential/conv2d/kernel");
  CHECK(nv[nv.size() - 4].path == "head/kernel");
  CHECK(nv.back().path == "dense/bias");
  CHECK_THROWS_AS(outer.add("head", nn::ReLU()), Error);
  CHECK_THROWS_AS(outer.add("a/b", nn::ReLU()), Error);

  // A layer shared twice is listed once (under its first path).
  nn::Dense shared(2, 2);
  nn::Sequential twice{shared, nn::ReLU(), shared};
  CHECK(twice.variables().size() == 2);
  CHECK(twice.named_variables()[0].path == "dense/kernel");

  // The training flag reaches every submodule; copies of a handle share the module.
  outer.set_training(false);
  CHECK_FALSE(model.training());
  CHECK_FALSE(model[4].training());
  nn::Sequential alias = model;
  alias.set_training(true);
  CHECK(model[4].training());
  CHECK(model[5].ptr() == alias[5].ptr());
}

namespace {

// A user module with named submodules and its own variable.
class TwoTowerImpl : public nn::Module {
 public:
  explicit TwoTowerImpl(bool left_first) : nn::Module("two_tower") {
    // Layers created (and registered) in either order: paths depend on names only.
    if (left_first) {
      left_ = nn::Dense(3, 2);
      right_ = nn::Dense(3, 2);
    } else {
      right_ = nn::Dense(3, 2);
      left_ = nn::Dense(3, 2);
    }
    register_module("left", left_.ptr());
    register_module("right", right_.ptr());
    scale_ = add_weight("scale", {}, kFloat32, nn::ones_initializer());
  }
  Tensor forward(const Tensor& x) override { return (left_(x) + right_(x)) * scale_.read(); }

 private:
  nn::Dense left_, right_;
  Variable scale_;
};

using TwoTower = nn::ModuleHolder<TwoTowerImpl>;

}  // namespace

TEST_CASE("Module: user modules compose through ModuleHolder", "[train][layers]") {
  TwoTower m(std::make_shared<TwoTowerImpl>(true));
  std::set<std::string> paths;
  for (auto& nv : m.named_variables("m")) paths.insert(nv.path);
  CHECK(paths == std::set<std::string>{"m/scale", "m/left/kernel", "m/left/bias",
                                       "m/right/kernel", "m/right/bias"});
  CHECK(m(ones({4, 3})).shape() == Shape{4, 2});
  nn::Sequential s{m, nn::Dense(2, 1)};
  CHECK(s.named_variables()[0].path == "two_tower/scale");
}

TEST_CASE("The north-star training step compiles and learns", "[train][layers]") {
  nn::set_global_seed(0);
  nn::Sequential model;
  optim::Adam opt(1e-3);
  {
    model = nn::Sequential{nn::Dense(784, 256), nn::ReLU(), nn::Dense(256, 10)};
    opt = optim::Adam(1e-2);
  }
  Tensor x = random::normal({32, 784}, 1);
  std::vector<int64_t> labels;
  for (int i = 0; i < 32; ++i) labels.push_back(i % 10);
  Tensor y = Tensor::from_vector(labels, {32});
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    GradientTape tape;
    Tensor logits = model(x);
    Tensor per_example = losses::sparse_categorical_crossentropy(y, logits, /*from_logits=*/true);
    Tensor loss = mean(per_example);
    auto grads = tape.gradient(loss, model.trainable_variables());
    opt.apply_gradients(grads, model.trainable_variables());
    (step == 0 ? first : last) = loss.item<double>();
  }
  CHECK(opt.iterations_value() == 20);
  CHECK(last < 0.2 * first);
}
