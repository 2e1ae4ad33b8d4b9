// LossScaleOptimizer: Keras's dynamic loss scaling (growth after N finite steps, halving on
// overflow down to 1, skipped updates that still advance iterations), fixed scales, the
// argument rules, one replica's overflow under MirroredStrategy(3) making every replica
// skip, checkpoints of the scale state, and a short mixed-precision training run.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <limits>

#include <strata/autograd/autograd.h>
#include <strata/core/random.h>
#include <strata/data/synthetic.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include "tests/test_util.h"
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/loss_scale_optimizer.h>
#include <strata/train/losses.h>
#include <strata/train/nn/nn.h>
#include <strata/train/policy.h>
#include <strata/train/sgd.h>

using namespace strata;
using autograd::GradientTape;
namespace fs = std::filesystem;

namespace {

Variable var(std::vector<float> values) { return Variable(Tensor::from_vector<float>(values)); }
Tensor vec(std::vector<float> values) { return Tensor::from_vector<float>(values); }

}  // namespace

TEST_CASE("LossScaleOptimizer: arguments and defaults", "[train][loss_scale]") {
  optim::LossScaleOptimizer dyn(optim::SGD(0.1));
  CHECK(dyn.dynamic());
  CHECK(dyn.loss_scale() == 32768.0);
  CHECK(dyn.initial_scale() == 32768.0);
  CHECK(dyn.dynamic_growth_steps() == 2000);
  CHECK(dyn.dynamic_counter() == 0);
  CHECK(dyn.loss_scale_variable().dtype() == kFloat32);
  CHECK(dyn.dynamic_counter_variable().dtype() == kInt64);
  CHECK_FALSE(dyn.loss_scale_variable().trainable());
  CHECK(dyn.loss_scale_variable().aggregation() == autograd::VariableAggregation::OnlyFirstReplica);
  CHECK(dyn.inner_optimizer().name() == "SGD");

  optim::LossScaleOptimizer fixed(optim::SGD(0.1), /*dynamic=*/false, 128.0);
  CHECK_FALSE(fixed.dynamic());
  CHECK(fixed.loss_scale() == 128.0);
  CHECK(fixed.dynamic_growth_steps() == 0);

  CHECK_THROWS_WITH(optim::LossScaleOptimizer(optim::SGD(0.1), false),
                    Catch::Matchers::Contains("requires an initial_scale"));
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::SGD(0.1), false, 8.0, 10), Error);
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::SGD(0.1), true, 0.0), Error);
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::SGD(0.1), true, -2.0), Error);
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::SGD(0.1), true, INFINITY), Error);
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::SGD(0.1), true, 1e39), Error);
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::SGD(0.1), true, std::nullopt, 0), Error);
  CHECK_THROWS_AS(optim::LossScaleOptimizer(optim::Optimizer()), Error);
  // Wrapping a LossScaleOptimizer (held as a plain Optimizer: a LossScaleOptimizer
  // argument would copy the handle) is an error.
  const optim::Optimizer plain = dyn;
  CHECK_THROWS_WITH(optim::LossScaleOptimizer(plain), Catch::Matchers::Contains("cannot wrap another"));
  CHECK_THROWS_AS(optim::LossScaleOptimizer(plain, false, 2.0), Error);

  // of() recovers the loss-scaling view from a plain handle.
  REQUIRE(optim::LossScaleOptimizer::of(plain).has_value());
  CHECK(optim::LossScaleOptimizer::of(plain)->loss_scale() == 32768.0);
  CHECK_FALSE(optim::LossScaleOptimizer::of(optim::SGD(0.1)).has_value());

  // The handle forwards the step counter, learning rate and slots to the inner optimizer.
  optim::Adam adam(0.01);
  optim::LossScaleOptimizer wrapped(adam);
  CHECK(wrapped.iterations() == adam.iterations());
  CHECK(wrapped.learning_rate() == adam.learning_rate());
  CHECK(wrapped.slot_names() == adam.slot_names());
  Variable w = var({1, 2});
  wrapped.build({w});
  CHECK(adam.find_slot(w, "m").has_value());
  CHECK(wrapped.variables().size() == 5);  // iterations, m, v, loss_scale, good_steps
}

