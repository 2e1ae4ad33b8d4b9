// The moving average of the weights an optimizer keeps with use_ema (train/ema.h):
//  - its arithmetic (Keras 3's: the average is the weights after the first step, then
//    momentum * average + (1 - momentum) * weights) and ema_overwrite_frequency;
//  - under Mirrored(2), with ZeRO-1 (bitwise its unsharded self) and with replicas sharing
//    one copy of the variables, every replica's copy equal;
//  - finalize_variable_values and swap_ema_weights, and their refusals;
//  - checkpoints: averages saved and restored (also from ZeRO-1 into a plain strategy), a
//    checkpoint without averages resumed with use_ema (they start at the restored
//    weights), one with averages resumed without use_ema refused;
//  - fit ends with the averages in the model, and SwapEMAWeights validates with them;
//  - the optimizer factory's Keras names, and bad options.
#include <catch2/catch.hpp>

#include <strata/core/ops.h>
#include <strata/distribute/make_strategy.h>
#include <strata/distribute/strategy.h>
#include <strata/train/adam.h>
#include <strata/train/checkpoint.h>
#include <strata/train/fit.h>
#include <strata/train/optimizer_factory.h>
#include <strata/train/sgd.h>
#include <strata/train/swap_ema_weights.h>
#include "tests/distribute/equivalence_helpers.h"
#include "tests/temp_dir.h"

using namespace strata;

namespace ema_test {

namespace eq = strata::distribute::testing;

constexpr int64_t kFeatures = 6, kHidden = 10, kClasses = 4;

data::Dataset dataset() { return eq::classification_dataset(3, 40, kFeatures, 8); }

optim::Optimizer adam_with_ema(int64_t overwrite_frequency = 0) {
  return optim::Adam(0.02, {.ema = {.use_ema = true, .momentum = 0.8, .overwrite_frequency = overwrite_frequency}});
}

// The MLP and Adam with use_ema, made in `strategy`'s scope and trained `epochs` epochs.
struct Run {
  nn::Sequential model;
  optim::Optimizer opt;
};

Run run_with_ema(distribute::Strategy& strategy, int epochs, int64_t overwrite_frequency = 0) {
  Run r;
  {
    auto scope = strategy.scope();
    r.model = eq::classification_mlp(kFeatures, kHidden, kClasses, /*init_seed=*/4);
    r.opt = adam_with_ema(overwrite_frequency);
  }
  eq::train_classifier(strategy, r.model, r.opt, dataset(), epochs);
  return r;
}

// The model's trainable variables and their averages after run_with_ema (every replica's
// copies checked equal).
struct Trained {
  std::vector<Tensor> weights, averages;
};

Trained train_with_ema(distribute::Strategy& strategy, int epochs, int64_t overwrite_frequency = 0) {
  auto [model, opt] = run_with_ema(strategy, epochs, overwrite_frequency);
  const auto vars = model.trainable_variables();
  REQUIRE(eq::replicas_agree(strategy, vars));
  Trained out;
  out.weights = eq::values_of(vars);
  auto scope = strategy.scope();
  for (const Variable& v : vars) {
    const auto average = opt.average(v);
    REQUIRE(average.has_value());
    REQUIRE(eq::replicas_agree(strategy, {*average}));
    out.averages.push_back(average->impl().checkpoint_value().clone());
  }
  return out;
}

double value(const Variable& v) { return v.value().item<double>(); }

}  // namespace ema_test

using namespace ema_test;

