// EarlyStopping and ReduceLROnPlateau (train/callbacks.h): their counting of patience,
// min_delta, baselines, warm-up epochs and cooldowns as Keras counts them, driven with
// made-up logs; their errors; and both inside fit under the Default and Mirrored(2)
// strategies (the best weights restored into every replica's copy).
#include "tests/train/controller_test_util.h"
#include <strata/train/callbacks.h>
#include <strata/train/fit.h>
#include <strata/train/sgd.h>

using namespace strata;
using namespace strata::testing::orbit;

namespace callbacks_test {

// The epoch after which `callback` asked to stop when fed `values` of `monitor`, or -1.
int64_t stop_epoch(train::Callback& callback, const std::string& monitor, const std::vector<double>& values) {
  callback.on_train_begin();
  for (size_t e = 0; e < values.size(); ++e) {
    callback.on_epoch_end(int64_t(e), train::Outputs(std::map<std::string, double>{{monitor, values[e]}}));
    if (callback.stop_requested()) return int64_t(e);
  }
  return -1;
}

int64_t stop_epoch(train::EarlyStoppingOptions o, const std::vector<double>& values) {
  train::EarlyStopping es(o);
  return stop_epoch(es, o.monitor, values);
}

struct Problem {
  data::Dataset train, val;
};

Problem make_problem() {
  data::SyntheticOptions so;
  so.num_examples = 192;
  so.num_classes = 3;
  so.feature_shape = {8};
  so.seed = 5;
  so.separation = 0.4;
  auto all = data::make_synthetic_classification(so);
  return {all.slice(0, 128).dataset().batch(32), all.slice(128, 192).dataset().batch(32)};
}

nn::Sequential make_model() {
  nn::set_global_seed(9);
  return nn::Sequential{nn::Dense(8, 16), nn::ReLU(), nn::Dense(16, 3)};
}

train::FitOptions fit_options(int64_t epochs, const Problem& p, std::vector<train::Callback*> callbacks) {
  train::FitOptions o;
  o.epochs = epochs;
  o.validation_data = p.val;
  o.metrics = {"accuracy"};
  o.callbacks = std::move(callbacks);
  o.verbose = train::Verbosity::Quiet;
  return o;
}

}  // namespace callbacks_test

using namespace callbacks_test;

TEST_CASE("EarlyStopping: patience and min_delta count epochs as Keras's do") {
  // Keras's test_EarlyStopping_patience: the best epoch is the first, stop two epochs on.
  CHECK(stop_epoch({.patience = 2}, {0.0860, 0.1096, 0.1040, 0.1019}) == 2);
  CHECK(stop_epoch({.patience = 0}, {1.0, 2.0}) == 1);
  // Never after the first epoch: a NaN there is no improvement, yet training goes on.
  CHECK(stop_epoch({.patience = 0}, {std::nan(""), std::nan("")}) == 1);
  // Improvements smaller than min_delta do not count.
  CHECK(stop_epoch({.min_delta = 0.1, .patience = 2}, {1.0, 0.95, 0.92, 0.85}) == 2);
  CHECK(stop_epoch({.min_delta = 0.0, .patience = 2}, {1.0, 0.95, 0.92, 0.85}) == -1);
  // Auto mode: larger is better for accuracies, smaller for anything else.
  train::EarlyStopping accuracy({.monitor = "val_accuracy", .patience = 1});
  CHECK(stop_epoch(accuracy, "val_accuracy", {0.5, 0.6, 0.55, 0.58}) == 2);
  CHECK(accuracy.best() == 0.6);
  CHECK(accuracy.best_epoch() == 1);
  CHECK(accuracy.stopped_epoch() == 2);
  CHECK(stop_epoch({.monitor = "val_accuracy", .patience = 1, .mode = train::MonitorMode::Min}, {0.5, 0.6}) == 1);
  // A baseline not reached keeps the wait running from the first epoch.
  CHECK(stop_epoch({.monitor = "val_accuracy", .patience = 2, .baseline = 0.7}, {0.5, 0.5, 0.5}) == 1);
  CHECK(stop_epoch({.monitor = "val_accuracy", .patience = 2}, {0.5, 0.5, 0.5}) == 2);
  CHECK(stop_epoch({.monitor = "val_accuracy", .patience = 2, .baseline = 0.7}, {0.8, 0.5, 0.5}) == 2);
  // Warm-up epochs are not watched: the best is the first watched one.
  CHECK(stop_epoch({.patience = 0, .start_from_epoch = 2}, {1.0, 2.0, 3.0, 4.0}) == 3);
  CHECK(stop_epoch({.patience = 0, .start_from_epoch = 2}, {1.0, 2.0, 3.0, 2.0}) == -1);
  // on_train_begin starts afresh.
  train::EarlyStopping again({.patience = 1});
  CHECK(stop_epoch(again, "val_loss", {1.0, 2.0}) == 1);
  again.clear_stop_request();
  CHECK(stop_epoch(again, "val_loss", {1.0, 0.5, 0.4}) == -1);
  CHECK(again.stopped_epoch() == -1);
}

