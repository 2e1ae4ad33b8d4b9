// The Controller's rules: argument validation, steps_per_loop and summary_interval
// arithmetic, checkpoints on the interval and at completion, restore on construction,
// train_and_evaluate's schedule, and the StandardTrainer / StandardEvaluator loops.
#include "tests/train/controller_test_util.h"

using namespace strata;
using namespace strata::testing::orbit;

namespace {

// Advances the global step by `advance` per step (1 unless testing misuse), records every
// train(n) call and writes one in-loop summary per step through train::summary.
class CountingTrainer final : public train::AbstractTrainer {
 public:
  explicit CountingTrainer(Variable step, int64_t advance = 1) : step_(std::move(step)), advance_(advance) {}
  train::Outputs train(int64_t num_steps) override {
    calls.push_back(num_steps);
    for (int64_t i = 0; i < num_steps; ++i) {
      const int64_t s = step_.value().item<int64_t>();
      if (train::summary::scalar("inner", double(s))) recorded.push_back(s);
      step_.assign_add(Tensor::scalar(advance_, kInt64));
    }
    return {{"loss", 1.0 / double(step_.value().item<int64_t>())}};
  }
  int64_t examples_per_step() const override { return 8; }
  std::vector<int64_t> calls, recorded;

 private:
  Variable step_;
  int64_t advance_;
};

class CountingEvaluator final : public train::AbstractEvaluator {
 public:
  explicit CountingEvaluator(Variable step) : step_(std::move(step)) {}
  train::Outputs evaluate(int64_t num_steps) override {
    calls.emplace_back(num_steps, step_.value().item<int64_t>());
    return {{"accuracy", 0.5}};
  }
  std::vector<std::pair<int64_t, int64_t>> calls;  // (num_steps, global step)

 private:
  Variable step_;
};

train::ControllerOptions quiet_options() {
  train::ControllerOptions o;
  o.progress.verbosity = train::Verbosity::Quiet;
  return o;
}

std::vector<int64_t> checkpoint_steps(const train::CheckpointManager& m) {
  std::vector<int64_t> steps;
  for (const auto& p : m.checkpoints()) {
    const std::string name = fs::path(p).filename().string();
    steps.push_back(std::stoll(name.substr(name.find('-') + 1)));
  }
  return steps;
}

}  // namespace

TEST_CASE("Controller: argument validation follows Orbit's rules") {
  Variable step = train::create_global_step();
  CountingTrainer trainer(step);
  CountingEvaluator evaluator(step);
  auto expect_error = [](train::ControllerOptions o, const std::string& what) {
    INFO(what);
    REQUIRE_THROWS_WITH(train::Controller(std::move(o)), Catch::Contains(what));
  };

  auto o = quiet_options();
  o.global_step = step;
  expect_error(o, "should not both be null");

  o.trainer = &trainer;
  expect_error(o, "`steps_per_loop` is required");
  o.steps_per_loop = 0;
  expect_error(o, "must be a positive integer");
  o.steps_per_loop = -3;
  expect_error(o, "must be a positive integer");
  o.steps_per_loop = 10;
  o.steps_per_loop_fn = [](int64_t) { return int64_t(5); };
  expect_error(o, "not both");
  o.steps_per_loop_fn = nullptr;
  o.summary_interval = 0;
  expect_error(o, "must be larger than 0");
  o.summary_interval = 25;
  expect_error(o, "must be a multiple of `steps_per_loop` (10)");
  o.summary_interval = 30;
  REQUIRE_NOTHROW(train::Controller(o));

  auto no_step = o;
  no_step.global_step = Variable();
  expect_error(no_step, "`global_step` is required");
  auto float_step = o;
  autograd::VariableOptions float_options;
  float_options.name = "f";
  float_options.trainable = false;
  float_step.global_step = Variable(zeros({}), float_options);
  expect_error(float_step, "integer scalar");

  // A manager whose checkpoint does not track the global step would resume at step 0.
  TempDir dir("validate");
  Variable other = Variable(zeros({2}));
  train::CheckpointManager untracked(train::Checkpoint{{"w", other}}, dir.path, 0);
  auto bad_manager = o;
  bad_manager.checkpoint_manager = &untracked;
  expect_error(bad_manager, "does not track `global_step`");

  // Without a trainer, steps_per_loop is not needed (an evaluation-only controller).
  auto eval_only = quiet_options();
  eval_only.global_step = step;
  eval_only.evaluator = &evaluator;
  train::Controller c(eval_only);
  REQUIRE_THROWS_WITH(c.train(10), Catch::Contains("requires a `trainer`"));
  REQUIRE_THROWS_WITH(c.train_and_evaluate(10), Catch::Contains("requires a `trainer`"));
  REQUIRE_THROWS_WITH(c.evaluate(0), Catch::Contains("should be > 0, or == -1"));
  REQUIRE_THROWS_WITH(c.evaluate(-2), Catch::Contains("should be > 0, or == -1"));
  REQUIRE_THROWS_WITH(c.save_checkpoint(), Catch::Contains("requires a `checkpoint_manager`"));
  REQUIRE_THROWS_WITH(c.restore_checkpoint("x"), Catch::Contains("requires a `checkpoint_manager`"));
  REQUIRE_THROWS_WITH(c.evaluate_continuously(-1, 1.0), Catch::Contains("requires a `checkpoint_manager`"));
  REQUIRE(c.evaluate(3).at("accuracy") == 0.5);

  auto train_only = quiet_options();
  train_only.global_step = step;
  train_only.trainer = &trainer;
  train_only.steps_per_loop = 5;
  train::Controller t(train_only);
  REQUIRE_THROWS_WITH(t.evaluate(), Catch::Contains("requires a `evaluator`"));
}

