// Orbit's shapes: StandardTrainer(train_dataset, options) / StandardEvaluator(eval_dataset,
// options) with the strategy from get_strategy() and the global step owned by the
// Controller, and loop outputs written from tensors.
#include <strata/autograd/tape.h>
#include <strata/data/dataset.h>
#include <strata/distribute/loss_scaling.h>
#include <strata/distribute/strategy.h>
#include <strata/train/controller.h>
#include <strata/train/losses.h>
#include <strata/train/metrics.h>
#include <strata/train/nn/nn.h>
#include <strata/train/sgd.h>
#include "tests/test_util.h"

namespace strata_orbit_shapes_test {

using namespace strata;

// y = 2 x: one Dense unit learns it; the loss metric is the loop's output, as a tensor.
data::Dataset line_dataset() {
  const Tensor x = reshape(arange(0.0, 1.0, 1.0 / 32), {32, 1});
  return data::Dataset::from_tensor_slices({x, x * 2.0}).repeat().batch(8);
}

class LineTrainer final : public train::StandardTrainer {
 public:
  LineTrainer(data::Dataset ds, nn::Dense model, train::StandardTrainerOptions options = {})
      : StandardTrainer(ds, options), model_(std::move(model)) {}
  int steps_run = 0;
  using StandardTrainer::global_step;
  using StandardTrainer::strategy;

 protected:
  void train_loop_begin() override { loss_.reset_state(); }
  void train_step(distribute::DistributedIterator& it) override {
    ++steps_run;
    strategy().run(
        [&](const data::Batch& b) {
          autograd::GradientTape tape;
          Tensor per_example = losses::mean_squared_error(b[1], model_(b[0]));
          Tensor loss = distribute::compute_average_loss(per_example, 8);
          auto vars = model_.trainable_variables();
          opt_.apply_gradients(tape.gradient(loss, vars), vars);
          loss_.update_state(per_example);
        },
        next_batch(it));
  }
  train::Outputs train_loop_end() override { return {{"loss", loss_.result()}, {"steps", steps_run}}; }

 private:
  nn::Dense model_;
  optim::SGD opt_{0.5};
  metrics::Mean loss_{"loss"};
};

class LineEvaluator final : public train::StandardEvaluator {
 public:
  LineEvaluator(data::Dataset ds, nn::Dense model) : StandardEvaluator(ds), model_(std::move(model)) {}
  using StandardEvaluator::strategy;

 protected:
  void eval_begin() override { loss_.reset_state(); }
  std::optional<train::Outputs> eval_step(distribute::DistributedIterator& it) override {
    auto batch = it.next();
    if (!batch) return std::nullopt;
    strategy().run([&](const data::Batch& b) { loss_.update_state(losses::mean_squared_error(b[1], model_(b[0]))); },
                   *batch);
    return train::Outputs{};
  }
  train::Outputs eval_end() override { return {{"loss", loss_.result()}}; }

 private:
  nn::Dense model_;
  metrics::Mean loss_{"loss"};
};

}  // namespace strata_orbit_shapes_test

TEST_CASE("Orbit shapes: trainer and evaluator take (dataset, options), the Controller owns the step") {
  using namespace strata;
  using namespace strata_orbit_shapes_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  auto scope = strategy.scope();
  nn::Dense model(1, 1, {.use_bias = false});
  Variable global_step = train::create_global_step();
  LineTrainer trainer(line_dataset(), model);
  LineEvaluator evaluator(line_dataset().take(4), model);
  REQUIRE(&trainer.strategy() == &strategy);  // get_strategy() at construction
  REQUIRE(&evaluator.strategy() == &strategy);
  REQUIRE(!trainer.global_step().defined());

  train::ControllerOptions co;
  co.trainer = &trainer;
  co.evaluator = &evaluator;
  co.global_step = global_step;
  co.steps_per_loop = 10;
  co.progress.verbosity = train::Verbosity::Quiet;
  train::Controller controller(co);
  REQUIRE(trainer.global_step() == global_step);  // lent by the Controller
  const train::Outputs eval = controller.train_and_evaluate(40);
  REQUIRE(controller.global_step() == 40);
  REQUIRE(trainer.steps_run == 40);
  REQUIRE(controller.last_train_outputs().at("steps") == 40.0);
  REQUIRE(controller.last_train_outputs().at("loss") < 0.01);  // from the metric's tensor
  REQUIRE(eval.at("loss") < 0.01);
}

TEST_CASE("Orbit shapes: the options name the strategy, without a Controller no step is counted") {
  using namespace strata;
  using namespace strata_orbit_shapes_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  nn::Dense model;
  {
    auto scope = strategy.scope();
    model = nn::Dense(1, 1);
  }
  LineTrainer trainer(line_dataset(), model, {.strategy = &strategy});
  REQUIRE(&trainer.strategy() == &strategy);
  const train::Outputs out = trainer.train(3);
  REQUIRE(trainer.steps_run == 3);
  REQUIRE(out.at("steps") == 3.0);
  REQUIRE(!trainer.global_step().defined());
}

TEST_CASE("Orbit shapes: a trainer's own global step must be the Controller's") {
  using namespace strata;
  using namespace strata_orbit_shapes_test;
  distribute::MirroredStrategy strategy(distribute::MirroredStrategy::cpu_devices(2));
  auto scope = strategy.scope();
  nn::Dense model(1, 1);
  class OwnStepTrainer final : public train::StandardTrainer {
   public:
    using StandardTrainer::StandardTrainer;
    void train_step(distribute::DistributedIterator& it) override { next_batch(it); }
  };
  OwnStepTrainer trainer(strategy, strategy.experimental_distribute_dataset(line_dataset()),
                         train::create_global_step());
  train::ControllerOptions co;
  co.trainer = &trainer;
  co.global_step = train::create_global_step();
  co.steps_per_loop = 1;
  REQUIRE_THROWS_WITH(train::Controller(co), Catch::Contains("not the trainer's own"));
}

TEST_CASE("Orbit shapes: Outputs are written from numbers and one-element tensors") {
  using namespace strata;
  const train::Outputs out{{"loss", Tensor::scalar(0.25, kFloat32)}, {"step", int64_t(7)}, {"rate", 1e-3},
                           {"accuracy", Tensor::from_vector(std::vector<double>{0.5}, {1, 1})}};
  REQUIRE(out.at("loss") == 0.25);
  REQUIRE(out.at("step") == 7.0);
  REQUIRE(out.at("rate") == 1e-3);
  REQUIRE(out.at("accuracy") == 0.5);
  REQUIRE_THROWS_WITH((train::Outputs{{"loss", ones({2})}}), Catch::Contains("scalar") && Catch::Contains("[2]"));
  REQUIRE_THROWS_WITH((train::Outputs{{"loss", 1.0}, {"loss", 2.0}}), Catch::Contains("'loss' is given twice"));
}
