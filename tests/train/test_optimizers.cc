// Optimizers: every golden "optimizer" case (PyTorch float64 references), update rules by
// hand, slots and iterations, clipping, misuse, and the distribution hooks under a
// two-replica MirroredStrategy.
#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include <strata/autograd/autograd.h>
#include <strata/core/random.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/clip.h>
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>
#include <strata/train/optimizer_factory.h>
#include <strata/train/sgd.h>

using namespace strata;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

Tensor from_json(const json& j) {
  const DType dtype = dtype_from_name(j.at("dtype").get<std::string>());
  return Tensor::from_vector(j.at("data").get<std::vector<double>>(),
                             j.at("shape").get<std::vector<int64_t>>(), dtype);
}

Tensor f64(const std::vector<double>& v) {
  return Tensor::from_vector(v, {int64_t(v.size())}, kFloat64);
}

Variable var64(const std::vector<double>& v, const std::string& name = "w") {
  autograd::VariableOptions o;
  o.name = name;
  return Variable(f64(v), o);
}

}  // namespace

TEST_CASE("Optimizers match every golden optimizer case", "[train][optimizers][golden]") {
  const fs::path shared = testing::shared_dir();
  if (shared.empty() || !fs::exists(shared / "golden" / "cases")) {
    WARN("skipped: no ../shared/golden/cases in this checkout");
    return;
  }
  int ran = 0;
  for (const auto& entry : fs::directory_iterator(shared / "golden" / "cases")) {
    if (entry.path().extension() != ".json") continue;
    json c = json::parse(std::ifstream(entry.path()));
    if (c.value("kind", "") != "optimizer") continue;
    INFO("case " << entry.path().filename().string());
    optim::Optimizer opt = optim::make_optimizer(c.at("optimizer").get<std::string>(),
                                                 c.value("hparams", json::object()));
    std::vector<Tensor> grads;
    for (const auto& g : c.at("grads")) grads.push_back(from_json(g));
    const auto& want = c.at("expect").at("params_after_each_step");
    REQUIRE(want.size() == grads.size());
    const auto got = optim::optimizer_trajectory(opt, from_json(c.at("param")), grads);
    const double rtol = c.at("tol").at("rtol").get<double>();
    const double atol = c.at("tol").at("atol").get<double>();
    for (size_t k = 0; k < got.size(); ++k) {
      INFO("after step " << k + 1);
      REQUIRE_ALLCLOSE(got[k], from_json(want[k]), rtol, atol);
    }
    CHECK(opt.iterations_value() == int64_t(grads.size()));
    ++ran;
  }
  if (ran == 0) WARN("no optimizer cases found in " << (shared / "golden" / "cases"));
  CHECK(ran >= 4);
}

TEST_CASE("make_optimizer refuses unknown names and hyperparameters", "[train][optimizers]") {
  CHECK_THROWS_AS(optim::make_optimizer("rmsprop", {{"lr", 0.1}}), Error);
  CHECK_THROWS_AS(optim::make_optimizer("sgd", {{"lr", 0.1}, {"dampening", 0.5}}), Error);
  CHECK_THROWS_AS(optim::make_optimizer("adam", {{"beta1", 0.9}}), Error);  // no lr
  CHECK_THROWS_AS(optim::make_optimizer("sgd", {{"lr", "fast"}}), Error);
  CHECK_THROWS_AS(optim::make_optimizer("sgd", {{"lr", 0.1}, {"nesterov", 1}}), Error);
  CHECK(optim::make_optimizer("adamw", {{"lr", 0.1}}).name() == "AdamW");
}

TEST_CASE("SGD: plain, weight decay, momentum and Nesterov by hand", "[train][optimizers]") {
  const double lr = 0.1, m = 0.9, wd = 0.01;
  const double p0 = 1.0, g1 = 0.5, g2 = -0.25;
  {
    Variable w = var64({p0});
    optim::SGD opt(lr);
    CHECK(opt.slot_names().empty());
    opt.apply_gradients({f64({g1})}, {w});
    CHECK(w.value().item<double>() == p0 - lr * g1);
  }
  {
    Variable w = var64({p0});
    optim::SGD opt(lr, {.momentum = m, .weight_decay = wd});
    opt.apply_gradients({f64({g1})}, {w});
    const double d1 = g1 + wd * p0, b1 = d1, p1 = p0 - lr * b1;  // b = g on the first step
    CHECK(w.value().item<double>() == Approx(p1).epsilon(1e-15));
    opt.apply_gradients({f64({g2})}, {w});
    const double d2 = g2 + wd * p1, b2 = m * b1 + d2, p2 = p1 - lr * b2;
    CHECK(w.value().item<double>() == Approx(p2).epsilon(1e-15));
    CHECK(opt.find_slot(w, "momentum")->value().item<double>() == Approx(b2).epsilon(1e-15));
  }
  {
    Variable w = var64({p0});
    optim::SGD opt(lr, {.momentum = m, .nesterov = true});
    opt.apply_gradients({f64({g1})}, {w});
    const double b1 = g1, p1 = p0 - lr * (g1 + m * b1);
    CHECK(w.value().item<double>() == Approx(p1).epsilon(1e-15));
    opt.apply_gradients({f64({g2})}, {w});
    const double b2 = m * b1 + g2, p2 = p1 - lr * (g2 + m * b2);
    CHECK(w.value().item<double>() == Approx(p2).epsilon(1e-15));
  }
  CHECK_THROWS_AS(optim::SGD(0.1, {.nesterov = true}), Error);
  CHECK_THROWS_AS(optim::SGD(-1.0), Error);
}