TEST_CASE("LossScaleOptimizer: scaled loss and unscaled gradients", "[train][loss_scale]") {
  optim::LossScaleOptimizer opt(optim::SGD(1.0), false, 1024.0);
  Variable w = var({1.0f, -2.0f});
  GradientTape tape;
  Tensor loss = sum(square(w.read()));
  Tensor scaled = opt.get_scaled_loss(loss);
  CHECK(scaled.dtype() == kFloat32);
  CHECK(scaled.item<double>() == 5.0 * 1024);
  auto grads = tape.gradient(scaled, std::vector<Variable>{w});
  REQUIRE_ALLCLOSE(grads[0], vec({2048.f, -4096.f}), 0, 0);
  auto unscaled = opt.get_unscaled_gradients({grads[0], Tensor()});
  REQUIRE(unscaled.size() == 2);
  CHECK_FALSE(unscaled[1].defined());
  REQUIRE_ALLCLOSE(unscaled[0], vec({2.f, -4.f}), 0, 0);
  // In the loss's own dtype (a float16 loss stays float16).
  CHECK(opt.get_scaled_loss(cast(loss, kFloat16)).dtype() == kFloat16);
  CHECK_THROWS_AS(opt.get_scaled_loss(Tensor()), Error);
  CHECK_THROWS_AS(opt.get_scaled_loss(Tensor::scalar(1, kInt64)), Error);
}

TEST_CASE("LossScaleOptimizer: growth after N finite steps, halving on overflow, minimum 1",
          "[train][loss_scale]") {
  optim::SGD sgd(0.5);
  optim::LossScaleOptimizer opt(sgd, true, 8.0, /*dynamic_growth_steps=*/3);
  Variable w = var({1.0f, 1.0f});
  const Tensor g = vec({0.5f, -1.0f});
  std::vector<double> scales;
  std::vector<int64_t> counters;
  for (int i = 0; i < 7; ++i) {
    opt.apply_gradients({g}, {w});
    scales.push_back(opt.loss_scale());
    counters.push_back(opt.dynamic_counter());
  }
  CHECK(scales == std::vector<double>{8, 8, 16, 16, 16, 32, 32});
  CHECK(counters == std::vector<int64_t>{1, 2, 0, 1, 2, 0, 1});
  CHECK(opt.iterations_value() == 7);
  REQUIRE_ALLCLOSE(w.value(), vec({1.0f - 7 * 0.25f, 1.0f + 7 * 0.5f}), 1e-6, 1e-6);

  // A non-finite gradient (inf or NaN, in any variable): the update is skipped, the scale
  // halves, the counter resets and iterations still advances.
  Variable other = var({3.0f});
  for (float bad : {INFINITY, -INFINITY, NAN}) {
    const Tensor before = w.value().clone(), other_before = other.value().clone();
    const double scale = opt.loss_scale();
    const int64_t it = opt.iterations_value();
    opt.apply_gradients({g, vec({bad})}, {w, other});
    REQUIRE_ALLCLOSE(w.value(), before, 0, 0);
    REQUIRE_ALLCLOSE(other.value(), other_before, 0, 0);
    CHECK(opt.loss_scale() == scale / 2);
    CHECK(opt.dynamic_counter() == 0);
    CHECK(opt.iterations_value() == it + 1);
  }
  // 32 -> 16 -> 8 -> 4; then the scale never goes below 1.
  for (int i = 0; i < 4; ++i) opt.apply_gradients({vec({NAN, 0.f})}, {w});
  CHECK(opt.loss_scale() == 1.0);
  CHECK(opt.iterations_value() == 7 + 3 + 4);
  // Undefined gradients are ignored by the check (the variable is not updated).
  opt.apply_gradients({g, Tensor()}, {w, other});
  CHECK(opt.dynamic_counter() == 1);
  CHECK(other.value().item<float>() == 3.0f);

  // A scale below 1 halves to 1 (the floor), as in Keras.
  optim::LossScaleOptimizer small(optim::SGD(0.1), true, 0.5);
  small.apply_gradients({vec({INFINITY})}, {var({0.f})});
  CHECK(small.loss_scale() == 1.0);
}