TEST_CASE("EMA: the average follows Keras's arithmetic and ema_overwrite_frequency") {
  // SGD(lr 0.5) on w with gradient 1 each step: w = 4, 3.5, 3, 2.5, ...
  Variable w(Tensor::scalar(4.0, kFloat64));
  optim::SGD plain(0.5, {.ema = {.use_ema = true, .momentum = 0.9}});
  std::vector<double> weights{4.0}, averages;
  for (int step = 1; step <= 4; ++step) {
    plain.apply_gradients({Tensor::scalar(1.0, kFloat64)}, {w});
    weights.push_back(value(w));
    averages.push_back(value(*plain.average(w)));
  }
  CHECK(weights == std::vector<double>{4.0, 3.5, 3.0, 2.5, 2.0});
  // The first step starts the average at the updated weights (Keras 3), not at 4.
  CHECK(averages[0] == 3.5);
  for (size_t k = 1; k < averages.size(); ++k)
    CHECK(averages[k] == Approx(0.9 * averages[k - 1] + 0.1 * weights[k + 1]).epsilon(1e-15));
  CHECK(plain.slot_names() == std::vector<std::string>{"average"});

  // Every second step the average is copied into the weights, which go on from there.
  Variable u(Tensor::scalar(4.0, kFloat64));
  optim::SGD overwriting(0.5, {.ema = {.use_ema = true, .momentum = 0.9, .overwrite_frequency = 2}});
  overwriting.apply_gradients({Tensor::scalar(1.0, kFloat64)}, {u});
  CHECK(value(u) == 3.5);
  overwriting.apply_gradients({Tensor::scalar(1.0, kFloat64)}, {u});
  const double second = 0.9 * 3.5 + 0.1 * 3.0;
  CHECK(value(u) == Approx(second).epsilon(1e-15));
  CHECK(value(*overwriting.average(u)) == value(u));
  overwriting.apply_gradients({Tensor::scalar(1.0, kFloat64)}, {u});
  CHECK(value(u) == Approx(second - 0.5).epsilon(1e-15));
  CHECK(value(*overwriting.average(u)) == Approx(0.9 * second + 0.1 * (second - 0.5)).epsilon(1e-15));

  // A variable the optimizer meets late starts its average at its own weights.
  Variable late(Tensor::scalar(10.0, kFloat64));
  plain.apply_gradients({Tensor::scalar(1.0, kFloat64)}, {late});
  CHECK(value(*plain.average(late)) == Approx(0.9 * 10.0 + 0.1 * 9.5).epsilon(1e-15));
}

TEST_CASE("EMA: Mirrored(2) and ZeRO-1 keep the same averages on every replica") {
  auto plain_default = distribute::make_strategy("default", {});
  const Trained reference = train_with_ema(*plain_default, 2, /*overwrite_frequency=*/3);

  for (const bool share : {false, true}) {
    auto mirrored = distribute::make_strategy("mirrored", {.replicas = 2, .share_cpu_variables = share});
    auto sharded =
        distribute::make_strategy("mirrored", {.replicas = 2, .shard_optimizer_state = true, .share_cpu_variables = share});
    const Trained m = train_with_ema(*mirrored, 2, 3), z = train_with_ema(*sharded, 2, 3);
    INFO("one copy of the variables: " << share);
    // ZeRO-1 moves the averages on each replica's chunk: bitwise the unsharded ones.
    CHECK(eq::bitwise_equal(m.weights, z.weights));
    CHECK(eq::bitwise_equal(m.averages, z.averages));
    // Two replicas sum the gradients in another order than one: equal to rounding.
    CHECK(eq::max_relative_difference(m.averages, reference.averages) < 1e-4);
    CHECK(eq::max_relative_difference(m.weights, reference.weights) < 1e-4);
  }
  // The averages moved away from the weights (momentum 0.8, and no overwrite at the end).
  CHECK(eq::max_relative_difference(reference.weights, reference.averages) > 1e-3);
}

TEST_CASE("EMA: finalize_variable_values and swap_ema_weights") {
  auto strategy = distribute::make_strategy("mirrored", {.replicas = 2});
  auto [model, opt] = run_with_ema(*strategy, 1);
  const auto vars = model.trainable_variables();
  auto scope = strategy->scope();
  const std::vector<Tensor> weights = eq::values_of(vars);
  std::vector<Tensor> averages;
  for (const Variable& v : vars) averages.push_back(opt.average(v)->value().clone());

  opt.swap_ema_weights(vars);
  CHECK(opt.ema_weights_swapped());
  CHECK(eq::bitwise_equal(eq::values_of(vars), averages));
  CHECK(eq::replicas_agree(*strategy, vars));
  // Training on the averages would corrupt both: refused until swapped back.
  REQUIRE_THROWS_WITH(eq::train_classifier(*strategy, model, opt, dataset(), 1),
                      Catch::Contains("swap_ema_weights") && Catch::Contains("swap them back"));
  opt.swap_ema_weights(vars);
  CHECK_FALSE(opt.ema_weights_swapped());
  CHECK(eq::bitwise_equal(eq::values_of(vars), weights));

  // Swapped, finalize keeps the averages in the model and gives them to the slots too.
  opt.swap_ema_weights(vars);
  opt.finalize_variable_values(vars);
  CHECK_FALSE(opt.ema_weights_swapped());
  CHECK(eq::bitwise_equal(eq::values_of(vars), averages));
  for (size_t k = 0; k < vars.size(); ++k) CHECK(eq::bitwise_equal({opt.average(vars[k])->value()}, {averages[k]}));

  // Inside run it would race the replicas' copies: refused.
  REQUIRE_THROWS_WITH(strategy->run([&] { opt.finalize_variable_values(vars); }),
                      Catch::Contains("outside Strategy::run"));
  optim::Optimizer without = optim::Adam(0.01);
  without.finalize_variable_values(vars);  // nothing to do
  REQUIRE_THROWS_WITH(without.swap_ema_weights(vars), Catch::Contains("keeps no moving average"));
  REQUIRE_THROWS_WITH(without.average(vars[0]), Catch::Contains("use_ema is off"));
}