TEST_CASE("Controller: a trainer that moves the global step wrongly is an error") {
  Variable step = train::create_global_step();
  CountingTrainer double_stepper(step, /*advance=*/2);
  auto o = quiet_options();
  o.global_step = step;
  o.trainer = &double_stepper;
  o.steps_per_loop = 4;
  train::Controller c(o);
  REQUIRE_THROWS_WITH(c.train(8), Catch::Contains("did not advance the global step by 4") &&
                                      Catch::Contains("expected 4, got 8"));

  // steps_per_loop_fn must return a positive count.
  Variable step2 = train::create_global_step();
  CountingTrainer trainer(step2);
  auto f = quiet_options();
  f.global_step = step2;
  f.trainer = &trainer;
  f.steps_per_loop_fn = [](int64_t s) { return s < 6 ? int64_t(3) : int64_t(0); };
  train::Controller cf(f);
  REQUIRE_THROWS_WITH(cf.train(20), Catch::Contains("returned 0 at step 6"));
  REQUIRE(step2.value().item<int64_t>() == 6);
}

TEST_CASE("Controller: steps_per_loop arithmetic") {
  Variable step = train::create_global_step();
  CountingTrainer trainer(step);
  auto o = quiet_options();
  o.global_step = step;
  o.trainer = &trainer;
  o.steps_per_loop = 10;
  train::Controller c(o);
  c.train(35);
  REQUIRE(trainer.calls == std::vector<int64_t>{10, 10, 10, 5});
  REQUIRE(c.global_step() == 35);
  c.train(35);  // already there: no loop
  c.train(20);  // `steps` is absolute: nothing to do
  REQUIRE(trainer.calls.size() == 4);
  c.train(50);
  REQUIRE(trainer.calls == std::vector<int64_t>{10, 10, 10, 5, 10, 5});
  REQUIRE(c.last_train_outputs().count("steps_per_second"));
  REQUIRE(c.last_train_outputs().at("loss") == Approx(1.0 / 50));

  // A function of the step: 5-step loops below 20, then 10.
  Variable step2 = train::create_global_step();
  CountingTrainer trainer2(step2);
  auto f = quiet_options();
  f.global_step = step2;
  f.trainer = &trainer2;
  f.steps_per_loop_fn = [](int64_t s) { return s < 20 ? int64_t(5) : int64_t(10); };
  train::Controller cf(f);
  cf.train(45);
  REQUIRE(trainer2.calls == std::vector<int64_t>{5, 5, 5, 5, 10, 10, 5});
}

