// Controller: Orbit's outer loop (orbit.Controller). The user owns the inner step (a
// trainer and/or an evaluator); the Controller runs the trainer steps_per_loop steps at a
// time, writes the loop outputs and steps_per_second to TensorBoard summaries, saves
// checkpoints on the manager's interval and at completion, evaluates, and restores the
// latest checkpoint when it is constructed.
//
//   auto global_step = train::create_global_step();           // in the strategy's scope
//   // (a StandardTrainer built in Orbit's form, (dataset, options), counts with the
//   // Controller's global step: the Controller lends it when constructed)
//   train::Checkpoint ckpt{{"model", model}, {"optimizer", opt}, {"global_step", global_step},
//                          {"train_input", trainer.input_state()}};
//   train::CheckpointManager manager(ckpt, dir / "checkpoints", 3, /*interval=*/1000);
//   train::ControllerOptions o;
//   o.strategy = &strategy;  o.trainer = &trainer;  o.evaluator = &evaluator;
//   o.global_step = global_step;  o.steps_per_loop = 100;  o.checkpoint_manager = &manager;
//   o.summary_dir = dir / "train";  o.eval_summary_dir = dir / "eval";
//   train::Controller controller(o);
//   controller.train_and_evaluate(/*train_steps=*/10000, /*eval_steps=*/-1, /*eval_interval=*/1000);
//
// Rules (Orbit's):
//  - `trainer` and `evaluator` may not both be null; `global_step` is required (an
//    integer scalar variable, see create_global_step()).
//  - With a trainer, `steps_per_loop` is required: a positive integer, or
//    `steps_per_loop_fn` (a function of the global step) — not both.
//  - `summary_interval`, when set, must be positive and (with a fixed steps_per_loop) a
//    multiple of it. It governs only summaries written from inside trainer.train()
//    through train::summary::* (recorded when the global step is a multiple of it, like
//    tf.summary.record_if in Orbit; without it they are not recorded). The outputs of
//    every loop and steps_per_second are always written when `summary_dir` is set.
//  - `eval_summary_dir` defaults to `summary_dir` (one shared writer when they are equal).
//  - Only the chief (worker 0) writes summaries.
//  - train(steps) trains until the global step reaches `steps` (an absolute step):
//    loops of min(steps_per_loop, steps - step) steps. After each loop a checkpoint is
//    saved when the manager has a checkpoint_interval and the interval has passed; at
//    completion (checkpoint_at_completion) one is saved regardless of the interval,
//    unless the current step already has one. (Orbit saves nothing at all when the
//    manager has no interval; here a manager without an interval still gets the
//    checkpoint at completion and on save_checkpoint().)
//  - evaluate(steps): steps > 0, or -1 for the whole evaluation set. With steps > 0 the
//    outputs gain steps_per_second.
//  - train_and_evaluate when the global step is already at train_steps (a finished run
//    started again) trains nothing and evaluates once, so that its outputs describe the
//    restored model (Orbit would return nothing).
//  - terminate_on_nan (default): a non-finite loss output ends train() with an error.
//  - train_actions run after each train loop (after its outputs are written, before its
//    periodic checkpoint), eval_actions after each evaluation, each with the outputs, in
//    order (Orbit's; train/actions.h, train/preemption.h).
//  - A checkpoint manager's Checkpoint must track `global_step`, so that a restored run
//    resumes at its step.
// The trainer must advance the global step by exactly the number of steps it was asked
// to run (StandardTrainer does); anything else is an error.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <strata/autograd/variable.h>
#include <strata/distribute/strategy.h>
#include <strata/train/progress.h>
#include <strata/train/trainer.h>

