// Orbit's controller actions (orbit.actions): callables a Controller runs after each train
// loop (ControllerOptions::train_actions) or each evaluation (eval_actions) with its
// outputs. SaveCheckpointIfPreempted is in train/preemption.h.
//
//   train::NewBestMetric best("accuracy", /*higher_is_better=*/true, model_dir / "best.json");
//   train::CheckpointManager best_manager(checkpoint, model_dir / "best", /*max_to_keep=*/1);
//   co.eval_actions.push_back(train::ConditionalAction(
//       [&best](const train::Outputs& o) { return best(o); },
//       [&](const train::Outputs&) { best_manager.save(global_step.value().item<int64_t>(), true); }));
//
// Under MultiWorkerMirroredStrategy every worker sees the same evaluation outputs, so every
// worker decides alike; a save through a CheckpointManager must then run on every worker
// (a collective), into the chief's directory or a worker's temporary one
// (distribute/distributed_file_utils.h), and so must NewBestMetric's file: give each
// worker its own path, as for checkpoints.
#pragma once

#include <filesystem>
#include <functional>
#include <optional>
#include <string>

#include <strata/train/trainer.h>

namespace strata::train {

// Whether an output has improved on its best value so far (orbit.actions.NewBestMetric).
// The best value is kept in memory and, with a filename, in a small JSON file written
// atomically at each new best and read back at construction, so that a restarted job
// keeps comparing against the best value of its earlier runs.
class NewBestMetric {
 public:
  NewBestMetric(std::string metric, bool higher_is_better = true, std::filesystem::path filename = {});

  // The output's value; throws strata::Error naming the outputs there are when `metric`
  // is not one of them.
  double metric_value(const Outputs& outputs) const;
  // True when the output's value is better than the best so far (strictly; any value is
  // when there is none yet; NaN never is). Changes nothing.
  bool test(const Outputs& outputs) const;
  // Makes `value` the best (and writes the file).
  void commit(double value);
  // test(), and commit() when it is true.
  bool operator()(const Outputs& outputs);

  const std::optional<double>& best_value() const { return best_; }
  const std::string& metric() const { return metric_; }

 private:
  std::string metric_;
  bool higher_is_better_;
  std::filesystem::path filename_;
  std::optional<double> best_;
};

// Runs `action` when `condition` holds for the outputs (orbit.actions.ConditionalAction).
class ConditionalAction {
 public:
  ConditionalAction(std::function<bool(const Outputs&)> condition, std::function<void(const Outputs&)> action)
      : condition_(std::move(condition)), action_(std::move(action)) {}
  void operator()(const Outputs& outputs) const {
    if (condition_(outputs)) action_(outputs);
  }

 private:
  std::function<bool(const Outputs&)> condition_;
  std::function<void(const Outputs&)> action_;
};

}  // namespace strata::train