TEST_CASE("Controller: summary_interval gates in-loop summaries, loop outputs are written every loop") {
  TempDir dir("summary_interval");
  Variable step = train::create_global_step();
  CountingTrainer trainer(step);
  CountingEvaluator evaluator(step);
  auto o = quiet_options();
  o.global_step = step;
  o.trainer = &trainer;
  o.evaluator = &evaluator;
  o.steps_per_loop = 10;
  o.summary_interval = 30;
  o.summary_dir = (dir.path / "train").string();
  o.eval_summary_dir = (dir.path / "eval").string();
  {
    train::Controller c(o);
    c.train(100);
    c.evaluate(4);
    c.evaluate();
  }
  // In-loop summaries: recorded when the global step is a multiple of 30.
  REQUIRE(trainer.recorded == std::vector<int64_t>{0, 30, 60, 90});
  const auto events = read_scalars(dir.path / "train");
  REQUIRE(steps_of(events, "inner") == std::vector<int64_t>{0, 30, 60, 90});
  const std::vector<int64_t> loops{10, 20, 30, 40, 50, 60, 70, 80, 90, 100};
  REQUIRE(steps_of(events, "loss") == loops);
  REQUIRE(steps_of(events, "steps_per_second") == loops);
  for (const auto& e : events) {
    if (e.tag == "loss") REQUIRE(e.value == Approx(1.0 / double(e.step)));
    if (e.tag == "steps_per_second") REQUIRE(e.value > 0);
  }
  // Evaluation outputs go to the eval directory at the global step; steps_per_second
  // only for a fixed number of steps (Orbit).
  const auto eval_events = read_scalars(dir.path / "eval");
  REQUIRE(steps_of(eval_events, "accuracy") == std::vector<int64_t>{100, 100});
  REQUIRE(steps_of(eval_events, "steps_per_second") == std::vector<int64_t>{100});
  REQUIRE(evaluator.calls == std::vector<std::pair<int64_t, int64_t>>{{4, 100}, {-1, 100}});

  // Without a summary_interval nothing is recorded inside the loop; outside a
  // Controller nothing is recorded at all.
  Variable step2 = train::create_global_step();
  CountingTrainer trainer2(step2);
  auto o2 = quiet_options();
  o2.global_step = step2;
  o2.trainer = &trainer2;
  o2.steps_per_loop = 10;
  o2.summary_dir = (dir.path / "train2").string();
  {
    train::Controller c(o2);
    c.train(30);
  }
  REQUIRE(trainer2.recorded.empty());
  REQUIRE(steps_of(read_scalars(dir.path / "train2"), "loss") == std::vector<int64_t>{10, 20, 30});
  REQUIRE_FALSE(train::summary::should_record());
  REQUIRE_FALSE(train::summary::scalar("x", 1.0));
}

TEST_CASE("Controller: eval summaries share the train writer when eval_summary_dir is unset") {
  TempDir dir("shared_writer");
  Variable step = train::create_global_step();
  CountingTrainer trainer(step);
  CountingEvaluator evaluator(step);
  auto o = quiet_options();
  o.global_step = step;
  o.trainer = &trainer;
  o.evaluator = &evaluator;
  o.steps_per_loop = 5;
  o.summary_dir = dir.path.string();
  {
    train::Controller c(o);
    REQUIRE(c.eval_summary_writer() == c.train_summary_writer());
    c.train_and_evaluate(10, -1, 5);
  }
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  REQUIRE(files == 1);
  const auto events = read_scalars(dir.path);
  REQUIRE(steps_of(events, "accuracy") == std::vector<int64_t>{5, 10});
  REQUIRE(steps_of(events, "loss") == std::vector<int64_t>{5, 10});
}