TEST_CASE("LossScaleOptimizer: the scale doubles only when the result is finite", "[train][loss_scale]") {
  const double top = std::ldexp(1.0, 127);  // 2^128 overflows float32
  optim::LossScaleOptimizer opt(optim::SGD(0.1), true, top, 2);
  Variable w = var({0.f});
  opt.apply_gradients({vec({1.f})}, {w});
  opt.apply_gradients({vec({1.f})}, {w});
  CHECK(opt.loss_scale() == top);
  CHECK(opt.dynamic_counter() == 0);  // the counter resets all the same
  REQUIRE_ALLCLOSE(w.value(), vec({-0.2f}), 1e-6, 1e-7);
}

TEST_CASE("LossScaleOptimizer: a fixed scale never changes but still skips non-finite steps",
          "[train][loss_scale]") {
  optim::LossScaleOptimizer opt(optim::SGD(1.0), false, 64.0);
  Variable w = var({1.f});
  opt.apply_gradients({vec({NAN})}, {w});
  CHECK(w.value().item<float>() == 1.f);
  CHECK(opt.loss_scale() == 64.0);
  CHECK(opt.iterations_value() == 1);
  for (int i = 0; i < 5; ++i) opt.apply_gradients({vec({0.5f})}, {w});
  CHECK(opt.loss_scale() == 64.0);
  CHECK(opt.dynamic_counter() == 0);
  CHECK(w.value().item<float>() == Approx(-1.5f));
  CHECK(opt.iterations_value() == 6);
}

TEST_CASE("LossScaleOptimizer under MirroredStrategy(3): one replica's overflow makes every replica skip",
          "[train][loss_scale][distribute]") {
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(3));
  nn::Sequential model;
  optim::LossScaleOptimizer opt(optim::SGD(0.1));
  {
    auto scope = strategy.scope();
    nn::set_global_seed(3);
    model = nn::Sequential{nn::Dense(4, 3), nn::Tanh(), nn::Dense(3, 2)};
    opt = optim::LossScaleOptimizer(optim::Adam(0.05), true, 1024.0, /*dynamic_growth_steps=*/2);
  }
  REQUIRE(opt.loss_scale_variable().impl().is_replicated());
  const int64_t global_batch = 6;
  const Tensor x = random::normal({global_batch, 4}, 21);
  const Tensor y = Tensor::from_vector<int64_t>({0, 1, 1, 0, 1, 0}, {global_batch});

  // One step: replica `overflow_replica` (or none, -1) sees an infinite gradient.
  auto step = [&](int overflow_replica) {
    strategy.run([&] {
      auto* ctx = distribute::get_replica_context();
      const int r = ctx->replica_id_in_sync_group();
      const Tensor xb = x.slice(0, 2 * r, 2 * r + 2).to(ctx->device());
      const Tensor yb = y.slice(0, 2 * r, 2 * r + 2).to(ctx->device());
      GradientTape tape;
      Tensor per_example = losses::sparse_categorical_crossentropy(yb, model(xb), true);
      Tensor loss = distribute::compute_average_loss(per_example, global_batch);
      auto vars = model.trainable_variables();
      auto grads = opt.get_unscaled_gradients(tape.gradient(opt.get_scaled_loss(loss), vars));
      if (r == overflow_replica) grads[1] = full_like(grads[1], INFINITY);
      opt.apply_gradients(grads, vars);
    });
  };
  auto components = [&](const Variable& v) { return strategy.experimental_local_results(v); };
  auto snapshot = [&] {
    std::vector<std::vector<float>> out;
    for (const Variable& v : model.trainable_variables())
      for (const Tensor& c : components(v)) out.push_back(c.to_vector<float>());
    return out;
  };
  // The same state on every replica, bitwise.
  auto check_identical = [&] {
    for (const Variable& v : model.trainable_variables()) {
      auto c = components(v);
      REQUIRE(c.size() == 3);
      CHECK(c[0].to_vector<float>() == c[1].to_vector<float>());
      CHECK(c[0].to_vector<float>() == c[2].to_vector<float>());
    }
    for (const Variable& v : {opt.loss_scale_variable(), opt.dynamic_counter_variable(), opt.iterations()}) {
      auto c = components(v);
      REQUIRE(c.size() == 3);
      CHECK(c[0].to_vector<double>() == c[1].to_vector<double>());
      CHECK(c[0].to_vector<double>() == c[2].to_vector<double>());
    }
  };

  step(-1);  // a finite step: applied everywhere
  check_identical();
  CHECK(opt.dynamic_counter() == 1);
  const auto before = snapshot();
  step(1);  // replica 1 overflows: every replica skips
  check_identical();
  CHECK(snapshot() == before);
  for (const Tensor& s : components(opt.loss_scale_variable())) CHECK(s.item<double>() == 512.0);
  for (const Tensor& c : components(opt.dynamic_counter_variable())) CHECK(c.item<int64_t>() == 0);
  for (const Tensor& it : components(opt.iterations())) CHECK(it.item<int64_t>() == 2);
  step(2);  // and replica 2
  check_identical();
  CHECK(snapshot() == before);
  CHECK(opt.loss_scale() == 256.0);
  step(-1);
  step(-1);  // two finite steps in a row: the scale doubles on every replica
  check_identical();
  CHECK(snapshot() != before);
  for (const Tensor& s : components(opt.loss_scale_variable())) CHECK(s.item<double>() == 512.0);
  for (const Tensor& it : components(opt.iterations())) CHECK(it.item<int64_t>() == 5);

  // The three applied steps equal plain Adam steps on the whole batch, unscaled, with
  // iterations advanced by the two skipped steps (Adam's bias correction sees them).
  nn::set_global_seed(3);
  nn::Sequential ref{nn::Dense(4, 3), nn::Tanh(), nn::Dense(3, 2)};
  optim::Adam ref_opt(0.05);
  for (int i = 0; i < 3; ++i) {
    if (i == 1) ref_opt.iterations().assign(Tensor::scalar(3, kInt64));
    GradientTape tape;
    Tensor loss = distribute::compute_average_loss(losses::sparse_categorical_crossentropy(y, ref(x), true),
                                                   global_batch);
    ref_opt.apply_gradients(tape.gradient(loss, ref.trainable_variables()), ref.trainable_variables());
  }
  auto vars = model.trainable_variables(), ref_vars = ref.trainable_variables();
  for (size_t i = 0; i < vars.size(); ++i) REQUIRE_ALLCLOSE(components(vars[i])[0], ref_vars[i].value(), 1e-4, 1e-6);
}