TEST_CASE("EMA: averages are checkpointed, across ZeRO-1 and on and off") {
  strata::testing::TempDir dir("ema");
  auto sharded = distribute::make_strategy("mirrored", {.replicas = 2, .shard_optimizer_state = true});
  std::vector<Tensor> saved_averages;
  {
    auto [model, opt] = run_with_ema(*sharded, 1);
    auto scope = sharded->scope();
    for (const Variable& v : model.trainable_variables())
      saved_averages.push_back(opt.average(v)->impl().checkpoint_value().clone());
    train::Checkpoint{{"model", model}, {"optimizer", opt}}.save(dir.file("with_ema"));
  }
  {
    nn::Sequential model = eq::classification_mlp(kFeatures, kHidden, kClasses, 9);
    optim::Optimizer opt = adam_with_ema();
    train::Checkpoint{{"model", model}, {"optimizer", opt}}.restore(dir.file("with_ema"));
    std::vector<Tensor> restored;
    for (const Variable& v : model.trainable_variables()) restored.push_back(opt.average(v)->value());
    CHECK(eq::bitwise_equal(restored, saved_averages));
  }
  {
    nn::Sequential model = eq::classification_mlp(kFeatures, kHidden, kClasses, 9);
    optim::Optimizer opt = optim::Adam(0.02);
    REQUIRE_THROWS_WITH(train::Checkpoint({{"model", model}, {"optimizer", opt}}).restore(dir.file("with_ema")),
                        Catch::Contains("moving average") && Catch::Contains("use_ema off"));
  }
  {
    // Written without use_ema, resumed with it: the averages start at the restored weights.
    nn::Sequential model = eq::classification_mlp(kFeatures, kHidden, kClasses, 4);
    optim::Optimizer opt = optim::Adam(0.02);
    eq::train_classifier(*distribute::make_strategy("default", {}), model, opt, dataset(), 1);
    train::Checkpoint{{"model", model}, {"optimizer", opt}}.save(dir.file("without_ema"));
    const std::vector<Tensor> weights = eq::values_of(model.trainable_variables());

    nn::Sequential resumed = eq::classification_mlp(kFeatures, kHidden, kClasses, 9);
    optim::Optimizer with = adam_with_ema();
    train::Checkpoint{{"model", resumed}, {"optimizer", with}}.restore(dir.file("without_ema"));
    std::vector<Tensor> averages;
    for (const Variable& v : resumed.trainable_variables()) averages.push_back(with.average(v)->value());
    CHECK(eq::bitwise_equal(averages, weights));
    CHECK(with.find_slot(resumed.trainable_variables()[0], "m").has_value());
  }
}