TEST_CASE("Controller: checkpoints on the manager's interval and at completion") {
  TempDir dir("ckpt_interval");
  Variable step = train::create_global_step();
  CountingTrainer trainer(step);
  train::CheckpointManager manager(train::Checkpoint{{"global_step", step}}, dir.path, /*max_to_keep=*/0,
                                   /*checkpoint_interval=*/25);
  auto o = quiet_options();
  o.global_step = step;
  o.trainer = &trainer;
  o.steps_per_loop = 10;
  o.checkpoint_manager = &manager;
  train::Controller c(o);
  REQUIRE(c.last_checkpoint().empty());
  c.train(100);
  // The first loop saves (no checkpoint yet), then each loop at least 25 steps after the
  // last save; at completion step 100 already has one.
  REQUIRE(checkpoint_steps(manager) == std::vector<int64_t>{10, 40, 70, 100});
  REQUIRE(c.last_checkpoint() == (dir.path / "ckpt-100").string());
  c.train(105, /*checkpoint_at_completion=*/false);
  REQUIRE(checkpoint_steps(manager) == std::vector<int64_t>{10, 40, 70, 100});
  REQUIRE(c.save_checkpoint() == (dir.path / "ckpt-105").string());
  REQUIRE(c.save_checkpoint() == (dir.path / "ckpt-105").string());  // no second save
  REQUIRE(checkpoint_steps(manager) == std::vector<int64_t>{10, 40, 70, 100, 105});
  c.train(140);  // loops end at 115, 125, 135 (>= 105 + 25), 140 (completion)
  REQUIRE(checkpoint_steps(manager) == std::vector<int64_t>{10, 40, 70, 100, 105, 135, 140});

  // A manager without an interval: no periodic saves, only at completion.
  TempDir dir2("ckpt_no_interval");
  Variable step2 = train::create_global_step();
  CountingTrainer trainer2(step2);
  train::CheckpointManager manager2(train::Checkpoint{{"global_step", step2}}, dir2.path, 0);
  auto o2 = o;
  o2.global_step = step2;
  o2.trainer = &trainer2;
  o2.checkpoint_manager = &manager2;
  {
    train::Controller c2(o2);
    c2.train(30);
    REQUIRE(checkpoint_steps(manager2) == std::vector<int64_t>{30});
    c2.train(50, false);
    REQUIRE(checkpoint_steps(manager2) == std::vector<int64_t>{30});
  }

  // A new controller restores the latest checkpoint on construction.
  step2.assign(Tensor::scalar(int64_t(0), kInt64));
  train::CheckpointManager reopened(train::Checkpoint{{"global_step", step2}}, dir2.path, 0);
  o2.checkpoint_manager = &reopened;
  train::Controller c3(o2);
  REQUIRE(c3.global_step() == 30);
  REQUIRE(c3.last_checkpoint() == (dir2.path / "ckpt-30").string());
  REQUIRE(c3.restore_checkpoint((dir.path / "ckpt-70").string()) == (dir.path / "ckpt-70").string());
  REQUIRE(c3.global_step() == 70);
}

TEST_CASE("Controller: train_and_evaluate alternates and checkpoints at the end") {
  TempDir dir("train_and_eval");
  Variable step = train::create_global_step();
  CountingTrainer trainer(step);
  CountingEvaluator evaluator(step);
  train::CheckpointManager manager(train::Checkpoint{{"global_step", step}}, dir.path, 0);
  auto o = quiet_options();
  o.global_step = step;
  o.trainer = &trainer;
  o.evaluator = &evaluator;
  o.steps_per_loop = 10;
  o.checkpoint_manager = &manager;
  train::Controller c(o);
  REQUIRE_THROWS_WITH(c.train_and_evaluate(50, 0), Catch::Contains("should be > 0, or == -1"));
  REQUIRE_THROWS_WITH(c.train_and_evaluate(50, -1, -5), Catch::Contains("must be >= 0"));
  const auto out = c.train_and_evaluate(/*train_steps=*/50, /*eval_steps=*/3, /*eval_interval=*/20);
  REQUIRE(out.at("accuracy") == 0.5);
  REQUIRE(evaluator.calls == std::vector<std::pair<int64_t, int64_t>>{{3, 20}, {3, 40}, {3, 50}});
  REQUIRE(trainer.calls == std::vector<int64_t>{10, 10, 10, 10, 10});
  REQUIRE(checkpoint_steps(manager) == std::vector<int64_t>{50});
  // eval_interval 0: one evaluation at the end.
  c.train_and_evaluate(65);
  REQUIRE(evaluator.calls.back() == std::pair<int64_t, int64_t>{-1, 65});
  REQUIRE(evaluator.calls.size() == 4);
  REQUIRE(trainer.calls == std::vector<int64_t>{10, 10, 10, 10, 10, 10, 5});
}

