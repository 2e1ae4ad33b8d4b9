// evaluate_continuously: an evaluation-only Controller watching a checkpoint directory
// evaluates the checkpoints another thread writes (each evaluation sees exactly the saved
// weights and step), stops once timeout_fn agrees after a quiet period, and never waits
// unboundedly.
#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "tests/train/controller_test_util.h"

using namespace strata;
using namespace strata::testing::orbit;

namespace {

// An evaluator that records the global step and the model's weights it evaluated.
class RecordingEvaluator final : public train::AbstractEvaluator {
 public:
  RecordingEvaluator(nn::Sequential model, Variable step) : model_(std::move(model)), step_(std::move(step)) {}
  train::Outputs evaluate(int64_t) override {
    train::Checkpoint weights{{"model", model_}};
    seen.emplace_back(step_.value().item<int64_t>(), snapshot(weights));
    return {{"evaluated_step", double(seen.back().first)}};
  }
  std::vector<std::pair<int64_t, Snapshot>> seen;

 private:
  nn::Sequential model_;
  Variable step_;
};

}  // namespace

TEST_CASE("Controller: evaluate_continuously evaluates the checkpoints another thread writes") {
  TempDir dir("continuous");
  const fs::path ckpt = dir.path / "ckpt";
  fs::create_directories(ckpt);

  // The evaluation side: its own model and step (no strategy), restored from each checkpoint.
  nn::set_global_seed(1);
  JobOptions jo;
  nn::Sequential eval_model{nn::Dense(jo.features, jo.hidden), nn::ReLU(), nn::Dense(jo.hidden, jo.classes)};
  Variable eval_step = train::create_global_step();
  RecordingEvaluator evaluator(eval_model, eval_step);
  train::CheckpointManager eval_manager(train::Checkpoint{{"model", eval_model}, {"global_step", eval_step}}, ckpt, 0);
  train::ControllerOptions o;
  o.evaluator = &evaluator;
  o.global_step = eval_step;
  o.checkpoint_manager = &eval_manager;
  o.summary_dir = (dir.path / "eval").string();
  o.progress.verbosity = train::Verbosity::Quiet;
  train::Controller controller(o);
  REQUIRE(controller.global_step() == 0);  // nothing to restore yet

  // The training side, on another thread: three checkpoints, 10 steps apart, with pauses.
  std::mutex mu;
  std::map<int64_t, Snapshot> written;
  std::atomic<bool> done{false};
  std::string error;
  std::thread writer([&] {
    try {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the evaluator waits first
      JobOptions wo;
      wo.max_to_keep = 2;  // deletes the oldest while the evaluator may be reading
      Job job("default", 0, ckpt, wo);
      train::Controller c(job.controller_options(10));
      for (int64_t target : {10, 20, 30}) {
        c.train(target);
        {
          std::lock_guard<std::mutex> lock(mu);
          train::Checkpoint weights{{"model", job.model}};
          written[target] = snapshot(weights);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(400));
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    done = true;
  });

  int timeouts = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const train::Outputs last = controller.evaluate_continuously(-1, /*timeout_seconds=*/0.25, [&] {
    ++timeouts;
    return done.load();
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  writer.join();
  REQUIRE(error.empty());
  REQUIRE(timeouts >= 1);
  REQUIRE(seconds < 60);

  // Every evaluation saw a checkpoint exactly as written; the last one was the final one.
  REQUIRE_FALSE(evaluator.seen.empty());
  REQUIRE(evaluator.seen.back().first == 30);
  REQUIRE(last.at("evaluated_step") == 30);
  int64_t previous = 0;
  for (const auto& [step, weights] : evaluator.seen) {
    INFO("evaluated step " << step);
    REQUIRE(step > previous);
    previous = step;
    REQUIRE(written.count(step));
    REQUIRE(first_difference(weights, written.at(step)) == "");
  }
  // Each evaluation was summarised at its checkpoint's step.
  const auto events = read_scalars(dir.path / "eval");
  std::vector<int64_t> expected;
  for (const auto& [step, w] : evaluator.seen) expected.push_back(step);
  REQUIRE(steps_of(events, "evaluated_step") == expected);
}

TEST_CASE("Controller: evaluate_continuously returns after the timeout without checkpoints") {
  TempDir dir("continuous_empty");
  Variable step = train::create_global_step();
  class Never final : public train::AbstractEvaluator {
   public:
    train::Outputs evaluate(int64_t) override {
      FAIL("nothing to evaluate");
      return {};
    }
  } evaluator;
  train::CheckpointManager manager(train::Checkpoint{{"global_step", step}}, dir.path, 0);
  train::ControllerOptions o;
  o.evaluator = &evaluator;
  o.global_step = step;
  o.checkpoint_manager = &manager;
  o.progress.verbosity = train::Verbosity::Quiet;
  train::Controller c(o);
  const auto t0 = std::chrono::steady_clock::now();
  int calls = 0;
  REQUIRE(c.evaluate_continuously(-1, 0.2, [&] { return ++calls == 3; }).empty());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  REQUIRE(calls == 3);
  REQUIRE(seconds >= 0.55);
  REQUIRE(seconds < 5);
  REQUIRE_THROWS_WITH(c.evaluate_continuously(-1, 0), Catch::Contains("positive and finite"));
  REQUIRE_THROWS_WITH(c.evaluate_continuously(-1, std::numeric_limits<double>::infinity()),
                      Catch::Contains("positive and finite"));
  REQUIRE_THROWS_WITH(c.evaluate_continuously(0, 1.0), Catch::Contains("should be > 0, or == -1"));
}
