// Controller: Orbit's outer loop. It runs a trainer for steps_per_loop steps at a time,
// writes summaries every summary_interval steps, saves checkpoints on the manager's
// interval and at completion, evaluates, and restores the latest checkpoint on
// construction — while the user owns the inner step (orbit.Controller).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "autograd/variable.h"
#include "distribute/strategy.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace strata::train {

class CheckpointManager;
class SummaryWriter;

struct ControllerOptions {
  distribute::Strategy* strategy = nullptr;  // default: the current strategy
  AbstractTrainer* trainer = nullptr;
  AbstractEvaluator* evaluator = nullptr;
  Variable global_step;                      // from create_global_step()
  int64_t steps_per_loop = 0;                // required with a trainer
  std::function<int64_t(int64_t)> steps_per_loop_fn;  // alternative: a function of the step
  CheckpointManager* checkpoint_manager = nullptr;
  int64_t summary_interval = 0;              // 0: every loop; must be a multiple of steps_per_loop
  std::string summary_dir;                   // "": no train summaries
  std::string eval_summary_dir;              // "": summary_dir/eval when summary_dir is set
  ProgressOptions progress;
};

class Controller {
 public:
  explicit Controller(ControllerOptions options);
  ~Controller();

  // Trains until the global step reaches `steps` (an absolute step, as in Orbit).
  void train(int64_t steps, bool checkpoint_at_completion = true);
  // Evaluates `steps` steps (-1: until the evaluation data ends); returns the outputs.
  Outputs evaluate(int64_t steps = -1);
  // Alternates training eval_interval steps and evaluating, up to train_steps.
  void train_and_evaluate(int64_t train_steps, int64_t eval_steps = -1, int64_t eval_interval = 0);
  // Evaluates every new checkpoint in the manager's directory; returns after `timeout`
  // seconds without a new one (or once a checkpoint at >= stop_at_step was evaluated).
  void evaluate_continuously(int64_t steps = -1, double timeout_seconds = 60.0,
                             std::optional<int64_t> stop_at_step = std::nullopt);
  // Saves a checkpoint at the current global step; returns its path ("" without a manager).
  std::string save_checkpoint();
  // Restores `path` (default: the latest) or initialises; returns the restored path or "".
  std::string restore_checkpoint(const std::string& path = "");

  int64_t global_step() const;
  const Outputs& last_train_outputs() const { return last_train_outputs_; }
  const Outputs& last_eval_outputs() const { return last_eval_outputs_; }
  const std::string& last_checkpoint() const { return last_checkpoint_; }

 private:
  int64_t steps_per_loop_at(int64_t step) const;
  void train_n_steps(int64_t n, int64_t target);
  void maybe_save_checkpoint(bool force);

  ControllerOptions options_;
  distribute::Strategy* strategy_;
  std::unique_ptr<SummaryWriter> train_writer_, eval_writer_;
  std::unique_ptr<ProgressReporter> progress_;
  Outputs last_train_outputs_, last_eval_outputs_;
  std::string last_checkpoint_;
  int64_t last_summary_step_ = -1;
};

}  // namespace strata::train