TEST_CASE("LossScaleOptimizer with state the replicas share: updated once per step",
          "[train][loss_scale][distribute]") {
  // CentralStorageStrategy keeps one copy of every variable (loss-scale state included);
  // a LossScaleOptimizer made outside any scope has plain variables. Either way the
  // replicas must change the scale once per step, not once per replica.
  auto check = [](distribute::Strategy& strategy, bool in_scope) {
    INFO(strategy.name() << (in_scope ? " (made in scope)" : " (made outside any scope)"));
    Variable w;
    optim::LossScaleOptimizer opt(optim::SGD(0.5), true, 64.0, 2);
    {
      auto scope = strategy.scope();
      w = var({1.f, 1.f});
      if (in_scope) opt = optim::LossScaleOptimizer(optim::SGD(0.5), true, 64.0, 2);
    }
    REQUIRE_FALSE(opt.loss_scale_variable().impl().is_replicated());
    auto step = [&](int overflow_replica) {
      strategy.run([&] {
        const int r = distribute::get_replica_context()->replica_id_in_sync_group();
        Tensor g = r == overflow_replica ? vec({INFINITY, 0.f}) : vec({0.25f, 0.5f});
        opt.apply_gradients({g}, {w});
      });
    };
    step(1);
    CHECK(opt.loss_scale() == 32.0);
    CHECK(opt.iterations_value() == 1);
    CHECK(w.value().to_vector<float>() == std::vector<float>{1.f, 1.f});
    step(-1);
    CHECK(opt.dynamic_counter() == 1);
    step(-1);
    CHECK(opt.loss_scale() == 64.0);
    CHECK(opt.dynamic_counter() == 0);
    CHECK(opt.iterations_value() == 3);
    // Two applied steps of the summed gradient (2 replicas x [0.25, 0.5]) at rate 0.5.
    REQUIRE_ALLCLOSE(w.value(), vec({0.5f, 0.f}), 1e-6, 1e-6);
  };
  distribute::CentralStorageStrategy central(distribute::MirroredStrategy::cpu_devices(2));
  check(central, true);
  distribute::MirroredStrategy mirrored(distribute::MirroredStrategy::cpu_devices(2));
  check(mirrored, false);
}