TEST_CASE("StandardTrainer: the iterator persists across loops, the global step is advanced once per step") {
  for (bool in_step : {false, true}) {
    for (const char* name : {"default", "mirrored"}) {
      INFO(name << (in_step ? ", global step advanced inside strategy.run" : ""));
      JobOptions jo;
      jo.increment_in_step = in_step;
      Job a(name, 2 * (std::string(name) == "mirrored"), {}, jo);
      Job b(name, 2 * (std::string(name) == "mirrored"), {}, jo);
      a.trainer->train(3);
      a.trainer->train(4);
      b.trainer->train(7);
      REQUIRE(a.step_value() == 7);
      REQUIRE(b.step_value() == 7);
      // Same batches read in two loops as in one: the iterator was not recreated.
      REQUIRE(first_difference(snapshot(a.checkpoint), snapshot(b.checkpoint)).empty());
      for (const Tensor& c : a.strategy->experimental_local_results(a.step)) REQUIRE(c.item<int64_t>() == 7);
    }
  }
}

TEST_CASE("StandardEvaluator: a fresh iterator per evaluation, steps bound it") {
  Job job("mirrored", 2, {});
  auto full = job.evaluator->evaluate(-1);
  REQUIRE(full.at("examples") == 96);
  REQUIRE(job.evaluator->evaluate(-1).at("loss") == full.at("loss"));  // recreated: same data
  REQUIRE(job.evaluator->evaluate(2).at("examples") == 64);
  REQUIRE(job.evaluator->evaluate(100).at("examples") == 96);  // the data ends first
  REQUIRE_THROWS_WITH(job.evaluator->evaluate(0), Catch::Contains("num_steps must be > 0, or -1"));

  // Without recreation the iterator continues until the data ends.
  class Continuing final : public train::StandardEvaluator {
   public:
    using StandardEvaluator::StandardEvaluator;
    int64_t rows = 0;

   protected:
    void eval_begin() override { rows = 0; }
    std::optional<train::Outputs> eval_step(distribute::DistributedIterator& it) override {
      auto b = it.next();
      if (!b) return std::nullopt;
      for (const auto& part : *b) rows += part[0].dim(0);
      return train::Outputs{};
    }
    train::Outputs eval_end() override { return {{"rows", double(rows)}}; }
  };
  Continuing cont(*job.strategy, *job.eval_ds, {.recreate_iterator_for_each_eval = false});
  REQUIRE(cont.evaluate(2).at("rows") == 64);
  REQUIRE(cont.evaluate(2).at("rows") == 32);
  REQUIRE(cont.evaluate(2).at("rows") == 0);
}

TEST_CASE("create_global_step: an int64 non-trainable OnlyFirstReplica variable of the current strategy") {
  auto strategy = make("mirrored", 2);
  Variable step;
  {
    auto scope = strategy->scope();
    step = train::create_global_step();
  }
  REQUIRE(step.dtype() == kInt64);
  REQUIRE(step.shape().empty());
  REQUIRE_FALSE(step.trainable());
  REQUIRE(step.aggregation() == autograd::VariableAggregation::OnlyFirstReplica);
  REQUIRE(step.name() == "global_step");
  REQUIRE(strategy->experimental_local_results(step).size() == 2);
  // Inside run, each replica adds 1 but OnlyFirstReplica counts it once.
  strategy->run([&](int64_t one) { step.assign_add(Tensor::scalar(one, kInt64)); }, int64_t(1));
  for (const Tensor& c : strategy->experimental_local_results(step)) REQUIRE(c.item<int64_t>() == 1);
}