TEST_CASE("ReduceLROnPlateau: patience, cooldown and min_lr as Keras's") {
  optim::Optimizer opt = optim::SGD(0.1);
  train::ReduceLROnPlateau plateau(
      {.factor = 0.5, .patience = 2, .min_delta = 0, .cooldown = 1, .min_lr = 0.03});
  plateau.set_training(nullptr, &opt);
  plateau.on_train_begin();
  std::vector<double> rates;
  for (int64_t e = 0; e < 7; ++e) {
    plateau.on_epoch_end(e, train::Outputs(std::map<std::string, double>{{"val_loss", 1.0}}));
    rates.push_back(opt.learning_rate());
  }
  // Reduced after epochs 2 and 4 (each after 2 epochs without improvement, the epoch after a
  // reduction in cooldown), the second time to min_lr, then never below it.
  CHECK(plateau.reductions() == std::vector<int64_t>{2, 4});
  const std::vector<double> want{0.1, 0.1, 0.05, 0.05, 0.03, 0.03, 0.03};
  REQUIRE(rates.size() == want.size());
  for (size_t e = 0; e < want.size(); ++e) CHECK(rates[e] == Approx(want[e]).epsilon(1e-12));
  // An improvement resets the wait.
  optim::Optimizer fresh = optim::SGD(0.1);
  train::ReduceLROnPlateau improving({.patience = 1});
  improving.set_training(nullptr, &fresh);
  improving.on_train_begin();
  for (int64_t e = 0; e < 4; ++e) {
    improving.on_epoch_end(e, train::Outputs(std::map<std::string, double>{{"val_loss", 1.0 - 0.1 * double(e)}}));
  }
  CHECK(improving.reductions().empty());
  CHECK(fresh.learning_rate() == 0.1);
}

TEST_CASE("EarlyStopping and ReduceLROnPlateau: misuse raises errors naming the problem") {
  train::EarlyStopping es({.monitor = "val_los"});
  es.on_train_begin();
  REQUIRE_THROWS_WITH(es.on_epoch_end(0, train::Outputs(std::map<std::string, double>{{"loss", 1}, {"val_loss", 1}})),
                      Catch::Contains("monitors 'val_los', which this epoch did not log (logged: loss, val_loss)"));
  train::EarlyStopping no_validation;
  no_validation.on_train_begin();
  REQUIRE_THROWS_WITH(no_validation.on_epoch_end(0, train::Outputs(std::map<std::string, double>{{"loss", 1}})),
                      Catch::Contains("need FitOptions::validation_data"));
  train::EarlyStopping restoring({.restore_best_weights = true});
  REQUIRE_THROWS_WITH(restoring.on_train_begin(), Catch::Contains("restore_best_weights needs the model"));
  REQUIRE_THROWS_WITH(train::EarlyStopping({.patience = -1}), Catch::Contains("patience must be >= 0"));
  REQUIRE_THROWS_WITH(train::ReduceLROnPlateau({.factor = 1.0}), Catch::Contains("factor must be in (0, 1), got 1"));
  REQUIRE_THROWS_WITH(train::ReduceLROnPlateau({.min_lr = -1}), Catch::Contains("min_lr must be finite and >= 0"));
  train::ReduceLROnPlateau without_fit;
  REQUIRE_THROWS_WITH(without_fit.on_train_begin(), Catch::Contains("needs the optimizer"));
  optim::Optimizer scheduled = optim::SGD(optim::LearningRate([](int64_t step) { return 0.1 / double(1 + step); }));
  without_fit.set_training(nullptr, &scheduled);
  REQUIRE_THROWS_WITH(without_fit.on_train_begin(), Catch::Contains("learning rate is a schedule"));
}