namespace strata::train {

class CheckpointManager;
class SummaryWriter;

struct ControllerOptions {
  distribute::Strategy* strategy = nullptr;  // default: the current strategy
  AbstractTrainer* trainer = nullptr;
  AbstractEvaluator* evaluator = nullptr;
  Variable global_step;                      // from create_global_step()
  std::optional<int64_t> steps_per_loop;     // required with a trainer (or the function)
  std::function<int64_t(int64_t global_step)> steps_per_loop_fn;
  CheckpointManager* checkpoint_manager = nullptr;
  std::optional<int64_t> summary_interval;   // for train::summary::* inside train()
  std::string summary_dir;                   // "": no training summaries
  std::string eval_summary_dir;              // "": summary_dir
  ProgressOptions progress;
  // Keras's TerminateOnNaN, on by default: a training output whose name contains "loss"
  // that is NaN or infinite after a loop stops training with a strata::Error (before any
  // checkpoint of that state is saved). false keeps training regardless.
  bool terminate_on_nan = true;
  // Orbit's enable_async_checkpointing: the checkpoints train() saves on its way are
  // written on a background thread while training goes on (CheckpointOptions::
  // enable_async_checkpoint, train/checkpoint.h); train() and save_checkpoint() return
  // once they are written.
  bool enable_async_checkpointing = false;
  // The checkpoint to restore at construction; "" restores the manager's latest.
  std::string initial_checkpoint;
  // Orbit's train_actions: called in order after each train loop with its outputs (e.g.
  // SaveCheckpointIfPreempted, train/preemption.h). An action that throws stops training.
  std::vector<std::function<void(const Outputs&)>> train_actions;
  // Orbit's eval_actions: called in order after each evaluation with its outputs (e.g. a
  // ConditionalAction on a NewBestMetric, train/actions.h).
  std::vector<std::function<void(const Outputs&)>> eval_actions;
};

class Controller {
 public:
  // Validates the options (strata::Error naming the rule broken) and restores the latest
  // checkpoint of the manager, if any.
  explicit Controller(ControllerOptions options);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Trains until the global step reaches `steps`.
  void train(int64_t steps, bool checkpoint_at_completion = true);
  // Evaluates `steps` steps (-1: until the evaluation data ends) and returns the outputs.
  Outputs evaluate(int64_t steps = -1);
  // Trains to train_steps, evaluating every eval_interval steps (0: only at the end) and
  // at the end; saves a checkpoint at completion, written (even an asynchronous one) when
  // this returns. Returns the last evaluation's outputs.
  Outputs train_and_evaluate(int64_t train_steps, int64_t eval_steps = -1, int64_t eval_interval = 0);
  // Waits for checkpoints in the manager's directory and evaluates each new one (the
  // newest at the time it looks; one already there is evaluated at once). After
  // `timeout_seconds` (> 0) without a new checkpoint it calls timeout_fn: it returns when
  // timeout_fn is empty or returns true, and keeps waiting otherwise
  // (tf.train.checkpoints_iterator). Returns the last evaluation's outputs.
  Outputs evaluate_continuously(int64_t steps, double timeout_seconds,
                                const std::function<bool()>& timeout_fn = {});
  // Saves a checkpoint at the current global step (unless it has one already) and
  // returns its path. Needs a checkpoint manager.
  std::string save_checkpoint();
  // Restores `path`, or with "" the latest checkpoint (running the manager's init_fn when
  // there is none); returns the path restored or "". Needs a checkpoint manager.
  std::string restore_checkpoint(const std::string& path = "");

  int64_t global_step() const;
  distribute::Strategy& strategy() const { return *strategy_; }
  const Outputs& last_train_outputs() const { return last_train_outputs_; }
  const Outputs& last_eval_outputs() const { return last_eval_outputs_; }
  // Steps per second of every inner train loop this controller ran, in order (each loop's
  // own clock: no evaluation, checkpoint or start-up in it). Their median is the steady
  // throughput a benchmark compares.
  const std::vector<double>& train_loop_steps_per_second() const { return train_loop_steps_per_second_; }
  // The last checkpoint saved or restored ("" when none).
  const std::string& last_checkpoint() const { return last_checkpoint_; }
  // The summary writers (nullptr when not writing, e.g. on a non-chief worker).
  SummaryWriter* train_summary_writer() const { return train_writer_.get(); }
  SummaryWriter* eval_summary_writer() const { return eval_writer_; }
  ProgressReporter& progress() const { return *progress_; }

 private:
  void require(const void* member, const char* name, const char* method) const;
  int64_t steps_per_loop_at(int64_t step) const;
  void train_until(int64_t steps, bool checkpoint_at_completion);
  void train_n_steps(int64_t num_steps);
  // Saves when due (check_interval) or unconditionally; returns the path or "".
  std::string maybe_save_checkpoint(bool check_interval);

  ControllerOptions options_;
  distribute::Strategy* strategy_;
  std::unique_ptr<SummaryWriter> train_writer_, own_eval_writer_;
  SummaryWriter* eval_writer_ = nullptr;  // own_eval_writer_ or train_writer_
  std::unique_ptr<ProgressReporter> progress_;
  Outputs last_train_outputs_, last_eval_outputs_;
  std::vector<double> train_loop_steps_per_second_;
  std::string last_checkpoint_;
};

// Summaries from inside a trainer or evaluator: while the Controller runs
// trainer.train() or evaluator.evaluate() on a thread, these write to its writer (the
// role of tf.summary's default writer and record_if in Orbit). Call them from that
// thread's cross-replica code (e.g. after strategy.run), not from inside a replica.
namespace summary {
// True when a summary written now is recorded: a writer is current and, during
// training, a summary_interval is set and the global step is a multiple of it (during
// evaluation: always).
bool should_record();
// The current global step (0 when no Controller is running a loop on this thread).
int64_t current_step();
// Write at the current global step when should_record(); return whether they did.
bool scalar(const std::string& tag, double value);
bool histogram(const std::string& tag, const Tensor& values);
bool text(const std::string& tag, const std::string& text);
bool image(const std::string& tag, const Tensor& images, int64_t max_outputs = 3);
}  // namespace summary

}  // namespace strata::train