TEST_CASE("EMA: fit ends with the averages and SwapEMAWeights validates with them") {
  data::Dataset train_data = eq::classification_dataset(3, 48, kFeatures, 8);
  data::Dataset val_data = eq::classification_dataset(8, 24, kFeatures, 8);
  losses::SparseCategoricalCrossentropy loss(/*from_logits=*/true);
  auto run_fit = [&](optim::Optimizer opt, std::vector<train::Callback*> callbacks, nn::Sequential& model) {
    model = eq::classification_mlp(kFeatures, kHidden, kClasses, 4);
    train::FitOptions o;
    o.epochs = 2;
    o.validation_data = val_data;
    o.verbose = train::Verbosity::Quiet;
    o.callbacks = std::move(callbacks);
    return train::fit(model, loss, opt, train_data, o);
  };
  nn::Sequential raw_model, ema_model, swapped_model, on_epoch_model;
  const train::History raw = run_fit(optim::Adam(0.02), {}, raw_model);
  optim::Optimizer ema_opt = adam_with_ema();
  const train::History ema = run_fit(ema_opt, {}, ema_model);
  // The same raw training (the average does not feed back); fit then puts the averages in.
  CHECK(raw.history.at("loss") == ema.history.at("loss"));
  CHECK(raw.history.at("val_loss") == ema.history.at("val_loss"));
  for (const Variable& v : ema_model.trainable_variables())
    CHECK(eq::bitwise_equal({v.value()}, {ema_opt.average(v)->value()}));
  CHECK(eq::max_relative_difference(eq::values_of(raw_model.trainable_variables()),
                                    eq::values_of(ema_model.trainable_variables())) > 1e-3);
  const double final_val_loss = train::evaluate(ema_model, loss, val_data).at("loss");
  CHECK(ema.history.at("val_loss").back() != final_val_loss);

  // With SwapEMAWeights the validation runs on the averages: the last one is the model fit
  // returns.
  train::SwapEMAWeights swap;
  const train::History swapped = run_fit(adam_with_ema(), {&swap}, swapped_model);
  CHECK(swapped.history.at("loss") == raw.history.at("loss"));
  CHECK(swapped.history.at("val_loss").back() == final_val_loss);

  // swap_on_epoch: the averages stay in the model from each epoch's end to the next start.
  std::vector<bool> swapped_at_epoch_end;
  optim::Optimizer on_epoch_opt = adam_with_ema();
  train::SwapEMAWeights on_epoch(/*swap_on_epoch=*/true);
  train::LambdaCallback after;
  after.epoch_end = [&](int64_t, const train::Outputs&) {
    swapped_at_epoch_end.push_back(on_epoch_opt.ema_weights_swapped());
  };
  const train::History e = run_fit(on_epoch_opt, {&on_epoch, &after}, on_epoch_model);
  CHECK(swapped_at_epoch_end == std::vector<bool>{true, true});
  CHECK(e.history.at("loss") == raw.history.at("loss"));
  CHECK_FALSE(on_epoch_opt.ema_weights_swapped());
  CHECK(eq::bitwise_equal(eq::values_of(on_epoch_model.trainable_variables()),
                          eq::values_of(ema_model.trainable_variables())));

  nn::Sequential unused;
  train::SwapEMAWeights needs_ema;
  REQUIRE_THROWS_WITH(run_fit(optim::Adam(0.02), {&needs_ema}, unused), Catch::Contains("keeps no moving average"));
}

TEST_CASE("EMA: the optimizer factory's Keras names and bad options") {
  const optim::Optimizer sgd = optim::make_optimizer(
      "sgd", {{"lr", 0.1}, {"use_ema", true}, {"ema_momentum", 0.5}, {"ema_overwrite_frequency", 3}});
  CHECK(sgd.use_ema());
  CHECK(sgd.ema().momentum == 0.5);
  CHECK(sgd.ema().overwrite_frequency == 3);
  CHECK(optim::make_optimizer("adamw", {{"lr", 0.1}, {"use_ema", true}}).slot_names() ==
        std::vector<std::string>{"m", "v", "average"});
  REQUIRE_THROWS_WITH(optim::make_optimizer("adam", {{"lr", 0.1}, {"ema_overwrite_frequency", 1.5}}),
                      Catch::Contains("'ema_overwrite_frequency' must be an integer"));
  REQUIRE_THROWS_WITH(optim::SGD(0.1, {.ema = {.use_ema = true, .momentum = 1.5}}),
                      Catch::Contains("ema_momentum must be in [0, 1], got 1.5"));
  REQUIRE_THROWS_WITH(optim::Adam(0.1, {.ema = {.use_ema = true, .overwrite_frequency = -1}}),
                      Catch::Contains("ema_overwrite_frequency must be >= 0"));
  REQUIRE_THROWS_WITH(optim::Adam(0.1, {.ema = {.overwrite_frequency = 5}}), Catch::Contains("needs use_ema"));
}
