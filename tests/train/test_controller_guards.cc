// The Controller's guards against wrong results that exit cleanly: a non-finite loss stops
// training (TerminateOnNaN, before that state is checkpointed) unless turned off; a
// finished run started again evaluates the restored model instead of returning nothing;
// `initial_checkpoint` restores a chosen checkpoint instead of the latest.
#include <cmath>
#include <limits>

#include "tests/train/controller_test_util.h"

using namespace strata;
using namespace strata::testing::orbit;

namespace controller_guards_test {

// Advances the global step once per step; its "loss" output turns NaN once the step
// passes nan_after (as a diverging run's does).
class DivergingTrainer final : public train::AbstractTrainer {
 public:
  DivergingTrainer(Variable step, int64_t nan_after) : step_(std::move(step)), nan_after_(nan_after) {}
  train::Outputs train(int64_t num_steps) override {
    calls.push_back(num_steps);
    for (int64_t i = 0; i < num_steps; ++i) step_.assign_add(Tensor::scalar(int64_t(1), kInt64));
    const int64_t s = step_.value().item<int64_t>();
    return {{"loss", s > nan_after_ ? std::numeric_limits<double>::quiet_NaN() : 1.0 / double(s)},
            {"accuracy_is_nan", std::numeric_limits<double>::quiet_NaN()}};
  }
  int64_t examples_per_step() const override { return 4; }
  std::vector<int64_t> calls;

 private:
  Variable step_;
  int64_t nan_after_;
};

class StepEvaluator final : public train::AbstractEvaluator {
 public:
  explicit StepEvaluator(Variable step) : step_(std::move(step)) {}
  train::Outputs evaluate(int64_t num_steps) override {
    calls.emplace_back(num_steps, step_.value().item<int64_t>());
    return {{"accuracy", 0.25}};
  }
  std::vector<std::pair<int64_t, int64_t>> calls;  // (num_steps, global step)

 private:
  Variable step_;
};

struct Setup {
  Variable step = train::create_global_step();
  DivergingTrainer trainer;
  StepEvaluator evaluator{step};
  train::CheckpointManager manager;
  Setup(const fs::path& dir, int64_t nan_after)
      : trainer(step, nan_after),
        manager(train::Checkpoint{{"global_step", step}}, dir, 0, /*checkpoint_interval=*/10) {}
  train::ControllerOptions options() {
    train::ControllerOptions o;
    o.progress.verbosity = train::Verbosity::Quiet;
    o.global_step = step;
    o.trainer = &trainer;
    o.evaluator = &evaluator;
    o.steps_per_loop = 10;
    o.checkpoint_manager = &manager;
    return o;
  }
};

std::vector<std::string> names_of(const train::CheckpointManager& m) {
  std::vector<std::string> out;
  for (const auto& p : m.checkpoints()) out.push_back(fs::path(p).filename().string());
  return out;
}

}  // namespace controller_guards_test

using namespace controller_guards_test;

TEST_CASE("Controller: a NaN loss stops training with an error and is never checkpointed") {
  TempDir dir("nan");
  Setup s(dir.path, /*nan_after=*/25);
  train::Controller c(s.options());
  REQUIRE_THROWS_WITH(c.train(50), Catch::Contains("step 30") && Catch::Contains("'loss'") &&
                                       Catch::Contains("nan") && Catch::Contains("TerminateOnNaN"));
  CHECK(s.trainer.calls == std::vector<int64_t>{10, 10, 10});
  CHECK(names_of(s.manager) == std::vector<std::string>{"ckpt-10", "ckpt-20"});
  // train_and_evaluate stops the same way, before evaluating the diverged model.
  TempDir dir2("nan2");
  Setup s2(dir2.path, 5);
  train::Controller c2(s2.options());
  REQUIRE_THROWS_AS(c2.train_and_evaluate(30), Error);
  CHECK(s2.evaluator.calls.empty());
}

TEST_CASE("Controller: terminate_on_nan = false keeps training through a NaN loss") {
  TempDir dir("nan_off");
  Setup s(dir.path, 25);
  auto o = s.options();
  o.terminate_on_nan = false;
  train::Controller c(o);
  c.train(50);
  CHECK(c.global_step() == 50);
  CHECK(std::isnan(c.last_train_outputs().at("loss")));
}

TEST_CASE("Controller: a finished run started again evaluates the restored model") {
  TempDir dir("rerun");
  {
    Setup s(dir.path, 1000);
    train::Controller c(s.options());
    c.train_and_evaluate(20);
    REQUIRE(s.evaluator.calls == std::vector<std::pair<int64_t, int64_t>>{{-1, 20}});
  }
  Setup again(dir.path, 1000);
  train::Controller c(again.options());
  REQUIRE(c.global_step() == 20);
  const train::Outputs out = c.train_and_evaluate(20);
  CHECK(again.trainer.calls.empty());
  CHECK(again.evaluator.calls == std::vector<std::pair<int64_t, int64_t>>{{-1, 20}});
  CHECK(out.at("accuracy") == 0.25);
  CHECK(c.last_eval_outputs().at("accuracy") == 0.25);
  // A target below the restored step trains nothing either, and still evaluates.
  c.train_and_evaluate(0);
  CHECK(again.evaluator.calls.size() == 2);
}

TEST_CASE("Controller: initial_checkpoint restores the given checkpoint instead of the latest") {
  TempDir dir("initial");
  {
    Setup s(dir.path, 1000);
    train::Controller c(s.options());
    c.train(30);
  }
  Setup again(dir.path, 1000);
  auto o = again.options();
  o.initial_checkpoint = (dir.path / "ckpt-10").string();
  train::Controller c(o);
  CHECK(c.global_step() == 10);
  CHECK(c.last_checkpoint() == (dir.path / "ckpt-10").string());
  auto bad = again.options();
  bad.checkpoint_manager = nullptr;
  bad.initial_checkpoint = "x";
  CHECK_THROWS_WITH(train::Controller(bad), Catch::Contains("initial_checkpoint"));
}