TEST_CASE("LossScaleOptimizer: the scale state round-trips through a checkpoint", "[train][loss_scale][checkpoint]") {
  const fs::path dir = fs::temp_directory_path() / ("strata_lso_ckpt_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  Variable w = var({1.f, 2.f});
  optim::LossScaleOptimizer opt(optim::Adam(0.1), true, 256.0, 5);
  opt.apply_gradients({vec({1.f, 1.f})}, {w});
  opt.apply_gradients({vec({1.f, 1.f})}, {w});
  opt.apply_gradients({vec({INFINITY, 1.f})}, {w});
  opt.apply_gradients({vec({1.f, 1.f})}, {w});
  REQUIRE(opt.loss_scale() == 128.0);
  REQUIRE(opt.dynamic_counter() == 1);
  REQUIRE(opt.iterations_value() == 4);

  train::Checkpoint ckpt{{"w", w}, {"optimizer", opt}};
  auto paths = ckpt.variables_by_path();
  CHECK(paths.count("optimizer/loss_scale") == 1);
  CHECK(paths.count("optimizer/good_steps") == 1);
  CHECK(paths.count("optimizer/iterations") == 1);
  ckpt.save(dir / "ckpt-4", 4);

  // Restored into a fresh optimizer (and, under a strategy, into mirrored state).
  Variable w2 = var({0.f, 0.f});
  optim::LossScaleOptimizer fresh(optim::Adam(0.1), true, 256.0, 5);
  train::Checkpoint{{"w", w2}, {"optimizer", fresh}}.restore(dir / "ckpt-4");
  CHECK(fresh.loss_scale() == 128.0);
  CHECK(fresh.dynamic_counter() == 1);
  CHECK(fresh.iterations_value() == 4);
  REQUIRE_ALLCLOSE(w2.value(), w.value(), 0, 0);

  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  Variable wm;
  optim::LossScaleOptimizer mirrored(optim::SGD(0.1));
  {
    auto scope = strategy.scope();
    wm = var({0.f, 0.f});
    mirrored = optim::LossScaleOptimizer(optim::Adam(0.1), true, 256.0, 5);
  }
  train::Checkpoint{{"w", wm}, {"optimizer", mirrored}}.restore(dir / "ckpt-4");
  for (const Tensor& s : strategy.experimental_local_results(mirrored.loss_scale_variable()))
    CHECK(s.item<double>() == 128.0);
  for (const Tensor& c : strategy.experimental_local_results(mirrored.dynamic_counter_variable()))
    CHECK(c.item<int64_t>() == 1);

  // A checkpoint without loss-scale state does not restore into a LossScaleOptimizer.
  optim::Adam plain(0.1);
  train::Checkpoint{{"w", w}, {"optimizer", plain}}.save(dir / "plain", 0);
  CHECK_THROWS_WITH(train::Checkpoint({{"w", w2}, {"optimizer", fresh}}).restore(dir / "plain"),
                    Catch::Matchers::Contains("missing variable 'optimizer/good_steps'"));

  // A fixed scale is the program's constant (Keras tracks only a dynamic one): a saved
  // dynamic scale does not replace it, and it is not saved itself.
  optim::LossScaleOptimizer fixed(optim::Adam(0.1), /*dynamic=*/false, 64.0);
  const train::RestoreStatus status = train::Checkpoint{{"w", w2}, {"optimizer", fixed}}.restore(dir / "ckpt-4");
  CHECK(fixed.loss_scale() == 64.0);
  CHECK(fixed.iterations_value() == 4);
  CHECK(std::count(status.unused.begin(), status.unused.end(), "optimizer/loss_scale") == 1);
  train::Checkpoint with_fixed{{"w", w2}, {"optimizer", fixed}};
  CHECK(with_fixed.variables_by_path().count("optimizer/loss_scale") == 0);

  // A saved scale the optimizer could not run with is refused before anything changes.
  opt.loss_scale_variable().assign(Tensor::scalar(0.0, kFloat32));
  ckpt.save(dir / "zero-scale", 5);
  CHECK_THROWS_WITH(train::Checkpoint({{"w", w2}, {"optimizer", fresh}}).restore(dir / "zero-scale"),
                    Catch::Matchers::Contains("'optimizer/loss_scale': the saved loss scale 0 is not a positive finite"));
  CHECK(fresh.loss_scale() == 128.0);
  fs::remove_all(dir);
}

namespace {

// A short synthetic run: an MLP under `policy` and MirroredStrategy(2), with a
// LossScaleOptimizer for mixed_float16. Returns the evaluation accuracy.
double train_synthetic(const std::string& policy, double* final_scale = nullptr) {
  data::SyntheticOptions so;
  so.num_examples = 1200;
  so.feature_shape = {64};
  so.separation = 0.5;
  so.seed = 5;
  const data::LabeledArrays all = data::make_synthetic_classification(so);
  const data::LabeledArrays tr = all.slice(0, 1000), ev = all.slice(1000, 1200);
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  nn::Sequential model;
  optim::Optimizer opt;
  {
    auto scope = strategy.scope();
    mixed_precision::PolicyScope policy_scope(policy);
    nn::set_global_seed(7);
    model = nn::Sequential{nn::Dense(64, 64), nn::ReLU(), nn::Dense(64, 10)};
    opt = optim::Adam(3e-3);
    if (policy == "mixed_float16") opt = optim::LossScaleOptimizer(opt);
  }
  const int64_t global_batch = 50;
  auto ds = strategy.experimental_distribute_dataset(tr.dataset().repeat().batch(global_batch, true));
  std::atomic<bool> float32_loss_and_grads{true};
  auto it = ds.make_iterator();
  for (int s = 0; s < 150; ++s) {
    auto batch = it.next();
    REQUIRE(batch.has_value());
    strategy.run(
        [&](const data::Batch& b) {
          GradientTape tape;
          Tensor logits = model(b[0]);
          Tensor loss = distribute::compute_average_loss(
              losses::sparse_categorical_crossentropy(b[1], logits, true), global_batch);
          // Catch2 assertions are not thread-safe: record, check after run.
          if (loss.dtype() != kFloat32) float32_loss_and_grads = false;
          auto vars = model.trainable_variables();
          auto lso = optim::LossScaleOptimizer::of(opt);
          auto grads = tape.gradient(lso ? lso->get_scaled_loss(loss) : loss, vars);
          if (lso) grads = lso->get_unscaled_gradients(grads);
          for (const Tensor& g : grads)
            if (g.dtype() != kFloat32) float32_loss_and_grads = false;
          opt.apply_gradients(grads, vars);
        },
        *batch);
  }
  CHECK(float32_loss_and_grads);
  if (final_scale) *final_scale = optim::LossScaleOptimizer::of(opt)->loss_scale();
  model.set_training(false);
  const Tensor logits = model(ev.features);
  CHECK(logits.dtype() == mixed_precision::Policy(policy).compute_dtype());
  return mean(cast(equal(argmax(logits, -1), ev.labels), kFloat32)).item<double>();
}

}  // namespace

TEST_CASE("Mixed precision trains like float32 under MirroredStrategy(2) (short synthetic run)",
          "[train][mixed_precision][loss_scale][distribute]") {
  const double f32 = train_synthetic("float32");
  const double bf16 = train_synthetic("mixed_bfloat16");
  double scale = 0;
  const double f16 = train_synthetic("mixed_float16", &scale);
  INFO("accuracy float32 " << f32 << ", mixed_bfloat16 " << bf16 << ", mixed_float16 " << f16);
  CHECK(f32 > 0.8);
  CHECK(bf16 > f32 - 0.05);
  CHECK(f16 > f32 - 0.05);
  // 150 steps never reach 2000 good steps: the scale only ever halved.
  CHECK(scale <= 32768.0);
  CHECK(scale >= 1.0);
}