TEST_CASE("SGD: Keras's velocity form differs from PyTorch's once the learning rate changes", "[train][optimizers]") {
  // lr 0.1 at step 0, then 0.01; momentum 0.9; gradient 1 from p = 1.
  const auto schedule = [] { return optim::PiecewiseConstantDecay({0}, {0.1, 0.01}); };
  Variable keras = var64({1.0}), keras_nesterov = var64({1.0}), torch = var64({1.0});
  optim::SGD keras_opt(schedule(), {.momentum = 0.9, .keras_momentum = true});
  optim::SGD nesterov_opt(schedule(), {.momentum = 0.9, .nesterov = true, .keras_momentum = true});
  optim::SGD torch_opt(schedule(), {.momentum = 0.9});
  for (int step = 0; step < 2; ++step) {
    keras_opt.apply_gradients({f64({1.0})}, {keras});
    nesterov_opt.apply_gradients({f64({1.0})}, {keras_nesterov});
    torch_opt.apply_gradients({f64({1.0})}, {torch});
  }
  // Keras: v = -0.1, p = 0.9; v = 0.9 * -0.1 - 0.01 = -0.1, p = 0.8.
  CHECK(keras.value().item<double>() == Approx(0.8).epsilon(1e-15));
  CHECK(keras_opt.find_slot(keras, "velocity")->value().item<double>() == Approx(-0.1).epsilon(1e-15));
  // Nesterov: p += 0.9 v - lr g: 1 - 0.09 - 0.1 = 0.81, then 0.81 - 0.09 - 0.01 = 0.71.
  CHECK(keras_nesterov.value().item<double>() == Approx(0.71).epsilon(1e-15));
  // PyTorch: b = 1, p = 0.9; b = 1.9, p = 0.9 - 0.019.
  CHECK(torch.value().item<double>() == Approx(0.881).epsilon(1e-15));
  CHECK(keras_opt.slot_names() == std::vector<std::string>{"velocity"});
  CHECK(optim::make_optimizer("sgd", {{"lr", 0.1}, {"momentum", 0.5}, {"keras_momentum", true}}).slot_names() ==
        std::vector<std::string>{"velocity"});

  // With a constant rate the forms agree (v = -lr * b).
  Variable a = var64({1.0, -2.0}), b = var64({1.0, -2.0});
  optim::SGD ka(0.05, {.momentum = 0.8, .weight_decay = 0.01, .keras_momentum = true});
  optim::SGD tb(0.05, {.momentum = 0.8, .weight_decay = 0.01});
  for (double g : {0.5, -0.25, 1.0}) {
    ka.apply_gradients({f64({g, 2 * g})}, {a});
    tb.apply_gradients({f64({g, 2 * g})}, {b});
  }
  REQUIRE_ALLCLOSE(a.value(), b.value(), 1e-14, 1e-14);
}

TEST_CASE("Adam and AdamW: bias-corrected steps by hand", "[train][optimizers]") {
  const double lr = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  const double p0 = 0.5, g1 = 0.2, g2 = -0.4;
  auto adam_steps = [&](double p, double wd_decoupled) {
    double m = 0, v = 0;
    std::vector<double> out;
    int t = 0;
    for (double g : {g1, g2}) {
      ++t;
      p *= 1 - lr * wd_decoupled;
      m = b1 * m + (1 - b1) * g;
      v = b2 * v + (1 - b2) * g * g;
      const double denom = std::sqrt(v) / std::sqrt(1 - std::pow(b2, t)) + eps;
      p -= lr / (1 - std::pow(b1, t)) * m / denom;
      out.push_back(p);
    }
    return out;
  };
  {
    Variable w = var64({p0});
    optim::Adam opt(lr);
    const auto want = adam_steps(p0, 0);
    opt.apply_gradients({f64({g1})}, {w});
    CHECK(w.value().item<double>() == Approx(want[0]).epsilon(1e-14));
    // The first Adam step moves by lr * sign(g) (almost exactly).
    CHECK(w.value().item<double>() == Approx(p0 - lr).epsilon(1e-6));
    opt.apply_gradients({f64({g2})}, {w});
    CHECK(w.value().item<double>() == Approx(want[1]).epsilon(1e-14));
    CHECK(opt.slot_names() == std::vector<std::string>{"m", "v"});
  }
  {
    Variable w = var64({p0});
    optim::AdamW opt(lr, {.weight_decay = 0.1});
    const auto want = adam_steps(p0, 0.1);
    opt.apply_gradients({f64({g1})}, {w});
    opt.apply_gradients({f64({g2})}, {w});
    CHECK(w.value().item<double>() == Approx(want[1]).epsilon(1e-14));
  }
  CHECK_THROWS_AS(optim::Adam(0.1, {.beta1 = 1.0}), Error);
  CHECK_THROWS_AS(optim::AdamW(0.1, {.weight_decay = -1}), Error);
}