TEST_CASE("EarlyStopping in fit restores the best epoch's weights into every replica's copy") {
  for (const char* name : {"default", "mirrored"}) {
    INFO(name);
    auto strategy = make(name, std::string(name) == "mirrored" ? 2 : 0);
    auto scope = strategy->scope();
    nn::Sequential model = make_model();
    optim::Optimizer opt = optim::SGD(0.2);
    const Problem p = make_problem();
    // Weights at the end of each epoch, before EarlyStopping acts.
    std::vector<std::vector<std::vector<double>>> weights;
    train::LambdaCallback recorder;
    recorder.epoch_end = [&](int64_t, const train::Outputs&) {
      std::vector<std::vector<double>> now;
      for (const Variable& v : model.variables()) now.push_back(v.value().to_vector<double>());
      weights.push_back(std::move(now));
    };
    // Nothing after the first epoch improves by 1e9: it is the best, and one epoch on
    // training stops.
    train::EarlyStopping es({.min_delta = 1e9, .patience = 1, .restore_best_weights = true});
    const train::History h =
        train::fit(model, losses::SparseCategoricalCrossentropy(/*from_logits=*/true), opt, p.train, fit_options(5, p, {&recorder, &es}));
    REQUIRE(h.epochs == std::vector<int64_t>{0, 1});
    CHECK(es.stopped_epoch() == 1);
    CHECK(es.best_epoch() == 0);
    CHECK(es.best() == h.history.at("val_loss")[0]);
    REQUIRE(weights.size() == 2);
    CHECK(weights[1] != weights[0]);  // the second epoch trained
    const std::vector<Variable> vars = model.variables();
    for (size_t i = 0; i < vars.size(); ++i) {
      for (const Tensor& copy : strategy->experimental_local_results(vars[i])) {
        CHECK(copy.to_vector<double>() == weights[0][i]);
      }
    }
  }
}

TEST_CASE("ReduceLROnPlateau in fit lowers the learning rate of the next epochs") {
  auto strategy = make("mirrored", 2);
  auto scope = strategy->scope();
  nn::Sequential model = make_model();
  optim::Optimizer opt = optim::SGD(0.2);
  const Problem p = make_problem();
  std::vector<double> rates;  // the rate each epoch trained with
  train::LambdaCallback recorder;
  recorder.epoch_begin = [&](int64_t) { rates.push_back(opt.learning_rate()); };
  train::ReduceLROnPlateau plateau({.factor = 0.5, .patience = 1, .min_delta = 1e9});
  train::fit(model, losses::SparseCategoricalCrossentropy(/*from_logits=*/true), opt, p.train, fit_options(3, p, {&recorder, &plateau}));
  CHECK(plateau.reductions() == std::vector<int64_t>{1, 2});
  REQUIRE(rates.size() == 3);
  CHECK(rates[0] == Approx(0.2));
  CHECK(rates[1] == Approx(0.2));
  CHECK(rates[2] == Approx(0.1));
  CHECK(opt.learning_rate() == Approx(0.05));
}