TEST_CASE("Optimizer: iterations, lazy slots, undefined gradients, schedules", "[train][optimizers]") {
  Variable a = var64({1, 2}, "a"), b = var64({3}, "b");
  optim::Adam opt(optim::PiecewiseConstantDecay({1}, {0.1, 0.01}));
  CHECK(opt.iterations().dtype() == kInt64);
  CHECK_FALSE(opt.iterations().trainable());
  CHECK(opt.iterations().aggregation() == autograd::VariableAggregation::OnlyFirstReplica);
  CHECK(opt.iterations_value() == 0);
  CHECK(opt.learning_rate() == 0.1);
  CHECK_FALSE(opt.find_slot(a, "m").has_value());

  // b has no gradient: it is skipped and gets no slots.
  opt.apply_gradients({f64({1, -1}), Tensor()}, {a, b});
  CHECK(opt.iterations_value() == 1);
  REQUIRE(opt.find_slot(a, "m").has_value());
  CHECK_FALSE(opt.find_slot(b, "m").has_value());
  CHECK(b.value().item<double>() == 3.0);
  CHECK(opt.find_slot(a, "v")->shape() == Shape{2});
  CHECK_FALSE(opt.find_slot(a, "v")->trainable());
  CHECK(opt.variables().size() == 3);  // iterations + m + v
  // The schedule is evaluated at iterations before the update: step 0 used 0.1, 1 uses 0.1
  // (boundary inclusive), then 0.01.
  REQUIRE_ALLCLOSE(a.value(), f64({0.9, 2.1}), 1e-6, 0);
  CHECK(opt.learning_rate() == 0.1);
  opt.apply_gradients({f64({1, -1}), Tensor()}, {a, b});
  CHECK(opt.learning_rate() == 0.01);

  // build() creates slots ahead of time; drop_slots forgets them.
  opt.build({b});
  CHECK(opt.find_slot(b, "m").has_value());
  opt.drop_slots(b);
  CHECK_FALSE(opt.find_slot(b, "m").has_value());
  CHECK_THROWS_AS(opt.find_slot(a, "velocity"), Error);

  // Copies of an optimizer handle share state.
  optim::Optimizer alias = opt;
  alias.apply_gradients({f64({0, 0})}, {a});
  CHECK(opt.iterations_value() == 3);
}

TEST_CASE("Optimizer: misuse throws and changes nothing", "[train][optimizers]") {
  Variable a = var64({1, 2}, "a");
  optim::SGD opt(0.1);
  CHECK_THROWS_AS(opt.apply_gradients({f64({1, 2}), f64({1})}, {a}), Error);
  CHECK_THROWS_AS(opt.apply_gradients({f64({1, 2, 3})}, {a}), Error);
  CHECK_THROWS_AS(opt.apply_gradients({Tensor::from_vector<float>({1, 2})}, {a}), Error);
  CHECK_THROWS_AS(opt.apply_gradients({f64({1, 2}), f64({1, 2})}, {a, a}), Error);
  CHECK_THROWS_AS(opt.apply_gradients({f64({1, 2})}, {Variable()}), Error);
  REQUIRE_ALLCLOSE(a.value(), f64({1, 2}));
  CHECK(opt.iterations_value() == 0);
  // No gradient at all (Keras's "No gradients provided for any variable").
  CHECK_THROWS_WITH(opt.apply_gradients({Tensor()}, {a}), Catch::Contains("no gradient provided for any of the 1"));
  CHECK(opt.iterations_value() == 0);
  optim::Optimizer empty;
  CHECK_THROWS_AS(empty.apply_gradients({}, {}), Error);
}

TEST_CASE("Clipping by global norm", "[train][optimizers]") {
  // Norm of {3, 4} and {12}: 13.
  auto clipped = optim::clip_by_global_norm({f64({3, 4}), Tensor(), f64({12})}, 6.5);
  CHECK(clipped.global_norm == Approx(13.0));
  REQUIRE_ALLCLOSE(clipped.gradients[0], f64({1.5, 2}));
  CHECK_FALSE(clipped.gradients[1].defined());
  REQUIRE_ALLCLOSE(clipped.gradients[2], f64({6}));
  // Within the norm: unchanged.
  auto same = optim::clip_by_global_norm({f64({3, 4})}, 10);
  REQUIRE_ALLCLOSE(same.gradients[0], f64({3, 4}));
  CHECK_THROWS_AS(optim::clip_by_global_norm({f64({1})}, 0), Error);
  // Non-finite norms give NaN gradients, as in TensorFlow.
  auto nan = optim::clip_by_global_norm({f64({INFINITY, 1})}, 1);
  CHECK(std::isnan(nan.gradients[0].to_vector<double>()[1]));

  // global_clipnorm applies before the update.
  Variable w = var64({0, 0});
  optim::SGD opt(1.0, {.global_clipnorm = 1.0});
  opt.apply_gradients({f64({3, 4})}, {w});
  REQUIRE_ALLCLOSE(w.value(), f64({-0.6, -0.8}));
}

TEST_CASE("Optimizer under a two-replica MirroredStrategy matches one replica",
          "[train][optimizers][distribute]") {
  // Two replicas on half batches with compute_average_loss over the global batch give the
  // same update as one replica on the whole batch.
  const int64_t global_batch = 8;
  Tensor x = random::normal({global_batch, 5}, 3, 0.0, 1.0, kFloat64);
  Tensor y = Tensor::from_vector<int64_t>({0, 1, 2, 0, 1, 2, 0, 1}, {global_batch});

  auto build = [] {
    nn::set_global_seed(5);
    return nn::Sequential{nn::Dense(5, 4, {.dtype = kFloat64}), nn::Tanh(),
                          nn::Dense(4, 3, {.dtype = kFloat64})};
  };
  auto step = [&](nn::Sequential& model, optim::Optimizer& opt, const Tensor& xb,
                  const Tensor& yb) {
    GradientTape tape;
    Tensor per_example = losses::sparse_categorical_crossentropy(yb, model(xb), true);
    Tensor loss = distribute::compute_average_loss(per_example, global_batch);
    auto grads = tape.gradient(loss, model.trainable_variables());
    opt.apply_gradients(grads, model.trainable_variables());
  };

  nn::Sequential ref = build();
  optim::Optimizer ref_opt = optim::Adam(0.05);
  for (int i = 0; i < 3; ++i) step(ref, ref_opt, x, y);

  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    model = build();
    opt = optim::Adam(0.05);
  }
  CHECK(model.trainable_variables()[0].impl().is_replicated());
  // In cross-replica context apply_gradients refuses, as TensorFlow does.
  {
    auto scope = strategy.scope();
    auto vars = model.trainable_variables();
    std::vector<Tensor> zero_grads;
    for (auto& v : vars) zero_grads.push_back(zeros_like(v.value()));
    CHECK_THROWS_AS(opt.apply_gradients(zero_grads, vars), Error);
  }
  std::vector<Tensor> xs{x.slice(0, 0, 4), x.slice(0, 4, 8)};
  std::vector<Tensor> ys{y.slice(0, 0, 4), y.slice(0, 4, 8)};
  for (int i = 0; i < 3; ++i) {
    strategy.run([&] {
      auto* ctx = distribute::get_replica_context();
      const size_t r = size_t(ctx->replica_id_in_sync_group());
      step(model, opt, xs[r].to(ctx->device()), ys[r].to(ctx->device()));
    });
  }
  auto ref_vars = ref.trainable_variables();
  auto vars = model.trainable_variables();
  REQUIRE(vars.size() == ref_vars.size());
  for (size_t i = 0; i < vars.size(); ++i) {
    auto components = strategy.experimental_local_results(vars[i]);
    REQUIRE(components.size() == 2);
    // Replicas stay bitwise identical, and match the single-replica run.
    REQUIRE(components[0].to_vector<double>() == components[1].to_vector<double>());
    REQUIRE_ALLCLOSE(components[0], ref_vars[i].value(), 1e-10, 1e-12);
    auto m = opt.find_slot(vars[i], "m");
    REQUIRE(m.has_value());
    auto m_components = strategy.experimental_local_results(*m);
    REQUIRE(m_components.size() == 2);
    REQUIRE_ALLCLOSE(m_components[1], ref_opt.find_slot(ref_vars[i], "m")->value(), 1e-10, 1e-12);
  }
  for (const Tensor& it : strategy.experimental_local_results(opt.iterations()))
    CHECK(it.item<int64_t>() == 3);
}
